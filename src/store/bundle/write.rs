//! Writing a bundle: blobs once each, rows in frames, the manifest last; and the rows an
//! export takes from the store.
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use std::collections::HashSet;
use std::io::{self, Read, Write};

use serde_json::Map;

use super::*;
use crate::store::{Result, Store};

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
        m.schema = crate::store::migrate::ROWS_SCHEMA_VERSION;
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

impl Store {
    /// The rows of every checkpoint from `from` (a seq) on, and what goes with them, in an
    /// order an import can insert them in: checkpoints, sessions, blobs, captures, capture
    /// ranges, moves, tracked, changes, origins. The workspace root's own rows (its mode, its
    /// log entries: the empty path) stay home: no rewind restores the root, and an import
    /// takes only paths inside the workspace.
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
                "SELECT * FROM captures WHERE checkpoint >= ?1 AND length(path) > 0 ORDER BY id",
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
                "SELECT * FROM changes WHERE checkpoint >= ?1 AND length(path) > 0 ORDER BY seq",
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
}
