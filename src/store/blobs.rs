//! Content-addressed blobs, named by their BLAKE3 hash.
//!
//! ```text
//! <store>/blobs/
//! ├── tmp/                 in-flight writes (removed at open)
//! └── ab/
//!     └── cdef0123…        content whose BLAKE3 hash is "abcdef0123…"
//! ```
//!
//! A blob is hashed while it is written to a temp file in `tmp/`, optionally fsynced, then
//! linked into place; an existing blob counts as success, so equal contents are stored once
//! and a crash leaves at most a stray temp file, never a partial blob under its name.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The hash of the empty blob, which is never written to disk.
pub fn empty_hash() -> String {
    blake3::hash(b"").to_hex().to_string()
}

/// The blob directory.
#[derive(Debug)]
pub struct Blobs {
    dir: PathBuf,
    /// fsync every blob before it is linked (power-loss durability, at a cost per capture).
    sync: bool,
    /// Distinguishes temp files of concurrent writers.
    counter: AtomicU64,
}

impl Blobs {
    /// Opens (creating) the blob directory and clears abandoned temp files.
    ///
    /// # Errors
    /// Any I/O error creating the directories.
    pub fn open(dir: &Path, sync: bool) -> io::Result<Blobs> {
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp)?;
        for e in fs::read_dir(&tmp)? {
            let _ = fs::remove_file(e?.path());
        }
        Ok(Blobs {
            dir: dir.to_owned(),
            sync,
            counter: AtomicU64::new(0),
        })
    }

    /// The blob directory without opening it (read-only use: `fsck`).
    pub fn at(dir: &Path) -> Blobs {
        Blobs {
            dir: dir.to_owned(),
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
        self.dir.join(&hash[..2]).join(&hash[2..])
    }

    pub fn exists(&self, hash: &str) -> bool {
        hash == empty_hash() || self.path(hash).exists()
    }

    /// Stores everything `src` yields; returns its hash and size.
    ///
    /// # Errors
    /// I/O errors reading the source or writing the blob (e.g. `ENOSPC`).
    pub fn put_reader(&self, mut src: impl Read) -> io::Result<(String, u64)> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let tmp_path = self
            .dir
            .join("tmp")
            .join(format!("{}-{n}", std::process::id()));
        let mut tmp = File::create(&tmp_path)?;
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
                tmp.write_all(&buf[..k])?;
                size += k as u64;
            }
            if self.sync {
                tmp.sync_data()?;
            }
            Ok(())
        })();
        if let Err(e) = res {
            let _ = fs::remove_file(&tmp_path);
            return Err(e);
        }
        drop(tmp);
        let hash = hasher.finalize().to_hex().to_string();
        if size == 0 {
            let _ = fs::remove_file(&tmp_path);
            return Ok((hash, 0));
        }
        let dst = self.path(&hash);
        if let Some(parent) = dst.parent() {
            fs::create_dir_all(parent)?;
        }
        // link, not rename: an existing blob (same content) is left as it is.
        match fs::hard_link(&tmp_path, &dst) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                let _ = fs::remove_file(&tmp_path);
                return Err(e);
            }
        }
        let _ = fs::remove_file(&tmp_path);
        Ok((hash, size))
    }

    /// Stores the content of an open file (read from offset 0).
    pub fn put_fd(&self, fd: BorrowedFd<'_>) -> io::Result<(String, u64)> {
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

    pub fn put_bytes(&self, data: &[u8]) -> io::Result<(String, u64)> {
        self.put_reader(data)
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
