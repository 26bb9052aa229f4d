//! Reading blobs back, never trusting them: every byte used is checked against the blob's
//! name (its BLAKE3 hash), so a blob changed or damaged behind rewindfs's back stops whatever
//! wanted it before anything is written.

use std::cell::Cell;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use super::{Blobs, empty_hash, is_pending, write_all};
use crate::sys;

/// Blobs up to this size are verified in memory before they are written
/// ([`Blobs::write_verified`]); larger ones are read twice.
const VERIFY_IN_MEMORY: u64 = 8 << 20;

impl Blobs {
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
    /// or diff uses of a blob, it has verified (docs/design.md §3, "The store is private").
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

    /// Writes a blob into `dst` (at its current position) once it is known to hash to its
    /// name: no byte of a changed or damaged blob reaches `dst`, and `before` (which empties
    /// the file a rewind restores in place) runs only then. Up to `VERIFY_IN_MEMORY` bytes
    /// the blob is read once, into memory; a larger one is read twice through one open file
    /// (hashed, then copied), so the store's copy cannot be swapped in between.
    /// Returns the number of bytes written.
    ///
    /// # Errors
    /// As [`read_verified`](Self::read_verified) (then `before` has not run); `before`'s
    /// error; I/O errors writing `dst`.
    pub fn write_verified(
        &self,
        hash: &str,
        dst: BorrowedFd<'_>,
        before: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<u64> {
        self.write_verified_counted(hash, dst, before, &Cell::new(0))
    }

    /// Writes `data`, which a plan read from blob `hash` and verified, into `dst` once it is
    /// checked again to hash to `hash` (what it is held as has not been swapped since), adding
    /// to `written` the bytes each write puts in `dst`. Returns the number of bytes written.
    ///
    /// # Errors
    /// `InvalidData` if `data` does not hash to `hash` (nothing is written); I/O errors
    /// writing `dst`.
    pub fn write_checked_counted(
        hash: &str,
        data: &[u8],
        dst: BorrowedFd<'_>,
        written: &Cell<u64>,
    ) -> io::Result<u64> {
        check(hash, blake3::hash(data))?;
        write_counted(dst, data, written)?;
        Ok(data.len() as u64)
    }

    /// [`write_verified`](Self::write_verified), adding to `written` the bytes each write
    /// puts in `dst` as it goes: after a failure, whether any byte reached `dst` (a rewind
    /// through the mount whose write is refused part-way has changed the file all the same).
    ///
    /// # Errors
    /// As [`write_verified`](Self::write_verified).
    pub fn write_verified_counted(
        &self,
        hash: &str,
        dst: BorrowedFd<'_>,
        before: impl FnOnce() -> io::Result<()>,
        written: &Cell<u64>,
    ) -> io::Result<u64> {
        let write_all = |dst: BorrowedFd<'_>, data: &[u8]| write_counted(dst, data, written);
        if hash == empty_hash() {
            before()?;
            return Ok(0);
        }
        let src = self.open_hash(hash)?;
        let len = src.metadata()?.len();
        let reading = |e: io::Error| io::Error::new(e.kind(), format!("blob {hash}: reading: {e}"));
        if len <= VERIFY_IN_MEMORY {
            let mut data = Vec::with_capacity(len as usize);
            (&src).read_to_end(&mut data).map_err(reading)?;
            check(hash, blake3::hash(&data))?;
            before()?;
            write_all(dst, &data)?;
            return Ok(data.len() as u64);
        }
        let mut buf = vec![0u8; 1 << 20];
        let mut hasher = blake3::Hasher::new();
        let mut off = 0u64;
        loop {
            match sys::pread(src.as_fd(), &mut buf, off) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    off += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(reading(e)),
            }
        }
        check(hash, hasher.finalize())?;
        before()?;
        // The second read is checked too: a blob cut short or changed between the two reads
        // (a damaged disk, someone behind rewindfs's back) fails the copy instead of leaving
        // `dst` with fewer or other bytes than the blob's name promises.
        let total = off;
        let mut again = blake3::Hasher::new();
        off = 0;
        while off < total {
            let want = buf.len().min((total - off) as usize);
            let n = match sys::pread(src.as_fd(), &mut buf[..want], off) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(reading(e)),
            };
            again.update(&buf[..n]);
            write_all(dst, &buf[..n])?;
            off += n as u64;
        }
        if off != total {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "blob {hash}: read {off} of its {total} bytes the second time (it was cut \
                     short while being copied)"
                ),
            ));
        }
        check(hash, again.finalize())?;
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

/// Writes all of `data` to `dst` (one `write` unless it is cut short), adding what each write
/// wrote to `written`.
fn write_counted(dst: BorrowedFd<'_>, mut data: &[u8], written: &Cell<u64>) -> io::Result<()> {
    while !data.is_empty() {
        match sys::write(dst, data) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => {
                written.set(written.get() + n as u64);
                data = &data[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    /// The blob's length.
    ///
    /// # Errors
    /// `fstat` failed.
    pub fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

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
