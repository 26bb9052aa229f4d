//! Rewind: plan (dry run) and apply a rewind, undo the last one, diff, and finish one a crash
//! interrupted.
//!
//! # Layout
//! - `mod.rs`: the public types and the engine's entry points (`rewind`, `undo`, `gc`) with
//!   the locking around them;
//! - `history.rs`: the history of a path through captures and renames (what it was at a
//!   checkpoint);
//! - `patched.rs`: completing a range pre-image (the range-chain reader);
//! - `filter.rs`: which paths a request names;
//! - `plan.rs`: planning — which paths change, and to what;
//! - `apply.rs`: applying a plan to the tree;
//! - `recovery.rs`: the journalled apply, and finishing it after a crash;
//! - `diff.rs`: the diff text and the line counts;
//! - `past.rs`: looking at the tree as it was when a checkpoint began, without rewinding
//!   (`show`, `ls`, `diff A B`), by the same lineage and chain reader a rewind uses;
//! - `fork.rs`: that tree written into a new directory, and the diff from it to a fork;
//! - `carry.rs`: export a run of checkpoints as a bundle, import one.
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
//! in the middle is finished at the next mount. Files are written beside and exchanged with
//! the current ones (atomic per file); writers through the mount are held off for the whole
//! rewind.
//!
//! # Invariants
//! - One rewind, undo, diff, dry run or gc pass at a time (`Engine::apply`): a plan names
//!   blobs that gc, and the end of another plan, must not remove under it.
//! - A real rewind or undo flushes the kernel's dirty data, then plans and applies under the
//!   capture gate ([`Recorder::exclusive`]), so the present it planned against is the one it
//!   changes. The kernel hears of the replaced paths before changes resume and drops its
//!   caches of them after ([`KernelCache`]).
//! - The blobs a plan put together are removed when it is done — applied, failed, or read by
//!   a dry run or diff — unless a capture or an unfinished rewind's plan names them
//!   (`Engine::discard`).

mod apply;
mod carry;
mod diff;
mod filter;
mod fork;
mod history;
mod past;
mod patched;
mod plan;
mod recovery;

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use self::carry::{Selection, import_origin};
pub use self::diff::FileStat;
use self::filter::Filter;
pub use self::fork::ForkReport;
pub use self::past::{DiffOut, Entry, Shown, Want};
use crate::capture::Recorder;
use crate::store::{Actor, Kind, PreImage, Store};

/// Which paths a rewind restores (design.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Files a tool (Write/Edit/NotebookEdit) changed in the session: the SDK's behaviour.
    Tool,
    /// Everything the agent did (tool and shell).
    Agent,
    /// Everything changed through the mount.
    All,
}

impl Scope {
    /// The scope named on the wire (`tool`, `agent`, `all`).
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "tool" => Some(Scope::Tool),
            "agent" => Some(Scope::Agent),
            "all" => Some(Scope::All),
            _ => None,
        }
    }

    /// The scope's name on the wire and in the rewind journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Tool => "tool",
            Scope::Agent => "agent",
            Scope::All => "all",
        }
    }

    /// Actor bits whose changes the scope restores (for agent/all).
    fn inside(self) -> u8 {
        match self {
            Scope::Tool => Actor::Tool.bit(),
            Scope::Agent => Actor::Tool.bit() | Actor::Shell.bit() | Actor::Rewind.bit(),
            Scope::All => 0xff,
        }
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
        RewindError::Failed(e.to_string())
    }
}

impl From<crate::store::StoreError> for RewindError {
    fn from(e: crate::store::StoreError) -> Self {
        RewindError::Failed(e.to_string())
    }
}

/// A rewind request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The checkpoint: the UUID of the user message it began with.
    pub user_message_id: String,
    /// Plan and report only; change nothing.
    pub dry_run: bool,
    /// Which paths to restore.
    pub scope: Scope,
    /// Rewind an `agent` scope over paths someone else also changed (otherwise refused).
    pub force: bool,
    /// Restrict to these paths or globs (workspace-relative).
    pub paths: Vec<String>,
    /// If given, the checkpoint must belong to this session.
    pub session_id: Option<String>,
}

/// One path a rewind changes, with its target state.
///
/// A plan is journalled as these, serialized (the `plan` of a rewind's row): the field names
/// are an on-disk format. Recovery reads a plan written by an earlier run, and gc reads the
/// `blob` of each target to keep an unfinished plan's blobs — rename a field and both break.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// Workspace-relative path, as bytes.
    pub path: Vec<u8>,
    /// What it should be ([`Kind::as_str`]): absent, file, dir, symlink or other.
    pub kind: String,
    /// A file's content; always set for a file (the empty blob for an empty one).
    pub blob: Option<String>,
    /// `st_mode`, type bits included (`mknod` needs them; a chmod takes the low 12 bits).
    pub mode: u32,
    /// Owner, restored only when the daemon runs as root.
    pub uid: u32,
    /// Group, restored only when the daemon runs as root.
    pub gid: u32,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
    /// A special file's device number.
    pub rdev: u64,
}

impl Target {
    /// The target that gives `path` the state `pre` (a special file keeps its device number
    /// in the pre-image's `size`).
    fn new(path: &Path, pre: &PreImage) -> Target {
        Target {
            path: path.as_os_str().as_bytes().to_vec(),
            kind: pre.kind.as_str().to_string(),
            blob: pre.blob.clone(),
            mode: pre.mode,
            uid: pre.uid,
            gid: pre.gid,
            target: pre.target.clone(),
            rdev: if pre.kind == Kind::Other { pre.size } else { 0 },
        }
    }

    /// The path, for the `*at` calls beneath the root fd.
    fn rel(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.path))
    }

    fn kind(&self) -> Kind {
        Kind::parse(&self.kind)
    }
}

/// The outcome of planning (and, for a real rewind, of applying).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Whether the rewind can be done (false: see `error`).
    pub can_rewind: bool,
    /// Why it cannot.
    pub error: Option<String>,
    /// Workspace-relative paths the rewind changes, sorted.
    pub files_changed: Vec<String>,
    /// Lines the rewind adds, current → target (0 for binary content).
    pub insertions: u64,
    /// Lines the rewind removes.
    pub deletions: u64,
    /// Paths changed by the agent and by someone else since the checkpoint, sorted.
    pub conflicts: Vec<String>,
    /// Symlinks the `tool` scope left alone.
    pub skipped_links: u64,
    /// The id of the rewind applied (or, for an undo, undone).
    pub rewind_id: Option<String>,
    /// What the rewind sets each changed path to, in path order.
    pub targets: Vec<Target>,
}

/// The kernel side of a rewind: flush what the kernel still holds, and invalidate what it
/// caches for the paths a rewind changed. Implemented by the daemon on top of the FUSE session.
pub trait KernelCache: Send + Sync {
    /// Writes back dirty data (mmap pages) so it reaches the daemon now.
    fn flush(&self);
    /// The files at these workspace-relative paths were replaced or removed (called before
    /// changes resume): whatever still stands for the old files must not change them.
    fn replaced(&self, _paths: &[PathBuf]) {}
    /// Drops the kernel's entries, attributes and pages for these workspace-relative paths.
    fn invalidate(&self, paths: &[PathBuf]);
}

/// No kernel to talk to (tests of the engine on a plain directory).
pub struct NoKernel;

impl KernelCache for NoKernel {
    fn flush(&self) {}
    fn invalidate(&self, _paths: &[PathBuf]) {}
}

/// Plans and applies rewinds.
pub struct Engine {
    /// Captures what a rewind overwrites, and holds the gate that stops changes meanwhile.
    pub recorder: Arc<Recorder>,
    /// Checkpoints, captures, the rewind journal and the blobs.
    pub store: Arc<Store>,
    /// The kernel's caches, flushed before a rewind and invalidated after.
    pub kernel: Arc<dyn KernelCache>,
    /// One rewind at a time (also a dry run, a diff, a gc pass); first in the lock order,
    /// before the capture gate.
    apply: Mutex<()>,
    /// Blobs the current plan put together (see [`Engine::discard`]); used under `apply`.
    scratch: Mutex<Vec<String>>,
}

impl Engine {
    /// An engine over the recorder and store of one mount.
    pub fn new(recorder: Arc<Recorder>, store: Arc<Store>, kernel: Arc<dyn KernelCache>) -> Engine {
        Engine {
            recorder,
            store,
            kernel,
            apply: Mutex::new(()),
            scratch: Mutex::default(),
        }
    }

    /// The workspace's root fd, which every path is resolved beneath.
    fn root(&self) -> BorrowedFd<'_> {
        self.recorder.root()
    }

    /// Plans (and unless `dry_run`, applies) a rewind.
    ///
    /// # Errors
    /// [`RewindError::NoCheckpoint`] for an unknown uuid; `Failed` for anything else. A dry
    /// run reports "cannot rewind" in the outcome instead of failing where it can.
    pub fn rewind(&self, req: &Request) -> Result<Outcome, RewindError> {
        // Dry runs too: what a plan puts together is removed once it is done (see `discard`).
        let _one = self.apply.lock().unwrap_or_else(|p| p.into_inner());
        let (uuid, cp, filter) = self.checked(req)?;
        if req.dry_run {
            // Data the kernel still holds counts as the present.
            self.kernel.flush();
            let out = self.plan(cp.seq, cp.session_id.as_deref(), req, &filter);
            self.discard();
            return out;
        }
        let t0 = std::time::Instant::now();
        self.kernel.flush();
        let changed;
        let (t1, t2, t3);
        let outcome = {
            let _gate = self.recorder.exclusive();
            t1 = t0.elapsed();
            let planned = self.plan(cp.seq, cp.session_id.as_deref(), req, &filter);
            t2 = t0.elapsed();
            let mut out = match planned {
                Ok(out) if out.can_rewind => out,
                Ok(out) => {
                    self.discard();
                    return Err(RewindError::Failed(
                        out.error.unwrap_or_else(|| "cannot rewind".into()),
                    ));
                }
                Err(e) => {
                    self.discard();
                    return Err(e);
                }
            };
            let id = uuid::Uuid::new_v4().to_string();
            // A failed one stays 'applying', and `discard` keeps what its plan names.
            let applied = self.apply_targets(&id, &uuid, req.scope.as_str(), &out.targets);
            self.discard();
            applied?;
            changed = out
                .targets
                .iter()
                .map(|t| t.rel().to_path_buf())
                .collect::<Vec<_>>();
            self.kernel.replaced(&changed);
            t3 = t0.elapsed();
            out.rewind_id = Some(id);
            out
        };
        self.kernel.invalidate(&changed);
        tracing::info!(
            "rewind to {uuid}: {} paths in {:?} (flush {t1:?}, plan {:?}, apply {:?}, invalidate {:?})",
            changed.len(),
            t0.elapsed(),
            t2 - t1,
            t3 - t2,
            t0.elapsed() - t3
        );
        Ok(outcome)
    }

    /// The checkpoint a request names, checked (a UUID, known, not dropped, of the session
    /// asked for), with its paths filter.
    fn checked(
        &self,
        req: &Request,
    ) -> Result<(String, crate::store::Checkpoint, Filter), RewindError> {
        let uuid = uuid::Uuid::parse_str(&req.user_message_id)
            .map_err(|_| {
                RewindError::Failed(format!(
                    "user_message_id {:?} is not a UUID",
                    req.user_message_id
                ))
            })?
            .hyphenated()
            .to_string();
        let Some(cp) = self.store.checkpoint(&uuid)? else {
            return Err(RewindError::NoCheckpoint);
        };
        if let Some((at, why)) = self.store.dropped(cp.seq)? {
            return Err(RewindError::Dropped {
                at: crate::control::rfc3339(at),
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

    /// Removes the blob files the plans since the last call put together (a file completed
    /// from a chain of range pre-images, a moved file's content) that no capture names and no
    /// unfinished rewind's plan names: nothing needs them once the rewind is applied (or has
    /// failed, leaving its plan for the next mount), or the dry run or diff has read them. A
    /// crash before that leaves them to the next gc's sweep. The caller holds `apply`.
    fn discard(&self) {
        let hashes = std::mem::take(&mut *self.scratch.lock().unwrap());
        if let Err(e) = self.recorder.discard_unreferenced(&hashes) {
            tracing::warn!("removing a plan's transient blobs: {e}");
        }
    }

    /// Runs a retention pass, serialised with rewinds (a plan names blobs) and captures.
    ///
    /// # Errors
    /// Store errors.
    pub fn gc(
        &self,
        policy: &crate::store::gc::Policy,
        full: bool,
    ) -> Result<crate::store::gc::Report, RewindError> {
        let _one = self.apply.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.recorder.gc(policy, full)?)
    }

    /// Undoes the last rewind that has not been undone: every path it captured under its own
    /// checkpoint goes back to what it captured.
    ///
    /// # Errors
    /// `Failed` when there is nothing to undo, and for store and file-system errors.
    pub fn undo(&self) -> Result<Outcome, RewindError> {
        let _one = self.apply.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = self.store.last_done_rewind()? else {
            return Err(RewindError::Failed("nothing to undo".into()));
        };
        let cp = self
            .store
            .checkpoint_by_seq(last.checkpoint)?
            .ok_or(RewindError::NoCheckpoint)?;
        let req = Request {
            user_message_id: cp.uuid,
            dry_run: false,
            scope: Scope::All,
            force: true,
            paths: Vec::new(),
            session_id: None,
        };
        // Exactly the paths the rewind touched: its targets, the parents it created and what it
        // removed beneath them — every path it captured under its own checkpoint.
        let touched = self
            .store
            .captures_in(last.checkpoint)?
            .into_iter()
            .filter(|c| c.actor == Actor::Rewind)
            .map(|c| c.path)
            .collect();
        let filter = Filter::exactly(touched);
        self.kernel.flush();
        let (out, changed) = {
            let _gate = self.recorder.exclusive();
            let planned = self.plan(last.checkpoint, None, &req, &filter);
            let mut out = match planned {
                Ok(out) => out,
                Err(e) => {
                    self.discard();
                    return Err(e);
                }
            };
            let id = uuid::Uuid::new_v4().to_string();
            let applied = self.apply_targets(&id, &last.id, "undo", &out.targets);
            self.discard();
            applied?;
            self.store.set_rewind_state(&last.id, "undone")?;
            out.rewind_id = Some(last.id.clone());
            let changed = out
                .targets
                .iter()
                .map(|t| t.rel().to_path_buf())
                .collect::<Vec<_>>();
            self.kernel.replaced(&changed);
            (out, changed)
        };
        self.kernel.invalidate(&changed);
        Ok(out)
    }
}
