//! Reading a bundle back: every frame checked against its hash before it is used, the byte
//! offset of any fault named; staging an import (its blobs stored as verified).

use std::collections::{BTreeSet, HashSet};
use std::io::{self, Read, Write};

use super::*;
use crate::store::{BlobRef, Store};

/// A reader that counts the bytes it has given.
struct Counted<R> {
    r: R,
    pos: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.r.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read> Counted<R> {
    /// Fills `buf`; `Ok(false)` at a clean end of the input (nothing read).
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            match self.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// A payload reader bounded to its frame, that hashes what it gives.
struct PayloadReader<'a, R> {
    inner: &'a mut Counted<R>,
    left: u64,
    hasher: blake3::Hasher,
}

impl<R: Read> Read for PayloadReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = (self.left as usize).min(buf.len());
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.hasher.update(&buf[..n]);
        self.left -= n as u64;
        Ok(n)
    }
}

/// What a bundle held, once read and checked (its blobs are in the store by then).
#[derive(Debug, Default)]
pub struct Staged {
    pub manifest: Manifest,
    pub rows: Vec<Row>,
    /// Blobs this read stored that the store did not have (removed again if the import fails).
    pub created: Vec<BlobRef>,
    /// Every blob the bundle held.
    pub blobs: HashSet<String>,
}

/// One frame of a bundle file, as [`scan`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameAt {
    pub kind: u8,
    /// The payload's hash (hex).
    pub hash: String,
    /// Where the payload starts in the file, and its length.
    pub offset: u64,
    pub len: u64,
}

/// The frames of a bundle, each checked against its hash (the payloads are read, not kept).
///
/// # Errors
/// `Corrupt` as an import would say it; I/O errors.
pub fn scan(src: impl Read) -> std::result::Result<Vec<FrameAt>, BundleError> {
    let mut r = Counted { r: src, pos: 0 };
    let corrupt = |offset: u64, what: &str| BundleError::Corrupt {
        offset,
        what: what.to_string(),
    };
    let mut head = [0u8; 12];
    if !r.fill(&mut head).unwrap_or(false) || &head[..8] != MAGIC {
        return Err(corrupt(0, "not a rewindfs bundle"));
    }
    let mut out = Vec::new();
    loop {
        let at = r.pos;
        let mut fh = [0u8; 41];
        match r.fill(&mut fh) {
            Ok(true) => {}
            Ok(false) => return Ok(out),
            Err(_) => return Err(corrupt(at, "a frame header is cut short (truncated)")),
        }
        let len = u64::from_le_bytes(fh[1..9].try_into().unwrap_or_default());
        let hash: [u8; 32] = fh[9..41].try_into().unwrap_or_default();
        let mut p = PayloadReader {
            inner: &mut r,
            left: len,
            hasher: blake3::Hasher::new(),
        };
        io::copy(&mut p, &mut io::sink())
            .map_err(|_| corrupt(at, "a frame is cut short (truncated)"))?;
        if p.hasher.finalize().as_bytes() != &hash {
            return Err(corrupt(at, "a frame's content does not match its hash"));
        }
        out.push(FrameAt {
            kind: fh[0],
            hash: encode_hash(&hash),
            offset: at + 41,
            len,
        });
    }
}

/// Writes a bundle from the blob-less form a remote keeps (`history`: the header, the rows
/// frames and the manifest), fetching each blob its `blobs` rows name with `fetch`.
///
/// # Errors
/// A damaged history object; `fetch`'s errors; I/O errors.
pub fn assemble(
    history: &[u8],
    mut fetch: impl FnMut(&str) -> io::Result<Vec<u8>>,
    out: &mut impl Write,
) -> std::result::Result<(), BundleError> {
    let frames = scan(history)?;
    let mut hashes = BTreeSet::new();
    for f in frames.iter().filter(|f| f.kind == ROWS) {
        let payload = &history[f.offset as usize..(f.offset + f.len) as usize];
        for line in payload.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let row: Row = serde_json::from_slice(line).map_err(|e| BundleError::Corrupt {
                offset: f.offset - 41,
                what: format!("a row: {e}"),
            })?;
            if row.t == "blobs" {
                hashes.extend(row.text("hash").map(str::to_string));
            }
        }
    }
    out.write_all(&history[..12])?;
    for h in &hashes {
        let data = fetch(h)?;
        let raw = decode_hash(h).ok_or_else(|| BundleError::Refused(format!("blob name {h:?}")))?;
        out.write_all(&[BLOB])?;
        out.write_all(&(data.len() as u64).to_le_bytes())?;
        out.write_all(&raw)?;
        out.write_all(&data)?;
    }
    for f in frames.iter().filter(|f| f.kind != BLOB) {
        out.write_all(&history[(f.offset - 41) as usize..(f.offset + f.len) as usize])?;
    }
    Ok(())
}

impl Store {
    /// Reads a bundle and checks every frame, storing its blobs as they are verified;
    /// returns its rows and manifest. On failure, the blobs it stored are removed again
    /// (unless a row names them).
    ///
    /// # Errors
    /// [`BundleError::Corrupt`] with the offset of the frame at fault; I/O and store errors.
    pub fn stage_bundle(
        &self,
        src: impl Read,
        capture: crate::store::gc::Capture<'_>,
    ) -> std::result::Result<Staged, BundleError> {
        let mut staged = Staged::default();
        let res = self.stage_into(src, &mut staged);
        if let Err(e) = res {
            if let Err(d) = self.discard_unreferenced(&staged.created, capture) {
                tracing::warn!("import: removing the blobs of a refused bundle: {d}");
            }
            return Err(e);
        }
        Ok(staged)
    }

    fn stage_into(
        &self,
        src: impl Read,
        staged: &mut Staged,
    ) -> std::result::Result<(), BundleError> {
        let mut r = Counted { r: src, pos: 0 };
        let corrupt = |offset: u64, what: String| BundleError::Corrupt { offset, what };
        read_header(&mut r)?;
        let mut frames = 0u64;
        let mut rows_seen = 0u64;
        loop {
            let offset = r.pos;
            let mut fh = [0u8; 41];
            match r.fill(&mut fh) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(corrupt(
                        offset,
                        "the bundle ends before its manifest (truncated)".into(),
                    ));
                }
                Err(_) => {
                    return Err(corrupt(
                        offset,
                        "a frame header is cut short (truncated)".into(),
                    ));
                }
            }
            let kind = fh[0];
            let len = u64::from_le_bytes(fh[1..9].try_into().unwrap_or_default());
            let hash: [u8; 32] = fh[9..41].try_into().unwrap_or_default();
            let hex = encode_hash(&hash);
            let mut p = PayloadReader {
                inner: &mut r,
                left: len,
                hasher: blake3::Hasher::new(),
            };
            let cut = |e: io::Error| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    corrupt(
                        offset,
                        format!(
                            "frame '{}' of {len} bytes is cut short (truncated)",
                            kind as char
                        ),
                    )
                } else {
                    BundleError::Io(e)
                }
            };
            match kind {
                BLOB => {
                    if self.blobs.exists(&hex) {
                        io::copy(&mut p, &mut io::sink()).map_err(cut)?;
                    } else {
                        let (got, _) = match self.blobs.put_reader(&mut p) {
                            Ok(x) => x,
                            Err(e) => return Err(cut(e)),
                        };
                        staged.created.push(BlobRef::hash(got));
                    }
                    if p.hasher.finalize().as_bytes() != &hash {
                        return Err(corrupt(
                            offset,
                            format!("blob {hex}: its content does not match its hash"),
                        ));
                    }
                    staged.blobs.insert(hex);
                }
                ROWS | MANIFEST => {
                    if len > 1 << 30 {
                        return Err(corrupt(offset, format!("a frame of {len} bytes")));
                    }
                    let mut buf = Vec::with_capacity(len as usize);
                    p.read_to_end(&mut buf).map_err(cut)?;
                    if p.hasher.finalize().as_bytes() != &hash {
                        return Err(corrupt(
                            offset,
                            format!(
                                "frame '{}': its content does not match its hash",
                                kind as char
                            ),
                        ));
                    }
                    if kind == MANIFEST {
                        let m: Manifest = serde_json::from_slice(&buf)
                            .map_err(|e| corrupt(offset, format!("the manifest: {e}")))?;
                        check_manifest(&m, offset, frames, rows_seen, staged.blobs.len() as u64)?;
                        let mut rest = [0u8; 1];
                        if r.fill(&mut rest).unwrap_or(true) {
                            return Err(corrupt(r.pos - 1, "bytes after the manifest".into()));
                        }
                        staged.manifest = m;
                        return Ok(());
                    }
                    for (i, line) in buf.split(|b| *b == b'\n').enumerate() {
                        if line.is_empty() {
                            continue;
                        }
                        let row: Row = serde_json::from_slice(line).map_err(|e| {
                            corrupt(offset, format!("row {i} of a rows frame: {e}"))
                        })?;
                        let keep =
                            super::check::check_row(&row).map_err(|what| BundleError::Entry {
                                offset,
                                index: i,
                                table: row.t.clone(),
                                what,
                            })?;
                        rows_seen += 1;
                        if keep {
                            staged.rows.push(row);
                        }
                    }
                }
                k => return Err(corrupt(offset, format!("a frame of unknown kind {k:#04x}"))),
            }
            frames += 1;
        }
    }
}

/// The bundle's header: its magic and a format this build reads.
fn read_header(r: &mut Counted<impl Read>) -> std::result::Result<(), BundleError> {
    let corrupt = |offset: u64, what: String| BundleError::Corrupt { offset, what };
    let mut head = [0u8; 12];
    match r.fill(&mut head) {
        Ok(true) => {}
        Ok(false) | Err(_) => {
            return Err(corrupt(0, "not a rewindfs bundle (too short)".into()));
        }
    }
    if &head[..8] != MAGIC {
        return Err(corrupt(
            0,
            "not a rewindfs bundle (no RWFSBNDL header)".into(),
        ));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
    if version != FORMAT {
        return Err(corrupt(
            8,
            format!("bundle format {version}; this rewindfs reads format {FORMAT}"),
        ));
    }
    Ok(())
}

/// The manifest (at `offset`) counts what was read before it, and names a store schema this
/// build knows.
fn check_manifest(
    m: &Manifest,
    offset: u64,
    frames: u64,
    rows: u64,
    blobs: u64,
) -> std::result::Result<(), BundleError> {
    if m.frames != frames || m.rows != rows || m.blobs != blobs {
        return Err(BundleError::Corrupt {
            offset,
            what: format!(
                "the manifest counts {} frames, {} rows, {} blobs; the bundle has {frames}, {rows}, {blobs}",
                m.frames, m.rows, m.blobs
            ),
        });
    }
    if m.schema > crate::store::migrate::SCHEMA_VERSION {
        return Err(BundleError::Refused(format!(
            "the bundle was written by a newer rewindfs (store schema {}; this one knows {}): upgrade rewindfs",
            m.schema,
            crate::store::migrate::SCHEMA_VERSION
        )));
    }
    Ok(())
}
