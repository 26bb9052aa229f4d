//! A rewind applied through the mount, and what others change meanwhile.
//!
//! A live rewind (undo, redo) changes the tree as any process would, through the mount, so
//! that editors and watchers see its changes (docs/design.md §2, "A rewind is itself a change"). It
//! holds no lock over the tree while it plans and applies; instead [`Recorder::watch`] notes,
//! from the moment planning begins, every path anyone else changes, and the rewind's own
//! requests — recognised by the process that makes them (the daemon's helper, a single
//! thread) — are refused with [`MEANWHILE`] when
//! they would overwrite such a change. The rewind leaves those paths as the other writer made
//! them and reports them (`changedMeanwhile`).
//!
//! Invariants, kept under the lock of `LiveRewind::changed` (a leaf: nothing else is taken while
//! it is held):
//! - a watch starts under the gate taken exclusively, for a moment: every change either
//!   finished before it (and planning sees it) or is noted, in `before`, before it is applied;
//! - a change of another process is noted before it is applied, and the rewind's own change
//!   is checked under the same lock before it is applied; the kernel holds the inode's lock (a
//!   write, truncate or attribute change) or the directory's (a name made, removed or renamed)
//!   across each request, so a change noted after the check cannot land under the rewind's;
//! - the rewind's requests never wait at the gate, and are captured as [`Actor::Rewind`] like
//!   any change, under the rewind's own checkpoint.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::{Change, Op, Recorder};
use crate::locks::{Locked, RwLocked};
use crate::store::Actor;

/// The errno the FUSE core answers a rewind's own request with when the path was changed by
/// someone else since the rewind began: "Operation canceled", which none of the calls a rewind
/// makes returns otherwise (and which the kernel passes through unchanged, unlike `ESTALE`,
/// which makes the VFS retry a lookup, or `ENOSYS`, which it remembers per operation).
pub const MEANWHILE: i32 = libc::ECANCELED;

/// The paths changed by others since a rewind began: path → whether the change was to the
/// namespace (a name made, removed or renamed: what lies beneath it is no longer what the
/// rewind planned against). Ordered, so that what lies beneath a path is one range: a rewind
/// asks for each target, and others may have changed thousands of paths meanwhile (an
/// install running beside it).
#[derive(Debug, Default)]
pub(super) struct Changed(BTreeMap<Vec<u8>, bool>);

impl Changed {
    fn note(&mut self, p: &[u8], names: bool) {
        *self.0.entry(p.to_vec()).or_default() |= names;
    }

    /// Whether a change to `p` could overwrite one of them: `p` itself changed, or a name
    /// above it was made, removed or renamed.
    fn at_or_above(&self, p: &[u8]) -> bool {
        if self.0.contains_key(p) {
            return true;
        }
        crate::wspath::ancestors(p).any(|a| self.0.get(a) == Some(&true))
    }

    /// Whether something beneath `p` changed (removing `p` would take it away).
    fn beneath(&self, p: &[u8]) -> bool {
        let bounds = crate::wspath::beneath_bounds(p);
        let mut keys = self.0.range::<[u8], _>(crate::wspath::as_slices(&bounds));
        keys.next().is_some()
    }
}

/// What the recorder knows of the live rewind in progress: its process and session, and what
/// others changed since it began. One per recorder; every field is set and cleared here, by
/// [`Recorder::watch_for`], [`Watch::apply_here_for`] and their guards.
#[derive(Default)]
pub(super) struct LiveRewind {
    /// The process applying it through the mount (its pid, which is its one thread's id; 0:
    /// none): its requests are the rewind's, which never wait at the gate.
    pid: std::sync::atomic::AtomicU32,
    /// The session that process's rewind is of (`None`: of no session), set with `pid`.
    session: std::sync::Mutex<Option<String>>,
    /// Whether a rewind is watching for changes by others (`changed` is `Some`).
    watching: std::sync::atomic::AtomicBool,
    /// What others changed since the watching rewind began.
    changed: std::sync::Mutex<Option<Changed>>,
}

impl LiveRewind {
    /// Whether a rewind is watching for changes by others.
    pub(super) fn watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }
}

/// A rewind applying through the mount, from its planning to its last change: dropped, it
/// ends (see the module doc).
pub struct Watch<'a> {
    rec: &'a Recorder,
    /// The session the rewind is of (its checkpoint's): its changes are that session's work.
    session: Option<String>,
}

impl Watch<'_> {
    /// Whether someone else changed `p` since the watch began, or something above it in the
    /// namespace — or, with `beneath`, something below it (for a path a rewind removes or
    /// replaces by another kind).
    pub fn changed(&self, p: &[u8], beneath: bool) -> bool {
        let m = self.rec.live.changed.locked();
        m.as_ref()
            .is_some_and(|c| c.at_or_above(p) || (beneath && c.beneath(p)))
    }

    /// How many paths others changed since the watch began.
    pub fn count(&self) -> usize {
        let m = self.rec.live.changed.locked();
        m.as_ref().map_or(0, |c| c.0.len())
    }

    /// Makes the single-threaded process `pid` the rewind's: its requests through the mount
    /// are the rewind's own (see the module doc) until the guard is dropped.
    pub fn apply_here_for(&self, pid: u32) -> Rewinder<'_> {
        *self.rec.live.session.locked() = self.session.clone();
        self.rec.live.pid.store(pid, Ordering::Release);
        Rewinder { rec: self.rec }
    }
}

/// The process a rewind applies from (see [`Watch::apply_here_for`]); dropped, its requests
/// are an ordinary process's again (a process id is soon another's).
pub struct Rewinder<'a> {
    rec: &'a Recorder,
}

impl Drop for Rewinder<'_> {
    fn drop(&mut self) {
        self.rec.live.pid.store(0, Ordering::Release);
        *self.rec.live.session.locked() = None;
    }
}

impl Drop for Watch<'_> {
    // The rewinder is reset by its own guard, which borrows the watch and so is gone already.
    fn drop(&mut self) {
        self.rec.live.watching.store(false, Ordering::Release);
        *self.rec.live.changed.locked() = None;
    }
}

impl Recorder {
    /// Begins watching for changes by others, for a rewind about to plan, then to apply
    /// through the mount from the process [`Watch::apply_here_for`] names (see the module doc).
    /// Waits, at the gate, for the changes in flight to finish.
    pub fn watch(&self) -> Watch<'_> {
        self.watch_for(None)
    }

    /// [`Recorder::watch`], for a rewind of `session`'s checkpoint (or an undo or redo of such
    /// a rewind): what it changes is recorded as that session's work, so another session's
    /// rewind leaves it alone (docs/design.md §3).
    pub fn watch_for(&self, session: Option<&str>) -> Watch<'_> {
        let _all = self.gate.exclusive();
        *self.live.changed.locked() = Some(Changed::default());
        self.live.watching.store(true, Ordering::Release);
        Watch {
            rec: self,
            session: session.map(str::to_string),
        }
    }

    /// Whether a request from `pid` is the rewind's own.
    pub(super) fn is_rewinder(&self, pid: u32) -> bool {
        pid != 0 && pid == self.live.pid.load(Ordering::Acquire)
    }

    /// Before another process's change, while a rewind is watching: notes what it changes.
    /// The caller holds the gate (shared) until the change is done.
    pub(super) fn note_meanwhile(&self, change: &Change<'_>) {
        if !self.live.watching() {
            return;
        }
        let names = matches!(
            change.op,
            Op::Create
                | Op::Mkdir
                | Op::Symlink
                | Op::Link
                | Op::Unlink
                | Op::Rmdir
                | Op::Rename
                | Op::Exchange
        );
        let mut m = self.live.changed.locked();
        let Some(c) = m.as_mut() else { return };
        c.note(change.path.as_bytes(), names);
        if let Some(p2) = change.path2 {
            c.note(p2.as_bytes(), names);
        }
        for a in change.aliases {
            c.note(a.as_bytes(), false);
        }
    }

    /// Before the rewind's own change: refused with [`MEANWHILE`] if someone else changed what
    /// it would change since the rewind began.
    pub(super) fn check_own(&self, change: &Change<'_>) -> std::io::Result<()> {
        let m = self.live.changed.locked();
        let Some(c) = m.as_ref() else { return Ok(()) };
        let hit = c.at_or_above(change.path.as_bytes())
            || change.path2.is_some_and(|p| c.at_or_above(p.as_bytes()));
        if hit {
            return Err(std::io::Error::from_raw_os_error(MEANWHILE));
        }
        Ok(())
    }

    /// Who the rewind's own requests are: rewindfs, for the session the rewind is of.
    pub(super) fn rewind_actor(&self) -> super::actors::Who {
        super::actors::Who {
            actor: Actor::Rewind,
            comm: "rewindfs".into(),
            span: None,
            session: self.live.session.locked().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Changed;

    #[test]
    fn a_change_counts_at_its_path_and_a_change_of_names_for_all_beneath() {
        let mut c = Changed::default();
        c.note(b"src/a.txt", false);
        c.note(b"lib", true);
        c.note(b"doc/x/y", false);
        assert!(c.at_or_above(b"src/a.txt"));
        assert!(!c.at_or_above(b"src/b.txt"));
        assert!(!c.at_or_above(b"src"), "a file changed, not its directory");
        assert!(
            c.at_or_above(b"lib/deep/f"),
            "beneath a renamed or removed name"
        );
        assert!(!c.at_or_above(b"library"));
        assert!(
            !c.at_or_above(b"doc/x/y/z"),
            "a content change has nothing beneath"
        );
        assert!(c.beneath(b"doc"));
        assert!(!c.beneath(b"do"));
        assert!(!c.beneath(b"doc/x/y"));
        assert!(c.beneath(b""), "everything lies beneath the root");
    }
}
