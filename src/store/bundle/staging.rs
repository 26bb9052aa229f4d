//! An import's staging area: a private SQLite file in the store's `blobs/tmp/`, where a
//! bundle's rows wait, checked, while the rest of the bundle is read — so an import's memory
//! stays bounded whatever the bundle holds (issue 29: a 100 MB bundle of small rows took 2.6 GB
//! when they were kept as JSON values in memory).
//!
//! ```text
//! rows(n, t, cp, id, json)   every row kept, in bundle order: its table, the checkpoint it
//!                            belongs to (NULL: a range, found through its capture), its id
//!                            (a checkpoint's seq, a capture's id, a move's seq, a range's
//!                            capture), the row as JSON
//! blobs(hash, size, created) the blob frames; `created`: stored by this import (removed again
//!                            if it fails)
//! skip(seq)                  checkpoints the store has already: their rows are left out
//! caps(old, new)             capture ids, bundle → store (in id order, after every id in use)
//! moves(old, new)            move seqs, likewise
//! names(path)                the paths whose present state the import splices in first
//! ```
//!
//! Invariants: the file is private (0600, in the store's private `blobs/tmp/`, which a store
//! open empties), removed when the import ends however it ends, and never read by anything but
//! the import that made it; no journal (a crash loses nothing: the bundle is still there).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use super::Row;
use crate::store::{Result, private};

/// The staging database of one import.
pub struct Staging {
    pub(super) conn: Connection,
    path: PathBuf,
}

impl Staging {
    /// A new, empty staging file in `tmp_dir` (the store's `blobs/tmp`).
    ///
    /// # Errors
    /// The file cannot be made.
    pub(super) fn create(tmp_dir: &Path) -> Result<Staging> {
        let path = tmp_dir.join(format!("import-{}.db", uuid::Uuid::new_v4().simple()));
        // Made private here: SQLite would make it 0644 under the daemon's empty umask.
        drop(private::open_file(
            &path,
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true),
        )?);
        let staging = Staging {
            conn: Connection::open(&path)?,
            path,
        };
        staging.conn.execute_batch(
            "PRAGMA journal_mode = OFF;
             PRAGMA synchronous = OFF;
             PRAGMA temp_store = FILE;
             PRAGMA cache_size = -8192;
             CREATE TABLE rows (n INTEGER PRIMARY KEY, t TEXT NOT NULL, cp INTEGER, id INTEGER, json TEXT NOT NULL);
             CREATE INDEX rows_t ON rows (t, id);
             CREATE INDEX rows_cp ON rows (cp);
             CREATE TABLE blobs (hash TEXT PRIMARY KEY, size INTEGER NOT NULL, created INTEGER NOT NULL);
             CREATE TABLE skip (seq INTEGER PRIMARY KEY);
             CREATE TABLE caps (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);
             CREATE TABLE moves (old INTEGER PRIMARY KEY, new INTEGER NOT NULL);
             CREATE TABLE names (path BLOB PRIMARY KEY);
             BEGIN;",
        )?;
        Ok(staging)
    }

    /// Keeps a checked row (`line`: its JSON, as the bundle has it).
    pub(super) fn add_row(&self, row: &Row, line: &[u8]) -> Result<()> {
        let (cp, id) = match row.t.as_str() {
            "checkpoints" => (row.int("seq"), row.int("seq")),
            "captures" => (row.int("checkpoint"), row.int("id")),
            "capture_ranges" => (None, row.int("capture")),
            "moves" => (row.int("checkpoint"), row.int("seq")),
            "sessions" | "blobs" => (None, None),
            _ => (row.int("checkpoint"), None),
        };
        let json = std::str::from_utf8(line).map_err(std::io::Error::other)?;
        self.conn
            .prepare_cached("INSERT INTO rows (t, cp, id, json) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![row.t, cp, id, json])?;
        Ok(())
    }

    /// Notes a blob frame (`created`: this import stored it).
    pub(super) fn add_blob(&self, hash: &str, size: u64, created: bool) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO blobs (hash, size, created) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![hash, size as i64, created])?;
        Ok(())
    }

    /// The size of blob `hash` if the bundle holds it.
    pub(super) fn blob_size(&self, hash: &str) -> Result<Option<u64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT size FROM blobs WHERE hash = ?1")?
            .query_row([hash], |r| r.get::<_, i64>(0))
            .optional()?
            .map(|s| s as u64))
    }

    /// How many rows of table `t` there are (counting those of skipped checkpoints).
    pub(super) fn count(&self, t: &str) -> Result<u64> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM rows WHERE t = ?1", [t], |r| {
                r.get::<_, i64>(0)
            })? as u64)
    }

    /// Calls `f` with each row of table `t` in bundle order; `fresh`: only those of checkpoints
    /// not skipped (a range by its capture's checkpoint).
    pub(super) fn each(
        &self,
        t: &str,
        fresh: bool,
        mut f: impl FnMut(Row) -> std::result::Result<(), super::BundleError>,
    ) -> std::result::Result<(), super::BundleError> {
        let sql = match (fresh, t) {
            (false, _) => "SELECT json FROM rows WHERE t = ?1 ORDER BY n",
            (true, "capture_ranges") => {
                "SELECT json FROM rows WHERE t = ?1 AND id NOT IN
                   (SELECT id FROM rows WHERE t = 'captures' AND cp IN (SELECT seq FROM skip))
                 ORDER BY n"
            }
            (true, _) => {
                "SELECT json FROM rows WHERE t = ?1 AND (cp IS NULL OR cp NOT IN (SELECT seq FROM skip))
                 ORDER BY n"
            }
        };
        let mut st = self.conn.prepare(sql)?;
        let mut rows = st.query([t])?;
        while let Some(r) = rows.next()? {
            let json: String = r.get(0)?;
            let row: Row = serde_json::from_str(&json).map_err(std::io::Error::other)?;
            f(row)?;
        }
        Ok(())
    }

    /// Leaves out the rows of checkpoint `seq` (the store has it).
    pub(super) fn skip(&self, seq: i64) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO skip (seq) VALUES (?1)")?
            .execute([seq])?;
        Ok(())
    }

    /// Numbers the captures and moves that will be inserted: the i-th capture (by id) gets
    /// `cap_base + i`, the i-th move `move_base + i`. Returns how many of each.
    pub(super) fn number(&self, cap_base: i64, move_base: i64) -> Result<(u64, u64)> {
        self.conn.execute("DELETE FROM caps", [])?;
        self.conn.execute("DELETE FROM moves", [])?;
        let caps = self.conn.execute(
            "INSERT INTO caps (old, new)
             SELECT id, ?1 + row_number() OVER (ORDER BY id) - 1 FROM rows
             WHERE t = 'captures' AND cp NOT IN (SELECT seq FROM skip)",
            [cap_base],
        )?;
        let moves = self.conn.execute(
            "INSERT INTO moves (old, new)
             SELECT id, ?1 + row_number() OVER (ORDER BY id) - 1 FROM rows
             WHERE t = 'moves' AND cp NOT IN (SELECT seq FROM skip)",
            [move_base],
        )?;
        Ok((caps as u64, moves as u64))
    }

    /// The capture that will be inserted at the bundle's id `old`.
    pub(super) fn cap(&self, old: i64) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT new FROM caps WHERE old = ?1")?
            .query_row([old], |r| r.get(0))
            .optional()?)
    }

    /// For a move's `after_capture`: the new id of the last capture at or before `old`
    /// (`cap_base - 1` when none).
    pub(super) fn cap_at_or_before(&self, old: i64, cap_base: i64) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached("SELECT max(new) FROM caps WHERE old <= ?1")?
            .query_row([old], |r| r.get::<_, Option<i64>>(0))?
            .unwrap_or(cap_base - 1))
    }

    /// The seq a move of the bundle's seq `old` will have.
    pub(super) fn move_seq(&self, old: i64) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT new FROM moves WHERE old = ?1")?
            .query_row([old], |r| r.get(0))
            .optional()?)
    }

    /// Adds a path whose present state is spliced in before the imported history.
    pub(super) fn add_name(&self, path: &[u8]) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO names (path) VALUES (?1)")?
            .execute([path])?;
        Ok(())
    }

    /// How many names there are.
    pub(super) fn names_count(&self) -> Result<u64> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM names", [], |r| r.get::<_, i64>(0))? as u64)
    }

    /// Calls `f` with each name, in path order.
    pub(super) fn each_name(
        &self,
        mut f: impl FnMut(Vec<u8>) -> std::result::Result<(), super::BundleError>,
    ) -> std::result::Result<(), super::BundleError> {
        let mut st = self.conn.prepare("SELECT path FROM names ORDER BY path")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            f(r.get(0)?)?;
        }
        Ok(())
    }

    /// The blobs this import stored, `chunk` at a time (to remove them again).
    pub(super) fn created(&self, chunk: usize, mut f: impl FnMut(Vec<String>)) -> Result<()> {
        let mut st = self.conn.prepare("SELECT hash FROM blobs WHERE created")?;
        let mut rows = st.query([])?;
        let mut batch = Vec::new();
        while let Some(r) = rows.next()? {
            batch.push(r.get(0)?);
            if batch.len() >= chunk {
                f(std::mem::take(&mut batch));
            }
        }
        if !batch.is_empty() {
            f(batch);
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
