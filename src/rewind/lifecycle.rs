//! A live rewind, undo or redo, from its first step to its last: the one place its lifecycle
//! is written down and run ([`Rewinder::live`]); a rewind and an undo or redo differ only in
//! how they plan and how a refusal reads.
//!
//! ```text
//!  flush ─► watch ─► plan ─┬─► refused: discard, nothing changed ───────────────► error
//!                          └─► begin + journal ─► helper steps ─► done ─► settle ─► outcome
//!                                                  own / refused / asked     │
//!                                                                            └─ failed: stays
//!                                                                               'applying'
//! ```
//!
//! 1. **flush** (the caller's, before it holds [`One`]): the kernel's dirty data reaches the
//!    daemon, so what it held counts as the present;
//! 2. **watch**: from here on, what anyone else changes is noted (`capture/meanwhile.rs`) and
//!    never overwritten; the rewind's changes are recorded as the work of `session`;
//! 3. **plan**: the caller's plan (a rewind's, with room in the store checked, `space.rs`; an
//!    undo's or redo's revert plan), against the tree as it is once watched;
//! 4. **refused**: a plan that cannot go ahead ends here — nothing changed, the blobs it put
//!    together discarded — with the caller's error;
//! 5. **begin + journal**: the rewind's own checkpoint begins (no other begins until it is
//!    done), and its plan is journalled 'applying', less the paths already changed meanwhile
//!    (`recovery.rs`);
//! 6. **helper steps**: the plan is applied through the mount from the helper process
//!    (`helper.rs`, `live.rs`, `passes.rs`): each step is the rewind's *own* (captured under
//!    its checkpoint as the rewind's), *refused* by the FUSE core because someone else changed
//!    the path meanwhile (left, reported), or *asked* (the helper asks the daemon whether a
//!    path changed);
//! 7. **done**: the journal row is finished; a failure leaves it 'applying', for recovery at
//!    the next mount and for `undo`, which puts back what of it was applied;
//! 8. **settle**: the watch ends, the plan's transient blobs go, and the outcome says what
//!    changed, what was left to others and what was partly restored.

use super::one::One;
use super::{Outcome, RewindError, Rewinder};
use crate::store::RewindScope;

/// What the journal records of a live rewind: the checkpoint it goes back to (for an undo or
/// redo, the rewind it reverts) and its scope.
pub(super) struct Journal<'a> {
    pub(super) target: &'a str,
    pub(super) scope: RewindScope,
}

/// A live rewind done: its outcome (settled), its id, and how long its steps took.
pub(super) struct Lived {
    pub(super) outcome: Outcome,
    pub(super) id: String,
    /// Paths others changed while it planned and applied.
    pub(super) changed_by_others: usize,
    /// Watch, plan, and apply.
    pub(super) took: [std::time::Duration; 3],
}

impl Rewinder {
    /// Runs steps 2–8 of the lifecycle (see the module doc): `plan` makes the plan once
    /// watching, `refused` turns a plan that cannot go ahead into its error.
    ///
    /// # Errors
    /// The plan's error, the refusal, or a failure to apply (the rewind then stays
    /// 'applying').
    pub(super) fn live(
        &self,
        one: &mut One<'_>,
        session: Option<&str>,
        journal: Journal<'_>,
        plan: impl FnOnce(&mut One<'_>) -> Result<Outcome, RewindError>,
        refused: impl FnOnce(String) -> RewindError,
    ) -> Result<Lived, RewindError> {
        let t0 = std::time::Instant::now();
        let watch = self.g.recorder.watch_for(session);
        let watched = t0.elapsed();
        let planned = plan(one);
        let t_plan = t0.elapsed();
        let mut out = match planned {
            Ok(out) if out.can_rewind => out,
            Ok(out) => {
                one.discard();
                return Err(refused(out.error.unwrap_or_else(|| "cannot rewind".into())));
            }
            Err(e) => {
                one.discard();
                return Err(e);
            }
        };
        let id = uuid::Uuid::new_v4().to_string();
        // A failed one stays 'applying', and `discard` keeps what its plan names.
        let applied = self.apply_targets(one, &id, journal.target, journal.scope, &out, &watch);
        let changed_by_others = watch.count();
        drop(watch);
        one.discard();
        out.settle(&applied?);
        let t_apply = t0.elapsed();
        Ok(Lived {
            outcome: out,
            id,
            changed_by_others,
            took: [watched, t_plan - watched, t_apply - t_plan],
        })
    }
}
