//! "Before this change": find the actor, capture the pre-image once per (checkpoint, path).
//!
//! The FUSE core calls [`Observer::before`] with the workspace-relative path(s) a change is
//! about to touch and applies the change only if it returns `Ok`; the returned [`Permit`] is
//! held until the change is done, so a rewind, which takes the gate exclusively for a moment to
//! start watching for changes (`meanwhile.rs`), sees every change either finished or noted.
//! Then it calls [`Observer::after`], or [`Observer::failed`] if the change did not happen.
//!
//! Invariants kept by [`Recorder`]:
//! - **write-ahead**: the pre-image's blob and row are committed before `before` returns;
//!   if they cannot be saved the change is refused (its errno, e.g. `ENOSPC`), never applied
//!   unprotected;
//! - **once per (checkpoint, path)**: a path is captured at most once per checkpoint (the
//!   in-memory `seen` map is the "captured?" lookup, so the common case costs no I/O); a large
//!   file's later changes in the checkpoint save only the bytes not saved yet;
//! - **tracked**: a tool's first change to a file in a session records the state just before
//!   it (`tracked`), as the SDK's checkpointing does.
//!
//! # Layout
//! - `mod.rs` — the gate and [`Permit`], the [`Observer`] trait, the [`Recorder`] and how
//!   each kind of change is routed to captures;
//! - `op.rs` — what a change is ([`Op`], [`Change`]) and which bytes it overwrites;
//! - `actors.rs` — who makes it: tool spans and the process tree;
//! - `checkpoint.rs` — the current checkpoint, the once-per-path rule, the boundary, `tracked`;
//! - `snapshot.rs` — whole pre-images;
//! - `adopt.rs` — a file losing its last name kept by a link: the recorder's steps;
//! - `ranges.rs` — range pre-images of large files;
//! - `precapture.rs` — pre-images taken ahead of a live rewind's helper, beside it;
//! - `log.rs` — the change log, buffered, and the flusher thread that writes it;
//! - `meanwhile.rs` — a rewind applying through the mount: its own requests, and the changes
//!   others make meanwhile, which it must not overwrite.
//!
//! # Lock order
//! `gate` → `boundary` → `capture` → `state`. `actors`, `meanwhile` and the change log's locks
//! (`flushing` → `entries`; `flush_wanted` alone) come after these, and no other lock of the
//! recorder is taken while one of them is held.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::locks::{Locked, RwLocked};
use crate::retention::Retention;
use crate::store::gc::Report;
use crate::store::{Actor, Store};
use crate::sys;
use crate::wspath::{Node, WsPath};

mod actors;
mod adopt;
mod checkpoint;
mod log;
mod meanwhile;
mod op;
mod precapture;
mod ranges;
mod snapshot;

use actors::{Actors, Who};
use adopt::Adopt;
use checkpoint::State;
use log::ChangeLog;
pub use meanwhile::{MEANWHILE, Watch};
use op::Need;
pub use op::{Change, Op};
pub use ranges::DEFAULT_RANGE_CAPTURE_MIN;
pub use snapshot::snapshot;

/// Held while a change is applied: a rewind waits for every permit to be dropped.
pub type Permit<'a> = Option<RwLockReadGuard<'a, ()>>;

/// Sees every change before and after it is applied.
pub trait Observer: Send + Sync {
    /// Called before the change is applied; an error refuses the change (its errno goes to
    /// the caller). The permit must be held until the change is done.
    fn before(&self, pid: u32, change: &Change<'_>) -> io::Result<Permit<'_>>;
    /// Called after the change succeeded.
    fn after(&self, pid: u32, change: &Change<'_>);
    /// Called when the change failed after `before` allowed it.
    fn failed(&self, _change: &Change<'_>) {}
    /// Called when the kernel's forgets removed `n` nodes from the file system's table: an
    /// observer with a thread of its own may hand the memory back to the system there.
    fn nodes_removed(&self, _n: usize) {}
}

/// An observer that records nothing: a plain passthrough (the FUSE core's unit tests, and
/// [`bench_observer`]).
#[cfg(any(test, feature = "bench-nocapture"))]
#[derive(Debug, Default)]
pub struct Passthrough;

#[cfg(any(test, feature = "bench-nocapture"))]
impl Observer for Passthrough {
    fn before(&self, _pid: u32, _change: &Change<'_>) -> io::Result<Permit<'_>> {
        Ok(None)
    }
    fn after(&self, _pid: u32, _change: &Change<'_>) {}
}

/// The FUSE core's observer in a build with the feature `bench-nocapture`, made for
/// `scripts/bench.sh`'s `nocapture` peer: with `REWINDFS_BENCH_NOCAPTURE` set, [`Passthrough`],
/// which records nothing, instead of `recorder`. The same core and transport then run with no
/// capture at all, so a benchmark tells what they cost from what capturing adds. Never in a
/// build for use: nothing such a mount changes can be rewound (the daemon says so at mount).
#[cfg(feature = "bench-nocapture")]
pub fn bench_observer(recorder: Arc<dyn Observer>) -> Arc<dyn Observer> {
    if std::env::var_os("REWINDFS_BENCH_NOCAPTURE").is_none() {
        return recorder;
    }
    tracing::warn!(
        "REWINDFS_BENCH_NOCAPTURE is set in a bench-nocapture build: this mount records \
         nothing, and nothing changed through it can be rewound"
    );
    Arc::new(Passthrough)
}

/// Records every change: pre-images into the store, entries into the change log.
pub struct Recorder {
    /// The workspace's underlying directory (a dup of the core's root fd).
    root: OwnedFd,
    /// Where pre-images, moves and the change log go.
    store: Arc<Store>,
    /// Current checkpoint and captured paths (see `checkpoint.rs`). Lock order: `gate` →
    /// `capture` → `state`.
    state: Mutex<State>,
    /// Serialises taking pre-images, so two changes to one path cannot both capture.
    capture: Mutex<()>,
    /// Held to begin a checkpoint, and by a rewind while it applies (`checkpoint.rs`,
    /// [`Recorder::begin_rewind`]). After `gate` in the lock order (an import begins a
    /// checkpoint holding the gate); no change takes it, and its holders never take the gate.
    boundary: Mutex<()>,
    /// Changes hold it shared; a rewind holds it exclusively for a moment, to start watching
    /// (`meanwhile.rs`).
    gate: RwLock<()>,
    /// The live rewind in progress, if one is: its process and session, and what others changed
    /// since it began (`meanwhile.rs`).
    live: meanwhile::LiveRewind,
    /// Actor classification (see `actors.rs`).
    actors: Mutex<Actors>,
    /// The change log not yet written and the flusher's signals.
    log: ChangeLog,
    /// Files larger than this get range pre-images (see `ranges.rs`).
    range_capture_min: std::sync::atomic::AtomicU64,
    /// Changes refused since the mount because the store was full (their pre-image could not be
    /// saved), and when the last one was (unix ms): what `status` reports.
    refused_full: std::sync::atomic::AtomicU64,
    last_refused_full: std::sync::atomic::AtomicI64,
}

impl Recorder {
    /// Opens a recorder, beginning the mount's implicit checkpoint.
    ///
    /// # Errors
    /// Store errors.
    pub fn new(root: BorrowedFd<'_>, store: Arc<Store>) -> io::Result<Recorder> {
        let uuid = uuid::Uuid::new_v4().to_string();
        let seq = store.begin_checkpoint(&uuid, None, crate::store::CheckpointKind::Mount)?;
        Self::at(root, store, seq, uuid)
    }

    /// A recorder over a workspace nothing is mounted on, to look at its history (`rewindfs
    /// ui` without a daemon): it begins no checkpoint (the last one stays current) and sees
    /// no change, so it records none.
    ///
    /// # Errors
    /// Store errors; a store without a checkpoint.
    pub fn reading(root: BorrowedFd<'_>, store: Arc<Store>) -> io::Result<Recorder> {
        let last = store.last_checkpoint()?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the store has no checkpoint yet")
        })?;
        Self::at(root, store, last.seq, last.uuid)
    }

    fn at(root: BorrowedFd<'_>, store: Arc<Store>, seq: i64, uuid: String) -> io::Result<Recorder> {
        let root = crate::sys::dup_cloexec(root)?;
        Ok(Recorder {
            root,
            store,
            state: Mutex::new(State::new(seq, uuid)),
            capture: Mutex::new(()),
            boundary: Mutex::new(()),
            gate: RwLock::new(()),
            live: meanwhile::LiveRewind::default(),
            actors: Mutex::new(Actors::default()),
            log: ChangeLog::default(),
            range_capture_min: std::sync::atomic::AtomicU64::new(DEFAULT_RANGE_CAPTURE_MIN),
            refused_full: std::sync::atomic::AtomicU64::new(0),
            last_refused_full: std::sync::atomic::AtomicI64::new(0),
        })
    }

    /// Changes refused because the store was full, since the mount, and when the last one was
    /// (unix ms; 0: never).
    pub fn refused_full(&self) -> (u64, i64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.refused_full.load(Relaxed),
            self.last_refused_full.load(Relaxed),
        )
    }

    /// Counts a change refused for a full store (its pre-image could not be saved).
    fn note_refused(&self, r: io::Result<()>) -> io::Result<()> {
        if let Err(e) = &r {
            if crate::sys::errno_of(e) == libc::ENOSPC {
                use std::sync::atomic::Ordering::Relaxed;
                self.refused_full.fetch_add(1, Relaxed);
                self.last_refused_full
                    .store(crate::store::now_ms(), Relaxed);
            }
        }
        r
    }

    /// The workspace's underlying directory, which every path of a change is relative to.
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Runs a retention pass (see [`crate::store::gc`]): never the current checkpoint; the
    /// current session and `live` (the other sessions still at work) stay rewindable. Captures
    /// go on meanwhile: the pass takes the capture lock only to remove blob files, a batch at
    /// a time (no change waits for the whole pass).
    ///
    /// # Errors
    /// Store errors.
    pub fn gc(&self, policy: &Retention, full: bool, live: &[String]) -> io::Result<Report> {
        let (seq, session) = {
            let s = self.state.locked();
            (s.seq, s.session.clone())
        };
        let others: Vec<&str> = live
            .iter()
            .map(String::as_str)
            .filter(|s| Some(*s) != session.as_deref())
            .collect();
        Ok(self.store.gc(
            policy,
            seq,
            session.as_deref(),
            &others,
            full,
            Some(&self.capture),
        )?)
    }

    /// Removes the blob files among `hashes` that no capture names (see
    /// [`Store::discard_unreferenced`]), taking the capture lock a batch at a time.
    ///
    /// # Errors
    /// Store errors.
    pub fn discard_unreferenced(&self, hashes: &[crate::store::BlobRef]) -> io::Result<u64> {
        if hashes.is_empty() {
            return Ok(0);
        }
        Ok(self
            .store
            .discard_unreferenced(hashes, Some(&self.capture))?)
    }

    /// Takes the gate exclusively: no change by anyone runs until the guard is dropped (fork
    /// and export read the present under it, import writes rows a capture would race). Not for
    /// rewinds, which apply through the mount under a watch instead (`meanwhile.rs`).
    pub fn exclusive(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.gate.exclusive()
    }

    /// The lock a capture holds while it stores a blob and records it: removing blob files
    /// that no row names takes it (see [`crate::store::gc::Capture`]).
    pub fn capture_lock(&self) -> &Mutex<()> {
        &self.capture
    }
}

impl Observer for Recorder {
    fn before(&self, pid: u32, change: &Change<'_>) -> io::Result<Permit<'_>> {
        if self.is_rewinder(pid) {
            // The rewind's own change, through the mount: never held at the gate, refused if
            // someone else changed the path since the rewind began (see `meanwhile.rs`).
            self.check_own(change)?;
            let who = self.rewind_actor();
            self.note_refused(match change.op {
                Op::Rename | Op::Exchange => self.before_move(change, &who),
                _ => self.before_change(change, &who),
            })?;
            return Ok(None);
        }
        let permit = self.gate.shared();
        self.note_meanwhile(change);
        // For a rename, the file that matters for tool spans is the target.
        let subject = match change.path2 {
            Some(p2) if change.op == Op::Rename => p2.as_bytes(),
            _ => change.path.as_bytes(),
        };
        let who = self.classify(pid, Some(subject));
        self.note_refused(match change.op {
            Op::Rename | Op::Exchange => self.before_move(change, &who),
            _ => self.before_change(change, &who),
        })?;
        Ok(Some(permit))
    }

    fn after(&self, pid: u32, change: &Change<'_>) {
        if change.last_name {
            self.settle_adopted(
                change
                    .path2
                    .map_or(change.path.as_bytes(), WsPath::as_bytes),
            );
        }
        self.log_change(pid, change);
    }

    fn nodes_removed(&self, n: usize) {
        self.log.nodes_removed(n);
    }

    fn failed(&self, change: &Change<'_>) {
        if change.last_name {
            self.unshare_adopted(
                change
                    .path2
                    .map_or(change.path.as_bytes(), WsPath::as_bytes),
            );
        }
    }
}

impl Recorder {
    /// Before a rename or exchange: captures both names (adopting the file a rename takes the
    /// last name of), records a directory's move, and tracks a tool's change.
    fn before_move(&self, change: &Change<'_>, who: &Who) -> io::Result<()> {
        let (op, actor) = (change.op, who.actor);
        // Neither side of a rename is ever the workspace root (the kernel refuses to move it).
        let (Some(src), Some(dst)) = (change.path.path(), change.path2) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let (seq, _) = self.ensure_captured(change.path, actor, op, Adopt::No, Need::All, None)?;
        let adopt = if change.last_name && op == Op::Rename {
            Adopt::Yes(change.gone)
        } else {
            Adopt::No
        };
        let dst_node = Node::from(dst.clone());
        let (seq2, fresh) = self.ensure_captured(&dst_node, actor, op, adopt, Need::All, None)?;
        let is_dir = |p: &WsPath| {
            sys::lstat_at(self.root(), p.as_path())
                .is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
        };
        // Looked at here, not taken from the caller's stat: either name may have been replaced
        // since (also by a rewind's own request, which does not wait at the gate).
        if is_dir(src) || is_dir(dst) {
            // Written before the rename: a rewind maps paths beneath it through this.
            self.store
                .insert_move(seq, src, dst, op == Op::Exchange, actor)?;
            self.forget_beneath(src, dst);
        }
        if actor == Actor::Tool {
            let session = who.session.as_deref();
            self.track(session, dst, seq2, fresh, op)?;
            if op == Op::Exchange {
                self.track(session, src, seq, None, op)?;
            }
        }
        Ok(())
    }

    /// Before any other change: captures the other names of the file whose content changes,
    /// then the path itself (adopting the file an unlink takes the last name of, or only the
    /// bytes a write overwrites), and tracks a tool's change.
    fn before_change(&self, change: &Change<'_>, who: &Who) -> io::Result<()> {
        let (op, actor) = (change.op, who.actor);
        let need = change.need();
        for alias in change.aliases {
            let alias = Node::from(alias.clone());
            self.ensure_captured(&alias, actor, op, Adopt::No, need, None)?;
        }
        let adopt = if change.last_name && op == Op::Unlink {
            Adopt::Yes(change.gone)
        } else {
            Adopt::No
        };
        let (seq, fresh) =
            self.ensure_captured(change.path, actor, op, adopt, need, change.file)?;
        // The root is never a tracked file (the SDK tracks the files its tools write).
        if let Some(p) = change
            .path
            .path()
            .filter(|_| actor == Actor::Tool && op != Op::Mkdir)
        {
            self.track(who.session.as_deref(), p, seq, fresh, op)?;
        }
        Ok(())
    }
}
