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
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{
    Checkpoint, CheckpointKind, CheckpointSummary, Prompt, Result, Store, StoreError, now_ms,
};

/// The columns [`row_checkpoint`] reads, in its order (every query here selects them first).
const CHECKPOINT_COLS: &str = "seq, uuid, session_id, kind, began_at, prompt, bound";

/// A checkpoint from the columns [`CHECKPOINT_COLS`].
fn row_checkpoint(r: &rusqlite::Row<'_>) -> rusqlite::Result<Checkpoint> {
    Ok(Checkpoint {
        seq: r.get(0)?,
        uuid: r.get(1)?,
        session_id: r.get(2)?,
        kind: r.get(3)?,
        began_at: r.get(4)?,
        prompt: r.get(5)?,
        bound: r.get::<_, i64>(6)? != 0,
    })
}

/// How many of a session's prompts still without a message uuid its hooks look up (the newest).
pub const UNBOUND_OF_A_SESSION: i64 = 32;

impl Store {
    /// Begins a checkpoint; returns its sequence number.
    pub fn begin_checkpoint(
        &self,
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
    ) -> Result<i64> {
        self.begin_checkpoint_for(uuid, session, kind, None)
    }

    /// Begins a checkpoint, of a hook's `prompt` if given (its uuid is then the prompt_id until
    /// [`Store::bind_prompt`]); returns its sequence number.
    pub fn begin_checkpoint_for(
        &self,
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
        prompt: Option<&Prompt>,
    ) -> Result<i64> {
        // Not after the journal is applied: the caller holds up every capture meanwhile, and
        // the row needs nothing the journal holds (its captures name earlier checkpoints).
        self.conn_only(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(s) = session {
                tx.execute("INSERT OR IGNORE INTO sessions (id, created_at) VALUES (?1, ?2)", params![s, now_ms()])?;
            }
            tx.execute(
                "INSERT INTO checkpoints (uuid, session_id, kind, began_at, prompt_id, prompt, transcript, bound)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    uuid,
                    session,
                    kind,
                    now_ms(),
                    prompt.map(|p| &p.prompt_id),
                    prompt.and_then(|p| p.text.as_deref()),
                    prompt.and_then(|p| p.transcript.as_deref()),
                    prompt.is_none(),
                ],
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
                &format!("SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE uuid = ?1"),
                [uuid],
                row_checkpoint,
            )
            .optional()
        })
    }

    pub fn checkpoint_by_seq(&self, seq: i64) -> Result<Option<Checkpoint>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE seq = ?1"),
                [seq],
                row_checkpoint,
            )
            .optional()
        })
    }

    /// The checkpoints (of one session, or all), oldest first, with their counts.
    /// Every checkpoint not dropped, oldest first, without what each captured (what the log
    /// needs to name an entry's checkpoint: counting captures for each was most of the time
    /// of a `log --limit 1`).
    pub fn checkpoint_rows(&self) -> Result<Vec<Checkpoint>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE dropped_at IS NULL ORDER BY seq"
            ))?;
            let rows = st.query_map([], row_checkpoint)?;
            rows.collect()
        })
    }

    pub fn checkpoints(&self, session: Option<&str>) -> Result<Vec<CheckpointSummary>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT k.seq, k.uuid, k.session_id, k.kind, k.began_at, k.prompt, k.bound,
                        (SELECT count(*) FROM captures WHERE checkpoint = k.seq AND purpose = 'checkpoint'),
                        (SELECT coalesce(sum(b.size), 0) FROM captures x JOIN blobs b ON b.hash = x.blob WHERE x.checkpoint = k.seq)
                         + (SELECT coalesce(sum(r.length), 0) FROM captures x JOIN capture_ranges r ON r.capture = x.id WHERE x.checkpoint = k.seq)
                 FROM checkpoints k WHERE (?1 IS NULL OR k.session_id = ?1) AND k.dropped_at IS NULL ORDER BY k.seq",
            )?;
            let rows = st.query_map([session], |r| {
                Ok(CheckpointSummary { checkpoint: row_checkpoint(r)?, paths_changed: r.get(7)?, bytes_captured: r.get(8)? })
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
                &format!(
                    "SELECT {CHECKPOINT_COLS} FROM checkpoints
                     WHERE session_id = ?1 AND kind = 'message' AND seq > ?2 AND seq <= ?3
                     ORDER BY seq LIMIT 1"
                ),
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
                &format!("SELECT {CHECKPOINT_COLS} FROM checkpoints ORDER BY seq DESC LIMIT 1"),
                [],
                row_checkpoint,
            )
            .optional()
        })
    }

    /// The first checkpoint of `session` still kept.
    pub fn first_checkpoint_of(&self, session: &str) -> Result<Option<i64>> {
        self.conn_only(|c| {
            c.query_row(
                "SELECT min(seq) FROM checkpoints WHERE session_id = ?1 AND dropped_at IS NULL",
                [session],
                |r| r.get(0),
            )
        })
    }

    /// The checkpoint a hook began under `prompt_id`.
    pub fn checkpoint_of_prompt(&self, prompt_id: &str) -> Result<Option<Checkpoint>> {
        self.conn_only(|c| {
            c.query_row(
                &format!("SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE prompt_id = ?1"),
                [prompt_id],
                row_checkpoint,
            )
            .optional()
        })
    }

    /// The checkpoints whose message uuid is not known yet: their prompt_ids and transcripts,
    /// oldest first. Of one session, only its newest (`UNBOUND_OF_A_SESSION`, 32): every hook of
    /// the session looks these up in its transcript, and a prompt that never gets a uuid there
    /// (one another hook blocked) must not cost each later hook a search forever. Without a
    /// session (a rewind naming a uuid the daemon has not heard of), all of them.
    pub fn unbound_prompts(&self, session: Option<&str>) -> Result<Vec<(i64, Prompt)>> {
        self.conn_only(|c| {
            let mut st = c.prepare_cached(
                "SELECT seq, prompt_id, prompt, transcript FROM checkpoints
                 WHERE bound = 0 AND prompt_id IS NOT NULL AND (?1 IS NULL OR session_id = ?1)
                 ORDER BY seq DESC LIMIT CASE WHEN ?1 IS NULL THEN -1 ELSE ?2 END",
            )?;
            let rows = st.query_map(params![session, UNBOUND_OF_A_SESSION], |r| {
                Ok((
                    r.get(0)?,
                    Prompt {
                        prompt_id: r.get(1)?,
                        text: r.get(2)?,
                        transcript: r.get(3)?,
                    },
                ))
            })?;
            let mut v: Vec<(i64, Prompt)> = rows.collect::<rusqlite::Result<_>>()?;
            v.reverse();
            Ok(v)
        })
    }

    /// Gives the checkpoint begun under `prompt_id` its message uuid. Returns its seq, or
    /// `None` when no checkpoint began under that prompt_id. Binding again to the same uuid is
    /// a no-op.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the checkpoint is bound to another uuid, or `uuid` names
    /// another checkpoint already.
    pub fn bind_prompt(&self, prompt_id: &str, uuid: &str) -> Result<Option<i64>> {
        self.conn_only(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let row: Option<(i64, String, bool)> = tx
                .query_row(
                    "SELECT seq, uuid, bound FROM checkpoints WHERE prompt_id = ?1",
                    [prompt_id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? != 0)),
                )
                .optional()?;
            let Some((seq, current, bound)) = row else {
                return Ok(Ok(None));
            };
            if current == uuid {
                // Bound to the id it began under: a CLI whose turn id is the checkpoint's id
                // for good (Codex's turn_id, Gemini's per-prompt id) says so, and the
                // checkpoint stops waiting for a transcript to name its message.
                if !bound {
                    tx.execute("UPDATE checkpoints SET bound = 1 WHERE seq = ?1", [seq])?;
                    tx.commit()?;
                }
                return Ok(Ok(Some(seq)));
            }
            if bound {
                return Ok(Err(format!(
                    "the checkpoint of prompt {prompt_id} is bound to message {current} already, not {uuid}"
                )));
            }
            let taken: Option<i64> = tx
                .query_row("SELECT seq FROM checkpoints WHERE uuid = ?1", [uuid], |r| r.get(0))
                .optional()?;
            if taken.is_some() {
                return Ok(Err(format!(
                    "message {uuid} has a checkpoint of its own already; prompt {prompt_id} cannot take it"
                )));
            }
            tx.execute(
                "UPDATE checkpoints SET uuid = ?1, bound = 1 WHERE seq = ?2",
                params![uuid, seq],
            )?;
            tx.commit()?;
            Ok(Ok(Some(seq)))
        })
        .and_then(|r| r.map_err(StoreError::Conflict))
    }

    /// Counts for `status`: checkpoints kept, checkpoints gc dropped, captures, bytes of
    /// captured content. The last two are kept in `store_counts` as rows change (`counts.rs`):
    /// counting them here scanned both tables at every `status`. A store whose row was deleted
    /// behind rewindfs's back is counted as before (`fsck` says so).
    pub fn counts(&self) -> Result<(i64, i64, i64, i64)> {
        self.with(|c| {
            c.query_row(
                "SELECT (SELECT count(*) FROM checkpoints WHERE dropped_at IS NULL),
                        (SELECT count(*) FROM checkpoints WHERE dropped_at IS NOT NULL),
                        coalesce((SELECT captures FROM store_counts WHERE id = 1),
                                 (SELECT count(*) FROM captures)),
                        coalesce((SELECT blob_bytes FROM store_counts WHERE id = 1),
                                 (SELECT coalesce(sum(size), 0) FROM blobs))",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the tables hold, counted: captures, and bytes of blobs.
    fn counted(s: &Store) -> (i64, i64) {
        s.with(|c| {
            c.query_row(
                "SELECT (SELECT count(*) FROM captures), (SELECT coalesce(sum(size), 0) FROM blobs)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .unwrap()
    }

    /// What `status` reports of them (kept in `store_counts`, `counts.rs`).
    fn reported(s: &Store) -> (i64, i64) {
        let (_, _, captures, bytes) = s.counts().unwrap();
        (captures, bytes)
    }

    /// Captures `path` in checkpoint `k` with `content` as its pre-image.
    fn capture(s: &Store, k: i64, path: &str, content: &[u8]) {
        let (h, n) = s.blobs.put_bytes(content).unwrap();
        let pre = crate::store::PreImage {
            kind: crate::store::Kind::File,
            blob: Some(crate::store::BlobRef::hash(h)),
            mode: 0o100644,
            size: n,
            ..crate::store::PreImage::absent()
        };
        s.insert_capture(
            k,
            &crate::wspath::node(path),
            crate::store::Purpose::Checkpoint,
            &pre,
            crate::store::Actor::Shell,
            crate::store::Op::Write,
        )
        .unwrap();
    }

    /// `status`'s counts follow the rows: captures and blobs the journal's applier adds (a blob
    /// two captures share counted once), removed as gc removes them (a checkpoint's captures,
    /// then the blobs no capture names), and, in a store from before the counts were kept,
    /// counted when the migration adds them. (Imports: the bundle fuzz test's `check_store`.)
    #[test]
    fn status_counts_follow_the_rows_and_a_migrated_store_starts_counted() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        assert_eq!(reported(&s), (0, 0));
        let k1 = s
            .begin_checkpoint(
                "11111111-1111-4111-8111-111111111111",
                None,
                CheckpointKind::Mount,
            )
            .unwrap();
        let k2 = s
            .begin_checkpoint(
                "22222222-2222-4222-8222-222222222222",
                None,
                CheckpointKind::Mount,
            )
            .unwrap();
        capture(&s, k1, "a", b"seven b");
        capture(&s, k1, "b", b"shared content");
        capture(&s, k2, "a", b"shared content");
        capture(&s, k2, "c", &[7u8; 5000]);
        assert_eq!(counted(&s), (4, 7 + 14 + 5000));
        assert_eq!(reported(&s), counted(&s));
        // As gc removes them (`gc.rs`'s statements, on k1's captures).
        s.with(|c| {
            c.execute("DELETE FROM captures WHERE checkpoint = ?1", [k1])?;
            c.execute(
                "DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM captures WHERE blob = blobs.hash)",
                [],
            )
        })
        .unwrap();
        assert_eq!(counted(&s), (2, 14 + 5000));
        assert_eq!(reported(&s), counted(&s));
        let size = s.size_bytes().unwrap();
        assert!(size >= 5014, "{size}");
        // A store of version 10: no counts kept. Opening it counts what it holds.
        s.with(|c| {
            c.execute_batch(
                "DROP TRIGGER store_counts_capture_out; DROP TRIGGER store_counts_blob_out;
                 DROP TRIGGER store_counts_blob_size; DROP TABLE store_counts;
                 PRAGMA user_version = 10;",
            )
        })
        .unwrap();
        drop(s);
        let s = Store::open(d.path(), false).unwrap();
        assert_eq!(reported(&s), (2, 14 + 5000));
        capture(&s, k2, "d", b"one more");
        assert_eq!(reported(&s), (3, 14 + 5000 + 8));
        assert_eq!(reported(&s), counted(&s));
        assert!(crate::store::fsck(d.path()).unwrap().0.is_empty());
        // fsck says when they disagree with the rows (changed outside rewindfs).
        s.with(|c| c.execute("UPDATE store_counts SET captures = 99", []))
            .unwrap();
        let (problems, _) = crate::store::fsck(d.path()).unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p.contains("99 captures") && p.contains("hold 3")),
            "{problems:?}"
        );
        // A row deleted behind rewindfs's back: status and gc count the tables, fsck says so.
        s.with(|c| c.execute("DELETE FROM store_counts", []))
            .unwrap();
        assert_eq!(reported(&s), counted(&s));
        assert!(s.size_bytes().unwrap() >= 5014 + 8);
        let (problems, _) = crate::store::fsck(d.path()).unwrap();
        assert!(
            problems.iter().any(|p| p.contains("has no row")),
            "{problems:?}"
        );
    }

    /// A session's hooks look up only its newest unbound prompts; a rewind looks up all.
    #[test]
    fn a_sessions_hooks_look_up_only_its_newest_unbound_prompts() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let n = UNBOUND_OF_A_SESSION + 8;
        for i in 0..n {
            let p = Prompt {
                prompt_id: format!("p{i}"),
                text: None,
                transcript: None,
            };
            s.begin_checkpoint_for(&p.prompt_id, Some("s"), CheckpointKind::Message, Some(&p))
                .unwrap();
        }
        let ids =
            |v: Vec<(i64, Prompt)>| v.into_iter().map(|(_, p)| p.prompt_id).collect::<Vec<_>>();
        let mine = ids(s.unbound_prompts(Some("s")).unwrap());
        let want: Vec<String> = (8..n).map(|i| format!("p{i}")).collect();
        assert_eq!(mine, want, "the newest, oldest first");
        assert_eq!(s.unbound_prompts(None).unwrap().len() as i64, n);
        assert!(s.unbound_prompts(Some("other")).unwrap().is_empty());
    }
}
