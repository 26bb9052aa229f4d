//! Rewind: plan (dry run) and apply a rewind, undo and redo rewinds (a stack), finish one a
//! crash interrupted; and look at the past without rewinding.
//!
//! # Types
//! - [`Rewinder`]: plans and applies rewinds, undoes and redoes them, recovers, runs gc — one
//!   at a time, behind the guard type `One` (`one.rs`);
//! - [`Views`]: looks at the past (`show`, `ls`, `diff A B`, `fork`) and carries history out
//!   and in (`export`, `import`); changes nothing in the workspace;
//! - both work on one `Ground` (the mount's recorder, store, kernel, turns and the lock); the
//!   session and turn bookkeeping is [`Turns`], outside this module.
//!
//! # Layout
//! - `mod.rs`: the public types, `Rewinder::rewind` and `Rewinder::gc`, and what both services
//!   share (`Ground`: the checked checkpoint of a request, the privilege policy);
//! - `one.rs`: one at a time, and what a plan put together;
//! - `history.rs`: the history of a path through captures and renames (what it was at a
//!   checkpoint);
//! - `patched.rs`: completing a range pre-image (the range-chain reader);
//! - `filter.rs`: which paths a request names;
//! - `plan.rs`: planning — which paths change, and to what;
//! - `tool.rs`: scope `tool`, the SDK's own rewind path by path (its answers, its skips, its
//!   test of what differs);
//! - `apply.rs`: applying a plan behind the mount (recovery), and the tool scope's in-place
//!   steps;
//! - `live.rs`: applying a plan through the mount (a live rewind, undo or redo);
//! - `helper.rs`: the helper process a live rewind applies from, and how the daemon talks to
//!   it;
//! - `attrs.rs`: extended attributes — which a rewind restores, and restoring them;
//! - `recovery.rs`: the journalled apply, and finishing it after a crash;
//! - `stack.rs`: undo and redo, and their check for changes made since by others;
//! - `preview.rs`: the diff of what a rewind would change (`rewindfs diff UUID`);
//! - `diff.rs`: the diff text and the line counts (a leaf: reads neither store nor tree);
//! - `past.rs`: looking at the tree as it was when a checkpoint began, without rewinding
//!   (`show`, `ls`, `diff A B`), by the same lineage and chain reader a rewind uses;
//! - `fork.rs`: that tree written into a new directory, and the diff from it to a fork;
//! - `carry.rs`: export a run of checkpoints as a bundle, import one;
//! - `privileges.rs`, `outside.rs`, `space.rs`, `omitted.rs`: what history from elsewhere may
//!   not grant, files written outside the mount, room in the store, what a scope leaves out.
//!
//! **State at a checkpoint.** The state of path `q` when checkpoint `C` began is found by
//! following `q` forward through the events recorded since `C` (captures and directory renames,
//! in the order they happened): the first capture of the path `q` is known by at that point is
//! the answer; a directory rename of an ancestor changes the name it is known by; a rename onto
//! an ancestor means `q` did not exist yet. If no event touches it, `q` is as it is now.
//!
//! **Applying.** Every target is first made self-contained (a pre-image with its content in a
//! blob), journalled as the rewind's plan, and each path's current state is captured under the
//! rewind's own checkpoint before it is overwritten — so a rewind can be undone, and a crash
//! in the middle is finished at the next mount. A live rewind changes the tree *through the
//! mount*, as a process would (`live.rs`), so that editors and watchers see it: a file still
//! there is rewritten in place (same inode), one that is not arrives by a rename, and the FUSE
//! core captures what each step overwrites. Writers are not held off: what someone else
//! changes while the rewind plans and applies is left as they made it, and reported
//! (`changedMeanwhile`). Recovery, before the mount serves, applies behind it (`apply.rs`).
//!
//! # Invariants
//! - One rewind, undo, diff, dry run, look at the past or gc pass at a time (`one.rs`): a
//!   plan names blobs that gc, and the end of another plan, must not remove under it.
//! - A real rewind, undo or redo flushes the kernel's dirty data, then starts watching
//!   (`Recorder::watch`: the gate is taken for a moment, no longer) before it plans, and
//!   applies through the mount; the FUSE core refuses the rewind's step on any path someone
//!   else changed since the watch began, so it never overwrites a change it did not plan
//!   against. No FUSE request waits for a rewind.
//! - Targets changed meanwhile before the plan is journalled are left out of the journalled
//!   plan; recovery leaves alone the paths changed by anyone else since the rewind's checkpoint
//!   began (`recovery.rs`).
//! - The blobs a plan put together are removed when it is done — applied, failed, or read by
//!   a dry run or diff — unless a capture or an unfinished rewind's plan names them
//!   (`One::discard`).

mod apply;
mod attrs;
mod carry;
mod diff;
mod filter;
mod fork;
mod helper;
mod history;
mod lifecycle;
mod live;
mod omitted;
mod one;
mod outside;
mod parallel;
mod passes;
mod past;
mod patched;
mod plan;
#[cfg(test)]
mod plan_tests;
mod preview;
mod privileges;
mod recovery;
mod space;
mod stack;
mod tool;

use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use self::carry::{Selection, import_origin};
pub use self::diff::{DiffOut, FileStat};
use self::filter::Filter;
pub use self::fork::ForkReport;
pub use self::helper::run_helper;
pub use self::omitted::Omitted;
use self::one::{One, OneAtATime};
pub use self::past::{Entry, Shown, Want};
pub use self::privileges::{AttrChange, Withheld};
pub use self::stack::{Direction, StackOutcome, StackRequest};
use crate::capture::Recorder;
use crate::locks::Locked;
pub use crate::store::Scope;
use crate::store::{Actor, Apply, BlobRef, Kind, PreImage, RewindScope, Store};
pub use crate::turns::{
    BeginError, Counts, Current, KernelCache, LiveSession, SESSION_IDLE, Turns,
};
use crate::wspath::WsPath;

/// A blob a plan needs cannot be used (missing, corrupt, unreadable): the plan stops before
/// anything is changed, and says which path, which checkpoint and (in `e`) which blob.
fn unusable(path: &[u8], checkpoint: &str, e: io::Error) -> RewindError {
    RewindError::Failed(format!(
        "{}: its content at checkpoint {checkpoint} cannot be restored: {e}; nothing was changed (`rewindfs fsck` checks the whole store)",
        crate::wire_path::encode(path)
    ))
}

/// A path the store names that is not a path inside the workspace (see [`crate::wspath`]):
/// nothing is planned over it, nothing changed.
fn bad_path(p: &[u8]) -> RewindError {
    let why = WsPath::parse(p.to_vec())
        .err()
        .map_or_else(String::new, |e| format!(" ({e})"));
    RewindError::Failed(format!(
        "the store names {:?} as a path to restore, which is not a path inside the \
         workspace{why}; nothing was changed. rewindfs never records such a path itself: the \
         store was altered (`rewindfs fsck` checks it)",
        crate::wire_path::encode(p)
    ))
}

/// Actor bits whose changes a scope restores (for agent/all).
fn inside(scope: Scope) -> u8 {
    match scope {
        Scope::Tool => Actor::Tool.bit(),
        Scope::Agent => Actor::Tool.bit() | Actor::Shell.bit() | Actor::Rewind.bit(),
        Scope::All => 0xff,
    }
}

/// Why a rewind cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The uuid is not a checkpoint that began (the SDK's own message).
    #[error("No file checkpoint found for this message.")]
    NoCheckpoint,
    /// gc removed the checkpoint's captures: the SDK's message, with the cause.
    #[error("No file checkpoint found for this message. (It was removed by gc at {at}: {why}.)")]
    Dropped {
        /// When gc dropped it (RFC 3339).
        at: String,
        /// The retention rule that dropped it.
        why: String,
    },
    /// `undo` with no rewind left to undo (not a failed rewind: no "Failed to rewind" prefix).
    #[error(
        "there is no rewind to undo: none was made since the store began, each one was undone \
         already, or gc dropped what undoing it needs; `rewindfs list` shows the checkpoints \
         you can rewind to (`rewindfs rewind UUID`)"
    )]
    NothingToUndo,
    /// `redo` with no undone rewind left to redo.
    #[error(
        "there is no rewind to redo: nothing was undone since the last rewind (a new rewind \
         clears what can be redone), or gc dropped what redoing it needs; `rewindfs list` shows \
         the rewinds and what undo or redo does next"
    )]
    NothingToRedo,
    /// An undo or redo refused: someone other than rewindfs changed what it would change (the
    /// message names them, and says how to go on).
    #[error("{0}")]
    Conflicts(String),
    /// A system call failed, in the SDK's `Failed to rewind: <cause>` form; the io error is
    /// kept whole, so its errno reaches the reply (`errno` of the error frame) and the CLI.
    #[error("Failed to rewind: {0}")]
    Io(io::Error),
    /// Anything else, in the SDK's `Failed to rewind: <cause>` form.
    #[error("Failed to rewind: {0}")]
    Failed(String),
    /// A look at the past (`show`, `ls`, `diff`, `fork`) named a uuid that is not a checkpoint
    /// of this store.
    #[error("no checkpoint {0} in this store (`rewindfs list` shows them)")]
    Unknown(String),
    /// The path did not exist when the checkpoint began.
    #[error("{path}: no such file or directory when checkpoint {checkpoint} began")]
    NotThen {
        /// Workspace-relative.
        path: String,
        checkpoint: String,
    },
    /// `ls` of a path that was not a directory when the checkpoint began.
    #[error("{path}: not a directory when checkpoint {checkpoint} began (it was a {kind})")]
    NotADirectory {
        path: String,
        checkpoint: String,
        /// What it was ([`Kind::as_str`]).
        kind: &'static str,
    },
    /// A look at the past, or a fork, that cannot be done, with its cause.
    #[error("{0}")]
    Refused(String),
}

impl From<io::Error> for RewindError {
    fn from(e: io::Error) -> Self {
        RewindError::Io(e)
    }
}

impl RewindError {
    /// The errno of a failed system call, if that is what stopped it.
    pub fn errno(&self) -> Option<i32> {
        match self {
            RewindError::Io(e) => crate::sys::known_errno(e),
            _ => None,
        }
    }

    /// The same error, its message prefixed with `what` (the errno kept).
    fn context(self, what: impl std::fmt::Display) -> RewindError {
        match self {
            RewindError::Io(e) => RewindError::Io(crate::sys::ctx(e, what)),
            RewindError::Failed(m) => RewindError::Failed(format!("{what}: {m}")),
            e => e,
        }
    }
}

impl From<crate::store::StoreError> for RewindError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::BadPath(b) => bad_path(&b.bytes),
            e => RewindError::Failed(e.to_string()),
        }
    }
}

/// A rewind request: the `rewind_files` request of the control protocol, as it comes off
/// the wire (the SDK's own fields, then rewindfs's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The checkpoint: the UUID of the user message it began with (missing: no checkpoint, as
    /// the SDK answers).
    #[serde(default, deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
    /// Plan and report only; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Which paths to restore.
    #[serde(default = "tool_scope")]
    pub scope: Scope,
    /// Rewind an `agent` scope over paths someone else also changed (otherwise refused).
    #[serde(default)]
    pub force: bool,
    /// Restrict to these paths or globs (workspace-relative).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// If given, the checkpoint must belong to this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Apply what history from elsewhere (an import or pull) would grant — set-user/group-ID
    /// bits, file capabilities, `security.*`/`trusted.*` attributes, owners, device nodes —
    /// which is otherwise withheld and reported (`privileges.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_imported: bool,
}

fn tool_scope() -> Scope {
    Scope::Tool
}

impl Request {
    /// A rewind to the checkpoint of `user_message_id` in `scope`, with every other field as
    /// the wire's defaults (applied, not forced, all paths, any session, nothing trusted).
    pub fn to(user_message_id: &str, scope: Scope) -> Request {
        Request {
            user_message_id: user_message_id.to_string(),
            dry_run: false,
            scope,
            force: false,
            paths: Vec::new(),
            session_id: None,
            trust_imported: false,
        }
    }
}

/// One path a rewind changes, with its target state: the store's plan entry (journalled as
/// the rewind's plan before it is applied; see [`PlanTarget`](crate::store::PlanTarget)).
pub use crate::store::PlanTarget as Target;

impl Target {
    /// The target that gives `path` the state `pre` (a special file keeps its device number
    /// in the pre-image's `size`).
    fn new(path: &WsPath, pre: &PreImage) -> Target {
        Target {
            path: path.clone(),
            kind: pre.kind,
            blob: pre.blob.clone(),
            mode: pre.mode,
            uid: pre.uid,
            gid: pre.gid,
            target: pre.target.clone(),
            rdev: if pre.kind == Kind::Other { pre.size } else { 0 },
            apply: Apply::Replace,
            xattrs: pre.xattrs.clone(),
        }
    }

    /// The path, for the `*at` calls beneath the root fd.
    fn rel(&self) -> &Path {
        self.path.as_path()
    }

    fn kind(&self) -> Kind {
        self.kind
    }
}

/// What planning saw differ at a target's path besides its kind, mode and owner (which
/// applying reads again): whether the content and the extended attributes differ. Applying
/// through the mount changes only those parts, as a process would (a mode restored is a chmod,
/// nothing more). Not journalled: recovery sets every part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Differs {
    pub(super) content: bool,
    pub(super) xattrs: bool,
}

impl Default for Differs {
    fn default() -> Self {
        Differs {
            content: true,
            xattrs: true,
        }
    }
}

/// One path a plan changes: its target state, and what planning learned of it. What a live
/// rewind's helper is sent (`helper.rs`); the journal keeps only the targets (recovery sets
/// every part, from the blobs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Planned {
    /// The state the path goes back to.
    pub(super) target: Target,
    /// The lines it adds and removes, current → target (as the SDK counts them).
    #[serde(skip)]
    pub(super) lines: (u64, u64),
    /// What planning saw differ at the path (all of it for scope `tool`, which rewrites every
    /// file it restores).
    #[serde(default)]
    pub(super) differs: Differs,
    /// The target's content as planning read and verified it from its blob, where small
    /// enough: a live rewind's helper writes it instead of reading the blob again (and checks
    /// its hash first). `None`: read from the blob.
    #[serde(default, with = "crate::store::base64::option")]
    pub(super) content: Option<Vec<u8>>,
}

impl Planned {
    /// A target planned with nothing learned besides its lines: everything is set, the content
    /// read from its blob.
    fn whole(target: Target, lines: (u64, u64)) -> Planned {
        Planned {
            target,
            lines,
            differs: Differs::default(),
            content: None,
        }
    }
}

/// The outcome of planning (and, for a real rewind, of applying).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Whether the rewind can be done (false: see `error`).
    pub can_rewind: bool,
    /// Why it cannot.
    pub error: Option<String>,
    /// Workspace-relative paths the rewind changes (a real rewind: changed). Scope `tool`: a
    /// dry run's are the SDK's list, in tracked order (see `tool.rs`); a real rewind's, the
    /// paths it changed, in the order it changed them. Other scopes: sorted.
    pub files_changed: Vec<String>,
    /// Lines the rewind adds to those paths, current → target, counted as the SDK counts
    /// them (binary content too).
    pub insertions: u64,
    /// Lines the rewind removes.
    pub deletions: u64,
    /// Paths changed by the agent and by someone else since the checkpoint, sorted.
    pub conflicts: Vec<String>,
    /// Who else changed each of `conflicts` since the checkpoint (workspace-relative path →
    /// `session <id>` for another session's actors, `external` for anyone else).
    pub conflicts_by: std::collections::BTreeMap<String, Vec<String>>,
    /// Some of `conflicts` are another session's changes: a `tool` rewind refuses over them
    /// unless forced (over an external edit alone it goes ahead, as the SDK does).
    pub(super) other_sessions: bool,
    /// Paths the `tool` scope leaves alone, as the SDK does (a symlink, not a regular file, hard
    /// linked, beneath a symlink or a non-directory); a dry run counts those it would.
    pub skipped_links: u64,
    /// The id of the rewind applied (or, for an undo, undone).
    pub rewind_id: Option<String>,
    /// What the rewind sets each changed path to, with what planning learned of it: in path
    /// order, or (scope `tool`) in tracked order.
    pub(super) planned: Vec<Planned>,
    /// Paths changed since the checkpoint that the scope leaves out.
    pub omitted: Omitted,
    /// Paths a real rewind left as someone else made them while it planned and applied
    /// (workspace-relative, sorted): it did not change them — except those also in
    /// `partially_restored`.
    pub changed_meanwhile: Vec<String>,
    /// Paths a real rewind began to restore and then had to leave because someone else changed
    /// them meanwhile (workspace-relative, sorted): some of its steps are done (content written
    /// in part, the file cut, a directory made or emptied), the rest refused. Each is also in
    /// `files_changed` and in `changed_meanwhile`.
    pub partially_restored: Vec<String>,
    /// What history from elsewhere would have granted at a path and the rewind withholds
    /// (`privileges.rs`), in path order.
    pub withheld: Vec<Withheld>,
    /// What the rewind changes besides content (mode, owner, attributes), per target.
    pub attr_changes: Vec<AttrChange>,
}

impl Outcome {
    /// What the rewind sets each changed path to.
    pub(super) fn targets(&self) -> impl Iterator<Item = &Target> {
        self.planned.iter().map(|p| &p.target)
    }

    /// After a rewind is applied: the paths it changed, their lines, the ones it skipped after
    /// all (scope `tool`: made unsafe by its own earlier steps), and those someone else changed
    /// meanwhile.
    fn settle(&mut self, applied: &apply::Applied) {
        self.files_changed.clear();
        self.insertions = 0;
        self.deletions = 0;
        for Planned {
            target: t,
            lines: (i, d),
            ..
        } in &self.planned
        {
            if applied.untouched.contains(&t.path) {
                continue;
            }
            self.files_changed.push(crate::wire_path::encode(&t.path));
            self.insertions += i;
            self.deletions += d;
        }
        self.skipped_links += applied.skipped.len() as u64;
        self.changed_meanwhile = applied
            .meanwhile
            .iter()
            .map(crate::wire_path::encode)
            .collect();
        self.changed_meanwhile.sort();
        self.partially_restored = applied
            .partial
            .iter()
            .map(crate::wire_path::encode)
            .collect();
        self.partially_restored.sort();
    }
}

/// What the rewinder and the views share: the mount's recorder, store, kernel and turns, where
/// the workspace is, and the one-at-a-time lock (`one.rs`). Internal: the services below are
/// the only way in.
pub(super) struct Ground {
    /// Notes what others change while a rewind runs ([`Recorder::watch`]), begins the rewind's
    /// own checkpoint, and captures what recovery overwrites behind the mount.
    recorder: Arc<Recorder>,
    /// Checkpoints, captures, the rewind journal and the blobs.
    store: Arc<Store>,
    /// The kernel's dirty data, flushed before a rewind plans or a look reads (a rewind
    /// changes the tree through the mount, so the caches follow by themselves).
    kernel: Arc<dyn KernelCache>,
    /// The session and turn bookkeeping: live sessions (gc keeps them), binding prompts.
    turns: Arc<Turns>,
    /// One rewind at a time (also a dry run, a diff, a look at the past, a gc pass), and what
    /// the current plan put together (`one.rs`).
    one: OneAtATime,
    /// The workspace's absolute path (the mount is in place): a live rewind applies through
    /// the mount there, and the tool scope follows an absolute symlink into it as the SDK would
    /// (see `tool.rs`).
    workspace: PathBuf,
    /// The mount's device (major, minor), read once the mount is made: a live rewind's helper
    /// applies only through this file system (see `helper.rs`).
    mount_dev: std::sync::OnceLock<(u32, u32)>,
}

/// Plans and applies rewinds, undoes and redoes them, finishes those a crash interrupted, and
/// runs retention passes: one at a time (`one.rs`).
pub struct Rewinder {
    g: Arc<Ground>,
    /// Rewinds the last recovery could not finish, each with why (`status` names them).
    unfinished: Mutex<Vec<(String, String)>>,
}

/// Looks at the past without rewinding (`show`, `ls`, `diff A B`, `fork` and the diff from a
/// fork), and carries history out of and into the store (`export`, `import`). Changes nothing
/// in the workspace; waits for a rewind in progress (`one.rs`).
pub struct Views {
    g: Arc<Ground>,
}

impl Rewinder {
    /// The rewinder over the recorder and store of one mount of `workspace` (its absolute
    /// path: the mount point).
    pub fn new(
        turns: Arc<Turns>,
        recorder: Arc<Recorder>,
        store: Arc<Store>,
        kernel: Arc<dyn KernelCache>,
        workspace: PathBuf,
    ) -> Rewinder {
        Rewinder {
            g: Arc::new(Ground {
                recorder,
                store,
                kernel,
                turns,
                one: OneAtATime::default(),
                workspace,
                mount_dev: std::sync::OnceLock::new(),
            }),
            unfinished: Mutex::default(),
        }
    }

    /// The views of the same mount's past.
    pub fn views(&self) -> Views {
        Views { g: self.g.clone() }
    }

    /// Rewinds the last recovery could not finish, each with why.
    pub fn unfinished(&self) -> Vec<(String, String)> {
        self.unfinished.locked().clone()
    }

    /// The store's room: bytes free on its filesystem, and the changes refused since the mount
    /// because their pre-image could not be saved (with when the last one was, unix ms).
    pub fn store_room(&self) -> (Option<u64>, u64, i64) {
        let free = crate::sys::open_dir_path(self.g.store.blobs.dir())
            .and_then(|fd| crate::sys::fstatvfs(std::os::fd::AsFd::as_fd(&fd)))
            .ok()
            .map(|v| space::free_blocks(&v).saturating_mul(v.f_frsize));
        let (n, at) = self.g.recorder.refused_full();
        (free, n, at)
    }

    /// The mount is made, on device `dev` (major, minor): live rewinds apply through it.
    pub fn mounted_on(&self, dev: (u32, u32)) {
        let _ = self.g.mount_dev.set(dev);
    }
    /// Plans (and unless `dry_run`, applies) a rewind.
    ///
    /// # Errors
    /// [`RewindError::NoCheckpoint`] for an unknown uuid; `Failed` for anything else. A dry
    /// run reports "cannot rewind" in the outcome instead of failing where it can.
    pub fn rewind(&self, req: &Request) -> Result<Outcome, RewindError> {
        // Dry runs too: what a plan puts together is removed once it is done (see `discard`).
        let mut one = self.g.one();
        let (uuid, cp, filter) = self.g.checked(req)?;
        if req.dry_run {
            // Data the kernel still holds counts as the present.
            self.g.kernel.flush();
            let out = self.plan(&mut one, cp.seq, cp.session_id.as_deref(), req, &filter);
            one.discard();
            let mut out = out?;
            if out.can_rewind {
                if let Err(e) = self.check_space(out.targets()) {
                    out.can_rewind = false;
                    out.error = Some(e);
                }
            }
            out.omitted = self.omitted(cp.seq, cp.session_id.as_deref(), req.scope)?;
            return Ok(out);
        }
        self.g.kernel.flush();
        let session = cp.session_id.as_deref();
        let lived = self.live(
            &mut one,
            session,
            lifecycle::Journal {
                target: &uuid,
                scope: RewindScope::Scope(req.scope),
            },
            |one| {
                let mut out = self.plan(one, cp.seq, session, req, &filter)?;
                // Room for what it captures, or it does not begin (`space.rs`).
                if out.can_rewind {
                    if let Err(e) = self.check_space(out.targets()) {
                        out.can_rewind = false;
                        out.error = Some(e);
                    }
                }
                Ok(out)
            },
            RewindError::Failed,
        )?;
        let mut out = lived.outcome;
        out.rewind_id = Some(lived.id);
        out.omitted = self.omitted(cp.seq, session, req.scope)?;
        let [watch, plan, apply] = lived.took;
        tracing::info!(
            "rewind to {uuid}: {} paths in {:?} (watch {watch:?}, plan {plan:?}, apply {apply:?}); \
             {} left as others changed them meanwhile ({} paths changed by others)",
            out.planned.len(),
            watch + plan + apply,
            out.changed_meanwhile.len(),
            lived.changed_by_others,
        );
        Ok(out)
    }

    /// The content of a target's blob: what a look put together in memory, or the store's
    /// blob, verified.
    fn target_content(&self, one: &One<'_>, b: &BlobRef) -> io::Result<Vec<u8>> {
        match one.looked(b) {
            Some(c) => Ok(c),
            None => self.g.store.blobs.read_verified(b.as_str()),
        }
    }

    /// Runs a retention pass, serialised with rewinds (a plan names blobs) and captures.
    ///
    /// # Errors
    /// Store errors.
    pub fn gc(
        &self,
        policy: &crate::retention::Retention,
        full: bool,
    ) -> Result<crate::store::gc::Report, RewindError> {
        let _one = self.g.one();
        // Every live session stays rewindable to its first message (store/gc.rs says how).
        let live: Vec<String> = self
            .g
            .turns
            .live_sessions()
            .into_iter()
            .filter(|s| s.live)
            .map(|s| s.session_id)
            .collect();
        Ok(self.g.recorder.gc(policy, full, &live)?)
    }
}

impl Ground {
    /// The workspace's root fd, which every path is resolved beneath.
    fn root(&self) -> BorrowedFd<'_> {
        self.recorder.root()
    }

    /// How pre-images from elsewhere are applied here (`privileges.rs`): `trust` as the request
    /// says; a withheld owner falls back to the workspace root's.
    fn policy(&self, trust: bool) -> privileges::Policy {
        let root_owner = crate::sys::fstat(self.root())
            .map(|st| (st.st_uid, st.st_gid))
            .unwrap_or((crate::sys::geteuid(), crate::sys::geteuid()));
        privileges::Policy {
            trust,
            as_root: crate::sys::geteuid() == 0,
            root_owner,
        }
    }

    /// The checkpoint a request names, checked (a UUID, known, not dropped, of the session
    /// asked for), with its paths filter.
    fn checked(
        &self,
        req: &Request,
    ) -> Result<(String, crate::store::Checkpoint, Filter), RewindError> {
        let uuid = crate::store::normalize_message_id(&req.user_message_id);
        let cp = match self.store.checkpoint(&uuid)? {
            Some(cp) => Some(cp),
            // A prompt the plain CLI's hooks began may not be bound to its uuid yet: the
            // transcript may show it by now.
            None if self.turns.bind_from_transcripts() > 0 => self.store.checkpoint(&uuid)?,
            None => None,
        };
        let Some(cp) = cp else {
            return Err(RewindError::NoCheckpoint);
        };
        if let Some((at, why)) = self.store.dropped(cp.seq)? {
            return Err(RewindError::Dropped {
                at: crate::store::rfc3339(at),
                why,
            });
        }
        if let (Some(want), Some(have)) = (&req.session_id, &cp.session_id) {
            if want != have {
                return Err(RewindError::Failed(format!(
                    "checkpoint {uuid} belongs to session {have:?}, not {want:?}"
                )));
            }
        }
        let filter = Filter::new(&req.paths)?;
        Ok((uuid, cp, filter))
    }

    /// Waits for the rewind, look or gc pass in progress, then holds the right to plan,
    /// apply or look (`one.rs`).
    fn one(&self) -> One<'_> {
        self.one.take(&self.recorder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system call's failure keeps its errno through the context a rewind adds, and says
    /// the SDK's prefix once.
    #[test]
    fn a_failed_call_keeps_its_errno_through_the_rewind() {
        for code in [libc::ENOSPC, libc::EACCES, libc::EIO] {
            let e = RewindError::from(io::Error::from_raw_os_error(code))
                .context("rewinding to checkpoint c1")
                .context("the helper");
            assert_eq!(e.errno(), Some(code));
            let said = e.to_string();
            assert!(
                said.starts_with("Failed to rewind: the helper: rewinding to checkpoint c1: "),
                "{said}"
            );
            assert_eq!(said.matches("Failed to rewind").count(), 1, "{said}");
        }
        let other = RewindError::Failed("no".into()).context("x");
        assert_eq!(other.errno(), None);
        assert_eq!(other.to_string(), "Failed to rewind: x: no");
    }
}
