//! The rewind journal and the undo/redo stack (`rewinds`): one row per rewind, undo or redo,
//! with the plan it applies and how far it got.
//!
//! Invariants (the rewinder keeps them; this file stores and finds the rows):
//! - a row is inserted `applying`, with its whole plan, before the rewind changes anything, and
//!   finished ([`Store::finish_rewind`]) only once every path is written, so a crash or a
//!   failure part-way leaves it `applying`, and the next mount applies the plan again
//!   (schema/store.md, rule 5);
//! - rows are read in the order they were created (`created_at`, then `rowid`).
//!
//! The plan is JSON the rewinder writes and reads; here it is only text. gc reads the blob
//! names of an `applying` plan, to keep them.
//!
//! # The stack
//! [`Stack`] reads the undo/redo stack off the rows, as an editor's: no other state is kept.
//! - A *rewind* row (scope `tool`, `agent` or `all`) is `done` while its result stands and
//!   `undone` once undone. An *undo* or *redo* row (scope `undo`/`redo`) names in `target` the
//!   rewind it undid or redid, and finishing it moves that rewind to `undone` or back to `done`
//!   in the same transaction.
//! - `undo` undoes the newest rewind that is `done`, by reverting the row that last applied
//!   its result: its newest redo, or the rewind itself. Again and again, back to the first.
//! - `redo` re-applies the undone rewind whose undo is newest, by reverting that undo — but
//!   only an undo newer than every rewind: a new rewind clears the redo stack.
//! - Reverting a row restores, for the paths it captured under its own checkpoint, what it
//!   captured there; that undo or redo is itself a row, with a checkpoint of its own.
//! - gc deletes the rows of the checkpoints it drops: such a rewind can no longer be undone or
//!   redone, and is not on the stack.
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use rusqlite::{TransactionBehavior, params};

use super::{Result, RewindRow, RewindScope, RewindState, Store, now_ms};

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

    /// Marks row `r` done once every path of its plan is written; for an undo or a redo, the
    /// rewind it undid or redid becomes `undone` or `done` in the same transaction (see the
    /// module doc: a crash never leaves the stack disagreeing with the tree). Its plan is
    /// needed only while it is 'applying' (to finish it after a crash), so it is emptied: it
    /// was most of the database's growth per rewind (1.5 MB for 3,000 paths, as JSON).
    pub fn finish_rewind(&self, r: &RewindRow) -> Result<()> {
        let follows = match r.scope {
            RewindScope::Undo => Some(RewindState::Undone),
            RewindScope::Redo => Some(RewindState::Done),
            RewindScope::Scope(_) => None,
        };
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "UPDATE rewinds SET state = 'done', plan = '' WHERE id = ?1",
                params![r.id],
            )?;
            match follows {
                // Undoing a rewind left unfinished closes it too: no later mount applies it.
                Some(RewindState::Undone) => {
                    tx.execute(
                        "UPDATE rewinds SET state = 'undone', plan = '' WHERE id = ?1",
                        params![r.target],
                    )?;
                }
                Some(state) => {
                    tx.execute(
                        "UPDATE rewinds SET state = ?2 WHERE id = ?1 AND state != 'applying'",
                        params![r.target, state],
                    )?;
                }
                None => {}
            }
            tx.commit()
        })
    }

    fn rewinds_where(&self, filter: &str, state: Option<RewindState>) -> Result<Vec<RewindRow>> {
        self.with(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT id, checkpoint, target, scope, state, plan FROM rewinds {filter} ORDER BY created_at, rowid"
            ))?;
            let row = |r: &rusqlite::Row<'_>| {
                Ok(RewindRow {
                    id: r.get(0)?,
                    checkpoint: r.get(1)?,
                    target: r.get(2)?,
                    scope: r.get(3)?,
                    state: r.get(4)?,
                    plan: r.get(5)?,
                })
            };
            match state {
                Some(s) => st.query_map([s], row)?.collect(),
                None => st.query_map([], row)?.collect(),
            }
        })
    }

    /// Rewinds interrupted by a crash.
    pub fn unfinished_rewinds(&self) -> Result<Vec<RewindRow>> {
        self.rewinds_where("WHERE state = ?1", Some(RewindState::Applying))
    }

    /// Every rewind, undo and redo kept, oldest first (plans of finished ones are empty).
    pub fn rewinds(&self) -> Result<Vec<RewindRow>> {
        self.rewinds_where("", None)
    }

    /// The undo/redo stack as it stands.
    pub fn stack(&self) -> Result<Stack> {
        Ok(Stack::new(self.rewinds()?))
    }
}

/// The undo/redo stack, read off the rows of `rewinds` (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct Stack {
    /// Every row, oldest first.
    rows: Vec<RewindRow>,
}

/// What `undo` or `redo` does next: the rewind it undoes or redoes, and the row it reverts.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The rewind undone or redone (a row of scope `tool`, `agent` or `all`).
    pub rewind: &'a RewindRow,
    /// The row whose result is reverted: for an undo the rewind itself or its newest redo, for
    /// a redo the rewind's newest undo.
    pub reverts: &'a RewindRow,
}

impl Stack {
    /// The stack of these rows, given oldest first.
    pub fn new(rows: Vec<RewindRow>) -> Stack {
        Stack { rows }
    }

    /// Every row, oldest first.
    pub fn rows(&self) -> &[RewindRow] {
        &self.rows
    }

    /// The newest row of `scope` that finished and names rewind `id` (an undo or redo of it).
    fn newest(&self, scope: RewindScope, id: &str) -> Option<(usize, &RewindRow)> {
        self.rows
            .iter()
            .enumerate()
            .rev()
            .find(|(_, r)| r.scope == scope && r.target == id && r.state == RewindState::Done)
    }

    fn is_rewind(r: &RewindRow) -> bool {
        matches!(r.scope, RewindScope::Scope(_))
    }

    /// The rewinds `undo` can undo, newest first: every one still `done`, and one left
    /// `applying` by a failure (a full store) or a crash the next mount could not finish: undo
    /// puts back what of it was applied (all of it was captured under its own checkpoint).
    fn undoable(&self) -> impl Iterator<Item = Step<'_>> {
        self.rows
            .iter()
            .rev()
            .filter(|r| {
                Self::is_rewind(r) && matches!(r.state, RewindState::Done | RewindState::Applying)
            })
            .map(|r| Step {
                rewind: r,
                reverts: self
                    .newest(RewindScope::Redo, &r.id)
                    .map_or(r, |(_, redo)| redo),
            })
    }

    /// The rewinds `redo` can re-apply, next first: each `undone` one whose newest undo is
    /// newer than every rewind, by that undo, newest first.
    fn redoable(&self) -> Vec<Step<'_>> {
        let last_rewind = self.rows.iter().rposition(Self::is_rewind);
        let mut steps: Vec<(usize, Step<'_>)> = self
            .rows
            .iter()
            .filter(|r| Self::is_rewind(r) && r.state == RewindState::Undone)
            .filter_map(|r| {
                let (at, undo) = self.newest(RewindScope::Undo, &r.id)?;
                (Some(at) > last_rewind).then_some((
                    at,
                    Step {
                        rewind: r,
                        reverts: undo,
                    },
                ))
            })
            .collect();
        steps.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        steps.into_iter().map(|(_, s)| s).collect()
    }

    /// What `undo` does next.
    pub fn next_undo(&self) -> Option<Step<'_>> {
        self.undoable().next()
    }

    /// What `redo` does next.
    pub fn next_redo(&self) -> Option<Step<'_>> {
        self.redoable().into_iter().next()
    }

    /// The stack of one session: the rewinds to its checkpoints (`session_of` says which
    /// session a checkpoint uuid belongs to), with their undos and redos. A new rewind of
    /// another session clears nothing this session can redo.
    pub fn of_session(&self, session: &str, session_of: impl Fn(&str) -> Option<String>) -> Stack {
        let mine: std::collections::HashSet<&str> = self
            .rows
            .iter()
            .filter(|r| Self::is_rewind(r) && session_of(&r.target).as_deref() == Some(session))
            .map(|r| r.id.as_str())
            .collect();
        Stack::new(
            self.rows
                .iter()
                .filter(|r| {
                    if Self::is_rewind(r) {
                        mine.contains(r.id.as_str())
                    } else {
                        mine.contains(r.target.as_str())
                    }
                })
                .cloned()
                .collect(),
        )
    }

    /// How many rewinds `undo` can undo, one after another.
    pub fn undo_depth(&self) -> usize {
        self.undoable().count()
    }

    /// How many rewinds `redo` can re-apply, one after another.
    pub fn redo_depth(&self) -> usize {
        self.redoable().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Scope;

    /// A stack driven as the engine drives it: each operation appends its row and finishes it.
    #[derive(Default)]
    struct Sim {
        rows: Vec<RewindRow>,
        n: i64,
    }

    impl Sim {
        fn push(&mut self, scope: RewindScope, target: &str) -> String {
            self.n += 1;
            let id = format!("r{}", self.n);
            self.rows.push(RewindRow {
                id: id.clone(),
                checkpoint: self.n,
                target: target.to_string(),
                scope,
                state: RewindState::Done,
                plan: String::new(),
            });
            let state = match scope {
                RewindScope::Undo => Some(RewindState::Undone),
                RewindScope::Redo => Some(RewindState::Done),
                RewindScope::Scope(_) => None,
            };
            if let Some(state) = state {
                let r = self.rows.iter_mut().find(|r| r.id == target).unwrap();
                r.state = state;
            }
            id
        }
        fn rewind(&mut self) -> String {
            self.push(RewindScope::Scope(Scope::All), "message")
        }
        /// Undoes the next rewind: (rewind undone, row reverted).
        fn undo(&mut self) -> Option<(String, String)> {
            let s = Stack::new(self.rows.clone());
            let step = s.next_undo()?;
            let got = (step.rewind.id.clone(), step.reverts.id.clone());
            self.push(RewindScope::Undo, &got.0);
            Some(got)
        }
        fn redo(&mut self) -> Option<(String, String)> {
            let s = Stack::new(self.rows.clone());
            let step = s.next_redo()?;
            let got = (step.rewind.id.clone(), step.reverts.id.clone());
            self.push(RewindScope::Redo, &got.0);
            Some(got)
        }
        fn depths(&self) -> (usize, usize) {
            let s = Stack::new(self.rows.clone());
            (s.undo_depth(), s.redo_depth())
        }
    }

    fn pair(a: &str, b: &str) -> Option<(String, String)> {
        Some((a.to_string(), b.to_string()))
    }

    #[test]
    fn undo_goes_back_rewind_by_rewind_and_redo_forward_in_order() {
        let mut s = Sim::default();
        let r1 = s.rewind();
        let r2 = s.rewind();
        assert_eq!(s.depths(), (2, 0));
        assert_eq!(s.undo(), pair(&r2, &r2));
        assert_eq!(s.undo(), pair(&r1, &r1));
        assert_eq!(s.undo(), None, "back at the first");
        assert_eq!(s.depths(), (0, 2));
        // Redo reverts the undo of each, the first rewind first.
        assert_eq!(s.redo(), pair(&r1, "r4"));
        assert_eq!(s.redo(), pair(&r2, "r3"));
        assert_eq!(s.redo(), None);
        // Undo now reverts the redo, the row that last applied the rewind's result.
        assert_eq!(s.undo(), pair(&r2, "r6"));
        assert_eq!(s.redo(), pair(&r2, "r7"));
        assert_eq!(s.depths(), (2, 0));
    }

    #[test]
    fn a_new_rewind_clears_the_redo_stack() {
        let mut s = Sim::default();
        let r1 = s.rewind();
        let r2 = s.rewind();
        s.undo();
        assert_eq!(s.depths(), (1, 1));
        let r3 = s.rewind();
        assert_eq!(s.depths(), (2, 0), "{r2} can no longer be redone");
        assert_eq!(s.redo(), None);
        assert_eq!(s.undo(), pair(&r3, &r3));
        assert_eq!(s.undo(), pair(&r1, &r1), "the cleared one is skipped");
        assert_eq!(s.redo(), pair(&r1, "r6"));
        assert_eq!(s.redo(), pair(&r3, "r5"));
        assert_eq!(s.redo(), None, "{r2} stays cleared");
    }

    /// A rewind gc dropped is gone from the stack; one a failure or crash left unfinished is
    /// undone like a finished one (issue 29: a full store left one `applying` that nothing could
    /// undo), and cannot be redone until it was.
    #[test]
    fn a_rewind_gc_dropped_is_not_on_the_stack_and_one_left_unfinished_can_be_undone() {
        let mut s = Sim::default();
        s.rewind();
        let r2 = s.rewind();
        s.rows.remove(0); // gc dropped r1's checkpoint
        s.rows[0].state = RewindState::Applying;
        assert_eq!(s.depths(), (1, 0));
        assert_eq!(s.redo(), None, "{r2} was never undone");
        assert_eq!(s.undo(), pair(&r2, &r2), "{r2} is left unfinished");
        assert_eq!(s.undo(), None);
    }
}
