//! Undo and redo: the stack of rewinds (docs/design.md §2, "A rewind is itself a change").
//!
//! `undo` undoes the newest rewind not yet undone, again and again back to the first; `redo`
//! re-applies the last one undone, in order, until a new rewind clears what can be redone (the
//! stack is read off the `rewinds` rows: [`crate::store::Stack`]). Either one *reverts a row*:
//! every path that row captured under its own checkpoint goes back to what it captured there —
//! for an undo the row that last applied the rewind's result (the rewind or its newest redo),
//! for a redo the rewind's newest undo. Each undo and redo is applied like a rewind, under a
//! checkpoint of its own, so it can itself be reverted.
//!
//! **Never clobbers.** A path the revert would change that someone other than rewindfs changed
//! since the reverted row (its captures' actors, a removal of a directory beneath which
//! something was made, a directory renamed there) is a *conflict*, as for the `agent` scope:
//! a dry run lists them, and a real undo or redo refuses, changing nothing, unless forced.
//! A forced one captures what it overwrites like any other, so the opposite command gives it
//! back.
//!
//! Invariants:
//! - the same locking as a rewind: one at a time (`Rewinder::apply`), the kernel's dirty data
//!   flushed first, then watched from before it plans and applied through the mount
//!   (`live.rs`): a path someone else changes meanwhile is left as they made it, and reported;
//! - the conflicts are computed against the same present the plan is, and a refusal changes
//!   nothing: no checkpoint, no row, no path.

use std::collections::{BTreeMap, HashSet};

use super::filter::Filter;
use super::history::History;
use super::lifecycle;
use super::one::One;
use super::{Outcome, Request, RewindError, Rewinder, Scope, Target};
use crate::locks::Locked;
use crate::store::{Actor, Kind, RewindRow, RewindScope, Step};
use crate::wspath::beneath;

/// Which way along the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Undo,
    Redo,
}

impl Direction {
    fn verb(self) -> &'static str {
        match self {
            Direction::Undo => "undo",
            Direction::Redo => "redo",
        }
    }
}

/// An undo or redo request.
#[derive(Debug, Clone)]
pub struct StackRequest {
    pub direction: Direction,
    /// Plan and report only; change nothing.
    pub dry_run: bool,
    /// Overwrite what others changed since (otherwise refused).
    pub force: bool,
    /// Only the rewinds to this session's checkpoints: its own stack (`None`: every rewind).
    pub session_id: Option<String>,
}

/// What an undo or redo did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct StackOutcome {
    /// The paths it changes, the lines, `can_rewind` and `error` (a dry run's refusal), and
    /// the conflicts: paths it changes that others changed since (with `force`, overwritten).
    pub outcome: Outcome,
    /// The rewind undone or redone (its id, the uuid of its checkpoint).
    pub rewind: String,
    /// The checkpoint that rewind went back to.
    pub rewound_to: String,
    /// That rewind's scope.
    pub scope: Option<Scope>,
    /// A real undo's or redo's own id (the uuid of its checkpoint).
    pub id: Option<String>,
    /// Who changed each conflicting path since: workspace-relative path → actor names.
    pub conflict_actors: BTreeMap<String, Vec<&'static str>>,
    /// How many rewinds `undo` can undo now, one after another.
    pub undo_depth: usize,
    /// How many `redo` can re-apply now.
    pub redo_depth: usize,
}

impl Rewinder {
    /// The undo/redo stack as it stands (for `list`).
    ///
    /// # Errors
    /// Store errors.
    pub fn stack(&self) -> Result<crate::store::Stack, RewindError> {
        Ok(self.g.store.stack()?)
    }

    /// Undoes the newest rewind not undone, or redoes the last one undone (see the module doc).
    ///
    /// # Errors
    /// [`RewindError::NothingToUndo`] / [`RewindError::NothingToRedo`]; for a real one,
    /// [`RewindError::Conflicts`] when others changed what it would change (unless forced),
    /// and `Failed` for store and file-system errors. A dry run reports a refusal in the
    /// outcome instead.
    pub fn undo_redo(&self, req: StackRequest) -> Result<StackOutcome, RewindError> {
        let mut one = self.g.one();
        let all = self.g.store.stack()?;
        let stack = match &req.session_id {
            Some(s) => all.of_session(s, |uuid| {
                self.g
                    .store
                    .checkpoint(uuid)
                    .ok()
                    .flatten()
                    .and_then(|c| c.session_id)
            }),
            None => all.clone(),
        };
        let step = match req.direction {
            Direction::Undo => stack.next_undo(),
            Direction::Redo => stack.next_redo(),
        };
        let Some(Step { rewind, reverts }) = step else {
            return Err(match req.direction {
                Direction::Undo => RewindError::NothingToUndo,
                Direction::Redo => RewindError::NothingToRedo,
            });
        };
        let (rewind, reverts) = (rewind.clone(), reverts.clone());
        // Another session's rewinds, undos and redos since the reverted row (only a session's
        // own stack can leave them newer): what they changed is someone else's work, as a
        // process's would be.
        let mine: HashSet<&str> = stack.rows().iter().map(|r| r.id.as_str()).collect();
        let foreign: HashSet<i64> = all
            .rows()
            .iter()
            .filter(|r| !mine.contains(r.id.as_str()) && r.checkpoint > reverts.checkpoint)
            .map(|r| r.checkpoint)
            .collect();
        let mut done = StackOutcome {
            rewind: rewind.id.clone(),
            rewound_to: rewind.target.clone(),
            scope: match rewind.scope {
                RewindScope::Scope(s) => Some(s),
                _ => None,
            },
            undo_depth: stack.undo_depth(),
            redo_depth: stack.redo_depth(),
            ..StackOutcome::default()
        };
        // Exactly the paths the reverted row touched: its targets, the parents it created, what
        // it removed beneath them, the directories whose modes it set — every path it captured
        // under its own checkpoint.
        let touched = self
            .g
            .store
            .captures_in(reverts.checkpoint)?
            .into_iter()
            .filter(|c| c.actor == Actor::Rewind)
            .map(|c| c.path.into_bytes())
            .collect();
        let filter = Filter::exactly(touched);
        self.g.kernel.flush();
        if req.dry_run {
            let planned = self.revert_plan(&mut one, &reverts, &foreign, &filter, &req, &mut done);
            one.discard();
            done.outcome = planned?;
            return Ok(done);
        }
        // The undo or redo is the work of the session the rewind was of.
        let session = self
            .g
            .store
            .checkpoint(&rewind.target)?
            .and_then(|c| c.session_id);
        let scope = match req.direction {
            Direction::Undo => RewindScope::Undo,
            Direction::Redo => RewindScope::Redo,
        };
        let lived = self.live(
            &mut one,
            session.as_deref(),
            lifecycle::Journal {
                target: &rewind.id,
                scope,
            },
            |one| self.revert_plan(one, &reverts, &foreign, &filter, &req, &mut done),
            RewindError::Conflicts,
        )?;
        let (out, id) = (lived.outcome, lived.id);
        let changed = out.planned.len();
        done.outcome = out;
        done.id = Some(id);
        // An unfinished rewind undone is finished with: `status` no longer names it.
        self.unfinished.locked().retain(|(u, _)| *u != rewind.id);
        let stack = self.g.store.stack()?;
        done.undo_depth = stack.undo_depth();
        done.redo_depth = stack.redo_depth();
        tracing::info!(
            "{} of rewind {}: {changed} paths, {} left as others changed them meanwhile",
            req.direction.verb(),
            done.rewind,
            done.outcome.changed_meanwhile.len()
        );
        Ok(done)
    }

    /// Plans reverting row `reverts` over the paths `filter` names, and refuses (in the
    /// outcome) when others changed any path it would change since that row, unless forced.
    fn revert_plan(
        &self,
        one: &mut One<'_>,
        reverts: &RewindRow,
        foreign: &HashSet<i64>,
        filter: &Filter,
        req: &StackRequest,
        done: &mut StackOutcome,
    ) -> Result<Outcome, RewindError> {
        // The checkpoint named is the reverted row's own (what an error about its content
        // names).
        let cp = self.g.store.checkpoint_by_seq(reverts.checkpoint)?;
        let plan_req = Request {
            user_message_id: cp.map(|c| c.uuid).unwrap_or_default(),
            dry_run: req.dry_run,
            scope: Scope::All,
            force: true,
            paths: Vec::new(),
            session_id: None,
            trust_imported: false,
        };
        let mut out = self.plan(one, reverts.checkpoint, None, &plan_req, filter)?;
        let hist = History::load(&self.g.store, reverts.checkpoint)?;
        done.conflict_actors = changed_by_others(&hist, out.targets(), foreign);
        out.conflicts = done.conflict_actors.keys().cloned().collect();
        if !out.conflicts.is_empty() && !req.force {
            out.can_rewind = false;
            out.error = Some(refusal(req.direction, &done.rewind, &done.conflict_actors));
        } else if let Err(e) = self.check_space(out.targets()) {
            // Room for what it captures, or it does not begin (`space.rs`).
            out.can_rewind = false;
            out.error = Some(e);
        }
        Ok(out)
    }
}

/// The paths among `targets` (or beneath one the revert removes or replaces) that someone
/// other than rewindfs changed since `hist` began, each with who: its captures' actors, and
/// the renames of directories at, above or beneath it. A capture under one of the `foreign`
/// checkpoints (another session's rewinds, undos and redos) counts as `rewind`: that session's
/// work.
fn changed_by_others<'a>(
    hist: &History,
    targets: impl IntoIterator<Item = &'a Target>,
    foreign: &HashSet<i64>,
) -> BTreeMap<String, Vec<&'static str>> {
    let others = !Actor::Rewind.bit();
    // What a path's captures say of who else changed it.
    let bits_of = |caps: &[crate::store::Capture]| {
        caps.iter().fold(0, |a, c| {
            let foreign_rewind = if foreign.contains(&c.checkpoint) {
                Actor::Rewind.bit()
            } else {
                0
            };
            a | (c.actors & others) | foreign_rewind
        })
    };
    let mut found: BTreeMap<String, u8> = BTreeMap::new();
    let mut note = |p: &[u8], bits: u8| {
        *found.entry(crate::wire_path::encode(p)).or_default() |= bits;
    };
    for t in targets {
        let bits = hist
            .by_path
            .get(t.path.as_bytes())
            .map_or(0, |caps| bits_of(caps));
        if bits != 0 {
            note(t.path.as_bytes(), bits);
        }
        // A path that goes or changes kind takes everything beneath it with it.
        if t.kind() != Kind::Dir {
            for (p, caps) in &hist.by_path {
                if beneath(p, &t.path) {
                    let bits = bits_of(caps);
                    if bits != 0 {
                        note(p, bits);
                    }
                }
            }
        }
        for m in hist.moves.iter().filter(|m| m.actor != Actor::Rewind) {
            let related = |d: &[u8]| *d == t.path || beneath(&t.path, d) || beneath(d, &t.path);
            if related(m.src.as_bytes()) || related(m.dst.as_bytes()) {
                note(t.path.as_bytes(), m.actor.bit());
            }
        }
    }
    found
        .into_iter()
        .map(|(p, bits)| {
            let who = [Actor::Tool, Actor::Shell, Actor::External, Actor::Rewind]
                .into_iter()
                .filter(|a| bits & a.bit() != 0)
                .map(Actor::as_str)
                .collect();
            (p, who)
        })
        .collect()
}

/// Why a real undo or redo refused: what changed, by whom, and how to go on — forcing it, and
/// getting back what the forced one overwrites.
fn refusal(
    dir: Direction,
    rewind: &str,
    conflicts: &BTreeMap<String, Vec<&'static str>>,
) -> String {
    const SHOWN: usize = 10;
    let shown: Vec<String> = conflicts
        .iter()
        .take(SHOWN)
        .map(|(p, who)| {
            let who: Vec<&str> = who
                .iter()
                .map(|w| match *w {
                    "rewind" => "another session's rewind",
                    w => w,
                })
                .collect();
            format!("{p} ({})", who.join(", "))
        })
        .collect();
    let more = match conflicts.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more (`conflicts` lists them)"),
    };
    let (verb, other) = match dir {
        Direction::Undo => ("undo", "redo"),
        Direction::Redo => ("redo", "undo"),
    };
    format!(
        "cannot {verb} rewind {rewind}: {} path(s) it would change were changed since by someone \
         other than rewindfs: {}{more}; nothing was changed. To {verb} anyway, overwriting those \
         changes, repeat with --force (on the socket, \"force\": true): the forced {verb} is \
         captured like a rewind, so `rewindfs {other}` right after it gives back what it \
         overwrote, those changes included",
        conflicts.len(),
        shown.join(", ")
    )
}
