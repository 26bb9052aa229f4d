//! Retention: drop the oldest checkpoints until the store is within its size budget and age
//! limit.
//!
//! Rules (docs/design.md §5):
//! - checkpoints go oldest first, and never the current one (`keep_from` and later), so a
//!   rewind to any checkpoint still kept sees every capture it needs (those at or after it);
//! - a dropped checkpoint keeps its row, marked `dropped_at`/`dropped_why`, so a rewind to it
//!   can say why it is gone; its captures, moves and change-log entries are deleted;
//! - the live session (the current one) stays rewindable to its first message: that
//!   checkpoint is never dropped, and dropping a later one keeps what a rewind to the first
//!   reads — the first capture of each path since the session began (and since each directory
//!   rename), the renames, and the actors of what it deletes; the capture before a tool's
//!   first change of a path in the session (`tracked`) stays too; and the change log's entries
//!   of other sessions, which say whose work a path is (docs/design.md §3, "Many sessions, one
//!   tree"), stay until no live session's history reaches back to them;
//! - every other session still at work keeps its whole history: nothing from its first
//!   checkpoint on is dropped (captures go to whichever checkpoint began last, so a later
//!   checkpoint of any session may hold what a rewind to one of its messages reads);
//! - what was kept for a live session is kept while any live session needs it: a pass sweeps
//!   only what none needs any more;
//! - a partial capture (range pre-image) kept for a live session keeps the capture after it
//!   too: that is where its unsaved bytes come from;
//! - a blob is deleted only when no capture or capture range refers to it any more; its row goes in the same
//!   transaction as the captures, its file after the commit (a crash in between leaves a
//!   file no row names, which the next gc sweeps);
//! - nothing is dropped while a rewind is unfinished (its journal names blobs).
//!
//! The caller serialises gc with rewinds (the daemon holds the rewind lock; the offline
//! command holds the store's lock file). Captures go on during a pass: rows are deleted in
//! transactions of their own, and a blob *file* is removed only under the lock captures take
//! (`Capture`, the recorder's capture lock), a few hundred at a time, each checked again then —
//! its row gone, the journal applied and no adoption being resolved (`applying`) — so a capture
//! that stored the same content meanwhile keeps it. No change waits for more than one such
//! batch (docs/design.md §4: the kernel aborts a mount whose requests wait too long).
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use std::collections::HashSet;
use std::sync::Mutex;

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{BlobRef, PlanTarget, Result, Store, StoreError, blobs::empty_hash, now_ms};
use crate::locks::Locked;
use crate::retention::Retention;
use crate::units::human_bytes;

/// The lock captures hold while they store a blob and record it (the recorder's capture lock),
/// which removing blob files takes; `None` where nothing captures (the offline command).
pub type Capture<'a> = Option<&'a Mutex<()>>;

/// Blob files checked and removed under one hold of the capture lock.
const UNLINK_BATCH: usize = 256;

/// What a gc pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub checkpoints_dropped: u64,
    pub captures_deleted: u64,
    pub blobs_deleted: u64,
    /// `bytes_before - bytes_after` (or 0 if the store grew meanwhile).
    pub bytes_freed: u64,
    /// The store's size ([`Store::size_bytes`]) before the pass, with the blob files no row
    /// named that it swept.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Still over the budget with nothing left that may be dropped.
    pub over_budget: bool,
}

impl Store {
    /// Bytes the store takes: blob contents plus the database's pages in use.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn size_bytes(&self) -> Result<u64> {
        self.with(|c| {
            // Kept as rows change (`counts.rs`); summed if the row was deleted behind our back.
            let blobs: i64 = c.query_row(
                "SELECT coalesce((SELECT blob_bytes FROM store_counts WHERE id = 1),
                                 (SELECT coalesce(sum(size), 0) FROM blobs))",
                [],
                |r| r.get(0),
            )?;
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let free: i64 = c.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok((blobs + (pages - free) * page).max(0) as u64)
        })
    }

    /// Why a checkpoint was dropped, if gc dropped it: `(dropped_at, why)`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn dropped(&self, seq: i64) -> Result<Option<(i64, String)>> {
        self.with(|c| {
            c.query_row(
                "SELECT dropped_at, coalesce(dropped_why, '') FROM checkpoints WHERE seq = ?1 AND dropped_at IS NOT NULL",
                [seq],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
        })
    }

    /// Drops the oldest checkpoints before `keep_from` until `policy` holds (see the module
    /// docs). `current` is the session at work now, `others` the other live sessions: each
    /// stays rewindable to its first checkpoint. `full` also sweeps blob files no row names (a
    /// directory walk), which a pass that dropped something always does.
    ///
    /// # Errors
    /// SQLite and I/O errors; what was committed before an error stays done.
    pub fn gc(
        &self,
        policy: &Retention,
        keep_from: i64,
        current: Option<&str>,
        others: &[&str],
        full: bool,
        capture: Capture<'_>,
    ) -> Result<Report> {
        let before = self.size_bytes()?;
        let mut report = Report {
            bytes_before: before,
            ..Report::default()
        };
        let unfinished: i64 = self.with(|c| {
            c.query_row(
                "SELECT count(*) FROM rewinds WHERE state = 'applying'",
                [],
                |r| r.get(0),
            )
        })?;
        let live = Live::load(self, current, others)?;
        // Every other live session keeps its whole history.
        let keep_from = live.others_first.map_or(keep_from, |f| f.min(keep_from));
        let now = now_ms();
        let mut size = before;
        if unfinished == 0 {
            loop {
                let next: Option<(i64, i64)> = self.with(|c| {
                    c.query_row(
                        "SELECT seq, began_at FROM checkpoints
                         WHERE dropped_at IS NULL AND seq < ?1 AND seq IS NOT ?2
                         ORDER BY seq LIMIT 1",
                        params![keep_from, live.current_first],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                })?;
                let Some((seq, began)) = next else { break };
                let why = if policy.max_age_ms().is_some_and(|a| now - began > a) {
                    format!(
                        "older than the store's age limit of {}",
                        crate::units::human_duration(policy.max_age_ms().unwrap_or(0))
                    )
                } else if policy.max_bytes.is_some_and(|m| size > m) {
                    format!(
                        "the store was over its budget of {}",
                        human_bytes(policy.max_bytes.unwrap_or(0))
                    )
                } else {
                    break;
                };
                let freed = self.drop_checkpoint(seq, &why, &live, capture)?;
                report.checkpoints_dropped += 1;
                report.add(&freed);
                size = size.saturating_sub(freed.2);
            }
        }
        // What dropped checkpoints kept for sessions that are no longer live.
        let freed = self.sweep(&live, capture)?;
        report.add(&freed);
        if full || report.checkpoints_dropped > 0 {
            // Files no row counted were on disk all the same: they count in the size before.
            let (n, bytes) = self.sweep_blob_files(capture)?;
            report.blobs_deleted += n;
            report.bytes_before += bytes;
        }
        report.bytes_after = self.size_bytes()?;
        // Freed is what the store went down by. Counting the deleted blobs alone left out the
        // database pages the deleted rows used (captures, the dropped checkpoints' change log),
        // which `size_bytes` counts: "freed 0 B (93.4 MiB -> 88.9 MiB)".
        report.bytes_freed = report.bytes_before.saturating_sub(report.bytes_after);
        report.over_budget = policy.max_bytes.is_some_and(|m| report.bytes_after > m);
        Ok(report)
    }

    /// Marks one checkpoint dropped and deletes what it held.
    fn drop_checkpoint(
        &self,
        seq: i64,
        why: &str,
        live: &Live,
        capture: Capture<'_>,
    ) -> Result<Freed> {
        // Inside the history of a live session that began before it.
        let in_session = live.earliest.is_some_and(|f| seq > f);
        let freed = self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            exec(
                &tx,
                "UPDATE checkpoints SET dropped_at = ?2, dropped_why = ?3 WHERE seq = ?1",
                params![seq, now_ms(), why],
            )?;
            if in_session {
                // Other sessions' entries say whose work a path is, for a rewind of the live
                // session: kept until the sweep (the current session's own, and external ones,
                // say nothing a rewind needs).
                exec(
                    &tx,
                    "DELETE FROM changes WHERE checkpoint = ?1 AND (session IS NULL OR session IS ?2)",
                    params![seq, live.current],
                )?;
            } else {
                exec(&tx, "DELETE FROM changes WHERE checkpoint = ?1", [seq])?;
            }
            // Its rewinds can no longer be undone (their captures are what undo replays).
            exec(
                &tx,
                "DELETE FROM rewinds WHERE checkpoint = ?1 AND state != 'applying'",
                [seq],
            )?;
            if in_session {
                // A live session's first checkpoint stays rewindable: its history keeps the
                // directory renames, the first capture of each path (after each rename), and
                // the actors of what is deleted, merged into the capture kept before it (the
                // latest one: inside every live session's history that has one).
                let dropped: Vec<(i64, Vec<u8>, i64)> = {
                    let mut st = tx.prepare_cached(&format!(
                        "SELECT c.id, c.path, c.actors FROM captures c
                         WHERE c.checkpoint = ?1 AND c.purpose = 'checkpoint' AND NOT ({KEEP})"
                    ))?;
                    let rows =
                        st.query_map(params![seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                    rows.collect::<rusqlite::Result<_>>()?
                };
                for (id, path, actors) in dropped {
                    exec(
                        &tx,
                        "UPDATE captures SET actors = actors | ?3 WHERE id = (
                             SELECT max(e.id) FROM captures e WHERE e.path = ?2 AND e.id < ?1
                             AND e.checkpoint >= ?4 AND e.purpose = 'checkpoint')",
                        params![id, path, actors, live.earliest],
                    )?;
                }
            } else {
                exec(&tx, "DELETE FROM moves WHERE checkpoint = ?1", [seq])?;
            }
            let r = delete_captures(&tx, "c.checkpoint = ?1", Some(seq))?;
            tx.commit()?;
            Ok(r)
        })?;
        self.unlink_blobs(&freed.1, capture)?;
        Ok(freed)
    }

    /// Deletes what dropped checkpoints before the earliest live session kept for sessions no
    /// longer live.
    fn sweep(&self, live: &Live, capture: Capture<'_>) -> Result<Freed> {
        let freed = self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let before = "(SELECT seq FROM checkpoints WHERE dropped_at IS NOT NULL AND seq < coalesce(?1, 9223372036854775807))";
            exec(&tx, &format!("DELETE FROM moves WHERE checkpoint IN {before}"), [live.earliest])?;
            exec(&tx, &format!("DELETE FROM changes WHERE checkpoint IN {before}"), [live.earliest])?;
            let r = delete_captures(&tx, &format!("c.checkpoint IN {before}"), live.earliest)?;
            tx.commit()?;
            Ok(r)
        })?;
        self.unlink_blobs(&freed.1, capture)?;
        Ok(freed)
    }

    /// Removes the blob files among `hashes` that no row names: content a rewind's plan, a dry
    /// run or a diff put together (a chain of range pre-images completed, a moved file's
    /// content), which nothing needs once the request is done. The caller is serialised with
    /// rewinds (whose plans name such files); `capture` is taken for each batch (see the module
    /// doc). Returns the bytes removed.
    ///
    /// # Errors
    /// Store errors (what was removed before stays removed).
    pub fn discard_unreferenced(&self, hashes: &[BlobRef], capture: Capture<'_>) -> Result<u64> {
        let empty = empty_hash();
        let mut want: Vec<String> = hashes
            .iter()
            .filter(|h| h.as_str() != empty && !h.is_pending())
            .map(|h| h.as_str().to_string())
            .collect();
        want.sort();
        want.dedup();
        if want.is_empty() {
            return Ok(0);
        }
        let (_, bytes) = self.remove_unnamed(&want, capture)?;
        Ok(bytes)
    }

    /// The blobs the plans of rewinds still 'applying' name (one that failed part-way, or was
    /// cut short by a crash): the next mount finishes them from these files, which no row names.
    ///
    /// # Errors
    /// A plan that does not parse: it names blobs that cannot be known, so nothing may be
    /// removed (the caller fails instead of deleting what recovery needs).
    pub(super) fn plan_blobs_in_flight(&self) -> Result<HashSet<String>> {
        let mut out = HashSet::new();
        for r in self.unfinished_rewinds()? {
            let plan = PlanTarget::parse_plan(&r.plan).map_err(|e| {
                StoreError::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "the plan of unfinished rewind {} does not parse ({e}); nothing is removed until it is finished or the store is repaired",
                        r.id
                    ),
                ))
            })?;
            out.extend(
                plan.0
                    .into_iter()
                    .filter_map(|t| t.blob)
                    .map(|b| b.to_string()),
            );
        }
        Ok(out)
    }

    /// Removes the files of the blobs a pass deleted the rows of, unless a capture stored the
    /// same content since (see [`Store::remove_unnamed`]).
    fn unlink_blobs(&self, hashes: &[String], capture: Capture<'_>) -> Result<()> {
        let empty = empty_hash();
        let doomed: Vec<String> = hashes.iter().filter(|h| **h != empty).cloned().collect();
        self.remove_unnamed(&doomed, capture).map(|_| ())
    }

    /// Removes the blob files among `hashes` that no row and no unfinished rewind's plan names,
    /// [`UNLINK_BATCH`] at a time, each batch under `capture` and `applying` with the journal
    /// applied first: a capture that stored one of them meanwhile has its row by then, and no
    /// adoption is linking one in. Returns the files and bytes removed.
    fn remove_unnamed(&self, hashes: &[String], capture: Capture<'_>) -> Result<(u64, u64)> {
        if hashes.is_empty() {
            return Ok((0, 0));
        }
        let in_flight = self.plan_blobs_in_flight()?;
        let (mut files, mut bytes) = (0, 0);
        for batch in hashes.chunks(UNLINK_BATCH) {
            // Most of the journal is applied before the locks are taken.
            self.flush_journal()?;
            let _c = capture.map(|m| m.locked());
            let _order = self.applying.locked();
            self.apply_pending_locked()?;
            let unnamed: Vec<&String> = self.conn_only(|c| {
                let mut st = c.prepare_cached("SELECT 1 FROM blobs WHERE hash = ?1")?;
                let mut out = Vec::new();
                for h in batch {
                    if !in_flight.contains(h) && st.query_row([h], |_| Ok(())).optional()?.is_none()
                    {
                        out.push(h);
                    }
                }
                Ok(out)
            })?;
            for h in unnamed {
                let p = self.blobs.path(h);
                let size = std::fs::symlink_metadata(&p).map_or(0, |m| m.len());
                match std::fs::remove_file(&p) {
                    Ok(()) => {
                        files += 1;
                        bytes += size;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => tracing::warn!("removing blob {h}: {e}"),
                }
            }
        }
        Ok((files, bytes))
    }

    /// Removes blob files no row names (left by a crash between a gc's commit and its unlinks,
    /// or before a rewind's plan was done with them), one fan-out directory at a time: listed
    /// without a lock, then each file no row named when the pass began checked again and
    /// removed as in [`Store::remove_unnamed`]. Returns the files and bytes removed.
    fn sweep_blob_files(&self, capture: Capture<'_>) -> Result<(u64, u64)> {
        let known: HashSet<String> = self.with(|c| {
            let mut st = c.prepare("SELECT hash FROM blobs")?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect()
        })?;
        let in_flight = self.plan_blobs_in_flight()?;
        let Ok(dirs) = std::fs::read_dir(self.blobs.dir()) else {
            return Ok((0, 0));
        };
        let (mut files_removed, mut bytes) = (0, 0);
        for d in dirs.flatten() {
            let name = d.file_name();
            let Some(prefix) = name.to_str().filter(|n| n.len() == 2) else {
                continue; // tmp/ and anything else that is not a fan-out directory
            };
            let Ok(files) = std::fs::read_dir(d.path()) else {
                continue;
            };
            let unknown: Vec<String> = files
                .flatten()
                .filter_map(|f| f.file_name().to_str().map(|rest| format!("{prefix}{rest}")))
                .filter(|h| !known.contains(h) && !in_flight.contains(h))
                .collect();
            let (n, b) = self.remove_unnamed(&unknown, capture)?;
            files_removed += n;
            bytes += b;
        }
        Ok((files_removed, bytes))
    }
}

/// The live sessions, each with its first checkpoint, as the pass's connection sees them in
/// `temp.gc_live` (what [`KEEP`] reads).
struct Live {
    /// The session at work now.
    current: Option<String>,
    /// Its first checkpoint.
    current_first: Option<i64>,
    /// The first checkpoint of the earliest other live session.
    others_first: Option<i64>,
    /// The first checkpoint of the earliest live session.
    earliest: Option<i64>,
}

impl Live {
    /// Fills `temp.gc_live` with `current` and `others` and their first kept checkpoints (one
    /// whose first was dropped before it came back to work stays rewindable to the earliest it
    /// still has; a session with none kept is left out).
    fn load(store: &Store, current: Option<&str>, others: &[&str]) -> Result<Live> {
        store.with(|c| {
            c.execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS gc_live (session TEXT PRIMARY KEY, first INTEGER NOT NULL);
                 DELETE FROM temp.gc_live;",
            )?;
            let mut st = c.prepare_cached(
                "INSERT OR IGNORE INTO temp.gc_live (session, first)
                 SELECT ?1, min(seq) FROM checkpoints WHERE session_id = ?1 AND dropped_at IS NULL
                 HAVING count(*) > 0",
            )?;
            for s in current.iter().chain(others) {
                st.execute([s])?;
            }
            let first_of = |s: Option<&str>| -> rusqlite::Result<Option<i64>> {
                c.query_row(
                    "SELECT first FROM temp.gc_live WHERE session IS ?1",
                    [s],
                    |r| r.get(0),
                )
                .optional()
            };
            let current_first = first_of(current)?;
            let others_first = c.query_row(
                "SELECT min(first) FROM temp.gc_live WHERE session IS NOT ?1",
                [current],
                |r| r.get(0),
            )?;
            let earliest = c.query_row("SELECT min(first) FROM temp.gc_live", [], |r| r.get(0))?;
            Ok(Live {
                current: current.map(str::to_string),
                current_first,
                others_first,
                earliest,
            })
        })
    }
}

/// Captures deleted, blob hashes deleted, bytes freed.
type Freed = (u64, Vec<String>, u64);

impl Report {
    fn add(&mut self, f: &Freed) {
        self.captures_deleted += f.0;
        self.blobs_deleted += f.1.len() as u64;
    }
}

/// A capture `c` that stays when its checkpoint is dropped or swept, for any live session `l`
/// (a row of `temp.gc_live`): the state before a tool's first change of a path in `l`, or — in
/// `l`'s history — the first capture of its path since `l` began or since the last directory
/// rename (what a rewind to `l`'s start reads), or the capture after a partial one kept for
/// `l`.
const KEEP: &str = "EXISTS (SELECT 1 FROM temp.gc_live l WHERE
    EXISTS (SELECT 1 FROM tracked t WHERE t.capture = c.id AND t.session_id = l.session)
    OR (c.checkpoint > l.first AND c.purpose = 'checkpoint' AND NOT EXISTS (
        SELECT 1 FROM captures e WHERE e.path = c.path AND e.purpose = 'checkpoint'
        AND e.checkpoint >= l.first AND e.id < c.id
        AND NOT EXISTS (SELECT 1 FROM moves m WHERE m.checkpoint >= l.first
                        AND m.after_capture >= e.id AND m.after_capture < c.id)))
    OR (c.checkpoint > l.first AND c.purpose = 'checkpoint' AND EXISTS (
        SELECT 1 FROM captures e WHERE e.id = (
            SELECT max(x.id) FROM captures x WHERE x.path = c.path AND x.purpose = 'checkpoint'
            AND x.id < c.id)
        AND e.partial = 1 AND e.checkpoint >= l.first)))";

/// Runs one statement through the connection's statement cache: gc runs the same few for
/// every checkpoint it drops, and parsing them each time was a third of its time.
fn exec(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    p: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(p)
}

/// Deletes the captures matching `cond` (with `?1` bound to `arg`) except those [`KEEP`]
/// spares, then the blob rows nothing refers to any more.
fn delete_captures(
    tx: &rusqlite::Transaction<'_>,
    cond: &str,
    arg: Option<i64>,
) -> rusqlite::Result<Freed> {
    let p = params![arg];
    let mut blobs: HashSet<String> = HashSet::new();
    {
        let mut st = tx.prepare_cached(&format!(
            "SELECT DISTINCT c.blob FROM captures c WHERE {cond} AND c.blob IS NOT NULL AND NOT ({KEEP})"
        ))?;
        let rows = st.query_map(p, |r| r.get::<_, String>(0))?;
        for h in rows {
            blobs.insert(h?);
        }
        let mut st = tx.prepare_cached(&format!(
            "SELECT DISTINCT r.blob FROM capture_ranges r JOIN captures c ON c.id = r.capture
             WHERE {cond} AND r.blob IS NOT NULL AND NOT ({KEEP})"
        ))?;
        let rows = st.query_map(p, |r| r.get::<_, String>(0))?;
        for h in rows {
            blobs.insert(h?);
        }
    }
    let n = exec(
        tx,
        &format!("DELETE FROM captures AS c WHERE {cond} AND NOT ({KEEP})"),
        p,
    )? as u64;
    let mut freed = Vec::new();
    let mut bytes = 0u64;
    for h in blobs {
        let gone: Option<i64> = tx
            .prepare_cached(
                "DELETE FROM blobs WHERE hash = ?1 AND NOT EXISTS (SELECT 1 FROM captures WHERE blob = ?1)
                 AND NOT EXISTS (SELECT 1 FROM capture_ranges WHERE blob = ?1) RETURNING size",
            )?
            .query_row([&h], |r| r.get(0))
            .optional()?;
        if let Some(size) = gone {
            bytes += size.max(0) as u64;
            freed.push(h);
        }
    }
    Ok((n, freed, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CheckpointKind, RewindRow, RewindScope, RewindState, Scope};

    /// A store with a blob file no row names, and an unfinished rewind whose plan is `plan`
    /// (with `{hash}` replaced by that blob's hash).
    fn store_with_unfinished_plan(plan: &str) -> (tempfile::TempDir, Store, BlobRef) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let seq = s
            .begin_checkpoint(
                "55555555-5555-4555-8555-555555555555",
                None,
                CheckpointKind::Rewind,
            )
            .unwrap();
        let (h, _) = s.blobs.put_bytes(b"what the plan restores").unwrap();
        s.insert_rewind(&RewindRow {
            id: "66666666-6666-4666-8666-666666666666".into(),
            checkpoint: seq,
            target: "77777777-7777-4777-8777-777777777777".into(),
            scope: RewindScope::Scope(Scope::All),
            state: RewindState::Applying,
            plan: plan.replace("{hash}", &h),
        })
        .unwrap();
        (d, s, BlobRef::hash(h))
    }

    /// The plan as rewindfs has always journalled it (field names are an on-disk format):
    /// gc must find its blob, and keep it for the recovery that needs it. Renaming the
    /// `blob` field of `PlanTarget`, or reading plans another way, fails this.
    #[test]
    fn an_unfinished_rewinds_plan_keeps_its_blobs_from_gc() {
        let plan = r#"[{"path":[97],"kind":"file","blob":"{hash}","mode":33188,"uid":0,"gid":0,"target":null,"rdev":0}]"#;
        let (_d, s, blob) = store_with_unfinished_plan(plan);
        assert!(s.plan_blobs_in_flight().unwrap().contains(blob.as_str()));
        s.discard_unreferenced(std::slice::from_ref(&blob), None)
            .unwrap();
        assert!(
            s.blobs.exists(blob.as_str()),
            "gc removed a blob an unfinished plan needs"
        );
        // What the engine journals now (the path as a string) reads back the same way.
        let written = serde_json::to_string(
            &PlanTarget::parse_plan(&plan.replace("{hash}", blob.as_str()))
                .unwrap()
                .0,
        )
        .unwrap();
        assert_eq!(
            written,
            plan.replace("{hash}", blob.as_str())
                .replace("[97]", "\"a\"")
        );
        let again = PlanTarget::parse_plan(&written).unwrap().0;
        assert!(
            again[0].path == b"a"[..]
                && again[0].blob.as_ref().map(BlobRef::as_str) == Some(blob.as_str())
        );
    }

    /// A plan that does not parse names blobs nobody can know: gc refuses to remove any.
    #[test]
    fn a_plan_that_does_not_parse_stops_gc_instead_of_deleting() {
        let (_d, s, blob) = store_with_unfinished_plan(r#"[{"path":[97],"content":"{hash}"}]"#);
        let e = s
            .discard_unreferenced(std::slice::from_ref(&blob), None)
            .unwrap_err();
        assert!(e.to_string().contains("does not parse"), "{e}");
        assert!(s.blobs.exists(blob.as_str()));
    }
}
