//! Checkpoints: the rows that mark where each checkpoint began, and the counts `status` and
//! `list_checkpoints` show.
//!
//! Invariants:
//! - a checkpoint row is written straight to the database, never through the journal: a
//!   boundary is inserted while the recorder holds up every capture, so it must not wait for a
//!   batch to be applied, and needs nothing in it (the journal's captures name earlier
//!   checkpoints);
//! - `seq` orders checkpoints by when they began; a checkpoint lasts until the next one begins;
//! - a checkpoint gc dropped keeps its row (`dropped_at`), so a lookup by uuid still finds it
//!   and can say why it is gone, but listings leave it out.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{Checkpoint, CheckpointKind, CheckpointSummary, Result, Store, now_ms};

/// A checkpoint from the columns `seq, uuid, session_id, kind, began_at`, in that order (every
/// query here selects them first).
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
    /// Begins a checkpoint; returns its sequence number.
    pub fn begin_checkpoint(
        &self,
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
    ) -> Result<i64> {
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

    /// The first checkpoint of `session` begun by a user message after checkpoint `after` and
    /// no later than `upto`.
    pub fn next_message_checkpoint(
        &self,
        session: &str,
        after: i64,
        upto: i64,
    ) -> Result<Option<Checkpoint>> {
        self.with(|c| {
            c.query_row(
                "SELECT seq, uuid, session_id, kind, began_at FROM checkpoints
                 WHERE session_id = ?1 AND kind = 'message' AND seq > ?2 AND seq <= ?3
                 ORDER BY seq LIMIT 1",
                params![session, after, upto],
                row_checkpoint,
            )
            .optional()
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
}
