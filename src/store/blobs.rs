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

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use rustix::fs::{OFlags, Stat};

use super::private::{self, BLOB_MODE};
use crate::sys;

/// The hash of the empty blob, which is never written to disk.
pub fn empty_hash() -> String {
    blake3::hash(b"").to_hex().to_string()
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
    /// Pending keys whose change is in flight: the pending file may still be the live file.
    in_flight: Mutex<HashSet<String>>,
    settled: Condvar,
    /// Pending keys already resolved → their hash, until the batch that named them is in the
    /// database (a batch that fails to apply is applied again, and its files are gone).
    resolved: Mutex<HashMap<String, String>>,
}

/// How [`Blobs::adopt`] kept a file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub hash: String,
    pub size: u64,
    /// The blob is a hard link to the file itself: until the file's own name is gone (the
    /// unlink or rename-over it is about to undergo), the blob must not be trusted; if that
    /// change fails, [`Blobs::unshare`] makes the blob a copy.
    pub linked: bool,
    /// `st_mode`, `st_uid`, `st_gid` of the file.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Adopted {
    /// The pre-image this adoption keeps: a regular file, with the file's mode and owner.
    pub fn pre_image(&self) -> super::PreImage {
        super::PreImage {
            kind: super::Kind::File,
            blob: Some(super::BlobRef::from_stored(self.hash.clone())),
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            target: None,
            partial: false,
            xattrs: None,
        }
    }
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
            in_flight: Mutex::default(),
            settled: Condvar::new(),
            resolved: Mutex::default(),
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
            in_flight: Mutex::default(),
            settled: Condvar::new(),
            resolved: Mutex::default(),
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
        sys::renameat_between(d, tmp, d, &rel(hash)).inspect_err(|_| {
            let _ = sys::unlinkat(d, tmp, false);
        })
    }

    /// Stores everything `src` yields; returns its hash and size.
    ///
    /// # Errors
    /// I/O errors reading the source or writing the blob (e.g. `ENOSPC`).
    pub fn put_reader(&self, mut src: impl Read) -> io::Result<(String, u64)> {
        let d = self.dirfd()?;
        let tmp = self.tmp_name();
        let fd = sys::openat(
            d,
            &tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            BLOB_MODE,
        )?;
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
                write_all(fd.as_fd(), &buf[..k])?;
                size += k as u64;
            }
            if self.sync {
                sys::fsync(fd.as_fd(), true)?;
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
        let fd = sys::openat(
            d,
            &tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            BLOB_MODE,
        )?;
        let res = write_all(fd.as_fd(), data).and_then(|()| {
            if self.sync {
                sys::fsync(fd.as_fd(), true)
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

    /// Keeps the content of `rel` beneath `root` — a regular file with one name that is about to
    /// lose it (unlink, or replaced by a rename) — without copying or reading it: the file is
    /// hard-linked to a name under `pending/`, and that key is returned as its blob. The key stays in
    /// flight until [`settle`](Self::settle) (the change happened, or failed and
    /// [`unshare`](Self::unshare) made a copy). `Ok(None)` when that cannot be done (another
    /// filesystem, several names, replaced meanwhile, `--sync`): the caller copies instead.
    /// `known`: the file's stat if the caller has just taken it (the link is checked against it
    /// either way).
    ///
    /// # Errors
    /// I/O errors other than those that only mean "copy instead".
    pub fn adopt(
        &self,
        root: BorrowedFd<'_>,
        path: &Path,
        known: Option<&Stat>,
    ) -> io::Result<Option<Adopted>> {
        if self.sync || self.dirfd.is_none() {
            // A link is durable only once the directory is synced; --sync copies and fsyncs.
            return Ok(None);
        }
        let before = match known {
            Some(st) => *st,
            None => match sys::lstat_beneath(root, path) {
                Ok(st) => st,
                Err(_) => return Ok(None),
            },
        };
        if before.st_mode & libc::S_IFMT != libc::S_IFREG
            || before.st_nlink != 1
            || before.st_dev != self.dev
        {
            return Ok(None);
        }
        // The pre-image's metadata comes from a stat taken now, under the caller's locks: a
        // `known` stat may predate a chmod or chown (which leave the checks below unchanged).
        let adopted = |hash: String, linked: bool, st: &Stat| Adopted {
            hash,
            size: st.st_size as u64,
            linked,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
        };
        if before.st_size == 0 {
            let now = match known {
                Some(_) => match sys::lstat_beneath(root, path) {
                    Ok(st) if (st.st_ino, st.st_nlink, st.st_size) == (before.st_ino, 1, 0) => st,
                    _ => return Ok(None),
                },
                None => before,
            };
            return Ok(Some(adopted(empty_hash(), false, &now)));
        }
        let d = self.dirfd()?;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let key = format!("{PENDING}/{}-{n}", self.nonce);
        // In flight before the link exists: no resolver may take the file for settled.
        self.in_flight.lock().unwrap().insert(key.clone());
        if sys::linkat_between(root, path, d, Path::new(&key)).is_err() {
            self.settle(&key);
            return Ok(None);
        }
        // The name may have been replaced between the stat and the link: the pending file must
        // be the file that was looked at, with no other name than the one about to go.
        let linked = sys::lstat_at(d, Path::new(&key)).ok().filter(|st| {
            (
                st.st_ino,
                st.st_nlink,
                st.st_size,
                st.st_mtime,
                st.st_mtime_nsec,
            ) == (
                before.st_ino,
                2,
                before.st_size,
                before.st_mtime,
                before.st_mtime_nsec,
            )
        });
        let Some(linked) = linked else {
            self.discard(&key);
            return Ok(None);
        };
        Ok(Some(adopted(key, true, &linked)))
    }

    /// The change an adoption was for has happened, or failed and the pending file was made a
    /// copy: the resolver may take it.
    pub fn settle(&self, key: &str) {
        if self.in_flight.lock().unwrap().remove(key) {
            self.settled.notify_all();
        }
    }

    /// Drops an adoption that no record names (its capture could not be recorded).
    pub fn discard(&self, key: &str) {
        if let Ok(d) = self.dirfd() {
            let _ = sys::unlinkat(d, Path::new(key), false);
        }
        self.settle(key);
    }

    /// The hash of the content of an adopted file (see [`adopt`](Self::adopt)): waits until
    /// its change has settled, hashes the pending file and links it to its hash (unless a blob
    /// of that hash exists); [`finish`](Self::finish) removes the pending name. A pending file that still has another name — a
    /// crash came between the link and the change, or the change never settled — is copied,
    /// never kept by a link to a file that may still change.
    ///
    /// # Errors
    /// The pending file is missing or unreadable.
    pub fn resolve(&self, key: &str) -> io::Result<String> {
        if let Some(h) = self.resolved.lock().unwrap().get(key) {
            return Ok(h.clone());
        }
        let settled = {
            let g = self.in_flight.lock().unwrap();
            let (g, _) = self
                .settled
                .wait_timeout_while(g, SETTLE_WAIT, |f| f.contains(key))
                .unwrap();
            !g.contains(key)
        };
        let d = self.dirfd()?;
        let name = Path::new(key);
        let fd = sys::open_beneath(d, name, OFlags::RDONLY | OFlags::NOATIME, 0)
            .or_else(|_| sys::open_beneath(d, name, OFlags::RDONLY, 0))
            .map_err(|e| io::Error::new(e.kind(), format!("adopted blob {key}: {e}")))?;
        let st = sys::fstat(fd.as_fd())?;
        let hash = if !settled || st.st_nlink > 1 {
            // (After a crash this may also be a pending file already linked to its hash:
            // storing it again then writes nothing.)
            tracing::debug!("adopted blob {key} still has another name: copying it");
            self.put_fd(fd.as_fd(), Some(st.st_size as u64))?.0
        } else {
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; (st.st_size as usize).clamp(4096, 256 * 1024)];
            let mut off = 0u64;
            loop {
                let n = sys::pread(fd.as_fd(), &mut buf, off)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                off += n as u64;
            }
            let hash = hasher.finalize().to_hex().to_string();
            // Linked, not renamed: the pending name goes only once the records naming it are
            // in the database and out of the journal (see `finish`), so a crash before that
            // finds it again.
            if off > 0 {
                match sys::linkat_between(d, name, d, &rel(&hash)) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {} // equal content
                    Err(e) => return Err(e),
                }
            }
            hash
        };
        self.resolved
            .lock()
            .unwrap()
            .insert(key.to_string(), hash.clone());
        Ok(hash)
    }

    /// The records naming these pending keys are in the database and out of the journal: the
    /// pending files go (their content has its hash name).
    pub fn finish<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let d = self.dirfd().ok();
        let mut r = self.resolved.lock().unwrap();
        for k in keys {
            if r.remove(k).is_some() {
                if let Some(d) = d {
                    let _ = sys::unlinkat(d, Path::new(k), false);
                }
            }
        }
    }

    /// Removes pending files no journal record names (after a crash's journal was applied at
    /// open: every file it named was resolved).
    pub fn clear_pending(&self) -> io::Result<()> {
        for e in fs::read_dir(self.dir.join(PENDING))? {
            let _ = fs::remove_file(e?.path());
        }
        Ok(())
    }

    /// Makes an adopted blob a copy of its own again (the change that was to remove the file's
    /// name failed, so the file lives on and may still change).
    ///
    /// # Errors
    /// I/O errors copying.
    pub fn unshare(&self, hash: &str) -> io::Result<()> {
        let d = self.dirfd()?;
        let src = sys::open_beneath(d, &rel(hash), OFlags::RDONLY, 0)?;
        let tmp = self.tmp_name();
        let fd = sys::openat(
            d,
            &tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            BLOB_MODE,
        )?;
        let len = sys::fstat(src.as_fd())?.st_size as u64;
        if let Err(e) = sys::copy_all(src.as_fd(), fd.as_fd(), len) {
            let _ = sys::unlinkat(d, &tmp, false);
            return Err(e);
        }
        drop(fd);
        self.publish(&tmp, hash)
    }

    /// Opens a blob for reading, by its content hash (never a pending key).
    fn open_hash(&self, hash: &str) -> io::Result<File> {
        if !is_hash(hash) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("blob {hash:?} is not a content hash"),
            ));
        }
        File::open(self.path(hash)).map_err(|e| {
            let what = if e.kind() == io::ErrorKind::NotFound {
                "is missing from the store"
            } else {
                "cannot be opened"
            };
            io::Error::new(e.kind(), format!("blob {hash} {what} ({e})"))
        })
    }

    /// Reads a whole blob and checks that it hashes to its name: what a rewind, undo, dry run
    /// or diff uses of a blob, it has verified (design.md §3, "The store is private").
    ///
    /// # Errors
    /// `NotFound` when the blob is missing, `InvalidData` when its content does not hash to its
    /// name (the store was changed behind rewindfs's back); each message names the blob.
    pub fn read_verified(&self, hash: &str) -> io::Result<Vec<u8>> {
        if hash == empty_hash() {
            return Ok(Vec::new());
        }
        let mut data = Vec::new();
        self.open_hash(hash)?
            .read_to_end(&mut data)
            .map_err(|e| io::Error::new(e.kind(), format!("blob {hash}: reading: {e}")))?;
        check(hash, blake3::hash(&data))?;
        Ok(data)
    }

    /// Copies a blob into `dst` (from offset 0, at its current position), hashing what it
    /// copies: one read of the blob, and an error once the copy is complete if the content
    /// does not hash to its name — the caller must then not use `dst` (a rewind writes the
    /// temporary file beside the target, and puts it in place only after this returns `Ok`).
    /// Returns the number of bytes copied.
    ///
    /// # Errors
    /// As [`read_verified`](Self::read_verified); I/O errors writing `dst`.
    pub fn copy_verified(&self, hash: &str, dst: BorrowedFd<'_>) -> io::Result<u64> {
        if hash == empty_hash() {
            return Ok(0);
        }
        let src = self.open_hash(hash)?;
        let len = src.metadata()?.len();
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; (len as usize).clamp(4096, 256 * 1024)];
        let mut off = 0u64;
        loop {
            let n = match sys::pread(src.as_fd(), &mut buf, off) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("blob {hash}: reading: {e}"),
                    ));
                }
            };
            hasher.update(&buf[..n]);
            write_all(dst, &buf[..n])?;
            off += n as u64;
        }
        check(hash, hasher.finalize())?;
        Ok(off)
    }

    /// Opens a blob to be read forward, with gaps (see [`BlobReader`]), verified by the time
    /// its reader is finished. `None` for the empty blob, which has no file.
    ///
    /// # Errors
    /// As [`read_verified`](Self::read_verified), for a blob that cannot be opened.
    pub fn open_verified(&self, hash: &str) -> io::Result<Option<BlobReader>> {
        if hash == empty_hash() {
            return Ok(None);
        }
        Ok(Some(BlobReader {
            file: self.open_hash(hash)?,
            hash: hash.to_string(),
            hasher: Box::default(),
            hashed: 0,
            used: false,
            verified: false,
        }))
    }

    /// Opens a blob to be read from its start to its end as a [`Read`]er (see [`BlobStream`]):
    /// the read that reaches the end fails instead of returning 0 unless the whole content
    /// hashes to the blob's name. The empty blob reads as nothing.
    ///
    /// # Errors
    /// As [`read_verified`](Self::read_verified), for a blob that cannot be opened.
    pub fn stream_verified(&self, hash: &str) -> io::Result<BlobStream> {
        Ok(BlobStream {
            blob: self.open_verified(hash)?,
            pos: 0,
        })
    }

    /// Checks that a blob exists and hashes to its name.
    pub fn verify(&self, hash: &str) -> io::Result<bool> {
        if hash == empty_hash() {
            return Ok(true);
        }
        if is_pending(hash) {
            // Hashed when the journal is applied; until then it only has to be there.
            return fs::metadata(self.path(hash)).map(|m| m.is_file());
        }
        let mut f = File::open(self.path(hash))?;
        let mut h = blake3::Hasher::new();
        io::copy(&mut f, &mut h)?;
        Ok(h.finalize().to_hex().as_str() == hash)
    }
}

/// Whether a blob key is a content hash (64 lowercase hex digits), as every row names them.
fn is_hash(key: &str) -> bool {
    key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `Ok` when `got` is the hash a blob is named by.
fn check(hash: &str, got: blake3::Hash) -> io::Result<()> {
    if got.to_hex().as_str() == hash {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "blob {hash} is corrupt: its content hashes to {} (it was changed or damaged outside rewindfs)",
                got.to_hex()
            ),
        ))
    }
}

/// A blob read forward at increasing offsets, possibly with gaps (the base of a chain of range
/// pre-images, where the ranges cover some of it): each byte is read once — the bytes skipped
/// are hashed on the way to the next read — and [`finish`](Self::finish) hashes the rest and
/// checks the whole against the blob's name. Whatever was read from it must not be used
/// unless `finish` returned `Ok`. A reader nothing was read from is not checked (nothing of it
/// is used: the ranges covered the whole file).
#[derive(Debug)]
pub struct BlobReader {
    file: File,
    hash: String,
    /// Boxed: the hasher is 2 KiB, and a reader sits in an enum beside a bare file.
    hasher: Box<blake3::Hasher>,
    /// Bytes `[0, hashed)` went into the hasher.
    hashed: u64,
    /// Something was read from it.
    used: bool,
    verified: bool,
}

impl BlobReader {
    /// Reads into `buf` at `off`; 0 at the end of the blob. Offsets before the ones already
    /// read are read again, but hashed only once.
    ///
    /// # Errors
    /// I/O errors, naming the blob.
    pub fn read_at(&mut self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.used = true;
        if off > self.hashed {
            self.hash_to(Some(off))?;
        }
        let n = self.pread(buf, off)?;
        let end = off + n as u64;
        if off <= self.hashed && end > self.hashed {
            self.hasher.update(&buf[(self.hashed - off) as usize..n]);
            self.hashed = end;
        }
        Ok(n)
    }

    /// Hashes the rest of the blob and checks it against its name (once; later calls return
    /// the same answer without reading). Nothing to check if nothing was read.
    ///
    /// # Errors
    /// `InvalidData` when the content does not hash to the blob's name; I/O errors.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.used && !self.verified {
            self.hash_to(None)?;
            check(&self.hash, self.hasher.finalize())?;
            self.verified = true;
        }
        Ok(())
    }

    /// Hashes from `hashed` up to `end` (`None`: the end of the file).
    fn hash_to(&mut self, end: Option<u64>) -> io::Result<()> {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let want = match end {
                Some(e) if self.hashed >= e => return Ok(()),
                Some(e) => ((e - self.hashed) as usize).min(buf.len()),
                None => buf.len(),
            };
            let n = self.pread(&mut buf[..want], self.hashed)?;
            if n == 0 {
                return Ok(());
            }
            self.hasher.update(&buf[..n]);
            self.hashed += n as u64;
        }
    }

    fn pread(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        loop {
            match sys::pread(self.file.as_fd(), buf, off) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => {
                    return r.map_err(|e| {
                        io::Error::new(e.kind(), format!("blob {}: reading: {e}", self.hash))
                    });
                }
            }
        }
    }
}

/// A blob read in order, from its start, as a [`Read`]er ([`Blobs::stream_verified`]): a
/// [`BlobReader`] read without gaps, whose end is not reported (the read returning 0) until
/// the whole has been checked against the blob's name. What was read from it must not be used
/// (written where it counts, shown, sent) unless it was read to that end without an error.
#[derive(Debug)]
pub struct BlobStream {
    /// `None`: the empty blob.
    blob: Option<BlobReader>,
    /// The offset of the next read.
    pos: u64,
}

impl Read for BlobStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(blob) = &mut self.blob else {
            return Ok(0);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        let n = blob.read_at(buf, self.pos)?;
        if n == 0 {
            blob.finish()?;
        }
        self.pos += n as u64;
        Ok(n)
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

    fn ino(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(p).unwrap().ino()
    }

    /// A workspace with one file, and a blob store on the same filesystem.
    fn setup(content: &[u8]) -> (tempfile::TempDir, OwnedFd, Blobs) {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("ws")).unwrap();
        fs::write(d.path().join("ws/f"), content).unwrap();
        let root = sys::open_dir_path(&d.path().join("ws")).unwrap();
        let b = Blobs::open(&d.path().join("blobs"), false).unwrap();
        (d, root, b)
    }

    /// The adoption path of `rm`: linked under a pending key (nothing read), then, once the
    /// unlink settled, hashed and renamed to its hash — the very file, not a copy.
    #[test]
    fn an_adopted_file_becomes_its_hash_once_its_change_settles() {
        let (d, root, b) = setup(b"kept by a link");
        let orig = ino(&d.path().join("ws/f"));
        let a = b
            .adopt(root.as_fd(), Path::new("f"), None)
            .unwrap()
            .unwrap();
        assert!(is_pending(&a.hash) && a.linked && a.size == 14, "{a:?}");
        // The resolver waits for the change: it runs here while the unlink is still to come.
        let key = a.hash.clone();
        let h = std::thread::scope(|s| {
            let r = s.spawn(|| b.resolve(&key).unwrap());
            std::thread::sleep(Duration::from_millis(100));
            fs::remove_file(d.path().join("ws/f")).unwrap();
            b.settle(&key);
            r.join().unwrap()
        });
        assert_eq!(h, blake3::hash(b"kept by a link").to_hex().to_string());
        assert_eq!(b.read_verified(&h).unwrap(), b"kept by a link");
        // Linked, not copied: had the resolver not waited, the file would still have had its
        // workspace name, and it would have been copied.
        assert_eq!(ino(&b.path(&h)), orig);
        // Resolving again (a batch applied twice) gives the same hash until finished.
        assert_eq!(b.resolve(&key).unwrap(), h);
        b.finish([key.as_str()]);
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
        assert!(b.resolve(&key).is_err());
        assert_eq!(b.read_verified(&h).unwrap(), b"kept by a link");
    }

    /// The unlink failed: the pending file is made a copy, and later writes to the live file
    /// do not reach the pre-image.
    #[test]
    fn a_failed_change_leaves_the_pre_image_its_own_copy() {
        let (d, root, b) = setup(b"before");
        let a = b
            .adopt(root.as_fd(), Path::new("f"), None)
            .unwrap()
            .unwrap();
        b.unshare(&a.hash).unwrap();
        b.settle(&a.hash);
        fs::write(d.path().join("ws/f"), b"after, and longer").unwrap();
        let h = b.resolve(&a.hash).unwrap();
        assert_eq!(b.read_verified(&h).unwrap(), b"before");
        assert_ne!(ino(&b.path(&h)), ino(&d.path().join("ws/f")));
        assert!(b.verify(&h).unwrap());
    }

    /// A crash between the link and the unlink: after a restart nothing is in flight, and the
    /// pending file still has its workspace name — it is copied, never kept by a link.
    #[test]
    fn a_pending_file_that_still_has_its_name_is_copied() {
        let (d, root, b) = setup(b"still here");
        let a = b
            .adopt(root.as_fd(), Path::new("f"), None)
            .unwrap()
            .unwrap();
        drop(b);
        let b = Blobs::open(&d.path().join("blobs"), false).unwrap();
        let h = b.resolve(&a.hash).unwrap();
        assert_eq!(b.read_verified(&h).unwrap(), b"still here");
        assert_ne!(ino(&b.path(&h)), ino(&d.path().join("ws/f")));
        b.clear_pending().unwrap();
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
    }

    /// Files that cannot be kept by a link are left to the caller to copy.
    #[test]
    fn only_regular_files_with_one_name_are_adopted() {
        let (d, root, b) = setup(b"x");
        fs::hard_link(d.path().join("ws/f"), d.path().join("ws/g")).unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("f"), None)
                .unwrap()
                .is_none()
        );
        fs::create_dir(d.path().join("ws/dir")).unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("dir"), None)
                .unwrap()
                .is_none()
        );
        fs::write(d.path().join("ws/empty"), b"").unwrap();
        let e = b
            .adopt(root.as_fd(), Path::new("empty"), None)
            .unwrap()
            .unwrap();
        assert_eq!((e.hash, e.linked), (empty_hash(), false));
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
    }

    /// The caller's stat is taken before the link: if the name has meanwhile been given another
    /// file, or the file was written, the link is not that file and nothing is adopted (the
    /// caller copies what is there).
    #[test]
    fn a_stat_that_no_longer_fits_adopts_nothing() {
        let (d, root, b) = setup(b"first");
        let old = sys::lstat_at(root.as_fd(), Path::new("f")).unwrap();
        // Another file under the name.
        fs::write(d.path().join("ws/g"), b"second").unwrap();
        fs::rename(d.path().join("ws/g"), d.path().join("ws/f")).unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("f"), Some(&old))
                .unwrap()
                .is_none()
        );
        // The same file, written since.
        let old = sys::lstat_at(root.as_fd(), Path::new("f")).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(d.path().join("ws/f"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b" and more"))
            .unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("f"), Some(&old))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
        // A stat that fits adopts, under a key of its own; a chmod since that stat (which the
        // checks cannot see) is in the pre-image's metadata.
        let now = sys::lstat_at(root.as_fd(), Path::new("f")).unwrap();
        fs::set_permissions(d.path().join("ws/f"), fs::Permissions::from_mode(0o600)).unwrap();
        let a = b
            .adopt(root.as_fd(), Path::new("f"), Some(&now))
            .unwrap()
            .unwrap();
        assert!(is_pending(&a.hash) && a.linked && a.size == 15, "{a:?}");
        assert_eq!(a.mode & 0o7777, 0o600, "{a:?}");
        assert_eq!(ino(&b.path(&a.hash)), ino(&d.path().join("ws/f")));
        // The same for an empty file, which is not linked.
        fs::write(d.path().join("ws/e"), b"").unwrap();
        let then = sys::lstat_at(root.as_fd(), Path::new("e")).unwrap();
        fs::set_permissions(d.path().join("ws/e"), fs::Permissions::from_mode(0o640)).unwrap();
        let e = b
            .adopt(root.as_fd(), Path::new("e"), Some(&then))
            .unwrap()
            .unwrap();
        assert_eq!((e.linked, e.mode & 0o7777), (false, 0o640), "{e:?}");
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
