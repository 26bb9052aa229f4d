//! Rewind: plan (dry run) and apply, undo, diff.
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};

use crate::capture::{Recorder, snapshot};
use crate::store::{Actor, Capture, Kind, PreImage, Store};
use crate::sys;

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
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "tool" => Some(Scope::Tool),
            "agent" => Some(Scope::Agent),
            "all" => Some(Scope::All),
            _ => None,
        }
    }
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
    Dropped { at: String, why: String },
    /// Anything else, in the SDK's "Failed to rewind: <cause>" form.
    #[error("Failed to rewind: {0}")]
    Failed(String),
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
    pub user_message_id: String,
    pub dry_run: bool,
    pub scope: Scope,
    pub force: bool,
    /// Restrict to these paths or globs (workspace-relative).
    pub paths: Vec<String>,
    /// If given, the checkpoint must belong to this session.
    pub session_id: Option<String>,
}

/// One path a rewind changes, with its target state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub path: Vec<u8>,
    pub kind: String,
    pub blob: Option<String>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub target: Option<Vec<u8>>,
    pub rdev: u64,
}

impl Target {
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
    pub can_rewind: bool,
    pub error: Option<String>,
    pub files_changed: Vec<String>,
    pub insertions: u64,
    pub deletions: u64,
    pub conflicts: Vec<String>,
    pub skipped_links: u64,
    pub rewind_id: Option<String>,
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
    pub recorder: Arc<Recorder>,
    pub store: Arc<Store>,
    pub kernel: Arc<dyn KernelCache>,
    /// One rewind at a time.
    apply: Mutex<()>,
    /// Blobs the current plan put together (see [`Engine::discard`]); used under `apply`.
    scratch: Mutex<Vec<String>>,
}

fn key(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn under(p: &[u8], dir: &[u8]) -> Option<Vec<u8>> {
    if p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/' {
        Some(p[dir.len()..].to_vec())
    } else {
        None
    }
}

fn rebase(rest: &[u8], onto: &[u8]) -> Vec<u8> {
    let mut v = onto.to_vec();
    v.extend_from_slice(rest);
    v
}

/// What the rewind should make of a path.
enum Lineage {
    Pre(PreImage),
    /// A range pre-image of the file then known by this name: its content is completed from
    /// the path's next recorded state (see [`Engine::materialize`]).
    Partial(Capture, Vec<u8>),
    /// Unchanged since the checkpoint, now found at this path.
    Current(Vec<u8>),
}

impl Lineage {
    fn of(c: &Capture, at: Vec<u8>) -> Lineage {
        if c.pre.partial {
            Lineage::Partial(c.clone(), at)
        } else {
            Lineage::Pre(c.pre.clone())
        }
    }
}

/// Where the bytes a range pre-image did not save come from.
enum Base {
    /// No file: zeros.
    None,
    /// The file as it is now.
    File(std::fs::File),
    /// A blob, verified once read to its end (see [`crate::store::blobs::BlobReader`]).
    Blob(crate::store::blobs::BlobReader),
}

/// One range pre-image in a chain of them (see [`Patched`]): the bytes it saved and the size
/// the file had.
struct Layer {
    ranges: Vec<crate::store::Range>,
    size: u64,
    /// The range last read, with its bytes.
    loaded: Option<(usize, Vec<u8>)>,
}

/// Reads the content of the first of a chain of range pre-images of one file, earliest first,
/// each taken before the next: a byte is the one the earliest layer saved; a layer that did
/// not save it has it from the next layer, or as zero where that is past the next one's size
/// (the file grew in between); after the last layer, from the base (zero past its end). So
/// the chain costs one pass over the file, however many checkpoints it spans.
struct Patched<'a> {
    store: &'a Store,
    layers: Vec<Layer>,
    base: Base,
    pos: u64,
}

impl Patched<'_> {
    /// Copies what range `i` of layer `k` holds from `pos` on, up to `end`.
    fn read_range(&mut self, k: usize, i: usize, end: u64, buf: &mut [u8]) -> io::Result<usize> {
        let layer = &mut self.layers[k];
        let r = &layer.ranges[i];
        if layer.loaded.as_ref().map(|l| l.0) != Some(i) {
            let data = match &r.content {
                crate::store::RangeContent::Blob(h) => self.store.blobs.read_verified(h)?,
                crate::store::RangeContent::Inline(d) => d.clone(),
            };
            if data.len() as u64 != r.length {
                return Err(io::Error::other(format!(
                    "a saved range at {} holds {} bytes, not {}",
                    r.offset,
                    data.len(),
                    r.length
                )));
            }
            layer.loaded = Some((i, data));
        }
        let data = &layer.loaded.as_ref().unwrap().1;
        let at = (self.pos - r.offset) as usize;
        let n = ((end - self.pos) as usize).min(data.len() - at);
        buf[..n].copy_from_slice(&data[at..at + n]);
        if at + n == data.len() {
            // Reads only go forward: a range read to its end is not needed again (a range
            // can be 16 MiB, and a chain can have a layer per checkpoint).
            layer.loaded = None;
        }
        Ok(n)
    }

    /// Reads from the base at `pos`, up to `end`; zero past its end.
    fn read_base(&mut self, end: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = (end - self.pos) as usize;
        let got = match &mut self.base {
            Base::File(f) => {
                use std::os::unix::fs::FileExt;
                let mut k = 0;
                while k < n {
                    match f.read_at(&mut buf[k..n], self.pos + k as u64) {
                        Ok(0) => break,
                        Ok(m) => k += m,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                k
            }
            Base::Blob(b) => {
                let mut k = 0;
                while k < n {
                    match b.read_at(&mut buf[k..n], self.pos + k as u64)? {
                        0 => break,
                        m => k += m,
                    }
                }
                k
            }
            Base::None => 0,
        };
        buf[got..n].fill(0);
        Ok(n)
    }
}

impl io::Read for Patched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = self.layers.first().map_or(0, |l| l.size);
        if self.pos >= size || buf.is_empty() {
            if let Base::Blob(b) = &mut self.base {
                // Not a byte of it is used unless all of it hashes to its name.
                b.finish()?;
            }
            return Ok(0);
        }
        // This read stops before the first place where the layer that answers changes.
        let mut end = self.pos + (buf.len() as u64).min(size - self.pos);
        let mut answer = None; // Some(Some((layer, range))), or Some(None) for zeros
        for k in 0..self.layers.len() {
            let pos = self.pos;
            let layer = &mut self.layers[k];
            // A range the position has passed (earlier layers answered its tail) is done.
            if let Some((li, _)) = &layer.loaded {
                let r = &layer.ranges[*li];
                if r.offset + r.length <= pos {
                    layer.loaded = None;
                }
            }
            let layer = &self.layers[k];
            let i = layer.ranges.partition_point(|r| r.offset + r.length <= pos);
            if let Some(r) = layer.ranges.get(i) {
                if r.offset <= pos {
                    end = end.min(r.offset + r.length);
                    answer = Some(Some((k, i)));
                    break;
                }
                end = end.min(r.offset);
            }
            if let Some(next) = self.layers.get(k + 1) {
                if pos >= next.size {
                    answer = Some(None);
                    break;
                }
                end = end.min(next.size);
            }
        }
        let n = match answer {
            Some(Some((k, i))) => self.read_range(k, i, end, buf)?,
            Some(None) => {
                let n = (end - self.pos) as usize;
                buf[..n].fill(0);
                n
            }
            None => self.read_base(end, buf)?,
        };
        self.pos += n as u64;
        Ok(n)
    }
}

/// The events recorded since a checkpoint, indexed for lineage queries.
struct History {
    by_path: HashMap<Vec<u8>, Vec<Capture>>,
    moves: Vec<crate::store::Move>,
}

impl History {
    fn load(store: &Store, from: i64) -> crate::store::Result<History> {
        let mut by_path: HashMap<Vec<u8>, Vec<Capture>> = HashMap::new();
        let mut caps = store.captures_from(from)?;
        caps.sort_by_key(|c| c.id);
        for c in caps {
            by_path.entry(c.path.clone()).or_default().push(c);
        }
        Ok(History {
            by_path,
            moves: store.moves_from(from)?,
        })
    }

    /// The state `q` had when the checkpoint began (see the module doc).
    fn lineage(&self, q: &[u8]) -> Lineage {
        self.lineage_from(q, (0, 0))
    }

    /// What `q` was at event position `pos` (capture id, 0 = capture / 1 = move), found by
    /// following it forward through the events after `pos`.
    fn lineage_from(&self, q: &[u8], mut pos: (i64, u8)) -> Lineage {
        let mut cur = q.to_vec();
        loop {
            let cap = self
                .by_path
                .get(&cur)
                .and_then(|v| v.iter().find(|c| (c.id, 0) > pos));
            let mv = self.moves.iter().find(|m| {
                (m.after_capture, 1) > pos
                    && (under(&cur, &m.src).is_some()
                        || under(&cur, &m.dst).is_some()
                        || (m.exchange && (cur == m.src || cur == m.dst)))
            });
            match (cap, mv) {
                (Some(c), Some(m)) if (c.id, 0) < (m.after_capture, 1) => {
                    return Lineage::of(c, cur);
                }
                (Some(c), None) => return Lineage::of(c, cur),
                (_, Some(m)) => {
                    pos = (m.after_capture, 1);
                    if m.exchange {
                        if cur == m.src {
                            cur = m.dst.clone();
                        } else if cur == m.dst {
                            cur = m.src.clone();
                        } else if let Some(rest) = under(&cur, &m.src) {
                            cur = rebase(&rest, &m.dst);
                        } else if let Some(rest) = under(&cur, &m.dst) {
                            cur = rebase(&rest, &m.src);
                        }
                    } else if let Some(rest) = under(&cur, &m.src) {
                        cur = rebase(&rest, &m.dst);
                    } else {
                        // Beneath the rename's target: that directory was absent or empty before.
                        return Lineage::Pre(PreImage::absent());
                    }
                }
                (None, None) => return Lineage::Current(cur),
            }
        }
    }

    /// The name that `p` (a name valid at event position `at`) had when the checkpoint began:
    /// the renames before `at` undone, newest first. A name beneath a rename's source after
    /// the rename is a new path; it keeps its name.
    fn name_at_start(&self, p: &[u8], at: (i64, u8)) -> Vec<u8> {
        let mut cur = p.to_vec();
        for m in self.moves.iter().rev() {
            if (m.after_capture, 1) >= at {
                continue;
            }
            cur = Self::through(m, &cur, true);
        }
        cur
    }

    /// The name that `p` (valid at event position `at`) has now: the renames after `at`
    /// applied, oldest first.
    fn name_now(&self, p: &[u8], at: (i64, u8)) -> Vec<u8> {
        let mut cur = p.to_vec();
        for m in &self.moves {
            if (m.after_capture, 1) <= at {
                continue;
            }
            cur = Self::through(m, &cur, false);
        }
        cur
    }

    /// A name through one rename, forwards (`src` → `dst`) or backwards.
    fn through(m: &crate::store::Move, p: &[u8], backwards: bool) -> Vec<u8> {
        let (from, to) = if backwards {
            (&m.dst, &m.src)
        } else {
            (&m.src, &m.dst)
        };
        if let Some(rest) = under(p, from) {
            return rebase(&rest, to);
        }
        if m.exchange {
            if let Some(rest) = under(p, to) {
                return rebase(&rest, from);
            }
        }
        p.to_vec()
    }

    /// Bit set of the actors that changed a path (by name) since the checkpoint.
    fn actors(&self, p: &[u8]) -> u8 {
        self.by_path
            .get(p)
            .map(|v| v.iter().fold(0, |a, c| a | c.actors))
            .unwrap_or(0)
    }
}

/// Lists every path beneath `rel` (not following symlinks).
fn walk(root: BorrowedFd<'_>, rel: &Path, out: &mut Vec<Vec<u8>>) {
    let Ok(fd) = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, 0) else {
        return;
    };
    let Ok(ents) = sys::read_dir_all(fd) else {
        return;
    };
    for (name, _, dtype) in ents {
        let p = rel.join(&name);
        out.push(key(&p));
        if dtype == libc::DT_DIR {
            walk(root, &p, out);
        }
    }
}

fn is_text(b: &[u8]) -> bool {
    !b.contains(&0) && std::str::from_utf8(b).is_ok()
}

/// Lines added and removed going from `old` to `new` (0 for binary content).
fn line_counts(old: &[u8], new: &[u8]) -> (u64, u64) {
    if !is_text(old) || !is_text(new) {
        return (0, 0);
    }
    let (o, n) = (
        std::str::from_utf8(old).unwrap(),
        std::str::from_utf8(new).unwrap(),
    );
    let diff = similar::TextDiff::from_lines(o, n);
    let (mut ins, mut del) = (0, 0);
    for c in diff.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => ins += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (ins, del)
}

/// A path filter from `paths`: exact paths (and what lies beneath them) or globs.
struct Filter {
    set: Option<globset::GlobSet>,
    prefixes: Vec<Vec<u8>>,
    /// When set, exactly these paths (an undo: the paths the rewind touched).
    exact: Option<HashSet<Vec<u8>>>,
}

impl Filter {
    fn new(paths: &[String]) -> Result<Filter, RewindError> {
        if paths.is_empty() {
            return Ok(Filter {
                set: None,
                prefixes: Vec::new(),
                exact: None,
            });
        }
        let mut b = globset::GlobSetBuilder::new();
        let mut prefixes = Vec::new();
        for p in paths {
            let p = p.trim_start_matches("./").trim_end_matches('/');
            if p.starts_with('/') || p.split('/').any(|c| c == "..") {
                return Err(RewindError::Failed(format!(
                    "path {p:?} is not inside the workspace"
                )));
            }
            prefixes.push(p.as_bytes().to_vec());
            b.add(
                globset::Glob::new(p)
                    .map_err(|e| RewindError::Failed(format!("bad glob {p:?}: {e}")))?,
            );
        }
        Ok(Filter {
            set: Some(b.build().map_err(|e| RewindError::Failed(e.to_string()))?),
            prefixes,
            exact: None,
        })
    }
    fn matches(&self, p: &[u8]) -> bool {
        if let Some(exact) = &self.exact {
            return exact.contains(p);
        }
        let Some(set) = &self.set else { return true };
        self.prefixes
            .iter()
            .any(|x| p == &x[..] || under(p, x).is_some())
            || set.is_match(Path::new(OsStr::from_bytes(p)))
    }
}

/// The current state of a path, for comparison with a target.
struct Now {
    kind: Kind,
    mode: u32,
    content: Option<Vec<u8>>,
    target: Option<Vec<u8>>,
}

fn now_state(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Now> {
    let st = match sys::lstat_beneath(root, rel) {
        Ok(st) => st,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Ok(Now {
                kind: Kind::Absent,
                mode: 0,
                content: None,
                target: None,
            });
        }
        Err(e) => return Err(e),
    };
    Ok(match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {
            let fd = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)?;
            let mut buf = vec![0u8; st.st_size as usize];
            let n = sys::pread_full(fd.as_fd(), &mut buf, 0)?;
            buf.truncate(n);
            Now {
                kind: Kind::File,
                mode: st.st_mode,
                content: Some(buf),
                target: None,
            }
        }
        libc::S_IFDIR => Now {
            kind: Kind::Dir,
            mode: st.st_mode,
            content: None,
            target: None,
        },
        libc::S_IFLNK => Now {
            kind: Kind::Symlink,
            mode: st.st_mode,
            content: None,
            target: Some(sys::readlinkat(root, rel)?.as_bytes().to_vec()),
        },
        _ => Now {
            kind: Kind::Other,
            mode: st.st_mode,
            content: None,
            target: None,
        },
    })
}

impl Engine {
    pub fn new(recorder: Arc<Recorder>, store: Arc<Store>, kernel: Arc<dyn KernelCache>) -> Engine {
        Engine {
            recorder,
            store,
            kernel,
            apply: Mutex::new(()),
            scratch: Mutex::default(),
        }
    }

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

    /// Undoes the last rewind that has not been undone.
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
        let filter = Filter {
            set: None,
            prefixes: Vec::new(),
            exact: Some(touched),
        };
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

    /// Unified diff, current → checkpoint, of the paths a rewind of `scope` would change.
    pub fn diff(
        &self,
        user_message_id: &str,
        path: Option<&str>,
        scope: Scope,
    ) -> Result<(String, Vec<String>), RewindError> {
        let req = Request {
            user_message_id: user_message_id.to_string(),
            dry_run: true,
            scope,
            force: true,
            paths: path.map(|p| vec![p.to_string()]).unwrap_or_default(),
            session_id: None,
        };
        let _one = self.apply.lock().unwrap_or_else(|p| p.into_inner());
        let (_, cp, filter) = self.checked(&req)?;
        self.kernel.flush();
        let text = self
            .plan(cp.seq, cp.session_id.as_deref(), &req, &filter)
            .and_then(|out| Ok((self.diff_text(&out.targets)?, out.files_changed)));
        self.discard();
        text
    }

    /// The unified diff, current → target, of each target.
    fn diff_text(&self, targets: &[Target]) -> Result<String, RewindError> {
        let mut text = String::new();
        for t in targets {
            let rel = t.rel();
            let now = now_state(self.root(), rel)?;
            let old = now.content.unwrap_or_default();
            let new = match (&t.blob, t.kind()) {
                (Some(b), Kind::File) => self
                    .store
                    .blobs
                    .read_verified(b)
                    .map_err(|e| sys::ctx(e, rel.display()))?,
                _ => Vec::new(),
            };
            let name = rel.display().to_string();
            if !is_text(&old) || !is_text(&new) {
                if old != new {
                    text.push_str(&format!("Binary files a/{name} and b/{name} differ\n"));
                }
                continue;
            }
            let (a, b) = (String::from_utf8_lossy(&old), String::from_utf8_lossy(&new));
            let d = similar::TextDiff::from_lines(a.as_ref(), b.as_ref());
            let from = if now.kind == Kind::Absent {
                "/dev/null".to_string()
            } else {
                format!("a/{name}")
            };
            let to = if t.kind() == Kind::Absent {
                "/dev/null".to_string()
            } else {
                format!("b/{name}")
            };
            let u = d.unified_diff().header(&from, &to).to_string();
            if !u.is_empty() {
                text.push_str(&u);
            } else if now.mode & 0o7777 != t.mode & 0o7777 && t.kind() != Kind::Absent {
                text.push_str(&format!(
                    "mode {name}: {:o} -> {:o}\n",
                    now.mode & 0o7777,
                    t.mode & 0o7777
                ));
            }
        }
        Ok(text)
    }

    /// The complete state a lineage names for path `q` (`None`: unchanged, as it is now). The
    /// state is self-contained: content found elsewhere in the tree, or completed from a range
    /// pre-image, is stored as a blob, so the plan does not depend on the tree it rewrites.
    fn state_of(
        &self,
        hist: &History,
        lin: Lineage,
        q: &[u8],
    ) -> Result<Option<PreImage>, RewindError> {
        Ok(match lin {
            Lineage::Pre(p) => Some(p),
            Lineage::Partial(c, at) => Some(self.materialize(hist, &c, &at)?),
            Lineage::Current(at) if at == q => None,
            // Moved elsewhere and unchanged since: its content is there.
            Lineage::Current(at) => {
                let pre = snapshot(self.root(), Path::new(OsStr::from_bytes(&at)), &self.store)?;
                self.scratch.lock().unwrap().extend(pre.blob.clone());
                Some(pre)
            }
        })
    }

    /// The full pre-image of a range capture `c` of the file known as `at` when it was taken:
    /// the file's next recorded state (what the path's events after `c` say it was, or the
    /// file as it is now), cut or zero-extended to the size it had, with the saved old bytes
    /// laid over it. Stored as a blob. A next state that is itself a range pre-image is
    /// completed the same way: the chain is read in one pass (see [`Patched`]).
    fn materialize(&self, hist: &History, c: &Capture, at: &[u8]) -> Result<PreImage, RewindError> {
        // A saved range or base that is missing or corrupt stops the plan, naming where.
        let unusable_here = |e: io::Error| {
            let cp = self.store.checkpoint_by_seq(c.checkpoint).ok().flatten();
            let cp = cp.map_or_else(|| format!("#{}", c.checkpoint), |k| k.uuid);
            unusable(&c.path, &cp, e)
        };
        let mut layers = Vec::new();
        let (mut cur, mut cur_at) = (c.clone(), at.to_vec());
        let base = loop {
            layers.push(Layer {
                ranges: self.store.ranges(cur.id)?,
                size: cur.pre.size,
                loaded: None,
            });
            match hist.lineage_from(&cur_at, (cur.id, 0)) {
                Lineage::Partial(next, next_at) => (cur, cur_at) = (next, next_at),
                Lineage::Pre(p) => break self.blob_base(&p).map_err(unusable_here)?,
                Lineage::Current(now) => {
                    let rel = Path::new(OsStr::from_bytes(&now));
                    break match sys::open_beneath(
                        self.root(),
                        rel,
                        OFlags::RDONLY | OFlags::NONBLOCK,
                        0,
                    ) {
                        Ok(fd)
                            if sys::fstat(fd.as_fd())?.st_mode & libc::S_IFMT == libc::S_IFREG =>
                        {
                            Base::File(std::fs::File::from(fd))
                        }
                        _ => Base::None,
                    };
                }
            }
        };
        let reader = Patched {
            store: &self.store,
            layers,
            base,
            pos: 0,
        };
        let (hash, size) = self.store.blobs.put_reader(reader).map_err(unusable_here)?;
        self.scratch.lock().unwrap().push(hash.clone());
        Ok(PreImage {
            blob: Some(hash),
            size,
            partial: false,
            ..c.pre.clone()
        })
    }

    fn blob_base(&self, p: &PreImage) -> io::Result<Base> {
        Ok(match (&p.kind, &p.blob) {
            (Kind::File, Some(h)) => match self.store.blobs.open_verified(h)? {
                Some(b) => Base::Blob(b),
                None => Base::None, // the empty blob
            },
            _ => Base::None,
        })
    }

    /// Computes what a rewind would do; every target is self-contained (content in blobs).
    fn plan(
        &self,
        c: i64,
        session: Option<&str>,
        req: &Request,
        filter: &Filter,
    ) -> Result<Outcome, RewindError> {
        let hist = History::load(&self.store, c)?;
        let mut out = Outcome {
            can_rewind: true,
            ..Default::default()
        };
        // path → the state to give it
        let mut wanted: BTreeMap<Vec<u8>, PreImage> = BTreeMap::new();
        let root = self.root();
        match req.scope {
            Scope::Tool => {
                let session = session
                    .map(str::to_string)
                    .or_else(|| self.recorder.current().2);
                let tracked = match &session {
                    Some(s) => self.store.tracked(s)?,
                    None => Vec::new(),
                };
                for t in tracked {
                    if !filter.matches(&t.path) {
                        continue;
                    }
                    let target = if t.checkpoint < c {
                        match self.state_of(&hist, hist.lineage(&t.path), &t.path)? {
                            Some(p) => p,
                            None => continue,
                        }
                    } else {
                        match t
                            .capture
                            .and_then(|id| self.store.capture_by_id(id).ok().flatten())
                        {
                            Some(cap) if cap.pre.partial => {
                                let path = cap.path.clone();
                                self.materialize(&hist, &cap, &path)?
                            }
                            Some(cap) => cap.pre,
                            None => continue,
                        }
                    };
                    let rel = Path::new(OsStr::from_bytes(&t.path));
                    let now = now_state(root, rel)?;
                    if target.kind == Kind::Symlink || now.kind == Kind::Symlink {
                        out.skipped_links += 1;
                        continue;
                    }
                    // Files only: directories and special files are left alone.
                    if !matches!(target.kind, Kind::File | Kind::Absent)
                        || !matches!(now.kind, Kind::File | Kind::Absent)
                    {
                        continue;
                    }
                    if hist.actors(&t.path) & Actor::External.bit() != 0 {
                        out.conflicts
                            .push(String::from_utf8_lossy(&t.path).into_owned());
                    }
                    wanted.insert(t.path.clone(), target);
                }
            }
            Scope::Agent | Scope::All => {
                let inside = req.scope.inside();
                let mut candidates: HashSet<Vec<u8>> = HashSet::new();
                for (p, caps) in &hist.by_path {
                    if caps.iter().any(|c| c.actors & inside != 0) {
                        candidates.insert(p.clone());
                    }
                }
                for m in &hist.moves {
                    if m.actor.bit() & inside == 0 {
                        continue;
                    }
                    for base in [&m.src, &m.dst] {
                        let mut found = Vec::new();
                        walk(root, Path::new(OsStr::from_bytes(base)), &mut found);
                        for f in found {
                            if let Some(rest) = under(&f, &m.dst) {
                                candidates.insert(rebase(&rest, &m.src));
                            }
                            if let Some(rest) = under(&f, &m.src) {
                                candidates.insert(rebase(&rest, &m.dst));
                            }
                            candidates.insert(f);
                        }
                    }
                }
                // A path is known by other names before and after each rename: add, for every
                // path seen, its name when the checkpoint began and its name now, by following
                // the renames in the order they happened (bounded: two names per path; chaining
                // renames regardless of their order would grow without end, e.g. `mv x d/e`
                // then `mv d x`).
                let mut named: HashSet<Vec<u8>> = HashSet::new();
                for (p, caps) in &hist.by_path {
                    if !candidates.contains(p) {
                        continue;
                    }
                    for c in caps {
                        named.insert(hist.name_at_start(p, (c.id, 0)));
                        named.insert(hist.name_now(p, (c.id, 0)));
                    }
                }
                for p in &candidates {
                    if !hist.by_path.contains_key(p) {
                        // Found beneath a moved directory as it is now.
                        named.insert(hist.name_at_start(p, (i64::MAX, 2)));
                    }
                }
                candidates.extend(named);
                for p in candidates {
                    if p.is_empty() || !filter.matches(&p) {
                        continue;
                    }
                    let target = match self.state_of(&hist, hist.lineage(&p), &p)? {
                        Some(pre) => pre,
                        None => continue,
                    };
                    let bits = hist.actors(&p);
                    if req.scope == Scope::Agent
                        && bits & inside != 0
                        && bits & Actor::External.bit() != 0
                    {
                        out.conflicts.push(String::from_utf8_lossy(&p).into_owned());
                    }
                    wanted.insert(p, target);
                }
            }
        }
        out.conflicts.sort();
        // Keep only what differs from the present; count lines.
        for (p, target) in wanted {
            let rel = Path::new(OsStr::from_bytes(&p));
            let now = now_state(root, rel)?;
            let new_content = match (&target.kind, &target.blob) {
                (Kind::File, Some(b)) => Some(
                    self.store
                        .blobs
                        .read_verified(b)
                        .map_err(|e| unusable(&p, &req.user_message_id, e))?,
                ),
                (Kind::File, None) => Some(Vec::new()),
                _ => None,
            };
            let differs = now.kind != target.kind
                || (target.kind != Kind::Absent
                    && now.mode & 0o7777 != target.mode & 0o7777
                    && target.kind != Kind::Symlink)
                || (target.kind == Kind::File && now.content != new_content)
                || (target.kind == Kind::Symlink && now.target != target.target);
            if !differs {
                continue;
            }
            let old = now.content.clone().unwrap_or_default();
            let new = new_content.clone().unwrap_or_default();
            let (i, d) = line_counts(&old, &new);
            out.insertions += i;
            out.deletions += d;
            out.files_changed
                .push(String::from_utf8_lossy(&p).into_owned());
            let mut t = Target::new(rel, &target);
            if target.kind == Kind::File && t.blob.is_none() {
                t.blob = Some(crate::store::blobs::empty_hash());
            }
            out.targets.push(t);
        }
        out.files_changed.sort();
        if req.scope == Scope::Agent && !out.conflicts.is_empty() && !req.force {
            out.can_rewind = false;
            out.error = Some(format!(
                "{} path(s) were also changed by someone other than the agent since this message: {}; pass force to rewind anyway",
                out.conflicts.len(),
                out.conflicts.join(", ")
            ));
        }
        Ok(out)
    }

    /// Applies targets under a new checkpoint of the rewind's own, journalled.
    fn apply_targets(
        &self,
        id: &str,
        target_uuid: &str,
        scope: &str,
        targets: &[Target],
    ) -> Result<(), RewindError> {
        let seq = self.recorder.begin(id, None, "rewind")?;
        let plan =
            serde_json::to_string(targets).map_err(|e| RewindError::Failed(e.to_string()))?;
        self.store.insert_rewind(&crate::store::RewindRow {
            id: id.to_string(),
            checkpoint: seq,
            target: target_uuid.to_string(),
            scope: scope.to_string(),
            state: "applying".into(),
            plan,
        })?;
        apply_plan(&self.recorder, &self.store, targets, id).map_err(|e| {
            RewindError::Failed(format!("rewinding to checkpoint {target_uuid}: {e}"))
        })?;
        self.store.set_rewind_state(id, "done")?;
        Ok(())
    }

    /// Finishes rewinds a crash interrupted (called at mount, before serving).
    pub fn recover(&self) -> Result<usize, RewindError> {
        let pending = self.store.unfinished_rewinds()?;
        for r in &pending {
            let targets: Vec<Target> =
                serde_json::from_str(&r.plan).map_err(|e| RewindError::Failed(e.to_string()))?;
            tracing::warn!(
                "finishing rewind {} interrupted by a crash ({} paths)",
                r.id,
                targets.len()
            );
            apply_plan(&self.recorder, &self.store, &targets, &r.id)?;
            self.store.set_rewind_state(&r.id, "done")?;
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

/// A blob a plan needs cannot be used (missing, corrupt, unreadable): the plan stops before
/// anything is changed, and says which path, which checkpoint and (in `e`) which blob.
fn unusable(path: &[u8], checkpoint: &str, e: io::Error) -> RewindError {
    RewindError::Failed(format!(
        "{}: its content at checkpoint {checkpoint} cannot be restored: {e}; nothing was changed (`rewindfs fsck` checks the whole store)",
        String::from_utf8_lossy(path)
    ))
}

/// Fault injection for tests only (`REWINDFS_TEST_FAIL_REWIND_AFTER=N`): a rewind fails after
/// writing N files, as one that runs out of space would, and stays 'applying'.
fn fail_rewind_after() -> Option<usize> {
    static N: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("REWINDFS_TEST_FAIL_REWIND_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

fn depth(p: &[u8]) -> usize {
    p.iter().filter(|b| **b == b'/').count()
}

/// Sets every target path to its state: removals deepest first, then directories top-down,
/// then files, links and special files (each written beside and put in place), then directory
/// modes deepest first (so a read-only directory is filled before it is closed).
pub fn apply_plan(rec: &Recorder, store: &Store, targets: &[Target], id: &str) -> io::Result<()> {
    let root = rec.root();
    let mut order: Vec<&Target> = targets.iter().collect();
    // 1. Remove what must go (absent targets, and type changes).
    order.sort_by_key(|t| std::cmp::Reverse(depth(&t.path)));
    for t in &order {
        let rel = t.rel();
        let cur = sys::lstat_beneath_opt(root, rel)?;
        let Some(cur) = cur else { continue };
        let cur_kind = match cur.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        };
        if t.kind() == Kind::Absent
            || (cur_kind != t.kind() && (cur_kind == Kind::Dir || t.kind() == Kind::Dir))
        {
            rec.capture_for_rewind(rel)?;
            remove_tree(rec, rel, cur_kind == Kind::Dir)?;
        }
    }
    // 2. Directories, shallowest first.
    order.sort_by_key(|t| depth(&t.path));
    for t in order.iter().filter(|t| t.kind() == Kind::Dir) {
        let rel = t.rel();
        ensure_parents(rec, rel)?;
        match sys::lstat_beneath_opt(root, rel)? {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            _ => {
                rec.capture_for_rewind(rel)?;
                sys::mkdirat(root, rel, 0o700)?;
            }
        }
    }
    // 3. Files, symlinks, special files.
    let mut dirs = HashSet::new();
    for (i, t) in order
        .iter()
        .filter(|t| matches!(t.kind(), Kind::File | Kind::Symlink | Kind::Other))
        .enumerate()
    {
        if fail_rewind_after() == Some(i) {
            return Err(io::Error::other(
                "injected failure (REWINDFS_TEST_FAIL_REWIND_AFTER)",
            ));
        }
        let rel = t.rel();
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            if dirs.insert(parent.to_path_buf()) {
                ensure_parents(rec, rel)?;
            }
        }
        rec.capture_for_replace(rel)?;
        match write_beside(root, store, rel, t, id) {
            Ok(()) => rec.replaced(rel),
            Err(e) => {
                rec.not_replaced(rel);
                return Err(e);
            }
        }
    }
    // 4. Directory modes and owners, deepest first.
    order.sort_by_key(|t| std::cmp::Reverse(depth(&t.path)));
    for t in order.iter().filter(|t| t.kind() == Kind::Dir) {
        let rel = t.rel();
        if sys::geteuid() == 0 {
            let _ = sys::lchownat(root, rel, Some(t.uid), Some(t.gid));
        }
        sys::chmodat(root, rel, t.mode & 0o7777)?;
    }
    Ok(())
}

/// Creates missing parent directories of `rel` (capturing each as it is created).
fn ensure_parents(rec: &Recorder, rel: &Path) -> io::Result<()> {
    let root = rec.root();
    let mut acc = PathBuf::new();
    let comps: Vec<_> = rel.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        acc.push(c);
        match sys::lstat_beneath_opt(root, &acc)? {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            Some(_) => {
                return Err(io::Error::other(format!(
                    "{}: a parent of {} is not a directory",
                    acc.display(),
                    rel.display()
                )));
            }
            None => {
                rec.capture_for_rewind(&acc)?;
                sys::mkdirat(root, &acc, 0o755)?;
            }
        }
    }
    Ok(())
}

/// Removes a path; a directory with everything beneath it (each entry captured first).
fn remove_tree(rec: &Recorder, rel: &Path, is_dir: bool) -> io::Result<()> {
    let root = rec.root();
    if is_dir {
        let fd = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        for (name, _, dtype) in sys::read_dir_all(fd)? {
            let child = rel.join(&name);
            rec.capture_for_rewind(&child)?;
            remove_tree(rec, &child, dtype == libc::DT_DIR)?;
        }
    }
    match sys::unlinkat(root, rel, is_dir) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(sys::ctx(e, format!("removing {}", rel.display()))),
    }
}

/// Writes a file, symlink or special file to a temp name in the same directory, then puts it
/// in place of `rel` (exchanged with what is there, or renamed if nothing is): readers see the
/// old or the new state, never a mix.
fn write_beside(
    root: BorrowedFd<'_>,
    store: &Store,
    rel: &Path,
    t: &Target,
    id: &str,
) -> io::Result<()> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // Named after the rewind, so finishing it after a crash replaces a half-written temp.
    let tmp = parent.join(format!(
        ".{}.rewindfs-{}",
        name.to_string_lossy().chars().take(32).collect::<String>(),
        id
    ));
    let res = (|| -> io::Result<()> {
        match t.kind() {
            Kind::File => {
                let create = || {
                    sys::openat(
                        root,
                        &tmp,
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
                        0o600,
                    )
                };
                let fd = match create() {
                    // Left by this rewind's interrupted first attempt.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        sys::unlinkat(root, &tmp, false)?;
                        create()?
                    }
                    r => r?,
                };
                // Hashed while copied: a blob changed since the plan read it is never put
                // in place.
                if let Some(hash) = &t.blob {
                    store.blobs.copy_verified(hash, fd.as_fd())?;
                }
                if sys::geteuid() == 0 {
                    let _ = rustix::fs::fchown(
                        &fd,
                        Some(rustix::fs::Uid::from_raw(t.uid)),
                        Some(rustix::fs::Gid::from_raw(t.gid)),
                    );
                }
                sys::fchmod(fd.as_fd(), t.mode & 0o7777)?;
            }
            Kind::Symlink => {
                let _ = sys::unlinkat(root, &tmp, false);
                let target = t.target.clone().unwrap_or_default();
                sys::symlinkat(Path::new(OsStr::from_bytes(&target)), root, &tmp)?;
                if sys::geteuid() == 0 {
                    let _ = sys::lchownat(root, &tmp, Some(t.uid), Some(t.gid));
                }
            }
            _ => {
                let _ = sys::unlinkat(root, &tmp, false);
                sys::mknodat(root, &tmp, t.mode, t.rdev)?;
                if sys::geteuid() == 0 {
                    let _ = sys::lchownat(root, &tmp, Some(t.uid), Some(t.gid));
                }
                sys::chmodat(root, &tmp, t.mode & 0o7777)?;
            }
        }
        // Exchanged rather than renamed over: ext4 starts writeback of a file renamed over
        // another (auto_da_alloc), a disk write per restored file on the rewind's path (a
        // third of a 10k-file rewind). The old file then goes with the temp name.
        match sys::renameat2(root, &tmp, rel, libc::RENAME_EXCHANGE) {
            Ok(()) => sys::unlinkat(root, &tmp, false),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => {
                sys::renameat2(root, &tmp, rel, 0)
            }
            Err(e) => Err(e),
        }
    })();
    if res.is_err() {
        let _ = sys::unlinkat(root, &tmp, false);
    }
    res.map_err(|e| sys::ctx(e, format!("restoring {}", rel.display())))
}
