//! The rewind journal: how a rewind survives a crash.
//!
//! A rewind is applied under a checkpoint of its own, so that what it overwrites is captured
//! and it can be undone. Before the tree is touched its plan — the targets, each complete
//! and self-contained — is written to the rewind's row as 'applying'; the row becomes 'done'
//! once every target is in place (an undo's or redo's, together with the state of the rewind it
//! undid or redid: `Store::finish_rewind`). A crash, or a failure part-way (a full disk), leaves it
//! 'applying', and [`Rewinder::recover`] applies the same plan again at the next mount, before
//! the mount serves — behind the mount, as nobody watches it then.
//!
//! Invariants:
//! - The plan is journalled before the first change to the tree, never after. A target someone
//!   else changed while the rewind planned ([`Watch`]) is left out of it: the rewind leaves it
//!   alone, and that change was captured before the rewind's checkpoint began, where recovery
//!   would not see it.
//! - A plan can be applied again over a tree it left half done: a path already in its
//!   target state is set to the same state again, a temp file is named after the rewind, so a
//!   second attempt replaces the first one's, and a file restored in place (not atomic,
//!   possibly left truncated) is written again in full. What a target does is decided when it
//!   is planned and journalled with it (`apply`), so recovery does the same, only checking
//!   again that each in-place path is still safe to touch.
//! - Recovery never overwrites a change made since the rewind began by anyone else — another
//!   process while the mount still served, or a later rewind: such a path (or, for one it
//!   removes or replaces by another kind, something beneath it) is left alone and logged.
//! - The blobs a plan names outlive it while it is 'applying': `discard` and gc keep them
//!   (gc reads the plan's `blob` fields, see [`Target`]); once it is done they go unless a
//!   capture or another unfinished plan names them.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use super::apply::{Applied, apply_plan};
use super::history::History;
use super::one::One;
use super::passes::depth;
use super::{Outcome, Planned, RewindError, Rewinder, Target};
use crate::capture::Watch;
use crate::locks::Locked;
use crate::store::{Actor, Apply, Kind, RewindScope, RewindState};
use crate::wspath::{WsPath, beneath};

impl Rewinder {
    /// Applies a planned rewind through the mount, journalled, under a new checkpoint of the
    /// rewind's own: `id` names the rewind, `target_uuid` the checkpoint it goes back to (for
    /// an undo, the rewind undone), `scope` what the journal records; `watch` was started before
    /// the plan was made, on this thread.
    pub(super) fn apply_targets(
        &self,
        one: &mut One<'_>,
        id: &str,
        target_uuid: &str,
        scope: RewindScope,
        out: &Outcome,
        watch: &Watch<'_>,
    ) -> Result<Applied, RewindError> {
        if let Some(d) = crate::faults::pause_planned() {
            std::thread::sleep(d);
        }
        // No other checkpoint begins until the rewind is applied (`_applying` is held to the
        // end): undo reads what the rewind overwrote from its own checkpoint alone.
        let (seq, _applying) = self.g.recorder.begin_rewind(id)?;
        // Read after the checkpoint began: a change noted later is captured in it.
        let mut applied = Applied::default();
        let mut todo: Vec<&Planned> = Vec::with_capacity(out.planned.len());
        for p in &out.planned {
            let t = &p.target;
            if watch.changed(t.path.as_bytes(), t.kind != Kind::Dir) {
                applied.changed_meanwhile(&t.path);
            } else {
                todo.push(p);
            }
        }
        // The journal keeps the targets alone: recovery sets every part, from the blobs.
        let targets: Vec<&Target> = todo.iter().map(|p| &p.target).collect();
        let plan =
            serde_json::to_string(&targets).map_err(|e| RewindError::Failed(e.to_string()))?;
        let row = crate::store::RewindRow {
            id: id.to_string(),
            checkpoint: seq,
            target: target_uuid.to_string(),
            scope,
            state: RewindState::Applying,
            plan,
        };
        self.g.store.insert_rewind(&row)?;
        if let Some(d) = crate::faults::pause_journalled() {
            std::thread::sleep(d);
        }
        let done = self
            .apply_with_precapture(one, watch, &todo, id)
            .map_err(|e| e.context(format!("rewinding to checkpoint {target_uuid}")))?;
        applied.extend(done);
        // An undo or redo also moves the rewind it undid or redid on the stack.
        self.g.store.finish_rewind(&row)?;
        // Scope `tool`, as the SDK: restores failed and nothing changed is the rewind's failure,
        // in the SDK's words. Nothing is left to finish: the journal row is done, a rewind that
        // changed nothing.
        let changed = targets
            .iter()
            .filter(|t| !applied.untouched.contains(&t.path))
            .count();
        if let Some(e) = applied.nothing_restored(changed) {
            return Err(RewindError::Failed(e));
        }
        Ok(applied)
    }

    /// [`Rewinder::apply_through_mount`], with the pre-images of the files it writes over read
    /// beside it (`capture/precapture.rs`), in the order the helper writes them: by depth
    /// (`live.rs`, pass 3), then the tool scope's in-place targets.
    fn apply_with_precapture(
        &self,
        one: &mut One<'_>,
        watch: &Watch<'_>,
        todo: &[&Planned],
        id: &str,
    ) -> Result<Applied, RewindError> {
        let mut ahead: Vec<&Target> = todo
            .iter()
            .filter(|p| p.target.kind == Kind::File && p.differs.content)
            .map(|p| &p.target)
            .collect();
        ahead.sort_by_key(|t| (t.apply == Apply::InPlace, depth(&t.path)));
        let paths: Vec<&[u8]> = ahead.iter().map(|t| t.path.as_bytes()).collect();
        let stop = AtomicBool::new(false);
        let (done, ahead) = std::thread::scope(|s| {
            let taking = s.spawn(|| self.g.recorder.precapture(watch, &paths, &stop));
            let done = self.apply_through_mount(watch, todo, id);
            stop.store(true, Ordering::Relaxed);
            (done, taking.join().unwrap_or_default())
        });
        let mut unused = ahead.unused;
        let left = self.g.recorder.unprepared();
        tracing::info!(
            "rewind {id}: {} of {} pre-images read ahead of its helper, {} of them not needed",
            ahead.taken,
            paths.len(),
            left.len()
        );
        unused.extend(left);
        one.scratch(unused);
        done
    }

    /// Finishes rewinds a crash or a failure interrupted (called at mount, before serving):
    /// how many were finished, and those that could not be, each with why. One that cannot be
    /// finished (its plan does not parse, the store is full) stays 'applying' for the next
    /// mount, and never keeps this one from serving: `status` names it, and `undo` puts back
    /// what of it was applied.
    ///
    /// # Errors
    /// The store cannot list the unfinished rewinds.
    pub fn recover(&self) -> Result<(usize, Vec<(String, String)>), RewindError> {
        let mut one = self.g.one();
        let pending = self.g.store.unfinished_rewinds()?;
        let mut finished = 0;
        let mut failed = Vec::new();
        for r in &pending {
            match self.finish(&mut one, r) {
                Ok(()) => finished += 1,
                Err(e) => {
                    tracing::error!(
                        "rewind {} was interrupted and cannot be finished now: {e}; it stays \
                         unfinished (`rewindfs undo` puts back what of it was applied; the next \
                         mount tries again)",
                        r.id
                    );
                    failed.push((r.id.clone(), e.to_string()));
                }
            }
        }
        *self.unfinished.locked() = failed.clone();
        Ok((finished, failed))
    }

    /// Finishes one interrupted rewind (see [`Rewinder::recover`]).
    fn finish(&self, one: &mut One<'_>, r: &crate::store::RewindRow) -> Result<(), RewindError> {
        let (targets, bad) = Target::parse_plan(&r.plan).map_err(|e| {
            RewindError::Failed(format!("the plan of rewind {} does not parse: {e}", r.id))
        })?;
        // A journalled plan never names a path outside the workspace (it was checked
        // before it was journalled); one that does was altered, and is left out rather
        // than applied or allowed to stop every later mount.
        for p in bad {
            tracing::error!(
                "rewind {}: its journalled plan names {:?}, which is not a path inside the \
                 workspace: left out",
                r.id,
                crate::wire_path::encode(&p)
            );
        }
        let since = self.changed_since(r.checkpoint, &targets)?;
        tracing::warn!(
            "finishing rewind {} interrupted by a crash ({} paths{})",
            r.id,
            targets.len(),
            if since.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} left as they were changed since it began: {}",
                    since.len(),
                    shown(&since)
                )
            }
        );
        let todo: Vec<Target> = targets
            .iter()
            .filter(|t| !since.contains(&t.path))
            .cloned()
            .collect();
        // Captured under the rewind's own checkpoint, as its live steps were: undo reads
        // only that one.
        let captured = self
            .g
            .store
            .captures_in(r.checkpoint)?
            .into_iter()
            .map(|c| (c.path, c.actors));
        let own = self.g.recorder.recovering(r.checkpoint, captured);
        apply_plan(&self.g.recorder, &self.g.store, &todo, &r.id)?;
        drop(own);
        // An undo or redo also moves the rewind it undid or redid on the stack.
        self.g.store.finish_rewind(r)?;
        // What its plan named, unless another unfinished plan names it too.
        one.scratch(targets.iter().filter_map(|t| t.blob.clone()));
        one.discard();
        Ok(())
    }

    /// The targets of the rewind whose checkpoint is `own` that were changed since it began by
    /// anyone else: another actor (in its checkpoint or later), or a later rewind, undo or redo
    /// (its own checkpoint's captures). Recovery's own captures (actor `rewind`, in the
    /// rewind's own checkpoint) do not count: a recovery cut short is finished by the next.
    fn changed_since(&self, own: i64, targets: &[Target]) -> Result<HashSet<WsPath>, RewindError> {
        let hist = History::load(&self.g.store, own)?;
        let rewinds: HashSet<i64> = self
            .g
            .store
            .rewinds()?
            .into_iter()
            .map(|r| r.checkpoint)
            .filter(|c| *c != own)
            .collect();
        let other = |p: &[u8]| {
            hist.by_path.get(p).is_some_and(|caps| {
                caps.iter().any(|c| {
                    c.actors & !Actor::Rewind.bit() != 0 || rewinds.contains(&c.checkpoint)
                })
            })
        };
        // The paths others changed, ordered: what lies beneath a target is one range of them
        // (a scan of every path for each target is quadratic in a large interrupted rewind).
        let others: BTreeSet<&[u8]> = hist
            .by_path
            .keys()
            .map(Vec::as_slice)
            .filter(|p| other(p))
            .collect();
        let mut out = HashSet::new();
        for t in targets {
            let moved = hist.moves.iter().any(|m| {
                [&m.src, &m.dst]
                    .into_iter()
                    .any(|d| *d == t.path || beneath(&t.path, d) || beneath(d, &t.path))
            });
            let below = t.kind != Kind::Dir && {
                let bounds = crate::wspath::beneath_bounds(t.path.as_bytes());
                let mut keys = others.range::<[u8], _>(crate::wspath::as_slices(&bounds));
                keys.next().is_some()
            };
            if other(t.path.as_bytes()) || moved || below {
                out.insert(t.path.clone());
            }
        }
        Ok(out)
    }
}

/// Up to ten of `paths`, for a log line.
fn shown(paths: &HashSet<WsPath>) -> String {
    let mut v: Vec<String> = paths.iter().map(crate::wire_path::encode).collect();
    v.sort();
    let more = v.len().saturating_sub(10);
    v.truncate(10);
    if more > 0 {
        format!("{} and {more} more", v.join(", "))
    } else {
        v.join(", ")
    }
}
