//! Content-addressed blobs, named by their BLAKE3 hash.
//!
//! ```text
//! <store>/blobs/
//! ├── tmp/                 in-flight writes (removed at open)
//! ├── pending/             adopted files not yet hashed (resolved when the journal is applied)
//! └── ab/
//!     └── cdef0123…        content whose BLAKE3 hash is "abcdef0123…"
//! ```
//!
//! Directories are 0700 and blob files 0400 (the store is private, `private.rs`), and nothing
//! is used from a blob without checking its hash: a rewind (and a look at the past: `show`,
//! `fork`, `export`) reads blobs only through [`Blobs::read_verified`],
//! [`Blobs::copy_verified`], [`Blobs::open_verified`] and [`Blobs::stream_verified`].
//!
//! A blob is hashed while (or, for small files, before) it is written to a temp file in `tmp/`,
//! optionally fsynced, then renamed into place; an existing blob counts as success, so equal
//! contents are stored once and a crash leaves at most a stray temp file, never a partial blob
//! under its name. A file about to be deleted is *adopted* instead of copied: hard-linked
//! into `pending/` under a unique key (`adopt`), so `rm -rf` of a tree writes no data and reads
//! none on the request path. The key is what the capture journal records; when the journal is
//! applied to the database, the pending file is hashed and renamed to its hash (`resolve`), so
//! the database only ever names blobs by their hash. Until then the adoption may still be in
//! flight (the change that removes the file's name has not happened yet, or failed): the
//! resolver waits for it to settle, and copies a pending file that still has another name.
//!
//! One job per file: this one stores blobs (`put_*`) and names them; `adopt.rs` keeps a file
//! by a link (the blob store's steps of the lifecycle `store::Adoptions` owns); `verify.rs`
//! reads them back, checking every byte against the name.

mod adopt;
mod verify;

pub use self::adopt::Adopted;
pub use self::verify::{BlobReader, BlobStream};

use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use rustix::fs::OFlags;

use super::Adoptions;
use super::private::{self, BLOB_MODE};
use crate::sys;

/// The hash of the empty blob, which is never written to disk.
pub fn empty_hash() -> String {
    content_hash(b"")
}

/// The name content has in the blob store (its BLAKE3 hash, hex). Every content hash in
/// rewindfs is made here or by [`ContentHasher`]: the blob store decides what names content.
pub fn content_hash(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// [`content_hash`] of content that arrives in pieces (`io::copy` into it, or `update`).
#[derive(Default)]
pub struct ContentHasher(blake3::Hasher);

impl ContentHasher {
    /// Adds the next piece.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The name of everything added.
    pub fn finish(&self) -> String {
        self.0.finalize().to_hex().to_string()
    }
}

impl std::io::Write for ContentHasher {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where adopted files wait for their hash; their keys are `pending/<nonce>-<n>` (a nonce drawn
/// when the store is opened, and a counter: no random draw per file).
const PENDING: &str = "pending";

/// Whether a blob key names an adopted file not yet resolved to its hash.
pub fn is_pending(key: &str) -> bool {
    key.starts_with("pending/")
}

/// How long the resolver waits for an adoption's change to settle before it copies the file
/// instead (only a change stuck in the backing filesystem takes this long).
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Files up to this size are read whole and hashed in memory before anything is written (an
/// existing blob then costs no write at all); larger ones are streamed.
const SMALL: u64 = 1 << 20;

/// The blob directory.
#[derive(Debug)]
pub struct Blobs {
    dir: PathBuf,
    /// The blob directory, for `*at` calls (None for the read-only view of `fsck`).
    dirfd: Option<OwnedFd>,
    /// `st_dev` of the blob directory: a file on the same filesystem can be adopted by a link.
    dev: u64,
    /// fsync every blob before it is linked (power-loss durability, at a cost per capture).
    sync: bool,
    /// Distinguishes temp files of concurrent writers.
    counter: AtomicU64,
    /// Random, per opening of the store: keeps pending names of different runs apart.
    nonce: String,
    /// Every adoption in flight: its states and their lock (see `adoption.rs`).
    adoptions: Adoptions,
}

fn rel(hash: &str) -> PathBuf {
    if hash.contains('/') || hash.len() < 3 {
        return PathBuf::from(hash); // a pending key (or a damaged row: then "not found")
    }
    PathBuf::from(&hash[..2]).join(&hash[2..])
}

impl Blobs {
    /// Opens (creating) the blob directory and its 256 fan-out directories, and clears
    /// abandoned temp files.
    ///
    /// # Errors
    /// Any I/O error creating the directories.
    pub fn open(dir: &Path, sync: bool) -> io::Result<Blobs> {
        // Every directory 0700 whatever the umask (the store is private: `private.rs`).
        let tmp = dir.join("tmp");
        private::create_dir(dir)?;
        private::create_dir(&tmp)?;
        for e in fs::read_dir(&tmp)? {
            let _ = fs::remove_file(e?.path());
        }
        private::create_dir(&dir.join(PENDING))?;
        for i in 0..=255u8 {
            private::create_dir(&dir.join(format!("{i:02x}")))?;
        }
        let dirfd = sys::open_dir_path(dir)?;
        let dev = sys::fstat(dirfd.as_fd())?.st_dev;
        Ok(Blobs {
            dir: dir.to_owned(),
            dirfd: Some(dirfd),
            dev,
            sync,
            counter: AtomicU64::new(0),
            nonce: uuid::Uuid::new_v4().simple().to_string(),
            adoptions: Adoptions::default(),
        })
    }

    /// The blob directory without opening it (read-only use: `fsck`).
    pub fn at(dir: &Path) -> Blobs {
        Blobs {
            dir: dir.to_owned(),
            dirfd: None,
            dev: u64::MAX,
            sync: false,
            counter: AtomicU64::new(0),
            nonce: uuid::Uuid::new_v4().simple().to_string(),
            adoptions: Adoptions::default(),
        }
    }

    /// The blob directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob with this hash lives.
    pub fn path(&self, hash: &str) -> PathBuf {
        self.dir.join(rel(hash))
    }

    pub fn exists(&self, hash: &str) -> bool {
        if hash == empty_hash() {
            return true;
        }
        match &self.dirfd {
            Some(d) => sys::lstat_at(d.as_fd(), &rel(hash)).is_ok(),
            None => self.path(hash).exists(),
        }
    }

    fn dirfd(&self) -> io::Result<BorrowedFd<'_>> {
        self.dirfd
            .as_ref()
            .map(|d| d.as_fd())
            .ok_or_else(|| io::Error::other("the blob store is open read-only"))
    }

    fn tmp_name(&self) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        PathBuf::from("tmp").join(format!("{}-{n}", std::process::id()))
    }

    /// Moves a complete temp file to its blob name (replacing an equal blob is harmless).
    fn publish(&self, tmp: &Path, hash: &str) -> io::Result<()> {
        let d = self.dirfd()?;
        let to = rel(hash);
        sys::renameat_between(d, tmp, d, &to).map_err(|e| {
            let _ = sys::unlinkat(d, tmp, false);
            sys::ctx(
                e,
                format!(
                    "renameat({}, {}) in {}",
                    tmp.display(),
                    to.display(),
                    self.dir.display()
                ),
            )
        })
    }

    /// Creates the temp file `tmp` a new blob is written to (`O_CREAT | O_EXCL`).
    fn create_tmp(&self, d: BorrowedFd<'_>, tmp: &Path) -> io::Result<OwnedFd> {
        sys::openat(
            d,
            tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            BLOB_MODE,
        )
        .map_err(|e| self.tmp_error(e, "openat(O_CREAT|O_EXCL)", tmp))
    }

    /// An error writing temp file `tmp`, naming the call and the file.
    fn tmp_error(&self, e: io::Error, call: &str, tmp: &Path) -> io::Error {
        sys::ctx(
            e,
            format!("{call} of {} in {}", tmp.display(), self.dir.display()),
        )
    }

    /// Stores everything `src` yields; returns its hash and size.
    ///
    /// # Errors
    /// I/O errors reading the source or writing the blob (e.g. `ENOSPC`).
    pub fn put_reader(&self, mut src: impl Read) -> io::Result<(String, u64)> {
        let d = self.dirfd()?;
        let tmp = self.tmp_name();
        let fd = self.create_tmp(d, &tmp)?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        let res = (|| -> io::Result<()> {
            loop {
                let k = match src.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                hasher.update(&buf[..k]);
                write_all(fd.as_fd(), &buf[..k]).map_err(|e| self.tmp_error(e, "write", &tmp))?;
                size += k as u64;
            }
            if self.sync {
                sys::fsync(fd.as_fd(), true).map_err(|e| self.tmp_error(e, "fdatasync", &tmp))?;
            }
            Ok(())
        })();
        drop(fd);
        if let Err(e) = res {
            let _ = sys::unlinkat(d, &tmp, false);
            return Err(e);
        }
        let hash = hasher.finalize().to_hex().to_string();
        if size == 0 || self.exists(&hash) {
            let _ = sys::unlinkat(d, &tmp, false);
            return Ok((hash, size));
        }
        self.publish(&tmp, &hash)?;
        Ok((hash, size))
    }

    /// Stores the content of an open file (read from offset 0). `size`: its size if the caller
    /// has just stat'ed it (the content read is stored either way, whatever its length).
    pub fn put_fd(&self, fd: BorrowedFd<'_>, size: Option<u64>) -> io::Result<(String, u64)> {
        let size = match size {
            Some(n) => n,
            None => sys::fstat(fd)?.st_size as u64,
        };
        if size <= SMALL {
            // One extra byte tells a file that grew meanwhile, which is streamed instead. A
            // read that gives exactly `size` bytes found the end of the file: no second read.
            let mut buf = vec![0u8; size as usize + 1];
            let mut n = match sys::pread(fd, &mut buf, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                r => r?,
            };
            if n < size as usize {
                n += sys::pread_full(fd, &mut buf[n..], n as u64)?;
            }
            if n <= size as usize {
                buf.truncate(n);
                return self.put_bytes(&buf);
            }
        }
        struct FdReader<'a> {
            fd: BorrowedFd<'a>,
            off: u64,
        }
        impl Read for FdReader<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = crate::sys::pread(self.fd, buf, self.off)?;
                self.off += n as u64;
                Ok(n)
            }
        }
        self.put_reader(FdReader { fd, off: 0 })
    }

    /// Stores bytes held in memory: hashed first, so an existing blob costs no write.
    pub fn put_bytes(&self, data: &[u8]) -> io::Result<(String, u64)> {
        let hash = blake3::hash(data).to_hex().to_string();
        let size = data.len() as u64;
        if data.is_empty() || self.exists(&hash) {
            return Ok((hash, size));
        }
        let d = self.dirfd()?;
        let tmp = self.tmp_name();
        let fd = self.create_tmp(d, &tmp)?;
        let res = write_all(fd.as_fd(), data)
            .map_err(|e| self.tmp_error(e, "write", &tmp))
            .and_then(|()| {
                if self.sync {
                    sys::fsync(fd.as_fd(), true).map_err(|e| self.tmp_error(e, "fdatasync", &tmp))
                } else {
                    Ok(())
                }
            });
        drop(fd);
        if let Err(e) = res {
            let _ = sys::unlinkat(d, &tmp, false);
            return Err(e);
        }
        self.publish(&tmp, &hash)?;
        Ok((hash, size))
    }
}

fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match sys::write(fd, data) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn content_handed_over_is_written_only_if_it_hashes_to_its_blob() {
        let d = tempfile::tempdir().unwrap();
        let b = Blobs::open(d.path(), true).unwrap();
        let (h, _) = b.put_bytes(b"at the checkpoint\n").unwrap();
        let out = d.path().join("out");
        let f = std::fs::File::create(&out).unwrap();
        let written = std::cell::Cell::new(0);
        let err = Blobs::write_checked_counted(&h, b"swapped\n", f.as_fd(), &written).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(err.to_string().contains(&h), "{err}");
        assert_eq!(written.get(), 0);
        assert_eq!(std::fs::read(&out).unwrap(), b"");
        let n =
            Blobs::write_checked_counted(&h, b"at the checkpoint\n", f.as_fd(), &written).unwrap();
        assert_eq!((n, written.get()), (18, 18));
        assert_eq!(std::fs::read(&out).unwrap(), b"at the checkpoint\n");
    }

    #[test]
    fn equal_contents_are_stored_once_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let b = Blobs::open(d.path(), true).unwrap();
        let (h1, s1) = b.put_bytes(b"hello").unwrap();
        let (h2, _) = b.put_bytes(b"hello").unwrap();
        assert_eq!(h1, h2);
        assert_eq!(s1, 5);
        assert_eq!(h1, blake3::hash(b"hello").to_hex().to_string());
        assert_eq!(b.read_verified(&h1).unwrap(), b"hello");
        assert!(b.verify(&h1).unwrap());
        let files = walk(d.path());
        assert_eq!(files.len(), 1, "{files:?}");
        let (he, _) = b.put_bytes(b"").unwrap();
        assert_eq!(b.read_verified(&he).unwrap(), b"");
    }

    /// Overwrites a blob's file in place (as another user with write access could have).
    fn tamper(b: &Blobs, h: &str, with: &[u8]) {
        let p = b.path(h);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&p, with).unwrap();
    }

    /// Every verified way of reading a blob refuses one whose content no longer hashes to its
    /// name, or that is gone, naming the blob; an intact blob reads back whole.
    #[test]
    fn a_corrupt_or_missing_blob_is_refused_by_every_verified_read() {
        let d = tempfile::tempdir().unwrap();
        let b = Blobs::open(&d.path().join("blobs"), false).unwrap();
        let data: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        let (h, _) = b.put_bytes(&data).unwrap();
        let copy = |b: &Blobs| -> io::Result<Vec<u8>> {
            let out = tempfile::tempfile().unwrap();
            b.copy_verified(&h, out.as_fd())?;
            Ok(fs::read(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&out)
            ))
            .unwrap())
        };
        // Forward reads with gaps, as a chain of range pre-images reads its base.
        let gappy = |b: &Blobs| -> io::Result<Vec<u8>> {
            let mut r = b.open_verified(&h)?.unwrap();
            let mut got = vec![0u8; 1000];
            let mut n = 0;
            for off in [0u64, 5, 300_000, 299_990, 650_000] {
                n += r.read_at(&mut got[..100], off)?;
            }
            r.finish()?;
            got.truncate(n.min(1000));
            Ok(got)
        };
        // Read in order, in small pieces, as `show` and `export` read a blob.
        let stream = |b: &Blobs| -> io::Result<Vec<u8>> {
            let mut r = b.stream_verified(&h)?;
            let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
            loop {
                match r.read(&mut buf)? {
                    0 => return Ok(got),
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        };
        assert_eq!(b.read_verified(&h).unwrap(), data);
        assert_eq!(copy(&b).unwrap(), data);
        assert_eq!(stream(&b).unwrap(), data);
        gappy(&b).unwrap();
        let mut empty = b.stream_verified(&empty_hash()).unwrap();
        assert_eq!(empty.read(&mut [0u8; 16]).unwrap(), 0);

        let mut bad = data.clone();
        bad[600_000] ^= 1;
        tamper(&b, &h, &bad);
        for (what, r) in [
            ("read", b.read_verified(&h).map(|_| ())),
            ("copy", copy(&b).map(|_| ())),
            ("reader", gappy(&b).map(|_| ())),
            ("stream", stream(&b).map(|_| ())),
        ] {
            let e = r.expect_err(what);
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
            assert!(
                e.to_string().contains(&h) && e.to_string().contains("corrupt"),
                "{what}: {e}"
            );
        }
        // A reader nothing was read from has nothing to vouch for (and reads nothing).
        b.open_verified(&h).unwrap().unwrap().finish().unwrap();
        fs::remove_file(b.path(&h)).unwrap();
        let e = b.read_verified(&h).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(
            e.to_string().contains(&h) && e.to_string().contains("missing"),
            "{e}"
        );
        assert!(copy(&b).is_err() && b.open_verified(&h).is_err());
        assert!(b.stream_verified(&h).is_err());
        // A pending key or a damaged row is not a hash to read by.
        assert!(b.read_verified("pending/x-1").is_err());
        assert!(b.read_verified("../../etc/passwd").is_err());
    }

    /// A blob too large to verify in memory is read twice; one cut short or changed between
    /// the two reads fails the write instead of leaving fewer or other bytes than its name
    /// promises (the second read used to stop at the short end without a word).
    #[test]
    fn a_large_blob_changed_between_its_two_reads_fails_the_verified_write() {
        let d = tempfile::tempdir().unwrap();
        let b = Blobs::open(&d.path().join("blobs"), false).unwrap();
        let data: Vec<u8> = (0..(9u32 << 20)).map(|i| (i % 251) as u8).collect();
        let (h, _) = b.put_bytes(&data).unwrap();
        let out = tempfile::tempfile().unwrap();
        assert_eq!(
            b.write_verified(&h, out.as_fd(), || Ok(())).unwrap(),
            data.len() as u64
        );
        for (what, with) in [
            ("cut short", data[..5 << 20].to_vec()),
            ("changed", {
                let mut v = data.clone();
                v[7 << 20] ^= 1;
                v
            }),
        ] {
            let out = tempfile::tempfile().unwrap();
            let r = b.write_verified(&h, out.as_fd(), || {
                tamper(&b, &h, &with);
                Ok(())
            });
            assert!(r.is_err(), "{what}: {r:?}");
            let e = r.unwrap_err();
            assert!(e.to_string().contains(&h), "{what}: {e}");
            tamper(&b, &h, &data);
        }
    }

    fn walk(p: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(p).unwrap() {
            let e = e.unwrap().path();
            if e.is_dir() {
                out.extend(walk(&e))
            } else {
                out.push(e)
            }
        }
        out
    }
}
