//! The store: SQLite (checkpoints, captures, the change log, rewinds) and the blob directory.
//!
//! ```text
//! <store>/
//! ├── rewindfs.db        SQLite, WAL mode; schema in schema/00N_*.sql
//! ├── blobs/             content-addressed pre-image contents (see blobs.rs)
//! ├── control.sock       the daemon's control socket
//! ├── daemon.pid, daemon.log, lock
//! ```
//!
//! One connection behind a mutex: writes are short (a row or two), and a capture's row is
//! committed before the change it protects is applied. `schema/store.md` describes every table.

pub mod blobs;
mod error;
pub mod gc;
pub mod journal;
mod migrate;
mod model;

use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

pub use self::blobs::Blobs;
pub use self::error::{Result, StoreError};
use self::journal::{Journal, Record};
use self::migrate::{SCHEMA_VERSION, migrate};
pub use self::model::{
    Actor, Capture, Checkpoint, CheckpointSummary, Kind, LogEntry, Move, PreImage, Range,
    RangeContent, RewindRow, Tracked,
};

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The store.
pub struct Store {
    /// The one connection (WAL mode). Held only for the duration of a statement or transaction.
    /// Lock order: `applying` → `conn` → `pending`.
    conn: Mutex<Connection>,
    /// Held by whoever applies the journal, so batches land one at a time and in order. Adopted
    /// files are hashed under it, not under `conn`: a checkpoint boundary inserts its row
    /// while it holds up every capture, and must not wait for reads from disk.
    applying: Mutex<()>,
    /// Journalled writes not yet in the database, and the ids they allocate.
    pending: Mutex<Pending>,
    pub blobs: Blobs,
    pub dir: std::path::PathBuf,
}

/// The capture journal and the next ids it hands out (ids are allocated here, not by SQLite,
/// so a capture is durable with one append; see [`journal`]).
struct Pending {
    journal: Journal,
    /// Next `captures.id`.
    next_capture: i64,
    /// Next `moves.seq`.
    next_move: i64,
}

/// Gives the adopted files a batch names their content hashes (see [`Blobs::resolve`]): the
/// records with every pending key replaced, and the keys. A key whose file is gone is fine when
/// its capture is already in the database (a batch applied before a crash emptied its journal
/// file); otherwise (a damaged store) it is logged and kept, and a rewind that needs it fails
/// with "not found" rather than restoring something else.
fn resolve_pending(
    conn: &Mutex<Connection>,
    blobs: &Blobs,
    records: &[Record],
) -> (Vec<Record>, Vec<String>) {
    let mut keys = Vec::new();
    let mut out = records.to_vec();
    for r in &mut out {
        if let Record::Capture {
            id,
            pre: PreImage { blob: Some(b), .. },
            path,
            ..
        } = r
        {
            if blobs::is_pending(b) {
                keys.push(b.clone());
                match blobs.resolve(b) {
                    Ok(h) => *b = h,
                    Err(_)
                        if capture_exists(&conn.lock().unwrap_or_else(|p| p.into_inner()), *id) => {
                    }
                    Err(e) => tracing::error!(
                        "store: the pre-image of {} could not be hashed: {e}",
                        String::from_utf8_lossy(path)
                    ),
                }
            }
        }
    }
    (out, keys)
}

fn capture_exists(conn: &Connection, id: i64) -> bool {
    conn.query_row("SELECT 1 FROM captures WHERE id = ?1", [id], |_| Ok(()))
        .optional()
        .ok()
        .flatten()
        .is_some()
}

fn has_pending(records: &[Record]) -> bool {
    records.iter().any(|r| {
        matches!(r, Record::Capture { pre: PreImage { blob: Some(b), .. }, .. } if blobs::is_pending(b))
    })
}

/// Applies journal records to the database in one transaction. A record the database refuses
/// (which only a damaged store could cause) is logged and skipped rather than blocking every
/// later write.
fn apply_records(conn: &mut Connection, records: &[Record]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for r in records {
        let res = match r {
            Record::Capture { id, checkpoint, path, tool, pre, actor, op, at } => (|| {
                if let Some(b) = &pre.blob {
                    tx.prepare_cached("INSERT OR IGNORE INTO blobs (hash, size) VALUES (?1, ?2)")?
                        .execute(params![b, pre.size as i64])?;
                }
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO captures (id, checkpoint, path, purpose, kind, blob, mode, uid, gid, size, target, actor, actors, op, created_at, partial)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                )?
                .execute(params![
                    id,
                    checkpoint,
                    path,
                    if *tool { "tool" } else { "checkpoint" },
                    pre.kind.as_str(),
                    pre.blob,
                    pre.mode as i64,
                    pre.uid as i64,
                    pre.gid as i64,
                    pre.size as i64,
                    pre.target,
                    actor.as_str(),
                    actor.bit() as i64,
                    op,
                    at,
                    pre.partial as i64
                ])
            })(),
            Record::Range { capture, range } => (|| {
                let (blob, data) = match &range.content {
                    RangeContent::Blob(h) => {
                        tx.prepare_cached("INSERT OR IGNORE INTO blobs (hash, size) VALUES (?1, ?2)")?
                            .execute(params![h, range.length as i64])?;
                        (Some(h), None)
                    }
                    RangeContent::Inline(d) => (None, Some(d)),
                };
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO capture_ranges (capture, offset, length, blob, data) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![capture, range.offset as i64, range.length as i64, blob, data])
            })(),
            Record::Actors { checkpoint, path, bits } => tx
                .prepare_cached(
                    "UPDATE captures SET actors = actors | ?3 WHERE checkpoint = ?1 AND path = ?2 AND purpose = 'checkpoint'",
                )?
                .execute(params![checkpoint, path, *bits as i64]),
            Record::Track { session, path, checkpoint, capture } => tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO tracked (session_id, path, checkpoint, capture) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![session, path, checkpoint, capture]),
            Record::Move { seq, checkpoint, src, dst, exchange, after_capture, actor, at } => tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO moves (seq, checkpoint, src, dst, exchange, after_capture, actor, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?
                .execute(params![seq, checkpoint, src, dst, *exchange as i64, after_capture, actor.as_str(), at]),
            Record::Epoch(_) => Ok(0),
        };
        if let Err(e) = res {
            tracing::error!("store: a journal record could not be applied ({e}); skipped: {r:?}");
        }
    }
    tx.commit()
}

fn row_capture(r: &rusqlite::Row<'_>) -> rusqlite::Result<Capture> {
    Ok(Capture {
        id: r.get(0)?,
        checkpoint: r.get(1)?,
        path: r.get(2)?,
        purpose: r.get(3)?,
        pre: PreImage {
            kind: Kind::parse(&r.get::<_, String>(4)?),
            blob: r.get(5)?,
            mode: r.get::<_, Option<i64>>(6)?.unwrap_or(0) as u32,
            uid: r.get::<_, Option<i64>>(7)?.unwrap_or(0) as u32,
            gid: r.get::<_, Option<i64>>(8)?.unwrap_or(0) as u32,
            size: r.get::<_, Option<i64>>(9)?.unwrap_or(0) as u64,
            target: r.get(10)?,
            partial: r.get::<_, i64>(14)? != 0,
        },
        actor: Actor::parse(&r.get::<_, String>(11)?),
        actors: r.get::<_, i64>(12)? as u8,
        op: r.get(13)?,
    })
}

const CAPTURE_COLS: &str = "id, checkpoint, path, purpose, kind, blob, mode, uid, gid, size, target, actor, actors, op, partial";

fn row_checkpoint(r: &rusqlite::Row<'_>) -> rusqlite::Result<Checkpoint> {
    Ok(Checkpoint {
        seq: r.get(0)?,
        uuid: r.get(1)?,
        session_id: r.get(2)?,
        kind: r.get(3)?,
        began_at: r.get(4)?,
    })
}

impl Store {
    /// Opens (creating) the store in `dir`, applying migrations.
    ///
    /// # Errors
    /// [`StoreError::TooNew`] for a store written by a newer rewindfs; SQLite and I/O errors.
    pub fn open(dir: &Path, sync: bool) -> Result<Store> {
        std::fs::create_dir_all(dir)?;
        let db = dir.join("rewindfs.db");
        let mut conn = Connection::open(&db)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Room for every statement the journal's applier and gc run per row (the default 16
        // would evict some of them each round).
        conn.set_prepared_statement_cache_capacity(64);
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // NORMAL in WAL mode: a committed row survives any crash of the daemon (it is in the
        // kernel's page cache); FULL adds an fsync per commit for power loss.
        conn.pragma_update(None, "synchronous", if sync { "FULL" } else { "NORMAL" })?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        migrate(&mut conn, &db)?;
        let blobs = Blobs::open(&dir.join("blobs"), sync)?;
        // What a crash left in the journal goes into the database before anything reads it
        // (adopted files it names are hashed first); then no pending file is named any more.
        let left = journal::read(dir)?;
        if !left.records.is_empty() {
            let shared = Mutex::new(conn);
            let (records, _) = resolve_pending(&shared, &blobs, &left.records);
            conn = shared.into_inner().unwrap_or_else(|p| p.into_inner());
            apply_records(&mut conn, &records)?;
        }
        blobs.clear_pending()?;
        let journal = Journal::open(dir, sync)?;
        let next = |table: &str, col: &str| -> rusqlite::Result<i64> {
            conn.query_row(
                &format!(
                    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{table}'), 0), coalesce((SELECT max({col}) FROM {table}), 0)) + 1"
                ),
                [],
                |r| r.get(0),
            )
        };
        let pending = Pending {
            journal,
            next_capture: next("captures", "id")?,
            next_move: next("moves", "seq")?,
        };
        Ok(Store {
            conn: Mutex::new(conn),
            applying: Mutex::new(()),
            pending: Mutex::new(pending),
            blobs,
            dir: dir.to_owned(),
        })
    }

    /// Runs `f` on the connection, after the journal's pending records are applied (so every
    /// query sees every change recorded so far).
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.apply_pending()?;
        self.conn_only(f)
    }

    /// Runs `f` on the connection without applying the journal first.
    fn conn_only<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        Ok(f(&mut c)?)
    }

    /// Applies the journal's pending records, one batch at a time and in order (under
    /// `applying`). `pending` is held only to take the batch and to report it done, never
    /// across the SQLite transaction (changes append meanwhile), and `conn` only for the
    /// transaction itself (adopted files are hashed before it).
    fn apply_pending(&self) -> Result<()> {
        let _order = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        // A batch a failed attempt left comes first; then what is pending now.
        for _ in 0..2 {
            let (batch, retry) = {
                let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                let retry = p.journal.has_in_flight();
                match p.journal.take_batch()? {
                    Some(b) => (b, retry),
                    None => return Ok(()),
                }
            };
            // Adopted files are hashed here, off the request path, without the journal's lock
            // or the connection.
            let (res, keys) = if has_pending(&batch) {
                let (records, keys) = resolve_pending(&self.conn, &self.blobs, &batch);
                (self.conn_only(|c| apply_records(c, &records)), keys)
            } else {
                (self.conn_only(|c| apply_records(c, &batch)), Vec::new())
            };
            {
                let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                p.journal.batch_done(res.is_ok())?;
            }
            res?;
            // Out of the journal (or, written in place, applied): the pending names can go.
            self.blobs.finish(keys.iter().map(String::as_str));
            if !retry {
                break;
            }
        }
        Ok(())
    }

    /// Applies the journal's pending records to the database now (the daemon's timer and
    /// shutdown; reads do it themselves).
    ///
    /// # Errors
    /// SQLite errors; the records stay pending.
    pub fn flush_journal(&self) -> Result<()> {
        self.with(|_| Ok(()))
    }

    /// Appends the record `make` builds (taking ids from `Pending`) to the journal.
    fn journal(&self, make: impl FnOnce(&mut Pending) -> Record) -> Result<Record> {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (cap, mv) = (p.next_capture, p.next_move);
        let r = make(&mut p);
        if let Err(e) = p.journal.append(r.clone()) {
            // Nothing was recorded: hand the ids out again.
            p.next_capture = cap;
            p.next_move = mv;
            return Err(e.into());
        }
        Ok(r)
    }

    /// Begins a checkpoint; returns its sequence number.
    pub fn begin_checkpoint(&self, uuid: &str, session: Option<&str>, kind: &str) -> Result<i64> {
        // Not after the journal is applied: the caller holds up every capture meanwhile, and
        // the row needs nothing the journal holds (its captures name earlier checkpoints).
        self.conn_only(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(s) = session {
                tx.execute("INSERT OR IGNORE INTO sessions (id, created_at) VALUES (?1, ?2)", params![s, now_ms()])?;
            }
            tx.execute(
                "INSERT INTO checkpoints (uuid, session_id, kind, began_at) VALUES (?1, ?2, ?3, ?4)",
                params![uuid, session, kind, now_ms()],
            )?;
            let seq = tx.last_insert_rowid();
            tx.commit()?;
            Ok(seq)
        })
    }

    /// Whether a checkpoint `uuid` began. Checkpoint rows are written straight to the database
    /// ([`Store::begin_checkpoint`]), never through the journal, so this does not apply the
    /// journal first: a message boundary would otherwise commit the pending captures each time.
    pub fn checkpoint_began(&self, uuid: &str) -> Result<bool> {
        self.conn_only(|c| {
            c.query_row("SELECT 1 FROM checkpoints WHERE uuid = ?1", [uuid], |_| {
                Ok(())
            })
            .optional()
            .map(|r| r.is_some())
        })
    }

    pub fn checkpoint(&self, uuid: &str) -> Result<Option<Checkpoint>> {
        self.with(|c| {
            c.query_row(
                "SELECT seq, uuid, session_id, kind, began_at FROM checkpoints WHERE uuid = ?1",
                [uuid],
                row_checkpoint,
            )
            .optional()
        })
    }

    pub fn checkpoint_by_seq(&self, seq: i64) -> Result<Option<Checkpoint>> {
        self.with(|c| {
            c.query_row(
                "SELECT seq, uuid, session_id, kind, began_at FROM checkpoints WHERE seq = ?1",
                [seq],
                row_checkpoint,
            )
            .optional()
        })
    }

    /// The checkpoints (of one session, or all), oldest first, with their counts.
    pub fn checkpoints(&self, session: Option<&str>) -> Result<Vec<CheckpointSummary>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT k.seq, k.uuid, k.session_id, k.kind, k.began_at,
                        (SELECT count(*) FROM captures WHERE checkpoint = k.seq AND purpose = 'checkpoint'),
                        (SELECT coalesce(sum(b.size), 0) FROM captures x JOIN blobs b ON b.hash = x.blob WHERE x.checkpoint = k.seq)
                         + (SELECT coalesce(sum(r.length), 0) FROM captures x JOIN capture_ranges r ON r.capture = x.id WHERE x.checkpoint = k.seq)
                 FROM checkpoints k WHERE (?1 IS NULL OR k.session_id = ?1) AND k.dropped_at IS NULL ORDER BY k.seq",
            )?;
            let rows = st.query_map([session], |r| {
                Ok(CheckpointSummary { checkpoint: row_checkpoint(r)?, paths_changed: r.get(5)?, bytes_captured: r.get(6)? })
            })?;
            rows.collect()
        })
    }

    /// The last checkpoint that began.
    pub fn last_checkpoint(&self) -> Result<Option<Checkpoint>> {
        self.with(|c| {
            c.query_row(
                "SELECT seq, uuid, session_id, kind, began_at FROM checkpoints ORDER BY seq DESC LIMIT 1",
                [],
                row_checkpoint,
            )
            .optional()
        })
    }

    /// Saves a pre-image (blob already stored) and returns the capture id. The caller makes
    /// sure a path is captured once per checkpoint (the recorder's in-memory map).
    #[allow(clippy::too_many_arguments)]
    pub fn insert_capture(
        &self,
        checkpoint: i64,
        path: &[u8],
        purpose: &str,
        pre: &PreImage,
        actor: Actor,
        op: &str,
    ) -> Result<i64> {
        let r = self.journal(|p| {
            let id = p.next_capture;
            p.next_capture += 1;
            Record::Capture {
                id,
                checkpoint,
                path: path.to_vec(),
                tool: purpose == "tool",
                pre: pre.clone(),
                actor,
                op: op.to_string(),
                at: now_ms(),
            }
        })?;
        match r {
            Record::Capture { id, .. } => Ok(id),
            _ => unreachable!("journal() returns the record it was given"),
        }
    }

    /// Adds old bytes to a partial capture (the blob is already stored).
    ///
    /// # Errors
    /// The journal cannot be written: the change the bytes protect must not go ahead.
    pub fn insert_range(&self, capture: i64, range: &Range) -> Result<()> {
        self.journal(|_| Record::Range {
            capture,
            range: range.clone(),
        })
        .map(|_| ())
    }

    /// The ranges of a partial capture, by offset.
    pub fn ranges(&self, capture: i64) -> Result<Vec<Range>> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT offset, length, blob, data FROM capture_ranges WHERE capture = ?1 ORDER BY offset",
            )?;
            let rows = st.query_map([capture], |r| {
                let content = match r.get::<_, Option<String>>(2)? {
                    Some(h) => RangeContent::Blob(h),
                    None => RangeContent::Inline(r.get(3)?),
                };
                Ok(Range {
                    offset: r.get::<_, i64>(0)? as u64,
                    length: r.get::<_, i64>(1)? as u64,
                    content,
                })
            })?;
            rows.collect()
        })
    }

    /// Records that another actor changed a path already captured in a checkpoint.
    pub fn add_actor(&self, checkpoint: i64, path: &[u8], bits: u8) -> Result<()> {
        self.journal(|_| Record::Actors {
            checkpoint,
            path: path.to_vec(),
            bits,
        })
        .map(|_| ())
    }

    /// Marks a path as tracked (tool-changed) in a session, if it is not already.
    pub fn track(&self, session: &str, path: &[u8], checkpoint: i64, capture: i64) -> Result<()> {
        self.journal(|_| Record::Track {
            session: session.to_string(),
            path: path.to_vec(),
            checkpoint,
            capture,
        })
        .map(|_| ())
    }

    pub fn tracked(&self, session: &str) -> Result<Vec<Tracked>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT path, checkpoint, capture FROM tracked WHERE session_id = ?1 ORDER BY path",
            )?;
            let rows = st.query_map([session], |r| {
                Ok(Tracked {
                    path: r.get(0)?,
                    checkpoint: r.get(1)?,
                    capture: r.get(2)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Every tracked path of a session (to rebuild the in-memory set at mount).
    pub fn capture_by_id(&self, id: i64) -> Result<Option<Capture>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {CAPTURE_COLS} FROM captures WHERE id = ?1"),
                [id],
                row_capture,
            )
            .optional()
        })
    }

    /// All checkpoint-purpose captures in checkpoints with `seq >= from`, oldest checkpoint first.
    pub fn captures_from(&self, from: i64) -> Result<Vec<Capture>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {CAPTURE_COLS} FROM captures WHERE checkpoint >= ?1 AND purpose = 'checkpoint' ORDER BY checkpoint, id"
            ))?;
            let rows = st.query_map([from], row_capture)?;
            rows.collect()
        })
    }

    /// Captures of one checkpoint (checkpoint purpose).
    pub fn captures_in(&self, checkpoint: i64) -> Result<Vec<Capture>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {CAPTURE_COLS} FROM captures WHERE checkpoint = ?1 AND purpose = 'checkpoint' ORDER BY id"
            ))?;
            let rows = st.query_map([checkpoint], row_capture)?;
            rows.collect()
        })
    }

    /// Records a directory rename before it is applied.
    pub fn insert_move(
        &self,
        checkpoint: i64,
        src: &[u8],
        dst: &[u8],
        exchange: bool,
        actor: Actor,
    ) -> Result<()> {
        self.journal(|p| {
            let seq = p.next_move;
            p.next_move += 1;
            Record::Move {
                seq,
                checkpoint,
                src: src.to_vec(),
                dst: dst.to_vec(),
                exchange,
                // Every capture id handed out so far happened before this rename.
                after_capture: p.next_capture - 1,
                actor,
                at: now_ms(),
            }
        })
        .map(|_| ())
    }

    pub fn moves_from(&self, from: i64) -> Result<Vec<Move>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT seq, checkpoint, src, dst, exchange, after_capture, actor FROM moves WHERE checkpoint >= ?1 ORDER BY seq",
            )?;
            let rows = st.query_map([from], |r| {
                Ok(Move {
                    seq: r.get(0)?,
                    checkpoint: r.get(1)?,
                    src: r.get(2)?,
                    dst: r.get(3)?,
                    exchange: r.get::<_, i64>(4)? != 0,
                    after_capture: r.get(5)?,
                    actor: Actor::parse(&r.get::<_, String>(6)?),
                })
            })?;
            rows.collect()
        })
    }

    /// Appends change-log entries in one transaction.
    pub fn append_log(&self, entries: &[LogEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut st = tx.prepare_cached(
                    "INSERT INTO changes (at, checkpoint, op, path, path2, actor, pid, process, tool_use_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?;
                for e in entries {
                    st.execute(params![e.at, e.checkpoint, e.op, e.path, e.path2, e.actor, e.pid, e.process, e.tool_use_id])?;
                }
            }
            tx.commit()
        })
    }

    /// The change log, newest last, optionally for one path (or paths beneath it).
    pub fn log(&self, path: Option<&[u8]>, limit: i64) -> Result<Vec<LogEntry>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT seq, at, checkpoint, op, path, path2, actor, pid, process, tool_use_id FROM (
                   SELECT * FROM changes
                   WHERE ?1 IS NULL OR path = ?1 OR path2 = ?1
                      OR substr(path, 1, length(?1) + 1) = CAST(?1 AS BLOB) || X'2F'
                   ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
            )?;
            let rows = st.query_map(params![path, limit], |r| {
                Ok(LogEntry {
                    seq: r.get(0)?,
                    at: r.get(1)?,
                    checkpoint: r.get(2)?,
                    op: r.get(3)?,
                    path: r.get(4)?,
                    path2: r.get(5)?,
                    actor: r.get(6)?,
                    pid: r.get::<_, Option<i64>>(7)?.unwrap_or(0) as u32,
                    process: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
                    tool_use_id: r.get(9)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Counts for `status`: checkpoints kept, checkpoints gc dropped, captures, bytes of
    /// captured content.
    pub fn counts(&self) -> Result<(i64, i64, i64, i64)> {
        self.with(|c| {
            c.query_row(
                "SELECT (SELECT count(*) FROM checkpoints WHERE dropped_at IS NULL),
                        (SELECT count(*) FROM checkpoints WHERE dropped_at IS NOT NULL),
                        (SELECT count(*) FROM captures),
                        (SELECT coalesce(sum(size), 0) FROM blobs)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
        })
    }

    pub fn insert_rewind(&self, r: &RewindRow) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO rewinds (id, checkpoint, target, scope, state, plan, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![r.id, r.checkpoint, r.target, r.scope, r.state, r.plan, now_ms()],
            )?;
            Ok(())
        })
    }

    pub fn set_rewind_state(&self, id: &str, state: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE rewinds SET state = ?2 WHERE id = ?1",
                params![id, state],
            )?;
            Ok(())
        })
    }

    fn rewinds_where(&self, cond: &str) -> Result<Vec<RewindRow>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT id, checkpoint, target, scope, state, plan FROM rewinds WHERE {cond} ORDER BY created_at, rowid"
            ))?;
            let rows = st.query_map([], |r| {
                Ok(RewindRow {
                    id: r.get(0)?,
                    checkpoint: r.get(1)?,
                    target: r.get(2)?,
                    scope: r.get(3)?,
                    state: r.get(4)?,
                    plan: r.get(5)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Rewinds interrupted by a crash.
    pub fn unfinished_rewinds(&self) -> Result<Vec<RewindRow>> {
        self.rewinds_where("state = 'applying'")
    }

    /// The most recent completed rewind that has not been undone.
    pub fn last_done_rewind(&self) -> Result<Option<RewindRow>> {
        Ok(self.rewinds_where("state = 'done'")?.pop())
    }

    /// Every blob hash a capture refers to (for `fsck`).
    pub fn referenced_blobs(&self) -> Result<Vec<String>> {
        self.with(|c| {
            let mut st = c.prepare("SELECT blob FROM captures WHERE blob IS NOT NULL UNION SELECT blob FROM capture_ranges WHERE blob IS NOT NULL")?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect()
        })
    }

    /// `PRAGMA integrity_check`.
    pub fn integrity_check(&self) -> Result<String> {
        self.with(|c| c.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
    }
}

/// Checks a store without changing it (safe while a daemon uses it): SQLite's integrity check,
/// the schema version, and that every blob a capture refers to exists and hashes to its name.
/// Returns the problems found (empty when the store is sound) and the number of blobs checked.
///
/// # Errors
/// The database cannot be opened at all.
pub fn fsck(dir: &Path) -> Result<(Vec<String>, usize)> {
    let db = dir.join("rewindfs.db");
    if !db.exists() {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no store database", db.display()),
        )));
    }
    let conn = Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut problems = Vec::new();
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if ok != "ok" {
        problems.push(format!("database integrity: {ok}"));
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        problems.push(format!(
            "schema version {version} is newer than this rewindfs ({SCHEMA_VERSION})"
        ));
    }
    let blobs = Blobs::at(&dir.join("blobs"));
    let hashes: Vec<String> = {
        let mut st = conn.prepare("SELECT blob FROM captures WHERE blob IS NOT NULL UNION SELECT blob FROM capture_ranges WHERE blob IS NOT NULL")?;
        let rows = st.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for h in &hashes {
        match blobs.verify(h) {
            Ok(true) => {}
            Ok(false) => problems.push(format!("blob {h}: content does not match its hash")),
            Err(e) => problems.push(format!("blob {h}: {e}")),
        }
    }
    // A journal a crash left behind: its records go into the database at the next mount;
    // their blobs must be sound now.
    let left = journal::read(dir)?;
    let mut journal_blobs = 0;
    for r in &left.records {
        let (h, path) = match r {
            Record::Capture {
                pre: PreImage { blob: Some(h), .. },
                path,
                ..
            } => (h, String::from_utf8_lossy(path).into_owned()),
            Record::Range {
                capture,
                range:
                    Range {
                        content: RangeContent::Blob(h),
                        ..
                    },
            } => (h, format!("range of capture {capture}")),
            _ => continue,
        };
        if let Record::Capture { id, .. } = r {
            if blobs::is_pending(h) && capture_exists(&conn, *id) {
                continue; // applied before a crash emptied the journal; its row has the hash
            }
        }
        {
            journal_blobs += 1;
            match blobs.verify(h) {
                Ok(true) => {}
                Ok(false) => problems.push(format!(
                    "journal: blob {h} of {path}: content does not match its hash"
                )),
                Err(e) => problems.push(format!("journal: blob {h} of {path}: {e}")),
            }
        }
    }
    let unfinished: i64 = conn.query_row(
        "SELECT count(*) FROM rewinds WHERE state = 'applying'",
        [],
        |r| r.get(0),
    )?;
    if unfinished > 0 {
        problems.push(format!(
            "{unfinished} rewind(s) interrupted; the next mount finishes them"
        ));
    }
    Ok((problems, hashes.len() + journal_blobs))
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::*;

    /// An `rm` adopted a file (a pending key in the journal) and the daemon died: the next
    /// open hashes the file, and the database names it by its hash; the same holds for a batch
    /// applied while the daemon runs. No pending file is left.
    #[test]
    fn adopted_files_are_named_by_their_hash_in_the_database() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("gone"), b"deleted content").unwrap();
        std::fs::write(ws.join("also"), b"other content").unwrap();
        let root = crate::sys::open_dir_path(&ws).unwrap();
        let store_dir = d.path().join("store");
        let s = Store::open(&store_dir, false).unwrap();
        let k = s
            .begin_checkpoint("44444444-4444-4444-8444-444444444444", None, "message")
            .unwrap();
        let capture = |s: &Store, name: &str| {
            let a = s
                .blobs
                .adopt(std::os::fd::AsFd::as_fd(&root), Path::new(name), None)
                .unwrap()
                .unwrap();
            let pre = a.pre_image();
            s.insert_capture(
                k,
                name.as_bytes(),
                "checkpoint",
                &pre,
                Actor::Shell,
                "unlink",
            )
            .unwrap();
            std::fs::remove_file(ws.join(name)).unwrap();
            s.blobs.settle(&a.hash);
        };
        capture(&s, "gone");
        // The store as a crash right after this batch's commit, before its journal file was
        // emptied, would leave it: a copy now, given the database and blobs of after.
        let crashed = d.path().join("crashed");
        assert!(
            std::process::Command::new("cp")
                .args(["-a", store_dir.to_str().unwrap(), crashed.to_str().unwrap()])
                .status()
                .unwrap()
                .success()
        );
        let caps = s.captures_in(k).unwrap();
        let h = blake3::hash(b"deleted content").to_hex().to_string();
        assert_eq!(caps[0].pre.blob.as_deref(), Some(h.as_str()));
        assert_eq!(s.blobs.read(&h).unwrap(), b"deleted content");
        capture(&s, "also");
        std::mem::forget(s);
        let (problems, _) = fsck(&store_dir).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let s = Store::open(&store_dir, false).unwrap();
        let caps = s.captures_in(k).unwrap();
        let h2 = blake3::hash(b"other content").to_hex().to_string();
        assert_eq!(caps[1].pre.blob.as_deref(), Some(h2.as_str()));
        assert_eq!(s.blobs.read(&h2).unwrap(), b"other content");
        assert_eq!(
            std::fs::read_dir(store_dir.join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
        let (problems, n) = fsck(&store_dir).unwrap();
        assert!(problems.is_empty() && n == 2, "{problems:?} {n}");
        drop(s);

        // The batch was applied and its pending file removed, but its record is replayed.
        for f in ["rewindfs.db", "rewindfs.db-wal", "rewindfs.db-shm"] {
            let _ = std::fs::remove_file(crashed.join(f));
            if store_dir.join(f).exists() {
                std::fs::copy(store_dir.join(f), crashed.join(f)).unwrap();
            }
        }
        for e in std::fs::read_dir(crashed.join("blobs/pending")).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        for h in [&h, &h2] {
            let blob = Path::new(&h[..2]).join(&h[2..]);
            std::fs::copy(
                store_dir.join("blobs").join(&blob),
                crashed.join("blobs").join(&blob),
            )
            .unwrap();
        }
        let (problems, _) = fsck(&crashed).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let s = Store::open(&crashed, false).unwrap();
        let caps = s.captures_in(k).unwrap();
        assert_eq!(caps[0].pre.blob.as_deref(), Some(h.as_str()));
        assert_eq!(s.blobs.read(&h).unwrap(), b"deleted content");
    }

    #[test]
    fn a_journal_left_by_a_crash_is_applied_at_the_next_open_and_ids_keep_growing() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let k = s
            .begin_checkpoint("33333333-3333-4333-8333-333333333333", Some("s"), "message")
            .unwrap();
        let a = s
            .insert_capture(
                k,
                b"a",
                "checkpoint",
                &PreImage::absent(),
                Actor::Tool,
                "create",
            )
            .unwrap();
        s.track("s", b"a", k, a).unwrap();
        s.insert_move(k, b"d", b"e", false, Actor::Shell).unwrap();
        let b = s
            .insert_capture(
                k,
                b"e/x",
                "checkpoint",
                &PreImage::absent(),
                Actor::Shell,
                "create",
            )
            .unwrap();
        assert!(b > a);
        // A crash: the process goes away without applying the journal, mid-way through a
        // last record.
        std::mem::forget(s);
        for name in journal::FILES {
            let mut f = OpenOptions::new()
                .append(true)
                .open(d.path().join(name))
                .unwrap();
            std::io::Write::write_all(&mut f, &[42, 0, 0, 0, 1, 2]).unwrap();
        }
        let (problems, _) = fsck(d.path()).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let s = Store::open(d.path(), false).unwrap();
        let caps = s.captures_from(k).unwrap();
        assert_eq!(caps.iter().map(|c| c.id).collect::<Vec<_>>(), vec![a, b]);
        let moves = s.moves_from(k).unwrap();
        assert_eq!(moves.len(), 1);
        assert_eq!(
            moves[0].after_capture, a,
            "the rename came after capture a, before b"
        );
        assert_eq!(s.tracked("s").unwrap().len(), 1);
        let c = s
            .insert_capture(
                k,
                b"c",
                "checkpoint",
                &PreImage::absent(),
                Actor::Shell,
                "create",
            )
            .unwrap();
        assert!(c > b, "ids are never handed out twice");
        assert_eq!(
            journal::read(d.path()).unwrap().records.len(),
            1,
            "the new capture waits in the journal"
        );
        s.flush_journal().unwrap();
        assert!(journal::read(d.path()).unwrap().records.is_empty());
    }

    #[test]
    fn a_capture_round_trips_with_its_actors() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let k = s
            .begin_checkpoint("22222222-2222-4222-8222-222222222222", None, "mount")
            .unwrap();
        let (h, n) = s.blobs.put_bytes(b"old").unwrap();
        let pre = PreImage {
            kind: Kind::File,
            blob: Some(h),
            mode: 0o100644,
            uid: 0,
            gid: 0,
            size: n,
            target: None,
            partial: false,
        };
        s.insert_capture(k, b"a.txt", "checkpoint", &pre, Actor::Shell, "write")
            .unwrap();
        s.add_actor(k, b"a.txt", Actor::Tool.bit()).unwrap();
        let caps = s.captures_from(k).unwrap();
        assert_eq!(caps.len(), 1);
        assert_eq!(caps[0].pre, pre);
        assert_eq!(caps[0].actors, Actor::Shell.bit() | Actor::Tool.bit());
    }
}
