//! Fork: the whole tree as it was when a checkpoint began, written into a new directory; and
//! the diff from that checkpoint to a fork's tree as it is now (`diff --fork`).
//!
//! The tree is the one `ls` and `show` give (`past.rs`): each directory's entries at the
//! checkpoint, each file's bytes from where they are. A file unchanged since the checkpoint
//! is copied from the present tree with `FICLONE` first (a reflink shares the extents: no data
//! is copied where the disk allows), then `copy_file_range` (in the kernel); one the store
//! holds is copied from its blob, hashed as it is copied (`Blobs::copy_verified`); a
//! range-captured one is streamed from its chain, whose base blob is verified at its end. So
//! the work follows the tree's shape, and the bytes copied what differs.
//!
//! Invariants:
//! - The destination is a new or empty directory (the caller checks that it is neither in
//!   the workspace nor in the store); every path is created beneath its fd, never followed
//!   through a symlink, and a file is created exclusively (nothing there is overwritten).
//! - The whole fork runs under the capture gate (after the kernel's dirty data is flushed):
//!   no change lands in the workspace while its tree is being read, so the fork is the tree of
//!   one instant's history, exactly the checkpoint's state.
//! - Modes are set on directories last, deepest first (a read-only directory is filled before
//!   it is closed); owners are given only when running as root. Extended attributes are given
//!   as a rewind gives them (`attrs.rs`: after the owner, before the mode; as root every
//!   namespace, else `user.*` and ACLs; one that cannot be set is logged, not fatal).
//! - Nothing read from the store is kept unless verified: a file whose blob turns out damaged
//!   or missing is removed again and the fork fails, naming it.

use std::collections::BTreeMap;
use std::io::{self, Read as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::attrs;
use super::diff::DiffOut;
use super::diff::{Side, file_diff};
use super::filter::Filter;
use super::outside::parent_beneath;
use super::past::{Entry, Past, Source};
use super::privileges::{Policy, Withheld};
use super::{RewindError, Views};
use crate::locks::Locked;
use crate::store::{Kind, PreImage, Xattrs};
use crate::sys;

/// What a fork wrote.
#[derive(Debug, Clone, Default)]
pub struct ForkReport {
    /// The checkpoint (lowercase, hyphenated).
    pub checkpoint: String,
    /// Its session.
    pub session_id: Option<String>,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Bytes of file content written (shared by a reflink or copied).
    pub bytes: u64,
    /// Files whose content came from the store (changed since the checkpoint).
    pub files_from_store: u64,
    /// Their bytes.
    pub bytes_from_store: u64,
    /// Paths that could not be made (a special file, when not root), with why.
    pub skipped: Vec<String>,
    /// What history from elsewhere would have granted and the fork did not write.
    pub withheld: Vec<Withheld>,
}

/// What a fork's walk of the directories carries: how it limits history from elsewhere, what
/// it reports, the directories whose modes are set last and the files written after the walk.
struct Walk<'a> {
    policy: Policy,
    report: &'a mut ForkReport,
    dirs: &'a mut Vec<DirMode>,
    files: &'a mut Vec<Entry>,
}

/// Threads a fork writes files on (see [`Views::fork_files`]): reads in flight, not CPUs.
const FORK_WORKERS: usize = 8;

/// What one fork thread wrote.
#[derive(Debug, Default)]
struct ForkCounts {
    files: u64,
    bytes: u64,
    files_from_store: u64,
    bytes_from_store: u64,
}

impl ForkCounts {
    fn add(&mut self, bytes: u64, from_store: bool) {
        self.files += 1;
        self.bytes += bytes;
        if from_store {
            self.files_from_store += 1;
            self.bytes_from_store += bytes;
        }
    }
}

/// A directory whose mode (and owner, and attributes) is set once everything beneath it is
/// written.
struct DirMode {
    rel: PathBuf,
    mode: u32,
    uid: u32,
    gid: u32,
    xattrs: Option<Xattrs>,
}

impl Views {
    /// Writes the tree as it was when checkpoint `uuid` began into `dest`, a new or empty
    /// directory (created if missing; its parent must exist).
    ///
    /// # Errors
    /// `Unknown` for an unknown checkpoint; `Refused` for a destination that is not empty or
    /// cannot be created; file-system errors while writing (what was written stays, for the
    /// caller to look at or remove).
    pub fn fork(&self, uuid: &str, dest: &Path, trust: bool) -> Result<ForkReport, RewindError> {
        let _one = self.g.one();
        self.g.kernel.flush();
        let _gate = self.g.recorder.exclusive();
        let past = self.past(uuid)?;
        let cp = self
            .g
            .store
            .checkpoint(&past.uuid)?
            .ok_or_else(|| RewindError::Unknown(past.uuid.clone()))?;
        let out = super::outside::open_fork_dir(dest)?;
        let mut root = self
            .entry(&past, b"")?
            .ok_or_else(|| RewindError::Refused("the workspace itself did not exist".into()))?;
        // What history from elsewhere may not grant is not written (`privileges.rs`); a withheld
        // owner falls back to the fork's own.
        let policy = Policy {
            root_owner: sys::fstat(out.as_fd())
                .map(|st| (st.st_uid, st.st_gid))
                .unwrap_or_default(),
            ..self.g.policy(trust)
        };
        let mut report = ForkReport {
            checkpoint: past.uuid.clone(),
            session_id: cp.session_id,
            ..ForkReport::default()
        };
        limit_entry(&mut root, &policy, &mut report);
        let mut dirs = vec![DirMode {
            rel: PathBuf::new(),
            mode: root.mode,
            uid: root.uid,
            gid: root.gid,
            xattrs: self.xattrs_then(&root),
        }];
        let mut files = Vec::new();
        let mut walk = Walk {
            policy,
            report: &mut report,
            dirs: &mut dirs,
            files: &mut files,
        };
        self.fork_dir(&past, &root, out.as_fd(), &mut walk)?;
        if let Some(d) = crate::faults::pause_fork_files() {
            std::thread::sleep(d);
        }
        self.fork_files(&past, out.as_fd(), &files, &mut report)?;
        let as_root = sys::geteuid() == 0;
        for d in dirs.iter().rev() {
            // Through the directory's own fd, opened beneath the fork without following a
            // symlink: a name swapped meanwhile is refused, never followed.
            let what = |e: io::Error| {
                sys::ctx(e, format!("fork: setting the mode of {}", d.rel.display()))
            };
            let fd = sys::open_beneath(out.as_fd(), &d.rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)
                .map_err(what)?;
            if as_root {
                let _ = sys::fchown(fd.as_fd(), d.uid, d.gid);
            }
            attrs::restore(fd.as_fd(), sys::at_path(&d.rel), d.xattrs.as_ref());
            sys::fchmod(fd.as_fd(), d.mode & 0o7777).map_err(what)?;
        }
        tracing::info!(
            "fork of {} into {}: {} files ({} from the store), {} dirs, {} bytes",
            past.uuid,
            dest.display(),
            report.files,
            report.files_from_store,
            report.dirs,
            report.bytes
        );
        Ok(report)
    }

    /// Writes the entries of `dir` (at the checkpoint) beneath `out`, depth first, but for
    /// its files, which go on `files` to be written once every directory is there.
    fn fork_dir(
        &self,
        past: &Past,
        dir: &Entry,
        out: BorrowedFd<'_>,
        walk: &mut Walk<'_>,
    ) -> Result<(), RewindError> {
        let as_root = sys::geteuid() == 0;
        for mut e in self.children(past, dir)? {
            if !limit_entry(&mut e, &walk.policy, walk.report) {
                continue;
            }
            let report = &mut *walk.report;
            let rel = e.rel().to_path_buf();
            let what = |err: io::Error| sys::ctx(err, format!("fork: writing {}", rel.display()));
            match e.kind {
                Kind::Dir => {
                    let (parent, name) = parent_beneath(out, &rel).map_err(what)?;
                    sys::mkdirat(parent.as_fd(), Path::new(name), 0o700).map_err(what)?;
                    report.dirs += 1;
                    walk.dirs.push(DirMode {
                        rel: rel.clone(),
                        mode: e.mode,
                        uid: e.uid,
                        gid: e.gid,
                        xattrs: self.xattrs_then(&e),
                    });
                    self.fork_dir(past, &e, out, walk)?;
                }
                Kind::File => walk.files.push(e),
                Kind::Symlink => {
                    let target = e.target.clone().unwrap_or_default();
                    let (parent, name) = parent_beneath(out, &rel).map_err(what)?;
                    sys::symlinkat(
                        crate::wspath::key_path(&target),
                        parent.as_fd(),
                        Path::new(name),
                    )
                    .map_err(what)?;
                    if as_root {
                        let link = sys::open_beneath(out, &rel, OFlags::PATH, 0).map_err(what)?;
                        let _ = sys::chown_fd(link.as_fd(), e.uid, e.gid);
                    }
                    report.symlinks += 1;
                }
                Kind::Other => {
                    let (parent, name) = parent_beneath(out, &rel).map_err(what)?;
                    match sys::mknodat(
                        parent.as_fd(),
                        Path::new(name),
                        e.mode & !0o7777 | 0o600,
                        e.size,
                    ) {
                        Ok(()) => {
                            let node =
                                sys::open_beneath(out, &rel, OFlags::PATH, 0).map_err(what)?;
                            if as_root {
                                let _ = sys::chown_fd(node.as_fd(), e.uid, e.gid);
                            }
                            attrs::restore(node.as_fd(), &rel, self.xattrs_then(&e).as_ref());
                            sys::chmod_fd(node.as_fd(), e.mode & 0o7777).map_err(what)?;
                        }
                        Err(err) => report.skipped.push(format!("{}: {err}", rel.display())),
                    }
                }
                Kind::Absent => {}
            }
        }
        Ok(())
    }

    /// Writes the file entries `files` beneath `out` (their directories are there), on
    /// [`FORK_WORKERS`] threads: most of a fork's time is waiting for the disk to read one
    /// small file after another, which several reads in flight hide. The first error stops
    /// the others and fails the fork.
    fn fork_files(
        &self,
        past: &Past,
        out: BorrowedFd<'_>,
        files: &[Entry],
        report: &mut ForkReport,
    ) -> Result<(), RewindError> {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let first_error: std::sync::Mutex<Option<RewindError>> = std::sync::Mutex::new(None);
        let workers = FORK_WORKERS.min(files.len().max(1));
        let counts: Vec<ForkCounts> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| {
                        let mut c = ForkCounts::default();
                        while !stop.load(Ordering::Relaxed) {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(e) = files.get(i) else { break };
                            match self.fork_file(past, e, out) {
                                Ok(n) => c.add(n, !e.unchanged()),
                                Err(err) => {
                                    stop.store(true, Ordering::Relaxed);
                                    first_error.locked().get_or_insert(err);
                                    break;
                                }
                            }
                        }
                        c
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        // A thread that died may have left a file half written: the fork fails.
                        first_error.locked().get_or_insert(RewindError::Refused(
                            "fork: a thread writing files stopped on an internal error (see the \
                             daemon's log); the fork is incomplete"
                                .into(),
                        ));
                        ForkCounts::default()
                    })
                })
                .collect()
        });
        if let Some(e) = first_error.locked().take() {
            return Err(e);
        }
        for c in counts {
            report.files += c.files;
            report.bytes += c.bytes;
            report.files_from_store += c.files_from_store;
            report.bytes_from_store += c.bytes_from_store;
        }
        Ok(())
    }

    /// Writes one file entry beneath `out`: created exclusively, its content, then owner (as
    /// root), extended attributes and mode. Returns the bytes written; a file whose content
    /// failed is removed again.
    fn fork_file(&self, past: &Past, e: &Entry, out: BorrowedFd<'_>) -> Result<u64, RewindError> {
        let rel = e.rel().to_path_buf();
        let what = |err: io::Error| sys::ctx(err, format!("fork: writing {}", rel.display()));
        // Created exclusively beneath the fork, no symlink followed on the way.
        let fd = sys::open_beneath(
            out,
            &rel,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            0o600,
        )
        .map_err(what)?;
        let n = self.write_content(past, e, fd.as_fd()).map_err(|err| {
            // Not left behind as if it were the past: its bytes may be a damaged blob's (found
            // out only once it was all copied).
            if let Ok((parent, name)) = parent_beneath(out, &rel) {
                let _ = sys::unlinkat(parent.as_fd(), Path::new(name), false);
            }
            RewindError::Refused(format!("fork: writing {}: {err}", rel.display()))
        })?;
        if sys::geteuid() == 0 {
            let _ = sys::fchown(fd.as_fd(), e.uid, e.gid);
        }
        attrs::restore(fd.as_fd(), &rel, self.xattrs_then(e).as_ref());
        sys::fchmod(fd.as_fd(), e.mode & 0o7777).map_err(what)?;
        Ok(n)
    }

    /// Writes a file entry's content into `fd` (new and empty), from where it is: a reflink
    /// or an in-kernel copy of the present file, a copy of the blob hashed as it is made, or
    /// the range chain streamed (its base blob verified at its end). Returns the bytes
    /// written; an error (a blob that does not hash to its name among them) fails the fork.
    fn write_content(&self, past: &Past, e: &Entry, fd: BorrowedFd<'_>) -> io::Result<u64> {
        let copy_from = |src: OwnedFd| -> io::Result<u64> {
            let len = sys::fstat(src.as_fd())?.st_size as u64;
            sys::copy_all(src.as_fd(), fd, len)?;
            Ok(len)
        };
        match &e.source {
            Source::Tree(at) => {
                let rel = crate::wspath::key_path(at);
                copy_from(sys::open_beneath(
                    self.g.root(),
                    rel,
                    OFlags::RDONLY | OFlags::NONBLOCK,
                    0,
                )?)
            }
            // Copied while hashed: a blob that does not hash to its name fails the fork.
            Source::Blob(h) => self.g.store.blobs.copy_verified(h.as_str(), fd),
            Source::Chain(..) | Source::Saved => {
                let mut src = self
                    .content(past, e)
                    .map_err(|err| io::Error::other(err.to_string()))?;
                let mut dst = std::fs::File::from(sys::dup_cloexec(fd)?);
                io::copy(&mut src, &mut dst)
            }
        }
    }

    /// Unified diff from the tree when checkpoint `uuid` began to the directory `dir` as it is
    /// now (a fork of it), `path` restricting it to a path or glob.
    ///
    /// # Errors
    /// `Unknown` for the checkpoint; file-system errors reading either tree.
    pub fn diff_dir(
        &self,
        uuid: &str,
        dir: &Path,
        path: Option<&str>,
    ) -> Result<DiffOut, RewindError> {
        let _one = self.g.one();
        self.g.kernel.flush();
        let filter = Filter::new(&path.map(|p| vec![p.to_string()]).unwrap_or_default())?;
        let past = self.past(uuid)?;
        let there = sys::open_dir_path(dir)
            .map_err(|e| RewindError::Refused(format!("{}: {e}", dir.display())))?;
        let mut then = BTreeMap::new();
        if let Some(root) = self.entry(&past, b"")? {
            self.collect(&past, &root, &mut then)?;
        }
        let mut now = BTreeMap::new();
        collect_dir(there.as_fd(), Path::new(""), &mut now)?;
        let names: std::collections::BTreeSet<&Vec<u8>> = then.keys().chain(now.keys()).collect();
        let mut out = DiffOut::default();
        for p in names {
            if !filter.matches(p) {
                continue;
            }
            let (a, b) = (then.get(p), now.get(p));
            let kinds = (
                a.map_or(Kind::Absent, |e: &Entry| e.kind),
                b.map_or(Kind::Absent, |s: &Side| s.kind),
            );
            if matches!(kinds, (Kind::Dir, Kind::Absent) | (Kind::Absent, Kind::Dir)) {
                continue;
            }
            let rel = crate::wspath::key_path(p);
            let sb = match b {
                Some(s) if s.kind == Kind::File => {
                    let fd = sys::open_beneath(there.as_fd(), rel, OFlags::RDONLY, 0)?;
                    let mut buf = Vec::new();
                    io::Read::read_to_end(&mut std::fs::File::from(fd), &mut buf)?;
                    Side {
                        content: buf,
                        ..s.clone()
                    }
                }
                Some(s) => s.clone(),
                None => Side::absent(),
            };
            let sa = match a {
                Some(e) if e.kind == Kind::File => {
                    let mut buf = Vec::new();
                    self.content(&past, e)?.read_to_end(&mut buf)?;
                    Side {
                        kind: Kind::File,
                        mode: e.mode,
                        content: buf,
                        target: None,
                    }
                }
                Some(e) => Side {
                    kind: e.kind,
                    mode: e.mode,
                    content: Vec::new(),
                    target: e.target.clone(),
                },
                None => Side::absent(),
            };
            if !sa.differs(&sb) {
                continue;
            }
            let name = crate::wire_path::encode(p);
            let (text, stat) = file_diff(&name, &sa, &sb);
            out.text.push_str(&text);
            out.files_changed.push(name);
            out.stats.push(stat);
        }
        Ok(out)
    }

    /// Every entry beneath `dir` at the checkpoint, by path.
    fn collect(
        &self,
        past: &Past,
        dir: &Entry,
        out: &mut BTreeMap<Vec<u8>, Entry>,
    ) -> Result<(), RewindError> {
        for e in self.children(past, dir)? {
            let is_dir = e.kind == Kind::Dir;
            out.insert(e.path.clone(), e.clone());
            if is_dir {
                self.collect(past, &e, out)?;
            }
        }
        Ok(())
    }
}

/// Limits what entry `e` grants as a rewind limits history from elsewhere (`privileges.rs`),
/// noting what was withheld in `report`; `false` for an entry the fork leaves out (a device
/// node from elsewhere).
fn limit_entry(e: &mut Entry, policy: &Policy, report: &mut ForkReport) -> bool {
    if !e.imported {
        return true;
    }
    let mut pre = PreImage {
        kind: e.kind,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        size: e.size,
        xattrs: e.xattrs.clone(),
        imported: true,
        ..PreImage::absent()
    };
    let (what, leave) = policy.limit(&mut pre, None);
    if !what.is_empty() {
        report.withheld.push(Withheld {
            path: crate::wire_path::encode(&e.path),
            what,
        });
    }
    (e.mode, e.uid, e.gid, e.xattrs) = (pre.mode, pre.uid, pre.gid, pre.xattrs);
    !leave
}

/// Every entry beneath `rel` of the directory `fd`, by path: what it is (no content).
fn collect_dir(
    fd: BorrowedFd<'_>,
    rel: &Path,
    out: &mut BTreeMap<Vec<u8>, Side>,
) -> io::Result<()> {
    let d = sys::open_beneath(fd, rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
    for (name, _, _) in sys::read_dir_all(d)? {
        let p = rel.join(&name);
        let st = sys::lstat_beneath(fd, &p)?;
        let (kind, target) = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => (Kind::File, None),
            libc::S_IFDIR => (Kind::Dir, None),
            libc::S_IFLNK => (
                Kind::Symlink,
                Some(sys::readlinkat(fd, &p)?.as_bytes().to_vec()),
            ),
            _ => (Kind::Other, None),
        };
        out.insert(
            p.as_os_str().as_bytes().to_vec(),
            Side {
                kind,
                mode: st.st_mode,
                content: Vec::new(),
                target,
            },
        );
        if kind == Kind::Dir {
            collect_dir(fd, &p, out)?;
        }
    }
    Ok(())
}
