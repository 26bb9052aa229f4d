//! "Before this change": find the actor, capture the pre-image once per (checkpoint, path).
//!
//! The FUSE core calls [`Observer::before`] with the workspace-relative path(s) a change is
//! about to touch and applies the change only if it returns `Ok`; the returned [`Permit`] is
//! held until the change is done, so a rewind (which takes the gate exclusively) never
//! interleaves with a change.
//!
//! Invariants kept by [`Recorder`]:
//! - **write-ahead**: the pre-image's blob and row are committed before `before` returns;
//!   if they cannot be saved the change is refused (its errno, e.g. `ENOSPC`), never applied
//!   unprotected;
//! - a path is captured at most once per checkpoint (the in-memory `seen` map is the
//!   "captured?" lookup, so the common case costs no I/O);
//! - a tool's first change to a file in a session records the state just before it
//!   (`tracked`), as the SDK's checkpointing does.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::store::gc::{Policy, Report};
use crate::store::{Actor, Store};
use crate::sys;

mod actors;
mod adopt;
mod log;
mod op;
mod ranges;
mod snapshot;

pub use actors::parent_pid;
use actors::{Actors, is_tool_temp};
use adopt::Adopt;
use log::ChangeLog;
use op::Need;
pub use op::{Change, Op};
pub use ranges::DEFAULT_RANGE_CAPTURE_MIN;
use ranges::Partial;
pub use snapshot::snapshot;
use snapshot::{snapshot_or_adopt, stat_of};

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
}

/// An observer that records nothing: a plain passthrough.
#[derive(Debug, Default)]
pub struct Passthrough;

impl Observer for Passthrough {
    fn before(&self, _pid: u32, _change: &Change<'_>) -> io::Result<Permit<'_>> {
        Ok(None)
    }
    fn after(&self, _pid: u32, _change: &Change<'_>) {}
}

/// The bytes a path is stored under.
pub fn path_key(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

/// The current checkpoint and what has been captured in it.
#[derive(Debug)]
struct State {
    /// Sequence number of the current checkpoint.
    seq: i64,
    /// Its uuid.
    uuid: String,
    /// The session of the last `begin_message` (None until the first one).
    session: Option<String>,
    /// Paths captured in the current checkpoint → bit set of the actors that changed them.
    seen: HashMap<Vec<u8>, u8>,
    /// Paths a tool has changed, per session (mirror of the `tracked` table).
    tracked: HashMap<String, HashSet<Vec<u8>>>,
    /// Paths captured partially in the current checkpoint whose bytes are not all saved yet.
    partial: HashMap<Vec<u8>, Partial>,
}

/// Records every change: pre-images into the store, entries into the change log.
pub struct Recorder {
    /// The workspace's underlying directory (a dup of the core's root fd).
    root: OwnedFd,
    pub store: Arc<Store>,
    /// Current checkpoint and captured paths. Lock order: `gate` → `capture` → `state`.
    state: Mutex<State>,
    /// Serialises taking pre-images, so two changes to one path cannot both capture.
    capture: Mutex<()>,
    /// Changes hold it shared; a rewind holds it exclusively.
    gate: RwLock<()>,
    /// Actor classification.
    actors: Mutex<Actors>,
    /// The change log not yet written and the flusher's signals.
    log: ChangeLog,
    /// Paths whose pre-image is a hard link to the file itself (adopted), until the change
    /// that removes the file's name has happened → the pending blob key.
    adopted: Mutex<HashMap<Vec<u8>, String>>,
    /// Files larger than this get range pre-images.
    range_capture_min: std::sync::atomic::AtomicU64,
}

/// Paths a checkpoint's set must have held for its end to trim the heap.
const TRIM_AFTER_PATHS: usize = 10_000;

impl Recorder {
    /// Opens a recorder, beginning the mount's implicit checkpoint.
    ///
    /// # Errors
    /// Store errors.
    pub fn new(root: BorrowedFd<'_>, store: Arc<Store>) -> io::Result<Recorder> {
        let root = rustix::io::fcntl_dupfd_cloexec(root, 3)
            .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
        let uuid = uuid::Uuid::new_v4().to_string();
        let seq = store.begin_checkpoint(&uuid, None, "mount")?;
        Ok(Recorder {
            root,
            store,
            state: Mutex::new(State {
                seq,
                uuid,
                session: None,
                seen: HashMap::new(),
                tracked: HashMap::new(),
                partial: HashMap::new(),
            }),
            capture: Mutex::new(()),
            gate: RwLock::new(()),
            actors: Mutex::new(Actors::default()),
            log: ChangeLog::default(),
            adopted: Mutex::new(HashMap::new()),
            range_capture_min: std::sync::atomic::AtomicU64::new(DEFAULT_RANGE_CAPTURE_MIN),
        })
    }

    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The current checkpoint: (seq, uuid, session).
    pub fn current(&self) -> (i64, String, Option<String>) {
        let s = self.state.lock().unwrap();
        (s.seq, s.uuid.clone(), s.session.clone())
    }

    /// Makes sure `p` has a pre-image in the current checkpoint. Returns the checkpoint seq
    /// and, if this call took the capture, its id.
    fn ensure_captured(
        &self,
        p: &[u8],
        actor: Actor,
        op: Op,
        adopt: Adopt<'_>,
        need: Need,
        file: Option<BorrowedFd<'_>>,
    ) -> io::Result<(i64, Option<i64>)> {
        loop {
            let (seq, bits, partial) = {
                let s = self.state.lock().unwrap();
                (s.seq, s.seen.get(p).copied(), s.partial.contains_key(p))
            };
            if let Some(bits) = bits {
                if bits & actor.bit() == 0 {
                    self.store.add_actor(seq, p, actor.bit())?;
                    if let Some(b) = self.state.lock().unwrap().seen.get_mut(p) {
                        *b |= actor.bit();
                    }
                }
                if partial && need != Need::Meta {
                    let _g = self.capture.lock().unwrap();
                    self.save_ranges(p, need, op)?;
                }
                return Ok((seq, None));
            }
            let _g = self.capture.lock().unwrap();
            {
                let s = self.state.lock().unwrap();
                if s.seq != seq || s.seen.contains_key(p) {
                    continue;
                }
            }
            let rel = Path::new(OsStr::from_bytes(p));
            // Stat'ed once for both kinds of capture (an adopted file is stat'ed by the store).
            let st = matches!(adopt, Adopt::No).then(|| stat_of(self.root(), rel, file));
            if need != Need::All {
                if let Some(Ok(st)) = &st {
                    if let Some(id) = self.capture_partial(p, seq, actor, op, need, st)? {
                        return Ok((seq, Some(id)));
                    }
                }
            }
            let (pre, linked) = snapshot_or_adopt(self.root(), rel, &self.store, adopt, file, st)
                .map_err(|e| {
                tracing::error!(
                    "refusing {} of {}: its pre-image could not be saved: {e}",
                    op.as_str(),
                    rel.display()
                );
                e
            })?;
            let id = self
                .store
                .insert_capture(seq, p, "checkpoint", &pre, actor, op.as_str())
                .map_err(|e| {
                    tracing::error!(
                        "refusing {} of {}: its pre-image could not be recorded: {e}",
                        op.as_str(),
                        rel.display()
                    );
                    if let Some(key) = &linked {
                        self.store.blobs.discard(key);
                    }
                    io::Error::from(e)
                })?;
            if let Some(key) = linked {
                self.remember_adopted(p, key);
            }
            let mut s = self.state.lock().unwrap();
            if s.seq != seq {
                continue; // a boundary passed: capture again for the new checkpoint
            }
            s.seen.insert(p.to_vec(), actor.bit());
            return Ok((seq, Some(id)));
        }
    }

    /// A tool changes `p`: remember the state just before its first tool change in the session.
    fn track(&self, p: &[u8], seq: i64, fresh_capture: Option<i64>, op: Op) -> io::Result<()> {
        let session = {
            let s = self.state.lock().unwrap();
            match &s.session {
                Some(sess) if !s.tracked.get(sess).is_some_and(|t| t.contains(p)) => sess.clone(),
                _ => return Ok(()),
            }
        };
        if is_tool_temp(Path::new(OsStr::from_bytes(p))) {
            return Ok(());
        }
        let id = match fresh_capture {
            Some(id) => id,
            None => {
                // Already changed in this checkpoint by someone else: the state now is what the
                // tool is about to overwrite.
                let _g = self.capture.lock().unwrap();
                let pre = snapshot(self.root(), Path::new(OsStr::from_bytes(p)), &self.store)?;
                self.store
                    .insert_capture(seq, p, "tool", &pre, Actor::Tool, op.as_str())?
            }
        };
        self.store.track(&session, p, seq, id)?;
        self.state
            .lock()
            .unwrap()
            .tracked
            .entry(session)
            .or_default()
            .insert(p.to_vec());
        Ok(())
    }

    /// Captures `p` on behalf of rewindfs itself (a rewind about to write it).
    pub fn capture_for_rewind(&self, p: &Path) -> io::Result<()> {
        self.ensure_captured(
            &path_key(p),
            Actor::Rewind,
            Op::Write,
            Adopt::No,
            Need::All,
            None,
        )
        .map(|_| ())
    }

    /// Runs a retention pass (see [`crate::store::gc`]): never the current checkpoint, and the
    /// current session is live. Holds the capture lock so no blob is written meanwhile.
    ///
    /// # Errors
    /// Store errors.
    pub fn gc(&self, policy: &Policy, full: bool) -> io::Result<Report> {
        let _g = self.capture.lock().unwrap();
        let (seq, session) = {
            let s = self.state.lock().unwrap();
            (s.seq, s.session.clone())
        };
        Ok(self.store.gc(policy, seq, session.as_deref(), full)?)
    }

    /// Removes the blob files among `hashes` that no capture names (see
    /// [`Store::discard_unreferenced`]), under the capture lock.
    ///
    /// # Errors
    /// Store errors.
    pub fn discard_unreferenced(&self, hashes: &[String]) -> io::Result<u64> {
        if hashes.is_empty() {
            return Ok(0);
        }
        // Applied before the lock is taken (hashing what adoptions linked), so that changes
        // wait only for what was journalled since.
        self.store.flush_journal()?;
        let _g = self.capture.lock().unwrap();
        Ok(self.store.discard_unreferenced(hashes)?)
    }

    /// Takes the gate exclusively: no change runs until the guard is dropped.
    pub fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins a checkpoint of kind `kind` (message or rewind). The caller has flushed the
    /// kernel's dirty data first, so it lands in the previous checkpoint.
    pub fn begin(&self, uuid: &str, session: Option<&str>, kind: &str) -> io::Result<i64> {
        // The backlog goes to SQLite before changes are held up: under the capture lock only
        // the checkpoint's own row is written (a boundary used to stall every change for the
        // whole flush, 5-60 ms). Log entries carry their checkpoint, so order is kept anyway.
        self.flush_log();
        let _g = self.capture.lock().unwrap();
        let seq = self.store.begin_checkpoint(uuid, session, kind)?;
        let mut s = self.state.lock().unwrap();
        s.seq = seq;
        s.uuid = uuid.to_string();
        if let Some(sess) = session {
            if s.session.as_deref() != Some(sess) {
                s.session = Some(sess.to_string());
                if !s.tracked.contains_key(sess) {
                    let paths = self
                        .store
                        .tracked(sess)?
                        .into_iter()
                        .map(|t| t.path)
                        .collect();
                    s.tracked.insert(sess.to_string(), paths);
                }
            }
        }
        if s.seen.len() >= TRIM_AFTER_PATHS {
            // Dropping that many paths frees megabytes the allocator would keep; the flusher
            // hands them back (off this thread: trimming a large heap takes milliseconds).
            self.log.want_trim();
        }
        s.seen = HashMap::new();
        s.partial = HashMap::new();
        Ok(seq)
    }
}

impl Observer for Recorder {
    fn before(&self, pid: u32, change: &Change<'_>) -> io::Result<Permit<'_>> {
        let permit = self.gate.read().unwrap_or_else(|p| p.into_inner());
        // For a rename, the file that matters for tool spans is the target.
        let subject = if change.op == Op::Rename {
            change.path2.unwrap_or(change.path)
        } else {
            change.path
        };
        let (actor, _, _) = self.classify(pid, Some(subject));
        let op = change.op;
        let primary = path_key(change.path);
        match op {
            Op::Rename | Op::Exchange => {
                let dst = change.path2.map(path_key).unwrap_or_default();
                let (seq, _) =
                    self.ensure_captured(&primary, actor, op, Adopt::No, Need::All, None)?;
                let adopt = if change.last_name && op == Op::Rename {
                    Adopt::Yes(change.gone)
                } else {
                    Adopt::No
                };
                let (seq2, fresh) =
                    self.ensure_captured(&dst, actor, op, adopt, Need::All, None)?;
                let is_dir = |p: &Path| {
                    sys::lstat_at(self.root(), p)
                        .is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
                };
                // Looked at here, under the gate: a rewind may have replaced either name since
                // the caller's stat.
                if is_dir(change.path) || change.path2.is_some_and(is_dir) {
                    // Written before the rename: a rewind maps paths beneath it through this.
                    self.store
                        .insert_move(seq, &primary, &dst, op == Op::Exchange, actor)?;
                    // Paths beneath either name now hold other files: capture them afresh.
                    let mut s = self.state.lock().unwrap();
                    let under = |k: &Vec<u8>, d: &[u8]| {
                        k.len() > d.len() && k.starts_with(d) && k[d.len()] == b'/'
                    };
                    s.seen.retain(|k, _| !under(k, &primary) && !under(k, &dst));
                    s.partial
                        .retain(|k, _| !under(k, &primary) && !under(k, &dst));
                }
                if actor == Actor::Tool {
                    self.track(&dst, seq2, fresh, op)?;
                    if op == Op::Exchange {
                        self.track(&primary, seq, None, op)?;
                    }
                }
            }
            _ => {
                let need = change.need();
                for alias in change.aliases {
                    self.ensure_captured(&path_key(alias), actor, op, Adopt::No, need, None)?;
                }
                let adopt = if change.last_name && op == Op::Unlink {
                    Adopt::Yes(change.gone)
                } else {
                    Adopt::No
                };
                let (seq, fresh) =
                    self.ensure_captured(&primary, actor, op, adopt, need, change.file)?;
                if actor == Actor::Tool && op != Op::Mkdir {
                    self.track(&primary, seq, fresh, op)?;
                }
            }
        }
        Ok(Some(permit))
    }

    fn after(&self, pid: u32, change: &Change<'_>) {
        if change.last_name {
            self.settle_adopted(&path_key(change.path2.unwrap_or(change.path)));
        }
        self.log_change(pid, change);
    }

    fn failed(&self, change: &Change<'_>) {
        if change.last_name {
            self.unshare_adopted(&path_key(change.path2.unwrap_or(change.path)));
        }
    }
}
