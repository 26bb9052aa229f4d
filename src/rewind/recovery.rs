//! The rewind journal: how a rewind survives a crash.
//!
//! A rewind is applied under a checkpoint of its own, so that what it overwrites is captured
//! and it can be undone. Before the tree is touched its plan — the targets, each complete
//! and self-contained — is written to the rewind's row as 'applying'; the row becomes 'done'
//! once every target is in place (an undo's or redo's, together with the state of the rewind it
//! undid or redid: `Store::finish_rewind`). A crash, or a failure part-way (a full disk), leaves it
//! 'applying', and [`Engine::recover`] applies the same plan again at the next mount, before
//! the mount serves.
//!
//! Invariants:
//! - The plan is journalled before the first change to the tree, never after.
//! - A plan can be applied again over a tree it left half done: a path already in its
//!   target state is set to the same state again, a temp file is named after the rewind, so a
//!   second attempt replaces the first one's, and a file restored in place (scope `tool`: not
//!   atomic, possibly left truncated) is written again in full. What a target does is decided
//!   when it is planned and journalled with it (`apply`), so recovery does the same, only
//!   checking again that each in-place path is still safe to touch.
//! - The blobs a plan names outlive it while it is 'applying': `discard` and gc keep them
//!   (gc reads the plan's `blob` fields, see [`Target`]); once it is done they go unless a
//!   capture or another unfinished plan names them.

use super::apply::{Applied, apply_plan};
use super::{Engine, RewindError, Target};
use crate::store::{CheckpointKind, RewindScope, RewindState};

impl Engine {
    /// Applies targets under a new checkpoint of the rewind's own, journalled: `id` names the
    /// rewind, `target_uuid` the checkpoint it goes back to (for an undo, the rewind undone),
    /// `scope` what the journal records.
    pub(super) fn apply_targets(
        &self,
        id: &str,
        target_uuid: &str,
        scope: RewindScope,
        targets: &[Target],
    ) -> Result<Applied, RewindError> {
        let seq = self.recorder.begin(id, None, CheckpointKind::Rewind)?;
        let plan =
            serde_json::to_string(targets).map_err(|e| RewindError::Failed(e.to_string()))?;
        let row = crate::store::RewindRow {
            id: id.to_string(),
            checkpoint: seq,
            target: target_uuid.to_string(),
            scope,
            state: RewindState::Applying,
            plan,
        };
        self.store.insert_rewind(&row)?;
        let applied = apply_plan(&self.recorder, &self.store, targets, id).map_err(|e| {
            RewindError::Failed(format!("rewinding to checkpoint {target_uuid}: {e}"))
        })?;
        // An undo or redo also moves the rewind it undid or redid on the stack.
        self.store.finish_rewind(&row)?;
        Ok(applied)
    }

    /// Finishes rewinds a crash interrupted (called at mount, before serving), and returns
    /// how many.
    ///
    /// # Errors
    /// A plan that does not parse, and store and file-system errors; the rewind stays
    /// 'applying' for the next mount.
    pub fn recover(&self) -> Result<usize, RewindError> {
        let pending = self.store.unfinished_rewinds()?;
        for r in &pending {
            let targets = Target::parse_plan(&r.plan).map_err(|e| {
                RewindError::Failed(format!("the plan of rewind {} does not parse: {e}", r.id))
            })?;
            tracing::warn!(
                "finishing rewind {} interrupted by a crash ({} paths)",
                r.id,
                targets.len()
            );
            apply_plan(&self.recorder, &self.store, &targets, &r.id)?;
            // An undo or redo also moves the rewind it undid or redid on the stack.
            self.store.finish_rewind(r)?;
            // What its plan named, unless another unfinished plan names it too.
            self.scratch
                .lock()
                .unwrap()
                .extend(targets.iter().filter_map(|t| t.blob.clone()));
            self.discard();
        }
        Ok(pending.len())
    }
}
