//! Content-addressed blobs, named by their BLAKE3 hash.
//!
//! ```text
//! <store>/blobs/
//! ├── tmp/                 in-flight writes (removed at open)
//! └── ab/
//!     └── cdef0123…        content whose BLAKE3 hash is "abcdef0123…"
//! ```
//!
//! A blob is hashed while (or, for small files, before) it is written to a temp file in `tmp/`,
//! optionally fsynced, then renamed into place; an existing blob counts as success, so equal
//! contents are stored once and a crash leaves at most a stray temp file, never a partial blob
//! under its name. A file about to be deleted is *adopted* instead of copied: hashed, then
//! hard-linked into place (`adopt`), so `rm -rf` of a tree writes no data.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::OFlags;

use crate::sys;

/// The hash of the empty blob, which is never written to disk.
pub fn empty_hash() -> String {
    blake3::hash(b"").to_hex().to_string()
}

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

fn rel(hash: &str) -> PathBuf {
    PathBuf::from(&hash[..2]).join(&hash[2..])
}

impl Blobs {
    /// Opens (creating) the blob directory and its 256 fan-out directories, and clears
    /// abandoned temp files.
    ///
    /// # Errors
    /// Any I/O error creating the directories.
    pub fn open(dir: &Path, sync: bool) -> io::Result<Blobs> {
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp)?;
        for e in fs::read_dir(&tmp)? {
            let _ = fs::remove_file(e?.path());
        }
        for i in 0..=255u8 {
            let d = dir.join(format!("{i:02x}"));
            if let Err(e) = fs::create_dir(&d) {
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(io::Error::new(e.kind(), format!("{}: {e}", d.display())));
                }
            }
        }
        let dirfd = sys::open_dir_path(dir)?;
        let dev = sys::fstat(dirfd.as_fd())?.st_dev;
        Ok(Blobs {
            dir: dir.to_owned(),
            dirfd: Some(dirfd),
            dev,
            sync,
            counter: AtomicU64::new(0),
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
            0o444,
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

    /// Stores the content of an open file (read from offset 0).
    pub fn put_fd(&self, fd: BorrowedFd<'_>) -> io::Result<(String, u64)> {
        let size = sys::fstat(fd)?.st_size as u64;
        if size <= SMALL {
            // One extra byte tells a file that grew meanwhile, which is streamed instead.
            let mut buf = vec![0u8; size as usize + 1];
            let n = sys::pread_full(fd, &mut buf, 0)?;
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
            0o444,
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
    /// lose it (unlink, or replaced by a rename) — without copying it: the file is hashed, then
    /// hard-linked into the store as its blob. `Ok(None)` when that cannot be done (another
    /// filesystem, several names, changed while hashed, `--sync`): the caller copies instead.
    ///
    /// # Errors
    /// I/O errors reading the file or linking it.
    pub fn adopt(&self, root: BorrowedFd<'_>, path: &Path) -> io::Result<Option<Adopted>> {
        if self.sync || self.dirfd.is_none() {
            // A link is durable only once the directory is synced; --sync copies and fsyncs.
            return Ok(None);
        }
        let fd = match sys::open_beneath(
            root,
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOATIME,
            0,
        )
        .or_else(|_| sys::open_beneath(root, path, OFlags::RDONLY | OFlags::NONBLOCK, 0))
        {
            Ok(fd) => fd,
            Err(_) => return Ok(None),
        };
        let before = sys::fstat(fd.as_fd())?;
        if before.st_mode & libc::S_IFMT != libc::S_IFREG
            || before.st_nlink != 1
            || before.st_dev != self.dev
        {
            return Ok(None);
        }
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; (before.st_size as usize).clamp(4096, 256 * 1024)];
        let mut off = 0u64;
        loop {
            let n = sys::pread(fd.as_fd(), &mut buf, off)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            off += n as u64;
        }
        let after = sys::fstat(fd.as_fd())?;
        let same = |a: &rustix::fs::Stat, b: &rustix::fs::Stat| {
            (
                a.st_size,
                a.st_mtime,
                a.st_mtime_nsec,
                a.st_ctime,
                a.st_ctime_nsec,
            ) == (
                b.st_size,
                b.st_mtime,
                b.st_mtime_nsec,
                b.st_ctime,
                b.st_ctime_nsec,
            )
        };
        if !same(&before, &after) || off != before.st_size as u64 {
            return Ok(None); // written meanwhile: copy what is there now
        }
        let hash = hasher.finalize().to_hex().to_string();
        let size = off;
        if size == 0 {
            return Ok(Some(Adopted {
                hash,
                size,
                linked: false,
                mode: before.st_mode,
                uid: before.st_uid,
                gid: before.st_gid,
            }));
        }
        let d = self.dirfd()?;
        let name = rel(&hash);
        // Linked straight to its blob name: an existing blob (equal content) makes this fail
        // with EEXIST, and the file needs no keeping.
        match sys::linkat_between(root, path, d, &name) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                return Ok(Some(Adopted {
                    hash,
                    size,
                    linked: false,
                    mode: before.st_mode,
                    uid: before.st_uid,
                    gid: before.st_gid,
                }));
            }
            Err(_) => return Ok(None),
        }
        // The name may have been replaced between the open and the link: the blob must be the
        // file that was hashed, unchanged (the link itself changes its ctime, not its mtime).
        // Nothing reads blobs meanwhile: rewinds and gc wait for the change in progress.
        let unchanged = |st: &rustix::fs::Stat| {
            (
                st.st_dev,
                st.st_ino,
                st.st_size,
                st.st_mtime,
                st.st_mtime_nsec,
            ) == (
                before.st_dev,
                before.st_ino,
                before.st_size,
                before.st_mtime,
                before.st_mtime_nsec,
            )
        };
        match sys::lstat_at(d, &name) {
            Ok(st) if unchanged(&st) => Ok(Some(Adopted {
                hash,
                size,
                linked: true,
                mode: before.st_mode,
                uid: before.st_uid,
                gid: before.st_gid,
            })),
            _ => {
                let _ = sys::unlinkat(d, &name, false);
                Ok(None)
            }
        }
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
            0o444,
        )?;
        let len = sys::fstat(src.as_fd())?.st_size as u64;
        if let Err(e) = sys::copy_all(src.as_fd(), fd.as_fd(), len) {
            let _ = sys::unlinkat(d, &tmp, false);
            return Err(e);
        }
        drop(fd);
        self.publish(&tmp, hash)
    }

    /// Reads a whole blob.
    ///
    /// # Errors
    /// `NotFound` when the blob is missing (a damaged store).
    pub fn read(&self, hash: &str) -> io::Result<Vec<u8>> {
        if hash == empty_hash() {
            return Ok(Vec::new());
        }
        fs::read(self.path(hash)).map_err(|e| io::Error::new(e.kind(), format!("blob {hash}: {e}")))
    }

    /// Opens a blob for reading (for large restores).
    pub fn open_blob(&self, hash: &str) -> io::Result<Option<File>> {
        if hash == empty_hash() {
            return Ok(None);
        }
        File::open(self.path(hash))
            .map(Some)
            .map_err(|e| io::Error::new(e.kind(), format!("blob {hash}: {e}")))
    }

    /// Checks that a blob exists and hashes to its name.
    pub fn verify(&self, hash: &str) -> io::Result<bool> {
        if hash == empty_hash() {
            return Ok(true);
        }
        let mut f = File::open(self.path(hash))?;
        let mut h = blake3::Hasher::new();
        io::copy(&mut f, &mut h)?;
        Ok(h.finalize().to_hex().as_str() == hash)
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

    #[test]
    fn equal_contents_are_stored_once_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let b = Blobs::open(d.path(), true).unwrap();
        let (h1, s1) = b.put_bytes(b"hello").unwrap();
        let (h2, _) = b.put_bytes(b"hello").unwrap();
        assert_eq!(h1, h2);
        assert_eq!(s1, 5);
        assert_eq!(h1, blake3::hash(b"hello").to_hex().to_string());
        assert_eq!(b.read(&h1).unwrap(), b"hello");
        assert!(b.verify(&h1).unwrap());
        let files = walk(d.path());
        assert_eq!(files.len(), 1, "{files:?}");
        let (he, _) = b.put_bytes(b"").unwrap();
        assert_eq!(b.read(&he).unwrap(), b"");
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
