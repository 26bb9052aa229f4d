//! Journal coordination: how the capture journal's records become SQLite rows, and how every
//! query waits for them.
//!
//! A change is durable once its record is in the journal: [`Store::journal`] appends it and
//! hands out its ids, with one `write(2)` and no SQLite (see [`journal`](super::journal) for the
//! file format). The database catches up in batches: [`Store::with`] applies what is pending
//! before it runs a query, the daemon's timer and shutdown call [`Store::flush_journal`], and
//! [`Pending::open`] applies what a crash left before the store is used.
//!
//! Invariants:
//! - lock order `applying` → `conn` → `pending`; `pending` is held only to append, to take a
//!   batch and to report it done, never across a SQLite transaction, so a change never waits
//!   for SQLite;
//! - batches land one at a time and in the order they were journalled (under `applying`); a
//!   batch a failed attempt left is applied before newer ones;
//! - ids (`captures.id`, `moves.seq`) are handed out by [`Pending`] in the order of the
//!   records, continuing from the database's largest; an append that fails hands them out
//!   again;
//! - applying is idempotent (rows carry their ids; `INSERT OR IGNORE`; `actors | bits`), so a
//!   crash between the commit and the truncation of the journal only replays;
//! - an adopted file's pending key (`blobs/pending/…`) never reaches the database: it is hashed
//!   before the transaction, holding neither `conn` nor `pending`, and its pending name goes
//!   only once its batch is out of the journal;
//! - a record the database refuses is logged and skipped, never left to block later writes.
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::BlobRef;
use super::blobs::Blobs;
use super::counts::Added;
use super::journal::{self, Journal, Record};
use super::{PreImage, RangeContent, Result, Store};
use crate::locks::Locked;

/// The capture journal and the next ids it hands out (ids are allocated here, not by SQLite,
/// so a capture is durable with one append; see [`journal`]).
pub(super) struct Pending {
    pub(super) journal: Journal,
    /// Next `captures.id`.
    pub(super) next_capture: i64,
    /// Next `moves.seq`.
    pub(super) next_move: i64,
    /// Next `changes.seq`.
    pub(super) next_change: i64,
    /// The last change-log entry journalled, if it can stand for the next changes by the same
    /// process to the same file in the same checkpoint (see `Store::log_change`).
    pub(super) last: Option<super::LogEntry>,
}

impl Pending {
    /// Applies what a crash left in the journal to `conn` before anything reads it (adopted
    /// files it names are hashed first), clears the pending files no record names any more,
    /// and opens the journal for appends, with ids continuing from the database's largest.
    pub(super) fn open(
        dir: &Path,
        sync: bool,
        mut conn: Connection,
        blobs: &Blobs,
    ) -> Result<(Pending, Connection)> {
        let left = journal::read(dir)?;
        if !left.records.is_empty() {
            let shared = Mutex::new(conn);
            let (records, _) = resolve_pending(&shared, blobs, &left.records);
            conn = crate::locks::held(shared.into_inner());
            apply_records(&mut conn, &records)?;
        }
        blobs.clear_pending()?;
        let journal = Journal::open(dir, sync)?;
        // An id is never handed out twice: past the largest row, and past what AUTOINCREMENT
        // has given out (rows gc deleted).
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
            next_change: next("changes", "seq")?,
            last: None,
        };
        Ok((pending, conn))
    }
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
            if b.is_pending() {
                keys.push(b.to_string());
                match blobs.resolve(b.as_str()) {
                    Ok(h) => *b = BlobRef::hash(h),
                    Err(_) if capture_exists(&conn.locked(), *id) => {}
                    Err(e) => tracing::error!(
                        "store: the pre-image of {} could not be hashed: {e}",
                        path.as_path().display()
                    ),
                }
            }
        }
    }
    (out, keys)
}

/// Whether capture `id` is in the database (a replayed record whose batch already landed).
pub(super) fn capture_exists(conn: &Connection, id: i64) -> bool {
    conn.query_row("SELECT 1 FROM captures WHERE id = ?1", [id], |_| Ok(()))
        .optional()
        .ok()
        .flatten()
        .is_some()
}

/// Whether a batch names an adopted file, which must be hashed before it is applied.
fn has_pending(records: &[Record]) -> bool {
    records.iter().any(|r| {
        matches!(r, Record::Capture { pre: PreImage { blob: Some(b), .. }, .. } if b.is_pending())
    })
}

/// Applies journal records to the database in one transaction. A record the database refuses
/// (which only a damaged store could cause) is logged and skipped rather than blocking every
/// later write.
pub(super) fn apply_records(conn: &mut Connection, records: &[Record]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut added = Added::default();
    for r in records {
        if let Err(e) = apply_record(&tx, r, &mut added) {
            tracing::error!("store: a journal record could not be applied ({e}); skipped: {r:?}");
        }
    }
    added.record(&tx)?;
    tx.commit()
}

/// Writes one record's rows, and counts in `added` the captures and blobs it adds, statement
/// by statement (a record refused half-way keeps what it added). Every statement is `INSERT OR
/// IGNORE` or ORs bits in, so a record applied twice (a crash between the commit and the
/// journal's truncation) changes nothing.
fn apply_record(tx: &Transaction<'_>, r: &Record, added: &mut Added) -> rusqlite::Result<usize> {
    match r {
        Record::Capture { id, checkpoint, path, tool, pre, actor, op, at } => {
            if let Some(b) = &pre.blob {
                let n = tx
                    .prepare_cached("INSERT OR IGNORE INTO blobs (hash, size) VALUES (?1, ?2)")?
                    .execute(params![b, pre.size as i64])?;
                added.blob(n, pre.size as i64);
            }
            let n = tx.prepare_cached(
                "INSERT OR IGNORE INTO captures (id, checkpoint, path, purpose, kind, blob, mode, uid, gid, size, target, actor, actors, op, created_at, partial, xattrs)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
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
                pre.partial as i64,
                pre.xattrs
            ])?;
            added.capture(n);
            Ok(n)
        }
        Record::Range { capture, range } => {
            let (blob, data) = match &range.content {
                RangeContent::Blob(h) => {
                    let n = tx
                        .prepare_cached("INSERT OR IGNORE INTO blobs (hash, size) VALUES (?1, ?2)")?
                        .execute(params![h, range.length as i64])?;
                    added.blob(n, range.length as i64);
                    (Some(h), None)
                }
                RangeContent::Inline(d) => (None, Some(d)),
            };
            tx.prepare_cached(
                "INSERT OR IGNORE INTO capture_ranges (capture, offset, length, blob, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![capture, range.offset as i64, range.length as i64, blob, data])
        }
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
        Record::Log(e) => tx
            .prepare_cached(
                "INSERT OR IGNORE INTO changes (seq, at, checkpoint, op, path, path2, actor, pid, process, tool_use_id, session)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![e.seq, e.at, e.checkpoint, e.op, e.path, e.path2, e.actor, e.pid, e.process, e.tool_use_id, e.session]),
        Record::Epoch(_) => Ok(0),
    }
}

impl Store {
    /// Runs `f` on the connection, after the journal's pending records are applied (so every
    /// query sees every change recorded so far).
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        self.apply_pending()?;
        self.conn_only(f)
    }

    /// Runs `f` on the connection without applying the journal first.
    pub(super) fn conn_only<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut c = self.conn.locked();
        Ok(f(&mut c)?)
    }

    /// Applies the journal's pending records, one batch at a time and in order (under
    /// `applying`). `pending` is held only to take the batch and to report it done, never
    /// across the SQLite transaction (changes append meanwhile), and `conn` only for the
    /// transaction itself (adopted files are hashed before it).
    fn apply_pending(&self) -> Result<()> {
        let _order = self.applying.locked();
        self.apply_pending_locked()
    }

    /// [`Store::apply_pending`], for a caller that holds `applying`.
    pub(super) fn apply_pending_locked(&self) -> Result<()> {
        // A batch a failed attempt left comes first; then what is pending now.
        for _ in 0..2 {
            let (batch, retry) = {
                let mut p = self.pending.locked();
                let retry = p.journal.has_in_flight();
                match p.journal.take_batch()? {
                    Some(b) => (b, retry),
                    None => return Ok(()),
                }
            };
            // Decoded here, on the thread that applies them, without the journal's lock (see
            // `Journal::pending`).
            let batch = batch.records();
            // Adopted files are hashed here, off the request path, without the journal's lock
            // or the connection.
            let (res, keys) = if has_pending(&batch) {
                let (records, keys) = resolve_pending(&self.conn, &self.blobs, &batch);
                (self.conn_only(|c| apply_records(c, &records)), keys)
            } else {
                (self.conn_only(|c| apply_records(c, &batch)), Vec::new())
            };
            {
                let mut p = self.pending.locked();
                p.journal.batch_done(res.is_ok())?;
            }
            res?;
            self.applied
                .fetch_add(batch.len(), std::sync::atomic::Ordering::Relaxed);
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

    /// Journal records applied to the database since the store was opened.
    pub fn applied_records(&self) -> usize {
        self.applied.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Appends the record `make` builds (taking ids from `Pending`) to the journal.
    pub(super) fn journal(&self, make: impl FnOnce(&mut Pending) -> Record) -> Result<Record> {
        let mut p = self.pending.locked();
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
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::path::Path;

    use crate::store::{Actor, PreImage, Store, fsck, journal};

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
            .begin_checkpoint(
                "44444444-4444-4444-8444-444444444444",
                None,
                crate::store::CheckpointKind::Message,
            )
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
                &crate::wspath::node(name.as_bytes()),
                crate::store::Purpose::Checkpoint,
                &pre,
                Actor::Shell,
                crate::store::Op::Unlink,
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
        assert_eq!(
            caps[0].pre.blob.as_ref().map(super::BlobRef::as_str),
            Some(h.as_str())
        );
        assert_eq!(s.blobs.read_verified(&h).unwrap(), b"deleted content");
        capture(&s, "also");
        std::mem::forget(s);
        let (problems, _) = fsck(&store_dir).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let s = Store::open(&store_dir, false).unwrap();
        let caps = s.captures_in(k).unwrap();
        let h2 = blake3::hash(b"other content").to_hex().to_string();
        assert_eq!(
            caps[1].pre.blob.as_ref().map(super::BlobRef::as_str),
            Some(h2.as_str())
        );
        assert_eq!(s.blobs.read_verified(&h2).unwrap(), b"other content");
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
        assert_eq!(
            caps[0].pre.blob.as_ref().map(super::BlobRef::as_str),
            Some(h.as_str())
        );
        assert_eq!(s.blobs.read_verified(&h).unwrap(), b"deleted content");
    }

    #[test]
    fn a_journal_left_by_a_crash_is_applied_at_the_next_open_and_ids_keep_growing() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let k = s
            .begin_checkpoint(
                "33333333-3333-4333-8333-333333333333",
                Some("s"),
                crate::store::CheckpointKind::Message,
            )
            .unwrap();
        let a = s
            .insert_capture(
                k,
                &crate::wspath::node("a"),
                crate::store::Purpose::Checkpoint,
                &PreImage::absent(),
                Actor::Tool,
                crate::store::Op::Create,
            )
            .unwrap();
        s.track("s", &crate::wspath::ws("a"), k, a).unwrap();
        s.insert_move(
            k,
            &crate::wspath::ws(&b"d"[..]),
            &crate::wspath::ws(&b"e"[..]),
            false,
            Actor::Shell,
        )
        .unwrap();
        let b = s
            .insert_capture(
                k,
                &crate::wspath::node("e/x"),
                crate::store::Purpose::Checkpoint,
                &PreImage::absent(),
                Actor::Shell,
                crate::store::Op::Create,
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
                &crate::wspath::node("c"),
                crate::store::Purpose::Checkpoint,
                &PreImage::absent(),
                Actor::Shell,
                crate::store::Op::Create,
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
}
