//! The store: what every change overwrote, kept outside the workspace — SQLite for the rows
//! (checkpoints, captures, the change log, rewinds) and a content-addressed directory for the
//! bytes. `schema/store.md` describes every table and consistency rule; docs/design.md §5 is the
//! contract.
//!
//! ```text
//! <store>/
//! ├── rewindfs.db, -wal, -shm   SQLite, WAL mode; schema in schema/00N_*.sql (migrate.rs)
//! ├── journal, journal.1        capture records not yet in the database (journal.rs, apply.rs)
//! ├── blobs/                    pre-image contents (blobs.rs)
//! │   ├── tmp/                  blob writes in flight
//! │   ├── pending/              adopted files, until the journal is applied and names them
//! │   └── ab/cdef…              content whose BLAKE3 hash is abcdef…
//! ├── control.sock              the daemon's control socket
//! ├── daemon.pid, daemon.log
//! └── lock                      flock'ed by the daemon: one daemon per store
//! ```
//!
//! One job per file: this one holds [`Store`] and [`Store::open`]; `model.rs` the domain
//! values; `error.rs` the errors; `migrate.rs` the schema; `journal.rs` the journal's file
//! format and `apply.rs` how its records reach SQLite; `checkpoints.rs`, `captures.rs`,
//! `changes.rs`, `rewinds.rs` and `origins.rs` the queries, by table; `counts.rs` the counts
//! `status` reads, kept as rows are added; `blobs/` the blob directory;
//! `gc.rs` retention; `fsck.rs` the read-only check; `private.rs` who may use the store, and
//! the modes of what it creates; `bundle/` history bundles (export and import); `base64.rs`
//! bytes as text in JSON (bundle rows, and `show`'s content on the wire).
//!
//! Invariants:
//! - write-ahead: the pre-image of a change (its blob, then its journal record) is durable
//!   before the change is applied; its rows reach SQLite later, in a batch, and nothing is
//!   lost if the daemon dies in between (the next open applies the journal first);
//! - every query sees every change recorded so far, because it applies the journal before it
//!   runs; only checkpoint rows bypass the journal, and need nothing in it (`checkpoints.rs`);
//! - one connection behind a mutex, held for one statement or transaction; lock order
//!   `applying` → `conn` → `pending`, and no change waits for SQLite (`apply.rs`);
//! - a database written by a newer rewindfs is refused, never misread (`migrate.rs`);
//! - the store is private: directories 0700, files 0600 (blobs 0400) whatever the umask, and
//!   another user's store is refused (`private.rs`); what a rewind reads of a blob is checked
//!   against its hash first (`blobs.rs`).

mod adoption;
mod apply;
pub mod base64;
pub mod blobs;
pub mod bundle;
mod captures;
mod changes;
mod checkpoints;
mod counts;
mod error;
mod fsck;
pub mod gc;
pub mod journal;
pub mod layout;
mod migrate;
mod model;
mod origins;
pub mod private;
mod rewinds;
mod sql;
mod time;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;

use crate::locks::Locked;

pub use self::adoption::Adoptions;
use self::apply::Pending;
pub use self::blobs::Blobs;
pub use self::changes::LogQuery;
pub use self::error::{Result, StoreError};
pub use self::fsck::{fsck, fsck_with};
use self::migrate::migrate;
pub use self::model::{
    Actor, Apply, BlobRef, Capture, Checkpoint, CheckpointKind, CheckpointSummary, Kind, LogEntry,
    Move, Op, Origin, OriginKind, PlanTarget, PreImage, Prompt, Purpose, Range, RangeContent,
    RewindRow, RewindScope, RewindState, Scope, Tracked, Xattrs, message_id, normalize_message_id,
    optional_message_id, optional_session_id, session_id,
};
pub use self::origins::{first_origin, origin_now};
pub use self::rewinds::{Stack, Step};
pub use self::time::{now_ms, rfc3339};

/// An open store, shared by the daemon's threads; each method takes the locks it needs, in
/// the order above.
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
    /// The blob directory, `<store>/blobs`.
    pub blobs: Blobs,
    /// The database file, and a second connection to it that only checkpoints the WAL, from
    /// the daemon's flusher ([`Store::checkpoint_wal_aside`]); opened at the first call. Lock
    /// order: `checkpointer` → `conn`.
    db: PathBuf,
    checkpointer: Mutex<Option<Aside>>,
    /// Journal records applied to the database since the store was opened (the flusher trims
    /// the heap after a burst of them).
    applied: std::sync::atomic::AtomicUsize,
}

/// The WAL size, in pages, at which a commit on the main connection checkpoints it itself once
/// the flusher checkpoints aside ([`Store::checkpoint_wal_aside`]): a safety net against a WAL
/// that grows without bound, never reached while the flusher runs (SQLite's default, 1,000
/// pages, made one `begin_message` in about 80 wait for a checkpoint's fsync: 16-20 ms).
const WAL_AUTOCHECKPOINT_FALLBACK: i64 = 16_000;

/// The size, in bytes, the WAL is cut back to when it restarts after a checkpoint.
const WAL_SIZE_LIMIT: i64 = 8 << 20;

/// The connection that checkpoints the WAL aside ([`Store::checkpoint_wal_aside`]).
struct Aside {
    conn: Connection,
    /// The database's `data_version` as this connection saw it once it last started the WAL
    /// anew: while it stays so, nothing was committed since, and there is nothing to checkpoint.
    restarted_at: Option<i64>,
}

impl Store {
    /// Opens (creating) the store in `dir`, applying migrations.
    ///
    /// # Errors
    /// [`StoreError::TooNew`] for a store written by a newer rewindfs; SQLite and I/O errors.
    pub fn open(dir: &Path, sync: bool) -> Result<Store> {
        private::create_dir(dir)?;
        let db = dir.join(layout::DB);
        // Created here, 0600, rather than by SQLite (0644 under the daemon's empty umask); SQLite
        // gives the -wal and -shm files the database's mode.
        drop(private::open_file(
            &db,
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )?);
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
        // What a crash left in the journal goes into the database here, before anything reads it.
        let (pending, conn) = Pending::open(dir, sync, conn, &blobs)?;
        Ok(Store {
            conn: Mutex::new(conn),
            applying: Mutex::new(()),
            pending: Mutex::new(pending),
            blobs,
            db,
            checkpointer: Mutex::new(None),
            applied: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Copies what the WAL holds into the database from a connection of its own (a passive
    /// checkpoint: it waits for no reader or writer, and none waits for it), so the commits
    /// of message boundaries and captures never pay for one. The first call lets the main
    /// connection checkpoint only past `WAL_AUTOCHECKPOINT_FALLBACK` pages. Returns the
    /// WAL's pages and how many of them are now in the database, or `None` if nothing was
    /// committed since the last call started the WAL anew.
    ///
    /// Once every page is in the database, the next write transaction starts the WAL from its
    /// beginning and syncs its new header before it commits, even at `synchronous = NORMAL`
    /// (SQLite's guard against out-of-order writes after a restart): an fsync, 1-16 ms here,
    /// which fell on whichever commit came first, most often a message boundary's or a
    /// rewind's checkpoint row after a pause. So this connection makes that first write
    /// itself, one that changes nothing (`application_id` set to its own value), and pays the
    /// fsync here, on the flusher. It then leaves the WAL alone until someone else commits:
    /// checkpointing its own write would only make the next one restart the WAL again.
    ///
    /// # Errors
    /// SQLite errors (the main connection then keeps checkpointing by itself).
    pub fn checkpoint_wal_aside(&self) -> Result<Option<(i64, i64)>> {
        let mut aside = self.checkpointer.locked();
        if aside.is_none() {
            let conn = Connection::open(&self.db)?;
            // Never waits for a lock: a writer holding it restarts the WAL itself (below).
            conn.busy_timeout(std::time::Duration::ZERO)?;
            let sync = self.conn_only(|main| {
                main.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_FALLBACK)?;
                // Checkpointed less often, the WAL grows further between restarts (to 35 MiB
                // in an rm -rf of 20k files); past this it is cut back when it restarts.
                main.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
                main.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))
            })?;
            // Its restarting write syncs as the main connection's commits do (`--sync`: FULL).
            conn.pragma_update(None, "synchronous", sync)?;
            *aside = Some(Aside {
                conn,
                restarted_at: None,
            });
        }
        let Some(a) = aside.as_mut() else {
            unreachable!("opened above")
        };
        let version =
            |c: &Connection| c.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0));
        if a.restarted_at == Some(version(&a.conn)?) {
            return Ok(None);
        }
        let (pages, done) = a
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            })?;
        a.restarted_at = None;
        if pages > 0 && done == pages {
            let tx = match a
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            {
                Ok(tx) => tx,
                // Someone is writing right now: that commit starts the WAL anew, as before,
                // and the flusher does not wait behind it.
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy =>
                {
                    return Ok(Some((pages, done)));
                }
                Err(e) => return Err(e.into()),
            };
            let id: i64 = tx.query_row("PRAGMA application_id", [], |r| r.get(0))?;
            tx.pragma_update(None, "application_id", id)?;
            // Read under the write lock: a commit after this one changes it.
            let seen = version(&tx)?;
            tx.commit()?;
            a.restarted_at = Some(seen);
        }
        Ok(Some((pages, done)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The WAL header's checkpoint sequence number and salts: they change when a writer starts
    /// the WAL anew (and syncs the new header).
    fn wal_generation(dir: &Path) -> Vec<u8> {
        let wal = std::fs::read(dir.join(format!("{}-wal", layout::DB))).unwrap();
        wal[12..24].to_vec()
    }

    /// Once the aside checkpoint has put every page in the database, it starts the WAL anew
    /// itself, so that the next commit on the main connection (a message boundary's row) does
    /// not, and pays no fsync; with nothing committed since, it leaves the WAL alone. Without
    /// the restarting write, the second assertion fails (the boundary's commit restarts it).
    #[test]
    fn the_aside_checkpoint_starts_the_wal_anew_so_the_next_commit_does_not() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let cp = |u: &str| {
            s.begin_checkpoint(u, None, CheckpointKind::Message)
                .unwrap();
        };
        cp("11111111-1111-4111-8111-111111111111");
        let (pages, done) = s
            .checkpoint_wal_aside()
            .unwrap()
            .expect("something to checkpoint");
        assert!(pages > 0 && done == pages, "{done} of {pages}");
        let restarted = wal_generation(d.path());
        cp("22222222-2222-4222-8222-222222222222");
        assert_eq!(
            wal_generation(d.path()),
            restarted,
            "the boundary's commit appended to the WAL the checkpoint restarted"
        );
        assert!(
            s.checkpoint_wal_aside().unwrap().is_some(),
            "a commit since: checkpointed"
        );
        assert!(
            s.checkpoint_wal_aside().unwrap().is_none(),
            "nothing committed since it restarted the WAL: left alone"
        );
        // A writer holding the lock: the checkpoint neither waits nor fails.
        cp("33333333-3333-4333-8333-333333333333");
        let other = Connection::open(d.path().join(layout::DB)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let t = std::time::Instant::now();
        assert!(s.checkpoint_wal_aside().unwrap().is_some());
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            t.elapsed()
        );
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(
            s.checkpoint("22222222-2222-4222-8222-222222222222")
                .unwrap()
                .map(|c| c.uuid),
            Some("22222222-2222-4222-8222-222222222222".to_string())
        );
    }
}
