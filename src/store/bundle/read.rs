//! Reading a bundle back: every frame checked against its hash before it is used, the byte
//! offset of any fault named; staging an import (its blobs stored as verified).
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use std::collections::BTreeSet;
use std::io::{self, Read, Write};

use super::sign::{self, SIGNATURE, Trust};
use super::staging::Staging;
use super::*;
use crate::store::{BlobRef, Store};
use crate::wspath::WsPath;

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

/// What a bundle held, once read and checked (its blobs are in the store by then, its rows in
/// a staging file: see `staging.rs`).
pub struct Staged {
    pub manifest: Manifest,
    /// Who signed it (a trusted key's comment, or an untrusted key), if anyone did.
    pub signed_by: Option<String>,
    /// The rows, the blobs' names and sizes, and what the import works out from them.
    pub(super) db: Staging,
    /// Blob frames in the bundle.
    pub blobs: u64,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("manifest", &self.manifest)
            .field("blobs", &self.blobs)
            .finish_non_exhaustive()
    }
}

impl Staged {
    /// Removes again the blobs this import stored that no row names (`capture`: the lock the
    /// store's captures take, held while each batch goes).
    ///
    /// # Errors
    /// Store errors.
    pub fn discard(
        &self,
        store: &Store,
        capture: crate::store::gc::Capture<'_>,
    ) -> crate::store::Result<()> {
        let mut res = Ok(());
        self.db.created(10_000, |batch| {
            let refs: Vec<BlobRef> = batch.into_iter().map(BlobRef::hash).collect();
            if let Err(e) = store.discard_unreferenced(&refs, capture) {
                res = Err(e);
            }
        })?;
        res.map(|_| ())
    }

    /// Calls `f` with the path and bundle id of each new capture of checkpoint purpose (not of
    /// a checkpoint the store has), in bundle order: the history an import splices in front of.
    ///
    /// # Errors
    /// Store errors; `f`'s.
    pub fn each_new_capture(
        &self,
        mut f: impl FnMut(Vec<u8>, i64) -> std::result::Result<(), BundleError>,
    ) -> std::result::Result<(), BundleError> {
        self.db.each("captures", true, |r| {
            if r.text("purpose") != Some("checkpoint") {
                return Ok(());
            }
            match (r.bytes("path"), r.int("id")) {
                (Some(p), Some(id)) => f(p, id),
                _ => Ok(()),
            }
        })
    }

    /// The new directory renames, in the order they happened (a bundle carries at most
    /// 100,000).
    ///
    /// # Errors
    /// Store errors.
    pub fn new_moves(&self) -> std::result::Result<Vec<crate::store::Move>, BundleError> {
        let mut out = Vec::new();
        self.db.each("moves", true, |r| {
            // The bundle's paths were checked when it was staged (`check.rs`); one that is
            // not a workspace path here is left out, never handed on.
            let path = |col| r.bytes(col).and_then(|b| WsPath::parse(b).ok());
            if let (Some(seq), Some(src), Some(dst)) = (r.int("seq"), path("src"), path("dst")) {
                out.push(crate::store::Move {
                    seq,
                    checkpoint: r.int("checkpoint").unwrap_or(0),
                    src,
                    dst,
                    exchange: r.int("exchange").unwrap_or(0) != 0,
                    after_capture: r.int("after_capture").unwrap_or(0),
                    actor: r
                        .text("actor")
                        .map_or(crate::store::Actor::External, crate::store::Actor::parse),
                });
            }
            Ok(())
        })?;
        out.sort_by_key(|m| m.seq);
        Ok(out)
    }

    /// Adds a path whose present state the import splices in before the imported history
    /// (see [`Store::import_rows`]).
    ///
    /// # Errors
    /// Store errors.
    pub fn add_splice_name(&self, path: &[u8]) -> std::result::Result<(), BundleError> {
        Ok(self.db.add_name(path)?)
    }
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
        trust: &Trust,
    ) -> std::result::Result<Staged, BundleError> {
        let db = Staging::create(&self.blobs.dir().join("tmp"))?;
        match self.stage_into(src, &db, trust) {
            Ok((manifest, blobs, signed_by)) => Ok(Staged {
                manifest,
                signed_by,
                db,
                blobs,
            }),
            Err(e) => {
                let staged = Staged {
                    manifest: Manifest::default(),
                    signed_by: None,
                    db,
                    blobs: 0,
                };
                if let Err(d) = staged.discard(self, capture) {
                    tracing::warn!("import: removing the blobs of a refused bundle: {d}");
                }
                Err(e)
            }
        }
    }

    /// Reads the bundle into `db`: its manifest, how many blob frames it had, and who signed
    /// it (judged by `trust`).
    fn stage_into(
        &self,
        src: impl Read,
        db: &Staging,
        trust: &Trust,
    ) -> std::result::Result<(Manifest, u64, Option<String>), BundleError> {
        let mut r = Counted { r: src, pos: 0 };
        let corrupt = |offset: u64, what: String| BundleError::Corrupt { offset, what };
        let mut digest = sign::Digest::new(&read_header(&mut r)?);
        let mut frames = 0u64;
        let mut rows_seen = 0u64;
        let mut blobs = 0u64;
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
                    let created = if self.blobs.exists(&hex) {
                        io::copy(&mut p, &mut io::sink()).map_err(cut)?;
                        false
                    } else {
                        let (got, _) = match self.blobs.put_reader(&mut p) {
                            Ok(x) => x,
                            Err(e) => return Err(cut(e)),
                        };
                        // Noted before it is checked: a blob that does not match is removed.
                        db.add_blob(&got, len, true)?;
                        true
                    };
                    if p.hasher.finalize().as_bytes() != &hash {
                        return Err(corrupt(
                            offset,
                            format!("blob {hex}: its content does not match its hash"),
                        ));
                    }
                    if !created {
                        db.add_blob(&hex, len, false)?;
                    }
                    blobs += 1;
                }
                ROWS => {
                    read_lines(&mut p, |i, line| {
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
                            db.add_row(&row, line)?;
                        }
                        Ok(())
                    })
                    .map_err(|e| match e {
                        BundleError::Io(e) => cut(e),
                        e => e,
                    })?;
                    if p.hasher.finalize().as_bytes() != &hash {
                        return Err(corrupt(
                            offset,
                            "frame 'R': its content does not match its hash".into(),
                        ));
                    }
                    digest.frame(&fh);
                }
                MANIFEST => {
                    if len > MAX_LINE {
                        return Err(corrupt(offset, format!("a manifest of {len} bytes")));
                    }
                    let mut buf = Vec::with_capacity(len as usize);
                    p.read_to_end(&mut buf).map_err(cut)?;
                    if p.hasher.finalize().as_bytes() != &hash {
                        return Err(corrupt(
                            offset,
                            "frame 'M': its content does not match its hash".into(),
                        ));
                    }
                    let m: Manifest = serde_json::from_slice(&buf)
                        .map_err(|e| corrupt(offset, format!("the manifest: {e}")))?;
                    check_manifest(&m, offset, frames, rows_seen, blobs)?;
                    digest.frame(&fh);
                    let signature = read_signature(&mut r)?;
                    let signed_by = trust.judge(&digest.finish(), signature.as_deref())?;
                    db.conn.execute_batch("COMMIT; BEGIN;")?;
                    check_checkpoints(&m, db, offset)?;
                    return Ok((m, blobs, signed_by));
                }
                k => return Err(corrupt(offset, format!("a frame of unknown kind {k:#04x}"))),
            }
            frames += 1;
        }
    }
}

/// The longest row (a line of a rows frame) and manifest a bundle may have: a row with a saved
/// range inline (at most 32 MiB, as base64) fits.
const MAX_LINE: u64 = 64 << 20;
/// The most checkpoints, and directory renames, one bundle may carry (an import keeps a small
/// record of each in memory).
const MAX_CHECKPOINTS: u64 = 1_000_000;
const MAX_MOVES: u64 = 100_000;

/// Calls `each` with every line of a rows frame (with its index), one at a time: a frame is
/// never held whole.
fn read_lines<R: Read>(
    p: &mut PayloadReader<'_, R>,
    mut each: impl FnMut(usize, &[u8]) -> std::result::Result<(), BundleError>,
) -> std::result::Result<(), BundleError> {
    use std::io::BufRead;
    let mut br = io::BufReader::with_capacity(1 << 16, p);
    let mut line = Vec::new();
    for i in 0.. {
        line.clear();
        let n = (&mut br).take(MAX_LINE + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if n as u64 > MAX_LINE {
            return Err(BundleError::Refused(format!(
                "row {i} of a rows frame is longer than {MAX_LINE} bytes: not a row rewindfs writes"
            )));
        }
        if !line.is_empty() {
            each(i, &line)?;
        }
    }
    Ok(())
}

/// The manifest's checkpoints are the checkpoint rows', in order; a bundle holds at least one,
/// and no more checkpoints or renames than an import handles.
fn check_checkpoints(
    m: &Manifest,
    db: &Staging,
    offset: u64,
) -> std::result::Result<(), BundleError> {
    if m.checkpoints.is_empty() {
        return Err(BundleError::Refused(
            "the bundle holds no checkpoint: nothing to import (an export always holds at least \
             its own)"
                .into(),
        ));
    }
    let n = db.count("checkpoints")?;
    if n > MAX_CHECKPOINTS || db.count("moves")? > MAX_MOVES {
        return Err(BundleError::Refused(format!(
            "the bundle holds more than {MAX_CHECKPOINTS} checkpoints or {MAX_MOVES} directory \
             renames, more than this rewindfs imports at once: export it in parts (--since)"
        )));
    }
    let mut i = 0usize;
    let mismatch = |what: String| BundleError::Corrupt { offset, what };
    db.each("checkpoints", false, |row| {
        let uuid = row.text("uuid").unwrap_or_default();
        match m.checkpoints.get(i) {
            Some(u) if u == uuid => {}
            _ => {
                return Err(mismatch(format!(
                    "the manifest's checkpoint {} is not the bundle's checkpoint row {uuid:?}",
                    i + 1
                )));
            }
        }
        i += 1;
        Ok(())
    })?;
    if i != m.checkpoints.len() {
        return Err(mismatch(format!(
            "the manifest lists {} checkpoints; the bundle has {i}",
            m.checkpoints.len()
        )));
    }
    Ok(())
}

/// What follows the manifest: nothing, or a signature frame (its payload), and then nothing.
fn read_signature(r: &mut Counted<impl Read>) -> std::result::Result<Option<Vec<u8>>, BundleError> {
    let corrupt = |offset: u64, what: String| BundleError::Corrupt { offset, what };
    let offset = r.pos;
    let mut fh = [0u8; 41];
    match r.fill(&mut fh) {
        Ok(false) => return Ok(None),
        Ok(true) if fh[0] == SIGNATURE => {}
        _ => return Err(corrupt(offset, "bytes after the manifest".into())),
    }
    let len = u64::from_le_bytes(fh[1..9].try_into().unwrap_or_default());
    if len > sign::MAX_SIGNATURE {
        return Err(corrupt(offset, format!("a signature frame of {len} bytes")));
    }
    let mut payload = vec![0u8; len as usize];
    if !r.fill(&mut payload).unwrap_or(false) && len > 0 {
        return Err(corrupt(
            offset,
            "the signature frame is cut short (truncated)".into(),
        ));
    }
    if blake3::hash(&payload).as_bytes()[..] != fh[9..41] {
        return Err(corrupt(
            offset,
            "the signature frame does not match its hash".into(),
        ));
    }
    let mut rest = [0u8; 1];
    if r.fill(&mut rest).unwrap_or(true) {
        return Err(corrupt(r.pos - 1, "bytes after the signature".into()));
    }
    Ok(Some(payload))
}

/// The bundle's header: its magic and a format this build reads (its 12 bytes).
fn read_header(r: &mut Counted<impl Read>) -> std::result::Result<[u8; 12], BundleError> {
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
    Ok(head)
}

/// The manifest (at `offset`) counts what was read before it, and names a version of the rows
/// this build knows.
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
    if m.schema > crate::store::migrate::ROWS_SCHEMA_VERSION {
        return Err(BundleError::Refused(format!(
            "the bundle was written by a newer rewindfs (rows of store schema {}; this one knows {}): upgrade rewindfs",
            m.schema,
            crate::store::migrate::ROWS_SCHEMA_VERSION
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::migrate::ROWS_SCHEMA_VERSION;

    /// A bundle names the version of its rows (9), not the store's (10 changed only the
    /// journal), so an older rewindfs still imports it; a newer rows version is refused.
    #[test]
    fn a_bundle_names_its_rows_version_and_a_newer_one_is_refused() {
        let (_, written) = BundleWriter::new(Vec::new())
            .unwrap()
            .finish(Manifest::default())
            .unwrap();
        assert_eq!(written.schema, ROWS_SCHEMA_VERSION);
        let m = |schema| Manifest {
            schema,
            ..Manifest::default()
        };
        assert!(check_manifest(&m(ROWS_SCHEMA_VERSION), 0, 0, 0, 0).is_ok());
        match check_manifest(&m(ROWS_SCHEMA_VERSION + 1), 0, 0, 0, 0) {
            Err(BundleError::Refused(why)) => assert!(why.contains("newer rewindfs"), "{why}"),
            r => panic!("{r:?}"),
        }
    }
}
