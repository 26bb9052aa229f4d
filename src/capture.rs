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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use rustix::fs::{OFlags, Stat};

use crate::store::gc::{Policy, Report};
use crate::store::{Actor, Kind, LogEntry, PreImage, Store, now_ms};
use crate::sys;

/// What kind of change is about to happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write,
    Truncate,
    Create,
    Mkdir,
    Symlink,
    Link,
    Unlink,
    Rmdir,
    Rename,
    /// `RENAME_EXCHANGE`: both paths swap.
    Exchange,
    Chmod,
    Chown,
    Utimes,
    Setxattr,
    Fallocate,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Truncate => "truncate",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Symlink => "symlink",
            Op::Link => "link",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Exchange => "exchange",
            Op::Chmod => "chmod",
            Op::Chown => "chown",
            Op::Utimes => "utimes",
            Op::Setxattr => "setxattr",
            Op::Fallocate => "fallocate",
        }
    }
}

/// One change: the operation, its path and (for rename and link) the second path.
///
/// For `Rename`, `path` is the source and `path2` the target; for `Link`, `path` is the new
/// name and `path2` the existing one.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub op: Op,
    pub path: &'a Path,
    pub path2: Option<&'a Path>,
    /// Other names of the same file (hard links) whose content the change also changes.
    pub aliases: &'a [PathBuf],
    /// The change takes away the only name of the regular file at its target (`path` of an
    /// unlink, `path2` of a rename over it) and nobody has that file open for writing: its
    /// pre-image may be kept by hard-linking the file into the store instead of copying it.
    pub last_name: bool,
    /// For a write, truncate or hole punch: the bytes it overwrites, `(offset, length)` (the
    /// length may run past the end of the file). `None`: the whole content, or for changes
    /// of metadata, none of it.
    pub range: Option<(u64, u64)>,
    /// The file at `path`, open (the node's fd), for a change to its content: the pre-image is
    /// read from it, with no lookup of the path and no fd of the file closed. (Closing any fd of
    /// a file truncated and written again makes ext4 write its data out, and the next truncate
    /// waits for that write: a capture that opened and closed the file put a disk write on
    /// every truncating edit after a boundary.)
    pub file: Option<BorrowedFd<'a>>,
    /// With `last_name`: the stat the caller has just taken of the file that loses its name
    /// (an adoption's link is checked against it; `None`: the store stats the file itself).
    pub gone: Option<&'a Stat>,
}

/// Which bytes of a file's content a change is about to overwrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// None: the change touches metadata only.
    Meta,
    /// `(offset, length)`.
    Bytes(u64, u64),
    /// All of them (or the file's name goes away).
    All,
}

impl Change<'_> {
    fn need(&self) -> Need {
        match (self.op, self.range) {
            (Op::Chmod | Op::Chown | Op::Utimes | Op::Setxattr, _) => Need::Meta,
            (Op::Write | Op::Truncate | Op::Fallocate, Some((off, len))) => Need::Bytes(off, len),
            _ => Need::All,
        }
    }
}

/// Pages: ranges are saved in whole pages, as the kernel writes them back.
const PAGE: u64 = 4096;

/// Bytes read and stored at once when saving a range.
const RANGE_PIECE: u64 = 16 << 20;

/// Ranges up to this size are kept in the journal record and the database row (no blob file:
/// a small random write then costs a read and an append).
const RANGE_INLINE: u64 = 64 << 10;

/// The default size above which a file's first change in a checkpoint saves only the bytes it
/// overwrites (a range pre-image) instead of a copy of the whole file.
pub const DEFAULT_RANGE_CAPTURE_MIN: u64 = 1 << 20;

/// A partial capture in the current checkpoint, and which of its bytes are saved.
#[derive(Debug)]
struct Partial {
    /// The capture's id.
    id: i64,
    /// The file's size when the capture was taken (bytes past it need no saving).
    size: u64,
    /// Saved byte ranges `[start, end)`, sorted and disjoint.
    covered: Vec<(u64, u64)>,
    /// The file, open for reading the bytes to save (kept for the checkpoint: a random writer
    /// saves a page per write).
    fd: Option<Arc<OwnedFd>>,
}

impl Partial {
    /// The parts of `[a, b)` not yet saved.
    fn gaps(&self, a: u64, b: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut cur = a;
        // Binary search to the first range ending past `a`: a random writer's file collects a
        // range per write, and a scan from the start made each write O(ranges).
        let first = self.covered.partition_point(|&(_, e)| e <= a);
        for &(s, e) in &self.covered[first..] {
            if s >= b {
                break;
            }
            if s > cur {
                out.push((cur, s.min(b)));
            }
            cur = cur.max(e);
            if cur >= b {
                break;
            }
        }
        if cur < b {
            out.push((cur, b));
        }
        out
    }

    /// Marks `[a, b)` saved: merged with the ranges it overlaps or touches, in place (it used
    /// to push and re-sort the whole list, a third of the daemon's time under random writes).
    fn cover(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        let i = self.covered.partition_point(|&(_, e)| e < a);
        let j = self.covered.partition_point(|&(s, _)| s <= b);
        if i == j {
            self.covered.insert(i, (a, b));
            return;
        }
        let merged = (a.min(self.covered[i].0), b.max(self.covered[j - 1].1));
        self.covered.splice(i..j, [merged]);
    }
}

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

/// Reads the current state of `rel` beneath `root`, storing a regular file's content as a blob.
///
/// # Errors
/// I/O errors reading the file or writing the blob (a full store gives `ENOSPC`).
pub fn snapshot(root: BorrowedFd<'_>, rel: &Path, store: &Store) -> io::Result<PreImage> {
    Ok(snapshot_or_adopt(root, rel, store, Adopt::No, None, None)?.0)
}

/// [`snapshot`]; with `adopt`, a regular file about to lose its only name is kept by a hard link
/// where the store allows (the hash of such a blob is returned: it must be unshared if the
/// change fails). `file`: the file at `rel`, open (see [`Change::file`]); `known`: what its
/// stat gave, if the caller has just taken it (through `file` when given).
fn snapshot_or_adopt(
    root: BorrowedFd<'_>,
    rel: &Path,
    store: &Store,
    adopt: Adopt<'_>,
    file: Option<BorrowedFd<'_>>,
    known: Option<io::Result<Stat>>,
) -> io::Result<(PreImage, Option<String>)> {
    if let Adopt::Yes(gone) = adopt {
        // The caller saw a regular file with one name here: keep it by a link, unread.
        if let Some(a) = store.blobs.adopt(root, rel, gone)? {
            return Ok((a.pre_image(), a.linked.then_some(a.hash)));
        }
    }
    let st = match known.unwrap_or_else(|| stat_of(root, rel, file)) {
        Ok(st) => st,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Ok((PreImage::absent(), None));
        }
        Err(e) => return Err(e),
    };
    let base = |kind| PreImage {
        kind,
        blob: None,
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        target: None,
        partial: false,
    };
    Ok((
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {
                // Read without touching its access time: through `file` with O_NOATIME set
                // for the read, or a fresh fd opened so. Through `file` the size is the one
                // just stat'ed; a fresh fd may have found another file by now.
                let size = st.st_size as u64;
                let (hash, size) = match file
                    .and_then(|fd| sys::with_noatime(fd, || store.blobs.put_fd(fd, Some(size))))
                {
                    Some(got) => got?,
                    None => {
                        let fd = sys::open_beneath(
                            root,
                            rel,
                            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOATIME,
                            0,
                        )
                        .or_else(|_| {
                            sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)
                        })?;
                        store.blobs.put_fd(fd.as_fd(), None)?
                    }
                };
                PreImage {
                    blob: Some(hash),
                    size,
                    ..base(Kind::File)
                }
            }
            libc::S_IFDIR => base(Kind::Dir),
            libc::S_IFLNK => {
                let t = sys::readlinkat(root, rel)?;
                PreImage {
                    target: Some(t.as_bytes().to_vec()),
                    ..base(Kind::Symlink)
                }
            }
            _ => PreImage {
                size: st.st_rdev,
                ..base(Kind::Other)
            },
        },
        None,
    ))
}

/// Whether a capture may keep the file by a link (see [`Blobs::adopt`](crate::store::blobs::Blobs::adopt)):
/// `Yes` with the file's stat when the caller has just taken it.
#[derive(Debug, Clone, Copy)]
enum Adopt<'a> {
    No,
    Yes(Option<&'a Stat>),
}

/// The file at `rel` beneath `root`, stat'ed through `file` (its open fd) when given.
fn stat_of(root: BorrowedFd<'_>, rel: &Path, file: Option<BorrowedFd<'_>>) -> io::Result<Stat> {
    file.map_or_else(|| sys::lstat_beneath(root, rel), sys::fstat)
}

/// Whether a name is the temp file of a tool's write-then-rename (`<target>.tmp.<pid>.<ms>`).
pub fn is_tool_temp(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let mut parts = name.rsplitn(4, '.');
    let (Some(ms), Some(pid), Some(tmp), Some(base)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    tmp == "tmp"
        && !base.is_empty()
        && !ms.is_empty()
        && ms.bytes().all(|b| b.is_ascii_digit())
        && pid.bytes().all(|b| b.is_ascii_digit())
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

/// One process as the classifier saw it.
#[derive(Debug, Clone)]
struct ProcInfo {
    actor: Actor,
    comm: String,
    at: Instant,
}

/// Which processes are the agent, and which tool call is running.
#[derive(Debug, Default)]
struct Actors {
    /// Registered agent processes (thread-group ids).
    agents: HashSet<u32>,
    /// Open tool spans: tool_use_id → (tool name, file path).
    spans: HashMap<String, (String, Option<PathBuf>)>,
    /// pid → classification, valid for a short while (pids are reused).
    cache: HashMap<u32, ProcInfo>,
}

/// How long a pid's classification is trusted.
const PROC_CACHE_TTL: Duration = Duration::from_secs(2);

/// `(tgid, ppid, comm)` of a pid (or thread id) from /proc.
fn proc_status(pid: u32) -> Option<(u32, u32, String)> {
    use std::io::Read;
    // Name, Tgid and PPid are among the first lines: one read of 1 KiB (this runs for every
    // new process that changes a file, so no metadata call and no growing reads).
    let mut buf = [0u8; 1024];
    let mut f = std::fs::File::open(format!("/proc/{pid}/status")).ok()?;
    let n = f.read(&mut buf).ok()?;
    let s = String::from_utf8_lossy(&buf[..n]);
    let mut tgid = None;
    let mut ppid = None;
    let mut name = String::new();
    for line in s.lines() {
        if let Some(v) = line.strip_prefix("Tgid:") {
            tgid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("PPid:") {
            ppid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("Name:") {
            name = v.trim().to_string();
        }
    }
    Some((tgid?, ppid?, name))
}

/// The parent pid of a process (for the hook command's agent).
pub fn parent_pid(pid: u32) -> Option<u32> {
    proc_status(pid).map(|(_, ppid, _)| ppid)
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
    /// Paths whose pre-image is a hard link to the file itself (adopted), until the change
    /// that removes the file's name has happened → the pending blob key.
    adopted: Mutex<HashMap<Vec<u8>, String>>,
    /// Files larger than this get range pre-images.
    range_capture_min: std::sync::atomic::AtomicU64,
    /// Set (and the flusher woken) when the journal has grown enough to be applied.
    flush_wanted: Mutex<bool>,
    flush_wake: std::sync::Condvar,
    /// A checkpoint dropped a large set of paths: the flusher returns the memory.
    trim_wanted: std::sync::atomic::AtomicBool,
}

/// Paths a checkpoint's set must have held for its end to trim the heap.
const TRIM_AFTER_PATHS: usize = 10_000;

/// Journal records pending (change-log entries and captures) at which the flusher is woken
/// (and at every multiple).
const LOG_FLUSH_AT: usize = 512;
/// Journal records pending at which a change applies them itself (the flusher is behind).
const LOG_FLUSH_INLINE_AT: usize = 64 * 1024;

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
            adopted: Mutex::new(HashMap::new()),
            range_capture_min: std::sync::atomic::AtomicU64::new(DEFAULT_RANGE_CAPTURE_MIN),
            flush_wanted: Mutex::new(false),
            flush_wake: std::sync::Condvar::new(),
            trim_wanted: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Sets the size above which files get range pre-images (`u64::MAX`: never).
    pub fn set_range_capture_min(&self, bytes: u64) {
        self.range_capture_min
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The current checkpoint: (seq, uuid, session).
    pub fn current(&self) -> (i64, String, Option<String>) {
        let s = self.state.lock().unwrap();
        (s.seq, s.uuid.clone(), s.session.clone())
    }

    /// Registered agent pids.
    pub fn agents(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.actors.lock().unwrap().agents.iter().copied().collect();
        v.sort();
        v
    }

    pub fn register_agent(&self, pid: u32) {
        let mut a = self.actors.lock().unwrap();
        a.agents.insert(pid);
        a.cache.clear();
    }

    /// A tool call starts (`pre`) or ends (`post`).
    pub fn tool_span(&self, pre: bool, tool_name: &str, tool_use_id: &str, file: Option<PathBuf>) {
        let mut a = self.actors.lock().unwrap();
        if pre {
            a.spans
                .insert(tool_use_id.to_string(), (tool_name.to_string(), file));
        } else {
            a.spans.remove(tool_use_id);
        }
    }

    /// Classifies the process behind a FUSE request: the agent itself is `tool`, its
    /// descendants `shell`, anyone else `external`. A change to the file of an open tool span
    /// (or to that file's `<target>.tmp.<pid>.<ms>`) is `tool` whenever the process is the agent
    /// or one of its descendants — or no agent is registered — which covers SDKs whose hooks
    /// run in the host process rather than in the CLI.
    fn classify(&self, pid: u32, path: Option<&Path>) -> (Actor, String, Option<String>) {
        let mut a = self.actors.lock().unwrap();
        let span_for_path = path.and_then(|p| {
            a.spans.iter().find_map(|(id, (_, f))| {
                let f = f.as_deref()?;
                let hit = p == f
                    || (is_tool_temp(p)
                        && p.parent() == f.parent()
                        && p.file_name()
                            .and_then(|n| n.to_str())
                            .zip(f.file_name().and_then(|n| n.to_str()))
                            .is_some_and(|(n, t)| n.starts_with(&format!("{t}.tmp."))));
                hit.then(|| id.clone())
            })
        });
        let any_span = if a.spans.len() == 1 {
            a.spans.keys().next().cloned()
        } else {
            None
        };
        let no_agents = a.agents.is_empty();
        let cached = a
            .cache
            .get(&pid)
            .filter(|p| p.at.elapsed() < PROC_CACHE_TTL)
            .cloned();
        let (actor, comm) = match cached {
            Some(p) => (p.actor, p.comm),
            None => {
                let (actor, comm) = Self::process_actor(&a.agents, &a.cache, pid);
                if a.cache.len() > 4096 {
                    a.cache.clear();
                }
                a.cache.insert(
                    pid,
                    ProcInfo {
                        actor,
                        comm: comm.clone(),
                        at: Instant::now(),
                    },
                );
                (actor, comm)
            }
        };
        if let Some(id) = span_for_path.clone() {
            if no_agents || actor != Actor::External {
                return (Actor::Tool, comm, Some(id));
            }
        }
        let span = if actor == Actor::Tool {
            span_for_path.or(any_span)
        } else {
            None
        };
        (actor, comm, span)
    }

    /// The process-tree classification of one pid (a thread id is mapped to its process).
    /// An ancestor already classified settles it: below an agent or a shell process it is
    /// `shell`, below an external one `external`.
    fn process_actor(
        agents: &HashSet<u32>,
        cache: &HashMap<u32, ProcInfo>,
        pid: u32,
    ) -> (Actor, String) {
        if pid == 0 {
            return (Actor::External, String::new());
        }
        let Some((tgid, ppid, comm)) = proc_status(pid) else {
            return (Actor::External, String::new());
        };
        if agents.contains(&tgid) {
            return (Actor::Tool, comm);
        }
        if agents.is_empty() {
            return (Actor::External, comm);
        }
        let mut cur = ppid;
        for _ in 0..64 {
            if cur <= 1 {
                break;
            }
            if agents.contains(&cur) {
                return (Actor::Shell, comm);
            }
            match cache.get(&cur).filter(|p| p.at.elapsed() < PROC_CACHE_TTL) {
                Some(p) if matches!(p.actor, Actor::Tool | Actor::Shell) => {
                    return (Actor::Shell, comm);
                }
                Some(p) if p.actor == Actor::External => return (Actor::External, comm),
                _ => {}
            }
            match proc_status(cur) {
                Some((_, pp, _)) => cur = pp,
                None => break,
            }
        }
        (Actor::External, comm)
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
                if let Some(old) = self.adopted.lock().unwrap().insert(p.to_vec(), key) {
                    self.store.blobs.settle(&old);
                }
            }
            let mut s = self.state.lock().unwrap();
            if s.seq != seq {
                continue; // a boundary passed: capture again for the new checkpoint
            }
            s.seen.insert(p.to_vec(), actor.bit());
            return Ok((seq, Some(id)));
        }
    }

    /// Takes a range pre-image of `p` if it is a regular file larger than the threshold: a
    /// capture with the file's metadata and size, then the bytes `need` overwrites. `None` when
    /// the file gets an ordinary capture. The caller holds the capture lock.
    fn capture_partial(
        &self,
        p: &[u8],
        seq: i64,
        actor: Actor,
        op: Op,
        need: Need,
        st: &Stat,
    ) -> io::Result<Option<i64>> {
        let rel = Path::new(OsStr::from_bytes(p));
        let min = self
            .range_capture_min
            .load(std::sync::atomic::Ordering::Relaxed);
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) <= min {
            return Ok(None);
        }
        let pre = PreImage {
            kind: Kind::File,
            blob: None,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            target: None,
            partial: true,
        };
        let id = self
            .store
            .insert_capture(seq, p, "checkpoint", &pre, actor, op.as_str())
            .map_err(|e| {
                tracing::error!(
                    "refusing {} of {}: its pre-image could not be recorded: {e}",
                    op.as_str(),
                    rel.display()
                );
                io::Error::from(e)
            })?;
        {
            let mut s = self.state.lock().unwrap();
            s.seen.insert(p.to_vec(), actor.bit());
            s.partial.insert(
                p.to_vec(),
                Partial {
                    id,
                    size: pre.size,
                    covered: Vec::new(),
                    fd: None,
                },
            );
        }
        self.save_ranges(p, need, op)?;
        Ok(Some(id))
    }

    /// Saves the bytes of partially captured `p` that `need` overwrites and that are not saved
    /// yet, before the change is applied. The caller holds the capture lock.
    fn save_ranges(&self, p: &[u8], need: Need, op: Op) -> io::Result<()> {
        let rel = Path::new(OsStr::from_bytes(p));
        let (id, gaps, fd) = {
            let s = self.state.lock().unwrap();
            let Some(part) = s.partial.get(p) else {
                return Ok(());
            };
            let (a, b) = match need {
                Need::Meta => return Ok(()),
                Need::All => (0, part.size),
                Need::Bytes(off, len) => (
                    off / PAGE * PAGE,
                    off.saturating_add(len)
                        .div_ceil(PAGE)
                        .saturating_mul(PAGE)
                        .min(part.size),
                ),
            };
            if a >= b {
                return Ok(());
            }
            (part.id, part.gaps(a, b), part.fd.clone())
        };
        let refuse = |e: io::Error| {
            tracing::error!(
                "refusing {} of {}: its overwritten bytes could not be saved: {e}",
                op.as_str(),
                rel.display()
            );
            e
        };
        if !gaps.is_empty() {
            let fd = match fd {
                Some(fd) => fd,
                None => {
                    let fd = Arc::new(
                        sys::open_beneath(self.root(), rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)
                            .map_err(refuse)?,
                    );
                    if let Some(part) = self.state.lock().unwrap().partial.get_mut(p) {
                        part.fd = Some(fd.clone());
                    }
                    fd
                }
            };
            for (a, b) in gaps {
                let mut off = a;
                while off < b {
                    let len = (b - off).min(RANGE_PIECE);
                    let mut buf = vec![0u8; len as usize];
                    let n = sys::pread_full(fd.as_fd(), &mut buf, off).map_err(refuse)?;
                    // Bytes past the end (the file shrank outside this checkpoint's view) are
                    // zeros, as a read of a hole would give.
                    buf[n..].fill(0);
                    let content = if len <= RANGE_INLINE {
                        crate::store::RangeContent::Inline(buf)
                    } else {
                        let (hash, _) = self.store.blobs.put_bytes(&buf).map_err(refuse)?;
                        crate::store::RangeContent::Blob(hash)
                    };
                    let range = crate::store::Range {
                        offset: off,
                        length: len,
                        content,
                    };
                    self.store
                        .insert_range(id, &range)
                        .map_err(|e| refuse(e.into()))?;
                    if let Some(part) = self.state.lock().unwrap().partial.get_mut(p) {
                        part.cover(off, off + len);
                    }
                    off += len;
                }
            }
        }
        if need == Need::All {
            // Every byte is saved: the capture is as good as a full one from here on.
            self.state.lock().unwrap().partial.remove(p);
        }
        Ok(())
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

    /// Captures `p`, which a rewind is about to replace by renaming a file over it: a regular
    /// file with one name is adopted rather than copied. Call [`Recorder::replaced`] once the
    /// rename is done, or [`Recorder::not_replaced`] if it failed.
    pub fn capture_for_replace(&self, p: &Path) -> io::Result<()> {
        let st = sys::lstat_beneath(self.root(), p).ok();
        let adopt = match &st {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink == 1 => {
                Adopt::Yes(Some(st))
            }
            _ => Adopt::No,
        };
        self.ensure_captured(
            &path_key(p),
            Actor::Rewind,
            Op::Rename,
            adopt,
            Need::All,
            None,
        )
        .map(|_| ())
    }

    /// The file [`Recorder::capture_for_replace`] captured has lost its name.
    pub fn replaced(&self, p: &Path) {
        let key = self.adopted.lock().unwrap().remove(&path_key(p));
        if let Some(key) = key {
            self.store.blobs.settle(&key);
        }
    }

    /// Renaming over the file [`Recorder::capture_for_replace`] captured failed: the file lives
    /// on, so an adopted pre-image gets its own copy.
    pub fn not_replaced(&self, p: &Path) {
        self.failed(&Change {
            op: Op::Rename,
            path: p,
            path2: None,
            aliases: &[],
            last_name: true,
            range: None,
            file: None,
            gone: None,
        });
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
            self.trim_wanted
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        s.seen = HashMap::new();
        s.partial = HashMap::new();
        Ok(seq)
    }

    /// Applies the journal (pre-images and change-log entries) every `every`, and at once when
    /// changes ask for it, until `stop` is set (checked at each wake-up). Runs on its own
    /// thread, so SQLite stays off the FUSE request path.
    pub fn run_flusher(&self, every: std::time::Duration, stop: &std::sync::atomic::AtomicBool) {
        loop {
            {
                let wanted = self.flush_wanted.lock().unwrap();
                let (mut wanted, _) = self
                    .flush_wake
                    .wait_timeout_while(wanted, every, |w| !*w)
                    .unwrap();
                *wanted = false;
            }
            self.flush_log();
            if self
                .trim_wanted
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                let t = std::time::Instant::now();
                sys::trim_heap();
                tracing::debug!("heap trimmed in {:?}", t.elapsed());
            }
            if stop.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
        }
    }

    /// Wakes the flusher (see [`Recorder::run_flusher`]).
    pub fn wake_flusher(&self) {
        *self.flush_wanted.lock().unwrap() = true;
        self.flush_wake.notify_one();
    }

    /// Applies the journal — captures and change-log entries — to the database now.
    pub fn flush_log(&self) {
        if let Err(e) = self.store.flush_journal() {
            tracing::error!("capture journal: {e}; its records stay pending");
        }
    }

    fn log_change(&self, pid: u32, change: &Change<'_>) {
        let (actor, comm, span) = self.classify(
            pid,
            Some(
                change
                    .path2
                    .filter(|_| change.op == Op::Rename)
                    .unwrap_or(change.path),
            ),
        );
        let seq = self.state.lock().unwrap().seq;
        let e = LogEntry {
            seq: 0,
            at: now_ms(),
            checkpoint: seq,
            op: change.op.as_str().to_string(),
            path: path_key(change.path),
            path2: change.path2.map(path_key),
            actor: actor.as_str().to_string(),
            pid,
            process: comm,
            tool_use_id: span,
        };
        // Journalled, as pre-images are: a crash of the daemon loses no entry of a change that
        // was done (consecutive writes to one file by one process are one entry).
        let n = match self.store.log_change(e) {
            Ok(n) => n,
            Err(err) => {
                tracing::error!(
                    "change log: {err}; an entry for {} is lost",
                    change.path.display()
                );
                return;
            }
        };
        if n >= LOG_FLUSH_INLINE_AT {
            self.flush_log();
        } else if n % LOG_FLUSH_AT == 0 {
            self.wake_flusher();
        }
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
            // The file's name is gone: the adopted blob is the file's only other name now.
            let key = self
                .adopted
                .lock()
                .unwrap()
                .remove(&path_key(change.path2.unwrap_or(change.path)));
            if let Some(key) = key {
                self.store.blobs.settle(&key);
            }
        }
        self.log_change(pid, change);
    }

    fn failed(&self, change: &Change<'_>) {
        if !change.last_name {
            return;
        }
        let p = path_key(change.path2.unwrap_or(change.path));
        let Some(hash) = self.adopted.lock().unwrap().remove(&p) else {
            return;
        };
        // The file lives on under its name and may change: its pre-image needs its own copy.
        if let Err(e) = self.store.blobs.unshare(&hash) {
            tracing::error!(
                "the pre-image of {} shares its storage with the file and could not be copied: {e}",
                String::from_utf8_lossy(&p)
            );
        }
        // Settled either way: a resolver finding the file still linked copies it itself.
        self.store.blobs.settle(&hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The saved-ranges set against a bitmap: `gaps` gives exactly the unsaved bytes of a
        /// range, in order, and `cover` keeps the list sorted, disjoint and not touching.
        #[test]
        fn saved_ranges_match_a_bitmap(ops in proptest::collection::vec((0u64..64, 0u64..64), 1..40)) {
            let mut p = Partial { id: 0, size: 64, covered: Vec::new(), fd: None };
            let mut saved = [false; 64];
            for (x, y) in ops {
                let (a, b) = (x.min(y), x.max(y));
                let want: Vec<(u64, u64)> = {
                    let mut v: Vec<(u64, u64)> = Vec::new();
                    for i in a..b {
                        if saved[i as usize] {
                            continue;
                        }
                        match v.last_mut() {
                            Some(last) if last.1 == i => last.1 = i + 1,
                            _ => v.push((i, i + 1)),
                        }
                    }
                    v
                };
                proptest::prop_assert_eq!(p.gaps(a, b), want);
                p.cover(a, b);
                for i in a..b {
                    saved[i as usize] = true;
                }
                for w in p.covered.windows(2) {
                    proptest::prop_assert!(w[0].1 < w[1].0, "{:?}", p.covered);
                }
                for &(s, e) in &p.covered {
                    proptest::prop_assert!(s < e && (s..e).all(|i| saved[i as usize]));
                }
                let total: u64 = p.covered.iter().map(|(s, e)| e - s).sum();
                proptest::prop_assert_eq!(total as usize, saved.iter().filter(|&&x| x).count());
            }
        }
    }
}
