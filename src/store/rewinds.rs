//! The rewind journal and undo list (`rewinds`): one row per rewind or undo, with the plan it
//! applies and how far it got.
//!
//! Invariants (the rewinder keeps them; this file stores and finds the rows):
//! - a row is inserted `applying`, with its whole plan, before the rewind changes anything, and
//!   set `done` only once every path is written, so a crash or a failure part-way leaves it
//!   `applying`, and the next mount applies the plan again (schema/store.md, rule 5);
//! - `done` → `undone` when an undo reverts it; the newest `done` row is what `undo` reverts;
//! - rows are read in the order they were created (`created_at`, then `rowid`).
//!
//! The plan is JSON the rewinder writes and reads; here it is only text. gc reads the blob
//! names of an `applying` plan, to keep them.

use rusqlite::params;

use super::{Result, RewindRow, RewindState, Store, now_ms};

impl Store {
    pub fn insert_rewind(&self, r: &RewindRow) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO rewinds (id, checkpoint, target, scope, state, plan, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![r.id, r.checkpoint, r.target, r.scope, r.state, r.plan, now_ms()],
            )?;
            Ok(())
        })
    }

    /// Moves a rewind on in its life. Its plan is needed only while it is 'applying' (to
    /// finish it after a crash): once done or undone the plan is emptied — it was most of
    /// the database's growth per rewind (1.5 MB for 3,000 paths, as JSON).
    pub fn set_rewind_state(&self, id: &str, state: RewindState) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE rewinds SET state = ?2, plan = CASE WHEN ?2 = 'applying' THEN plan ELSE '' END WHERE id = ?1",
                params![id, state],
            )?;
            Ok(())
        })
    }

    fn rewinds_in(&self, state: RewindState) -> Result<Vec<RewindRow>> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT id, checkpoint, target, scope, state, plan FROM rewinds WHERE state = ?1 ORDER BY created_at, rowid",
            )?;
            let rows = st.query_map([state], |r| {
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
        self.rewinds_in(RewindState::Applying)
    }

    /// The most recent completed rewind that has not been undone.
    pub fn last_done_rewind(&self) -> Result<Option<RewindRow>> {
        Ok(self.rewinds_in(RewindState::Done)?.pop())
    }
}
