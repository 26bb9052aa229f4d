//! History bundles: the store's rows for a run of checkpoints and every blob they need, in one
//! self-checking file (`rewindfs export` / `import`; the format is `schema/bundle.md`).
//!
//! ```text
//! "RWFSBNDL" u32le(1)                      header, 12 bytes
//! frame*:  kind:u8  len:u64le  hash:[u8;32]  payload[len]
//!          'B' a blob: payload = its content, hash = its BLAKE3 (its name); each blob once
//!          'R' rows: JSON lines {"t": table, "r": {column: value}}, hash = BLAKE3(payload)
//!          'M' the manifest (JSON), the last frame: what the bundle holds, frames counted
//! ```
//!
//! Invariants:
//! - every frame's payload is checked against its hash before anything it holds is used; a
//!   bundle that ends before its manifest, a frame of an unknown kind, a hash or count that
//!   does not match, is refused with the byte offset of the frame at fault;
//! - an import is all or nothing: blobs are verified as they are stored, rows are inserted in
//!   one transaction only once the whole bundle has been read and checked, and on any failure
//!   the blobs it stored that no row names are removed again;
//! - a bundle whose history begins with checkpoints the store has (an earlier push of the
//!   same session) adds only the others, after them; one that diverges is refused;
//! - rows keep their meaning, not their ids: checkpoints get new `seq`s, captures and moves
//!   new ids handed out after every id in use (the journal's too), in the same order, so
//!   imported history lies after what the store had and before anything recorded later;
//! - table and column names in a bundle are checked against the store's own schema before
//!   they reach SQL.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{self, Read, Write};

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    Actor, BlobRef, CheckpointKind, Op, Origin, PreImage, Purpose, Result, Store, StoreError,
};
use crate::locks::Locked;

/// The first bytes of a bundle.
pub const MAGIC: &[u8; 8] = b"RWFSBNDL";
/// The format version this build writes and reads.
pub const FORMAT: u32 = 1;
/// Frame kinds.
pub const BLOB: u8 = b'B';
pub const ROWS: u8 = b'R';
pub const MANIFEST: u8 = b'M';
/// Rows per `R` frame (bounds a frame's size).
const ROWS_PER_FRAME: usize = 20_000;

/// Why a bundle cannot be read or imported.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle is damaged or cut short.
    #[error("bundle damaged at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    /// The bundle is sound but cannot go into this store (the message says why).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("bundle: {0}")]
    Io(#[from] io::Error),
}

impl From<rusqlite::Error> for BundleError {
    fn from(e: rusqlite::Error) -> Self {
        BundleError::Store(e.into())
    }
}

/// One row of a table, as JSON: integers and text as themselves, a BLOB as `{"$b": base64}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The table.
    pub t: String,
    /// Column → value.
    pub r: Map<String, Value>,
}

impl Row {
    /// An integer column (`None`: NULL or absent).
    pub fn int(&self, col: &str) -> Option<i64> {
        self.r.get(col).and_then(Value::as_i64)
    }

    /// A text column.
    pub fn text(&self, col: &str) -> Option<&str> {
        self.r.get(col).and_then(Value::as_str)
    }

    /// A BLOB column (`{"$b": base64}`), or text as its bytes.
    pub fn bytes(&self, col: &str) -> Option<Vec<u8>> {
        match self.r.get(col)? {
            Value::Object(m) => super::base64::decode(m.get("$b")?.as_str()?).ok(),
            Value::String(s) => Some(s.as_bytes().to_vec()),
            _ => None,
        }
    }
}

/// A BLOB as a bundle holds it.
pub fn blob_value(b: &[u8]) -> Value {
    let mut m = Map::new();
    m.insert("$b".into(), Value::String(super::base64::encode(b)));
    Value::Object(m)
}

fn to_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::from(i),
        ValueRef::Real(f) => Value::from(f),
        ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => blob_value(b),
    }
}

fn to_sql(v: &Value) -> std::result::Result<SqlValue, String> {
    Ok(match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(*b as i64),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Integer(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        Value::Object(m) => match m.get("$b").and_then(Value::as_str) {
            Some(b) => SqlValue::Blob(super::base64::decode(b).map_err(|e| e.to_string())?),
            None => return Err("an object that is not a BLOB".into()),
        },
        Value::Array(_) => return Err("an array".into()),
    })
}

/// The manifest: what a bundle holds (its last frame).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The exporting store's schema version.
    pub schema: i64,
    /// A uuid of this export, also the uuid of the checkpoint that holds the tree's state at
    /// export (see `rewind/carry.rs`).
    pub export_id: String,
    /// Unix ms.
    pub created_at: i64,
    /// Where it came from.
    pub workspace: String,
    pub store: String,
    /// What was asked for.
    pub session: Option<String>,
    pub since: Option<String>,
    /// Every checkpoint in the bundle, in order (the export's own last).
    pub checkpoints: Vec<String>,
    /// Blob frames and their bytes.
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Rows, and frames before the manifest.
    pub rows: u64,
    pub frames: u64,
}

/// Writes a bundle: blobs (each once), rows, then the manifest.
pub struct BundleWriter<W: Write> {
    w: W,
    /// Blobs written so far.
    written: HashSet<String>,
    pending_rows: Vec<u8>,
    pending_count: usize,
    /// Counts for the manifest.
    pub blobs: u64,
    pub blob_bytes: u64,
    pub rows: u64,
    pub frames: u64,
}

impl<W: Write> BundleWriter<W> {
    /// Starts a bundle (writes the header).
    ///
    /// # Errors
    /// I/O errors.
    pub fn new(mut w: W) -> io::Result<BundleWriter<W>> {
        w.write_all(MAGIC)?;
        w.write_all(&FORMAT.to_le_bytes())?;
        Ok(BundleWriter {
            w,
            written: HashSet::new(),
            pending_rows: Vec::new(),
            pending_count: 0,
            blobs: 0,
            blob_bytes: 0,
            rows: 0,
            frames: 0,
        })
    }

    /// Whether blob `hash` is in the bundle already.
    pub fn has_blob(&self, hash: &str) -> bool {
        self.written.contains(hash)
    }

    fn header(&mut self, kind: u8, len: u64, hash: &[u8; 32]) -> io::Result<()> {
        self.w.write_all(&[kind])?;
        self.w.write_all(&len.to_le_bytes())?;
        self.w.write_all(hash)?;
        self.frames += 1;
        Ok(())
    }

    /// Writes blob `hash`, `len` bytes read from `src`, which are checked against the hash as
    /// they go (a store whose blob was damaged makes the export fail, not the bundle lie). A
    /// blob already written is skipped.
    ///
    /// # Errors
    /// I/O errors; `InvalidData` when the content does not hash to its name or is not `len`
    /// bytes long.
    pub fn blob(&mut self, hash: &str, len: u64, src: &mut dyn Read) -> io::Result<()> {
        if self.written.contains(hash) {
            return Ok(());
        }
        let raw = decode_hash(hash).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("blob name {hash:?}"))
        })?;
        self.header(BLOB, len, &raw)?;
        let mut h = blake3::Hasher::new();
        let mut left = len;
        let mut buf = vec![0u8; (len as usize).clamp(1, 1 << 20)];
        while left > 0 {
            let want = (left as usize).min(buf.len());
            let n = match src.read(&mut buf[..want]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("blob {hash}: {left} bytes short"),
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
            self.w.write_all(&buf[..n])?;
            left -= n as u64;
        }
        if h.finalize().as_bytes() != &raw {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "blob {hash}: its content does not hash to its name (a damaged store: run `rewindfs fsck`)"
                ),
            ));
        }
        self.written.insert(hash.to_string());
        self.blobs += 1;
        self.blob_bytes += len;
        Ok(())
    }

    /// Adds a row (written in frames of at most 20,000 rows).
    ///
    /// # Errors
    /// I/O errors.
    pub fn row(&mut self, row: &Row) -> io::Result<()> {
        serde_json::to_writer(&mut self.pending_rows, row)?;
        self.pending_rows.push(b'\n');
        self.pending_count += 1;
        self.rows += 1;
        if self.pending_count >= ROWS_PER_FRAME {
            self.flush_rows()?;
        }
        Ok(())
    }

    fn flush_rows(&mut self) -> io::Result<()> {
        if self.pending_rows.is_empty() {
            return Ok(());
        }
        let payload = std::mem::take(&mut self.pending_rows);
        self.pending_count = 0;
        let hash = *blake3::hash(&payload).as_bytes();
        self.header(ROWS, payload.len() as u64, &hash)?;
        self.w.write_all(&payload)
    }

    /// Writes the remaining rows and the manifest (its counts filled in), and returns the
    /// writer.
    ///
    /// # Errors
    /// I/O errors.
    pub fn finish(mut self, mut m: Manifest) -> io::Result<(W, Manifest)> {
        self.flush_rows()?;
        m.format = FORMAT;
        m.schema = super::migrate::SCHEMA_VERSION;
        m.blobs = self.blobs;
        m.blob_bytes = self.blob_bytes;
        m.rows = self.rows;
        m.frames = self.frames;
        let payload = serde_json::to_vec(&m)?;
        let hash = *blake3::hash(&payload).as_bytes();
        self.header(MANIFEST, payload.len() as u64, &hash)?;
        self.w.write_all(&payload)?;
        self.w.flush()?;
        Ok((self.w, m))
    }
}

fn decode_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn encode_hash(raw: &[u8; 32]) -> String {
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

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

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub manifest_checkpoints: Vec<String>,
    /// Checkpoints added (0 when they were all here already).
    pub checkpoints: u64,
    pub rows: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Every checkpoint of the bundle was here already: nothing was done.
    pub already: bool,
    /// The exporting workspace.
    pub workspace: String,
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
        capture: super::gc::Capture<'_>,
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
                        if m.frames != frames
                            || m.rows != rows_seen
                            || m.blobs != staged.blobs.len() as u64
                        {
                            return Err(corrupt(
                                offset,
                                format!(
                                    "the manifest counts {} frames, {} rows, {} blobs; the bundle has {frames}, {rows_seen}, {}",
                                    m.frames,
                                    m.rows,
                                    m.blobs,
                                    staged.blobs.len()
                                ),
                            ));
                        }
                        if m.schema > super::migrate::SCHEMA_VERSION {
                            return Err(BundleError::Refused(format!(
                                "the bundle was written by a newer rewindfs (store schema {}; this one knows {}): upgrade rewindfs",
                                m.schema,
                                super::migrate::SCHEMA_VERSION
                            )));
                        }
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
                        staged.rows.push(row);
                        rows_seen += 1;
                    }
                }
                k => return Err(corrupt(offset, format!("a frame of unknown kind {k:#04x}"))),
            }
            frames += 1;
        }
    }

    /// The rows of every checkpoint from `from` (a seq) on, and what goes with them, in an
    /// order an import can insert them in: checkpoints, sessions, blobs, captures, capture
    /// ranges, moves, tracked, changes, origins.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn export_rows(&self, from: i64) -> Result<Vec<Row>> {
        const QUERIES: &[(&str, &str)] = &[
            (
                "checkpoints",
                "SELECT * FROM checkpoints WHERE seq >= ?1 ORDER BY seq",
            ),
            (
                "sessions",
                "SELECT * FROM sessions WHERE id IN (SELECT session_id FROM checkpoints WHERE seq >= ?1) ORDER BY id",
            ),
            (
                "blobs",
                "SELECT * FROM blobs WHERE hash IN (SELECT blob FROM captures WHERE checkpoint >= ?1 UNION SELECT r.blob FROM capture_ranges r JOIN captures c ON c.id = r.capture WHERE c.checkpoint >= ?1) ORDER BY hash",
            ),
            (
                "captures",
                "SELECT * FROM captures WHERE checkpoint >= ?1 ORDER BY id",
            ),
            (
                "capture_ranges",
                "SELECT r.* FROM capture_ranges r JOIN captures c ON c.id = r.capture WHERE c.checkpoint >= ?1 ORDER BY r.capture, r.offset",
            ),
            (
                "moves",
                "SELECT * FROM moves WHERE checkpoint >= ?1 ORDER BY seq",
            ),
            (
                "tracked",
                "SELECT * FROM tracked WHERE checkpoint >= ?1 ORDER BY session_id, path",
            ),
            (
                "changes",
                "SELECT * FROM changes WHERE checkpoint >= ?1 ORDER BY seq",
            ),
            (
                "origins",
                "SELECT * FROM origins WHERE checkpoint >= ?1 ORDER BY checkpoint",
            ),
        ];
        self.with(|c| {
            let mut out = Vec::new();
            for (table, sql) in QUERIES {
                let mut st = c.prepare(sql)?;
                let names: Vec<String> = st.column_names().iter().map(|s| s.to_string()).collect();
                let mut rows = st.query([from])?;
                while let Some(r) = rows.next()? {
                    let mut m = Map::new();
                    for (i, n) in names.iter().enumerate() {
                        m.insert(n.clone(), to_json(r.get_ref(i)?));
                    }
                    out.push(Row {
                        t: (*table).to_string(),
                        r: m,
                    });
                }
            }
            Ok(out)
        })
    }

    /// Which of these checkpoint uuids are in the store.
    pub fn known_checkpoints(&self, uuids: &[String]) -> Result<HashSet<String>> {
        self.with(|c| {
            let mut st = c.prepare_cached("SELECT 1 FROM checkpoints WHERE uuid = ?1")?;
            let mut known = HashSet::new();
            for u in uuids {
                if st.exists([u])? {
                    known.insert(u.clone());
                }
            }
            Ok(known)
        })
    }

    /// Inserts a staged bundle's rows in one transaction, renumbered (see the module doc),
    /// with no splice (see [`Store::import_rows`]): for a store no daemon serves.
    ///
    /// # Errors
    /// As [`Store::import_plan`] and [`Store::import_rows`].
    pub fn import_staged(
        &self,
        staged: &Staged,
        origin: Option<Origin>,
    ) -> std::result::Result<ImportReport, BundleError> {
        for (prompt_id, uuid) in self.bundle_bindings(staged)? {
            self.bind_prompt(&prompt_id, &uuid)?;
        }
        match self.import_plan(staged)? {
            ImportPlan::Already(r) => Ok(r),
            ImportPlan::Rows(rows) => self.import_rows(staged, &rows, origin, &[]),
        }
    }

    /// The message uuids a staged bundle knows for this store's prompts not bound yet:
    /// (prompt_id, uuid) for each checkpoint the bundle has bound to its message whose prompt
    /// this store began under the same prompt_id and has not bound (the bundle was exported
    /// after the transcript showed the uuid; an earlier one, imported here, before). Binding
    /// them first lets the bundle's history meet the store's under the same uuids.
    ///
    /// # Errors
    /// Store errors.
    pub fn bundle_bindings(&self, staged: &Staged) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for r in staged.rows.iter().filter(|r| r.t == "checkpoints") {
            let (Some(prompt_id), Some(uuid)) = (r.text("prompt_id"), r.text("uuid")) else {
                continue;
            };
            if r.int("bound") == Some(0) || prompt_id == uuid {
                continue;
            }
            if self
                .checkpoint_of_prompt(prompt_id)?
                .is_some_and(|c| !c.bound)
            {
                out.push((prompt_id.to_string(), uuid.to_string()));
            }
        }
        Ok(out)
    }

    /// What of a staged bundle is new here: its rows without those of the checkpoints the
    /// store has (which must begin the bundle's history), or `Already` when it has them all.
    ///
    /// # Errors
    /// `Refused` for a history that diverges from the store's, or rows naming a blob the
    /// bundle does not hold; store errors.
    pub fn import_plan(&self, staged: &Staged) -> std::result::Result<ImportPlan, BundleError> {
        let m = &staged.manifest;
        // The export's own checkpoint (the tree at export) is new to every store; the history
        // is here when every other one is (a store importing its own export, say).
        let history: Vec<String> = m
            .checkpoints
            .iter()
            .filter(|u| **u != m.export_id)
            .cloned()
            .collect();
        let mut known = self.known_checkpoints(&history)?;
        // A checkpoint begun by a prompt is here when the store has that prompt, whichever
        // uuid each side knows it by (the bundle's may not have been bound yet).
        for r in staged.rows.iter().filter(|r| r.t == "checkpoints") {
            if let (Some(prompt_id), Some(uuid)) = (r.text("prompt_id"), r.text("uuid")) {
                if !known.contains(uuid) && self.checkpoint_of_prompt(prompt_id)?.is_some() {
                    known.insert(uuid.to_string());
                }
            }
        }
        if known.len() == history.len() {
            return Ok(ImportPlan::Already(ImportReport {
                manifest_checkpoints: m.checkpoints.clone(),
                workspace: m.workspace.clone(),
                already: true,
                ..ImportReport::default()
            }));
        }
        // What is here must be where the bundle's history begins (an earlier push of the same
        // history, say): the rest goes after it. Known checkpoints and their rows are skipped.
        if let Some(i) = history.iter().position(|u| !known.contains(u)) {
            if let Some(late) = history[i..].iter().find(|u| known.contains(*u)) {
                return Err(BundleError::Refused(format!(
                    "checkpoint {late} of the bundle is in this store already, but {} before it is not: the histories have diverged",
                    history[i]
                )));
            }
        }
        let rows = new_rows(&staged.rows, &known);
        // Every blob a row names is in the bundle or here.
        for row in &rows {
            let named = match row.t.as_str() {
                "captures" | "capture_ranges" => row.text("blob"),
                _ => None,
            };
            if let Some(h) = named {
                if !staged.blobs.contains(h) && !self.blobs.exists(h) {
                    return Err(BundleError::Refused(format!(
                        "the bundle's rows name blob {h}, which it does not hold"
                    )));
                }
            }
        }
        Ok(ImportPlan::Rows(rows))
    }

    /// Inserts the rows of [`Store::import_plan`] in one transaction, renumbered. With a
    /// `splice` (a daemon's import: the present state of every path the imported history
    /// touches, blobs stored), a checkpoint holding it goes first: a rewind to one of the
    /// store's own earlier checkpoints then meets the present of those paths before the
    /// imported history, which is another tree's. The caller holds off captures.
    ///
    /// # Errors
    /// Store errors, and rows that do not fit the schema; nothing is inserted then.
    pub fn import_rows(
        &self,
        staged: &Staged,
        rows: &[Row],
        origin: Option<Origin>,
        splice: &[(Vec<u8>, PreImage)],
    ) -> std::result::Result<ImportReport, BundleError> {
        let m = &staged.manifest;
        self.flush_journal()?;
        let (cap_ids, move_ids) = {
            let caps = rows.iter().filter(|r| r.t == "captures").count() + splice.len();
            let moves = rows.iter().filter(|r| r.t == "moves").count() as i64;
            let mut p = self.pending.locked();
            let ids = (p.next_capture, p.next_move);
            p.next_capture += caps as i64;
            p.next_move += moves;
            ids
        };
        let n = self.with(|c| insert_rows(c, rows, cap_ids, move_ids, origin.as_ref(), splice))?;
        Ok(ImportReport {
            manifest_checkpoints: m.checkpoints.clone(),
            workspace: m.workspace.clone(),
            checkpoints: n.0,
            rows: n.1,
            blobs: staged.blobs.len() as u64,
            blob_bytes: m.blob_bytes,
            already: false,
        })
    }
}

/// What an import would add.
#[derive(Debug)]
pub enum ImportPlan {
    /// Every checkpoint of the bundle is here: nothing to do.
    Already(ImportReport),
    /// The rows to insert.
    Rows(Vec<Row>),
}

/// The rows of the checkpoints not in `known`: a known checkpoint's row, its captures (and
/// their ranges), moves, tracked rows, change-log entries and origins are left out.
fn new_rows(rows: &[Row], known: &HashSet<String>) -> Vec<Row> {
    let skip: HashSet<i64> = rows
        .iter()
        .filter(|r| r.t == "checkpoints" && r.text("uuid").is_some_and(|u| known.contains(u)))
        .filter_map(|r| r.int("seq"))
        .collect();
    let skip_caps: HashSet<i64> = rows
        .iter()
        .filter(|r| r.t == "captures" && r.int("checkpoint").is_some_and(|c| skip.contains(&c)))
        .filter_map(|r| r.int("id"))
        .collect();
    rows.iter()
        .filter(|r| match r.t.as_str() {
            "checkpoints" => !r.int("seq").is_some_and(|s| skip.contains(&s)),
            "capture_ranges" => !r.int("capture").is_some_and(|c| skip_caps.contains(&c)),
            "sessions" | "blobs" => true,
            _ => !r.int("checkpoint").is_some_and(|c| skip.contains(&c)),
        })
        .cloned()
        .collect()
}

/// Tables an import writes, in order.
const TABLES: &[&str] = &[
    "checkpoints",
    "sessions",
    "blobs",
    "captures",
    "capture_ranges",
    "moves",
    "tracked",
    "changes",
    "origins",
];

/// Inserts the rows, renumbered, in one transaction: (checkpoints inserted, rows inserted).
fn insert_rows(
    c: &mut Connection,
    rows: &[Row],
    splice_base: i64,
    move_base: i64,
    origin: Option<&Origin>,
    splice: &[(Vec<u8>, PreImage)],
) -> rusqlite::Result<(u64, u64)> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let cap_base = splice_base + splice.len() as i64;
    if !splice.is_empty() {
        let at = super::now_ms();
        tx.execute(
            "INSERT INTO checkpoints (uuid, session_id, kind, began_at) VALUES (?1, NULL, ?2, ?3)",
            rusqlite::params![uuid::Uuid::new_v4().to_string(), CheckpointKind::Mount, at],
        )?;
        let seq = tx.last_insert_rowid();
        for (i, (path, pre)) in splice.iter().enumerate() {
            if let Some(b) = &pre.blob {
                tx.execute(
                    "INSERT OR IGNORE INTO blobs (hash, size) VALUES (?1, ?2)",
                    rusqlite::params![b, pre.size as i64],
                )?;
            }
            tx.execute(
                "INSERT INTO captures (id, checkpoint, path, purpose, kind, blob, mode, uid, gid, size, target, actor, actors, op, created_at, partial, xattrs)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 0, ?16)",
                rusqlite::params![
                    splice_base + i as i64,
                    seq,
                    path,
                    Purpose::Checkpoint,
                    pre.kind,
                    pre.blob,
                    pre.mode as i64,
                    pre.uid as i64,
                    pre.gid as i64,
                    pre.size as i64,
                    pre.target,
                    // Taken by rewindfs itself, as a rewind's own captures are.
                    Actor::Rewind,
                    Actor::Rewind.bit(),
                    Op::Write,
                    at,
                    pre.xattrs
                ],
            )?;
        }
    }
    let mut columns: HashMap<&str, HashSet<String>> = HashMap::new();
    for t in TABLES {
        let mut st = tx.prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))?;
        let names = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<_>>()?;
        columns.insert(t, names);
    }
    // Old ids → new, in order.
    let old_caps: Vec<i64> = {
        let mut v: Vec<i64> = rows
            .iter()
            .filter(|r| r.t == "captures")
            .filter_map(|r| r.int("id"))
            .collect();
        v.sort_unstable();
        v
    };
    let cap = |old: i64| -> Option<i64> {
        old_caps
            .binary_search(&old)
            .ok()
            .map(|i| cap_base + i as i64)
    };
    // `after_capture`: the new id of the last exported capture at or before it.
    let after = |old: i64| -> i64 {
        let i = old_caps.partition_point(|x| *x <= old);
        cap_base + i as i64 - 1
    };
    let mut old_moves: Vec<i64> = rows
        .iter()
        .filter(|r| r.t == "moves")
        .filter_map(|r| r.int("seq"))
        .collect();
    old_moves.sort_unstable();
    let mut seqs: HashMap<i64, i64> = HashMap::new();
    let mut first_checkpoint: Option<i64> = None;
    let mut origin_rows: BTreeSet<i64> = BTreeSet::new();
    let mut inserted = 0u64;
    let bad = |what: String| rusqlite::Error::ToSqlConversionFailure(what.into());
    for t in TABLES {
        for row in rows.iter().filter(|r| r.t == *t) {
            let mut m = row.r.clone();
            let seq_of = |m: &Map<String, Value>, col: &str| -> rusqlite::Result<Option<i64>> {
                match m.get(col).and_then(Value::as_i64) {
                    None => Ok(None),
                    Some(old) => seqs.get(&old).copied().map(Some).ok_or_else(|| {
                        bad(format!(
                            "{t}.{col} names checkpoint {old}, not in the bundle"
                        ))
                    }),
                }
            };
            let mut or_ignore = false;
            match *t {
                "checkpoints" => {
                    m.remove("seq");
                }
                "sessions" | "blobs" => or_ignore = true,
                "captures" => {
                    let old = row
                        .int("id")
                        .ok_or_else(|| bad("a capture without an id".into()))?;
                    m.insert("id".into(), Value::from(cap(old).unwrap_or(cap_base)));
                    let s = seq_of(&m, "checkpoint")?;
                    m.insert("checkpoint".into(), Value::from(s));
                }
                "capture_ranges" => {
                    let old = row
                        .int("capture")
                        .ok_or_else(|| bad("a range without its capture".into()))?;
                    let new = cap(old).ok_or_else(|| {
                        bad(format!("a range of capture {old}, not in the bundle"))
                    })?;
                    m.insert("capture".into(), Value::from(new));
                }
                "moves" => {
                    let old = row.int("seq").unwrap_or(0);
                    let i = old_moves.binary_search(&old).unwrap_or(0);
                    m.insert("seq".into(), Value::from(move_base + i as i64));
                    let s = seq_of(&m, "checkpoint")?;
                    m.insert("checkpoint".into(), Value::from(s));
                    let a = row.int("after_capture").unwrap_or(0);
                    m.insert("after_capture".into(), Value::from(after(a)));
                }
                "tracked" => {
                    let s = seq_of(&m, "checkpoint")?;
                    m.insert("checkpoint".into(), Value::from(s));
                    let c = row.int("capture").and_then(cap);
                    m.insert("capture".into(), c.map_or(Value::Null, Value::from));
                    or_ignore = true;
                }
                "changes" => {
                    m.remove("seq");
                    let s = seq_of(&m, "checkpoint")?;
                    m.insert("checkpoint".into(), Value::from(s));
                }
                "origins" => {
                    let s = seq_of(&m, "checkpoint")?;
                    m.insert("checkpoint".into(), Value::from(s));
                    if let Some(s) = s {
                        origin_rows.insert(s);
                    }
                }
                _ => {}
            }
            let known = &columns[t];
            let mut cols = Vec::new();
            let mut vals = Vec::new();
            for (k, v) in &m {
                if !known.contains(k) {
                    return Err(bad(format!("{t} has no column {k:?}")));
                }
                cols.push(format!("\"{k}\""));
                vals.push(to_sql(v).map_err(|e| bad(format!("{t}.{k}: {e}")))?);
            }
            let sql = format!(
                "INSERT {}INTO {t} ({}) VALUES ({})",
                if or_ignore { "OR IGNORE " } else { "" },
                cols.join(", "),
                vec!["?"; cols.len()].join(", ")
            );
            tx.execute(&sql, rusqlite::params_from_iter(vals))?;
            inserted += 1;
            if *t == "checkpoints" {
                let new = tx.last_insert_rowid();
                if let Some(old) = row.int("seq") {
                    seqs.insert(old, new);
                }
                first_checkpoint.get_or_insert(new);
            }
        }
    }
    if let (Some(o), Some(first)) = (origin, first_checkpoint) {
        if !origin_rows.contains(&first) {
            tx.execute(
                "INSERT INTO origins (checkpoint, kind, workspace, store, uuid, session_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![first, o.kind, o.workspace, o.store, o.uuid, o.session_id, o.at],
            )?;
        }
    }
    let n = seqs.len() as u64;
    tx.commit()?;
    Ok((n, inserted))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(rows: &[Row], blobs: &[&[u8]]) -> Vec<u8> {
        let mut w = BundleWriter::new(Vec::new()).unwrap();
        for b in blobs {
            let h = blake3::hash(b).to_hex().to_string();
            w.blob(&h, b.len() as u64, &mut &b[..]).unwrap();
        }
        for r in rows {
            w.row(r).unwrap();
        }
        w.finish(Manifest {
            checkpoints: vec!["88888888-8888-4888-8888-888888888888".into()],
            ..Manifest::default()
        })
        .unwrap()
        .0
    }

    /// A bundle of every checkpoint of `s`, as an export writes one (no blobs).
    fn bundle_of(s: &Store) -> Vec<u8> {
        let rows = s.export_rows(0).unwrap();
        let checkpoints = rows
            .iter()
            .filter(|r| r.t == "checkpoints")
            .filter_map(|r| r.text("uuid").map(str::to_string))
            .collect();
        let mut w = BundleWriter::new(Vec::new()).unwrap();
        for r in &rows {
            w.row(r).unwrap();
        }
        w.finish(Manifest {
            export_id: uuid::Uuid::new_v4().to_string(),
            checkpoints,
            ..Manifest::default()
        })
        .unwrap()
        .0
    }

    fn import(s: &Store, b: &[u8]) -> ImportReport {
        let staged = s.stage_bundle(b, None).unwrap();
        s.import_staged(&staged, None).unwrap()
    }

    /// A prompt's checkpoint exported before its message uuid was known, then again after: the
    /// second import binds it here too and adds only what is new; an older bundle after a newer
    /// one finds everything here.
    #[test]
    fn a_prompt_bound_after_an_earlier_export_meets_its_import_under_one_uuid() {
        let (da, db, dc) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let a = Store::open(da.path(), false).unwrap();
        let (p, u, v) = ("prompt-1", "message-1", "message-2");
        let prompt = crate::store::Prompt {
            prompt_id: p.into(),
            text: Some("make it so".into()),
            transcript: None,
        };
        a.begin_checkpoint_for(p, Some("s"), CheckpointKind::Message, Some(&prompt))
            .unwrap();
        let early = bundle_of(&a);
        a.bind_prompt(p, u).unwrap();
        a.begin_checkpoint(v, Some("s"), CheckpointKind::Message)
            .unwrap();
        let late = bundle_of(&a);

        let b = Store::open(db.path(), false).unwrap();
        assert_eq!(import(&b, &early).checkpoints, 1);
        assert!(!b.checkpoint(p).unwrap().unwrap().bound);
        let r = import(&b, &late);
        assert_eq!((r.already, r.checkpoints), (false, 1));
        let c = b.checkpoint(u).unwrap().unwrap();
        assert_eq!((c.bound, c.prompt.as_deref()), (true, Some("make it so")));
        assert!(b.checkpoint(v).unwrap().is_some());

        let c = Store::open(dc.path(), false).unwrap();
        assert_eq!(import(&c, &late).checkpoints, 2);
        assert!(import(&c, &early).already);
    }

    #[test]
    fn a_damaged_or_cut_bundle_is_refused_at_the_frame_at_fault_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let good = bundle(&[], &[b"hello blob", b"another"]);
        let staged = s.stage_bundle(&good[..], None).unwrap();
        assert_eq!(staged.blobs.len(), 2);
        for h in &staged.created {
            s.discard_unreferenced(std::slice::from_ref(h), None)
                .unwrap();
        }
        // A byte flipped in the second blob's payload: refused at that frame's offset.
        let second = 12 + 41 + 10;
        let mut bad = good.clone();
        bad[second + 41 + 2] ^= 1;
        match s.stage_bundle(&bad[..], None) {
            Err(BundleError::Corrupt { offset, what }) => {
                assert_eq!(offset, second as u64, "{what}");
                assert!(what.contains("does not match"), "{what}");
            }
            r => panic!("{r:?}"),
        }
        // Cut short anywhere: refused, naming where.
        for cut in [5, 12, 30, good.len() - 1] {
            let e = s.stage_bundle(&good[..cut], None).unwrap_err().to_string();
            assert!(
                e.contains("truncated") || e.contains("too short"),
                "{cut}: {e}"
            );
        }
        // No blob of a refused bundle stays.
        let h = blake3::hash(b"hello blob").to_hex().to_string();
        assert!(!s.blobs.exists(&h));
    }
}
