//! The passthrough core: every filesystem operation, as a plain function returning
//! `io::Result`, on the backing directory that the mount covers.
//!
//! The FUSE adapter (`fs/mod.rs`) only decodes requests and encodes replies; everything that
//! touches the disk happens here, through `crate::sys`, relative to the root fd opened before
//! the mount. Every change calls the [`Observer`] *before* it is applied (so its pre-image is
//! saved first) and again after it succeeded (for the change log).
//!
//! Open files and directories are the only fds held for long (one per open handle); nodes are
//! re-resolved by path (see `inodes.rs`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rustix::fs::{OFlags, Stat};

use super::inodes::{Inodes, Looked, ROOT};
use crate::capture::{Change, Observer, Op, Permit};
use crate::sys;

/// Who asked: the caller's ids and pid, from the FUSE request header.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

/// One directory entry for readdir.
#[derive(Debug, Clone)]
pub struct DirEnt {
    pub name: OsString,
    pub ino: u64,
    pub dtype: u8,
    /// Where the next readdir continues after this entry.
    pub next: u64,
}

/// An open file or directory.
#[derive(Debug)]
pub struct Handle {
    /// The node this handle belongs to.
    pub ino: u64,
    /// The backing fd.
    fd: OwnedFd,
    /// Opened with write access.
    pub writable: bool,
    /// Opened with `O_TRUNC`: ext4 writes out a truncated-and-rewritten file's data at its last
    /// close, so this handle's close is left to the closer thread (see [`Core::closer`]).
    close_later: bool,
}

/// Attributes to change in a setattr.
#[derive(Debug, Default, Clone, Copy)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: sys::SetTime,
    pub mtime: sys::SetTime,
}

/// The passthrough filesystem core.
pub struct Core {
    /// The workspace's underlying directory (`O_PATH`), opened before the mount covered it.
    root: OwnedFd,
    /// Node ids ↔ backing files and their names.
    pub inodes: Inodes,
    /// Open handles by FUSE file handle. Lock order: after `inodes`, never held across I/O.
    handles: RwLock<HashMap<u64, Arc<Handle>>>,
    /// Next file handle.
    next_fh: AtomicU64,
    /// Saves pre-images and logs changes.
    observer: Arc<dyn Observer>,
    /// Whether the daemon runs as root, so created files must be given to the caller.
    as_root: bool,
    /// Where released files go to be closed, when the daemon runs a closer (see
    /// [`Core::closer`]).
    closer: std::sync::OnceLock<std::sync::mpsc::SyncSender<OwnedFd>>,
    /// Writable opens in progress, per node: counted before the backing open, so a removal
    /// that adopts the file's inode into the store sees them (see [`Core::removal`]).
    opening: std::sync::Mutex<HashMap<u64, usize>>,
}

/// A writable open in progress (see `Core::opening`); counted until dropped.
struct Opening<'a> {
    core: &'a Core,
    ino: u64,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut o = self.core.opening.lock().unwrap();
        if let Some(n) = o.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                o.remove(&self.ino);
            }
        }
    }
}

/// Released fds waiting for the closer; past this a release closes its fd itself.
const CLOSE_QUEUE: usize = 1024;

/// The attribute the kernel reads before a write or chown may drop privileges.
const CAPS: &[u8] = b"security.capability";

fn err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn join(parent: &Path, name: &OsStr) -> PathBuf {
    if parent.as_os_str().is_empty() {
        PathBuf::from(name)
    } else {
        parent.join(name)
    }
}

impl Core {
    /// # Errors
    /// Fails if the root cannot be stat'ed.
    pub fn new(root: OwnedFd, observer: Arc<dyn Observer>) -> io::Result<Core> {
        let st = sys::fstat(root.as_fd())?;
        Ok(Core {
            inodes: Inodes::new(&st),
            root,
            handles: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            observer,
            as_root: sys::geteuid() == 0,
            closer: std::sync::OnceLock::new(),
            opening: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The loop of a thread that closes released files opened with `O_TRUNC` (at most once;
    /// `None` after). Closing is then the costly part of a release — ext4 writes out a
    /// truncated-and-rewritten file's data when its last fd closes, ~40 µs — and the kernel
    /// does not wait for RELEASE, but a ring thread is pinned to the caller's CPU, so closing
    /// there delays the caller's next request; a closer thread lets the other CPU do it.
    pub fn closer(&self) -> Option<impl FnOnce() + Send + 'static> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<OwnedFd>(CLOSE_QUEUE);
        self.closer.set(tx).ok()?;
        Some(move || {
            for fd in rx {
                drop(fd);
            }
        })
    }

    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    fn path(&self, ino: u64) -> io::Result<PathBuf> {
        self.inodes.path(ino)
    }

    fn child_path(&self, parent: u64, name: &OsStr) -> io::Result<PathBuf> {
        sys::validate_name(name)?;
        Ok(join(&self.path(parent)?, name))
    }

    fn handle(&self, fh: u64) -> io::Result<Arc<Handle>> {
        self.handles
            .read()
            .unwrap()
            .get(&fh)
            .cloned()
            .ok_or_else(|| err(libc::EBADF))
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.write().unwrap().insert(fh, Arc::new(h));
        fh
    }

    /// Paths of files open for writing (whose data the kernel may still hold: mmap pages).
    pub fn writable_paths(&self) -> Vec<PathBuf> {
        let inos: Vec<u64> = self
            .handles
            .read()
            .unwrap()
            .values()
            .filter(|h| h.writable)
            .map(|h| h.ino)
            .collect();
        let mut paths: Vec<PathBuf> = inos.into_iter().filter_map(|i| self.path(i).ok()).collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Number of open handles (for `status`).
    pub fn open_handles(&self) -> usize {
        self.handles.read().unwrap().len()
    }

    fn before(
        &self,
        ctx: &Ctx,
        op: Op,
        path: &Path,
        path2: Option<&Path>,
    ) -> io::Result<Permit<'_>> {
        self.observer.before(
            ctx.pid,
            &Change {
                op,
                path,
                path2,
                aliases: &[],
                last_name: false,
                range: None,
            },
        )
    }

    /// Before a change to an existing file's content or attributes, which every hard link of
    /// it shows.
    /// `range`: the bytes the change overwrites (see [`Change::range`]).
    fn before_node(
        &self,
        ctx: &Ctx,
        op: Op,
        ino: u64,
        path: &Path,
        range: Option<(u64, u64)>,
    ) -> io::Result<Permit<'_>> {
        let aliases = self.inodes.aliases(ino);
        self.observer.before(
            ctx.pid,
            &Change {
                op,
                path,
                path2: None,
                aliases: &aliases,
                last_name: false,
                range,
            },
        )
    }

    fn after(&self, ctx: &Ctx, op: Op, path: &Path, path2: Option<&Path>) {
        self.observer.after(
            ctx.pid,
            &Change {
                op,
                path,
                path2,
                aliases: &[],
                last_name: false,
                range: None,
            },
        );
    }

    /// Whether `st` is a regular file with one name that no handle has open for writing: a
    /// change taking that name away may keep its content by hard-linking it into the store.
    fn is_last_name(&self, st: &Stat) -> bool {
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 1 {
            return false;
        }
        match self.inodes.ino_of(st) {
            Some(ino) => !self.has_writer(ino),
            None => true, // the kernel holds no node for it, so no handle either
        }
    }

    /// Whether a handle has node `ino` open for writing, or such an open is in progress.
    fn has_writer(&self, ino: u64) -> bool {
        self.opening.lock().unwrap().contains_key(&ino)
            || self
                .handles
                .read()
                .unwrap()
                .values()
                .any(|h| h.ino == ino && h.writable)
    }

    /// Counts a writable open of node `ino` as in progress until the guard is dropped.
    fn opening(&self, ino: u64) -> Opening<'_> {
        *self.opening.lock().unwrap().entry(ino).or_insert(0) += 1;
        Opening { core: self, ino }
    }

    /// Runs `apply` between the observer's `before` and `after` (or `failed`) for a change that
    /// may take away a file's last name; `victim` is the node of the file losing it.
    fn removal<T>(
        &self,
        ctx: &Ctx,
        change: Change<'_>,
        victim: Option<u64>,
        apply: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let _permit = self.observer.before(ctx.pid, &change)?;
        match apply() {
            Ok(v) => {
                if change.last_name && victim.is_some_and(|i| self.has_writer(i)) {
                    // A writable open raced the removal (it began after the check that let
                    // the file be adopted, and before its name went): the file lives on for
                    // that writer, so its pre-image gets a copy of its own, as if the removal
                    // had failed. (Writes it makes before this point would still reach the
                    // adopted file; the window is the few microseconds since the unlink.)
                    self.observer.failed(&change);
                }
                self.observer.after(ctx.pid, &change);
                Ok(v)
            }
            Err(e) => {
                self.observer.failed(&change);
                Err(e)
            }
        }
    }

    /// Stats a node by path, checking it is still the file the node stands for.
    fn stat_node(&self, ino: u64) -> io::Result<(PathBuf, Stat)> {
        let p = self.path(ino)?;
        let st = sys::lstat_at(self.root(), &p)?;
        if self.inodes.key(ino) != Some((st.st_dev, st.st_ino)) {
            return Err(err(libc::ESTALE));
        }
        Ok((p, st))
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> io::Result<(Looked, Stat)> {
        let p = self.child_path(parent, name)?;
        let st = sys::lstat_at(self.root(), &p)?;
        Ok((self.inodes.lookup(parent, name, &st), st))
    }

    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> io::Result<Stat> {
        if let Some(fh) = fh {
            if let Ok(h) = self.handle(fh) {
                return sys::fstat(h.fd.as_fd());
            }
        }
        match self.stat_node(ino) {
            Ok((_, st)) => Ok(st),
            Err(e) => {
                // An open file that was unlinked: any handle on it still answers.
                let hs = self.handles.read().unwrap();
                match hs.values().find(|h| h.ino == ino) {
                    Some(h) => sys::fstat(h.fd.as_fd()),
                    None => Err(e),
                }
            }
        }
    }

    /// Finds an fd to operate on for a node: its handle if one was given, else by path.
    fn node_fd(
        &self,
        ino: u64,
        fh: Option<u64>,
        flags: OFlags,
    ) -> io::Result<(Option<PathBuf>, OwnedFd)> {
        if let Some(fh) = fh {
            if let Ok(h) = self.handle(fh) {
                if h.ino == ino {
                    let p = self.path(ino).ok();
                    return Ok((p, h.fd.try_clone()?));
                }
            }
        }
        let p = self.path(ino)?;
        let fd = sys::open_beneath(self.root(), &p, flags, 0)?;
        Ok((Some(p), fd))
    }

    pub fn setattr(&self, ctx: &Ctx, ino: u64, fh: Option<u64>, a: SetAttr) -> io::Result<Stat> {
        let p = self.path(ino).ok();
        let kind = self.inodes.kind(ino).unwrap_or(0);
        let _permit = if let Some(p) = &p {
            let op = if a.size.is_some() {
                Op::Truncate
            } else if a.mode.is_some() {
                Op::Chmod
            } else if a.uid.is_some() || a.gid.is_some() {
                Op::Chown
            } else {
                Op::Utimes
            };
            // A truncate overwrites what lies past the new size.
            let range = a.size.map(|n| (n, u64::MAX - n));
            self.before_node(ctx, op, ino, p, range)?
        } else {
            None
        };
        if let Some(size) = a.size {
            if kind == libc::S_IFDIR {
                return Err(err(libc::EISDIR));
            }
            let (_, fd) = self.node_fd(ino, fh, OFlags::WRONLY)?;
            sys::ftruncate(fd.as_fd(), size)?;
            // The kernel asks for this with FATTR_KILL_SUIDGID when the caller lacks CAP_FSETID;
            // fuser does not pass that bit on, and root is who has the capability.
            if ctx.uid != 0 {
                Self::kill_suid_sgid(fd.as_fd(), ctx.gid)?;
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            let p = p.as_ref().ok_or_else(|| err(libc::ENOENT))?;
            sys::lchownat(self.root(), p, a.uid, a.gid)?;
        }
        if let Some(mode) = a.mode {
            if kind == libc::S_IFLNK {
                return Err(err(libc::EOPNOTSUPP));
            }
            // By path when the node has one (no fd to open); an unlinked open file by its handle.
            match (&p, fh.and_then(|fh| self.handle(fh).ok())) {
                (Some(p), _) => sys::chmodat(self.root(), p, mode & 0o7777)?,
                (None, Some(h)) => sys::fchmod(h.fd.as_fd(), mode & 0o7777)?,
                (None, None) => return Err(err(libc::ENOENT)),
            }
        }
        if a.atime.is_some() || a.mtime.is_some() {
            match (&p, fh) {
                (Some(p), _) => sys::lutimensat(self.root(), p, a.atime, a.mtime)?,
                (None, Some(fh)) => {
                    let h = self.handle(fh)?;
                    sys::futimens(h.fd.as_fd(), a.atime, a.mtime)?;
                }
                (None, None) => return Err(err(libc::ENOENT)),
            }
        }
        if let Some(p) = &p {
            let op = if a.size.is_some() {
                Op::Truncate
            } else if a.mode.is_some() {
                Op::Chmod
            } else {
                Op::Utimes
            };
            self.after(ctx, op, p, None);
        }
        self.getattr(ino, fh)
    }

    pub fn readlink(&self, ino: u64) -> io::Result<OsString> {
        let p = self.path(ino)?;
        sys::readlinkat(self.root(), &p)
    }

    /// Gives a newly created file to the caller (the daemon creates as itself).
    fn own(&self, ctx: &Ctx, parent: &Path, rel: &Path, mode: u32, is_dir: bool) -> io::Result<()> {
        if !self.as_root || (ctx.uid == 0 && ctx.gid == 0) {
            return Ok(());
        }
        let pst = sys::lstat_at(self.root(), sys::at_path(parent))?;
        // In a set-group-ID directory new files take the directory's group.
        let gid = if pst.st_mode & libc::S_ISGID != 0 {
            pst.st_gid
        } else {
            ctx.gid
        };
        sys::lchownat(self.root(), rel, Some(ctx.uid), Some(gid))?;
        // chown clears set-user/group-ID bits on non-directories; put back what was asked for.
        if !is_dir && mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            sys::chmodat(self.root(), rel, mode & 0o7777)?;
        }
        Ok(())
    }

    fn created(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        p: &Path,
        op: Op,
    ) -> io::Result<(Looked, Stat)> {
        let st = sys::lstat_at(self.root(), p)?;
        self.after(ctx, op, p, None);
        let looked = self.inodes.lookup(parent, name, &st);
        // A new inode has no capabilities.
        self.inodes.set_no_caps(looked.ino);
        Ok((looked, st))
    }

    pub fn mknod(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> io::Result<(Looked, Stat)> {
        let pp = self.path(parent)?;
        let p = self.child_path(parent, name)?;
        let mode = mode & !(umask & 0o777);
        let _permit = self.before(ctx, Op::Create, &p, None)?;
        if mode & libc::S_IFMT == libc::S_IFREG {
            sys::openat(
                self.root(),
                &p,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
                mode & 0o7777,
            )?;
        } else {
            sys::mknodat(self.root(), &p, mode, rdev as u64)?;
        }
        self.own(ctx, &pp, &p, mode, false)?;
        self.created(ctx, parent, name, &p, Op::Create)
    }

    pub fn mkdir(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<(Looked, Stat)> {
        let pp = self.path(parent)?;
        let p = self.child_path(parent, name)?;
        let mode = mode & !(umask & 0o777) & 0o7777;
        let _permit = self.before(ctx, Op::Mkdir, &p, None)?;
        sys::mkdirat(self.root(), &p, mode)?;
        self.own(ctx, &pp, &p, mode, true)?;
        self.created(ctx, parent, name, &p, Op::Mkdir)
    }

    pub fn symlink(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        target: &Path,
    ) -> io::Result<(Looked, Stat)> {
        let pp = self.path(parent)?;
        let p = self.child_path(parent, name)?;
        let _permit = self.before(ctx, Op::Symlink, &p, None)?;
        sys::symlinkat(target, self.root(), &p)?;
        self.own(ctx, &pp, &p, 0, false)?;
        self.created(ctx, parent, name, &p, Op::Symlink)
    }

    pub fn link(
        &self,
        ctx: &Ctx,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> io::Result<(Looked, Stat)> {
        let (old, _) = self.stat_node(ino)?;
        let p = self.child_path(newparent, newname)?;
        let _permit = self.before(ctx, Op::Link, &p, Some(&old))?;
        sys::linkat(self.root(), &old, &p)?;
        let st = sys::lstat_at(self.root(), &p)?;
        self.after(ctx, Op::Link, &p, Some(&old));
        // Keep the node's existing name; only count the lookup the kernel now holds.
        let looked = self.inodes.lookup_link(newparent, newname, &st);
        Ok((looked, st))
    }

    pub fn unlink(&self, ctx: &Ctx, parent: u64, name: &OsStr) -> io::Result<()> {
        self.remove(ctx, parent, name, false)
    }

    pub fn rmdir(&self, ctx: &Ctx, parent: u64, name: &OsStr) -> io::Result<()> {
        self.remove(ctx, parent, name, true)
    }

    fn remove(&self, ctx: &Ctx, parent: u64, name: &OsStr, is_dir: bool) -> io::Result<()> {
        let p = self.child_path(parent, name)?;
        let st = sys::lstat_at(self.root(), &p)?;
        let is_actually_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        if is_dir && !is_actually_dir {
            return Err(err(libc::ENOTDIR));
        }
        if !is_dir && is_actually_dir {
            return Err(err(libc::EISDIR));
        }
        let op = if is_dir { Op::Rmdir } else { Op::Unlink };
        let change = Change {
            op,
            path: &p,
            path2: None,
            aliases: &[],
            last_name: !is_dir && self.is_last_name(&st),
            range: None,
        };
        let victim = self.inodes.ino_of(&st);
        self.removal(ctx, change, victim, || {
            sys::unlinkat(self.root(), &p, is_dir)
        })?;
        if let Some(ino) = self.inodes.ino_of(&st) {
            self.inodes.renamed(ino, (parent, name), None);
            if is_dir || st.st_nlink <= 1 {
                self.inodes.unlinked(ino);
            }
        }
        Ok(())
    }

    pub fn rename(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> io::Result<()> {
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        let src = sys::lstat_at(self.root(), &from)?;
        let dst = sys::lstat_opt(self.root(), &to)?;
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let op = if exchange { Op::Exchange } else { Op::Rename };
        let same_file = dst
            .as_ref()
            .is_some_and(|d| (d.st_dev, d.st_ino) == (src.st_dev, src.st_ino));
        let change = Change {
            op,
            path: &from,
            path2: Some(&to),
            aliases: &[],
            last_name: !exchange
                && !same_file
                && dst.as_ref().is_some_and(|d| self.is_last_name(d)),
            range: None,
        };
        let victim = dst.as_ref().and_then(|d| self.inodes.ino_of(d));
        self.removal(ctx, change, victim, || {
            sys::renameat2(self.root(), &from, &to, flags)
        })?;
        let src_ino = self.inodes.ino_of(&src);
        let dst_ino = dst.as_ref().and_then(|d| self.inodes.ino_of(d));
        let same = dst
            .as_ref()
            .is_some_and(|d| (d.st_dev, d.st_ino) == (src.st_dev, src.st_ino));
        if same {
            return Ok(()); // renaming a hard link onto another name of itself does nothing
        }
        if let Some(d) = dst_ino {
            if exchange {
                self.inodes
                    .renamed(d, (newparent, newname), Some((parent, name)));
            } else {
                self.inodes.renamed(d, (newparent, newname), None);
                let dst = dst.unwrap();
                if dst.st_mode & libc::S_IFMT == libc::S_IFDIR || dst.st_nlink <= 1 {
                    self.inodes.unlinked(d);
                }
            }
        }
        if let Some(s) = src_ino {
            self.inodes
                .renamed(s, (parent, name), Some((newparent, newname)));
        }
        Ok(())
    }

    fn open_flags(flags: i32) -> OFlags {
        // Only flags that mean something for the backing open. The kernel sends internal bits
        // too (`__FMODE_EXEC` on execve) that `openat2` rejects with EINVAL; creation is the
        // kernel's business (create), and direct I/O would need aligned buffers.
        let keep = libc::O_ACCMODE
            | libc::O_APPEND
            | libc::O_TRUNC
            | libc::O_NONBLOCK
            | libc::O_DSYNC
            | libc::O_SYNC
            | libc::O_NOATIME
            | libc::O_LARGEFILE
            | libc::O_DIRECTORY;
        OFlags::from_bits_retain((flags & keep) as u32)
    }

    pub fn open(&self, ctx: &Ctx, ino: u64, flags: i32) -> io::Result<u64> {
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        // Counted before the path is resolved: a removal that has not yet taken the name sees
        // this open; one that has, makes the path lookup fail.
        let _opening = writable.then(|| self.opening(ino));
        let p = self.path(ino)?;
        let _permit = if flags & libc::O_TRUNC != 0 && writable {
            self.before_node(ctx, Op::Truncate, ino, &p, None)?
        } else {
            None
        };
        let fd = sys::open_beneath(self.root(), &p, Self::open_flags(flags), 0)?;
        if flags & libc::O_TRUNC != 0 && writable {
            // An O_TRUNC open truncates here (FUSE_ATOMIC_O_TRUNC): as for a truncate, an
            // ordinary caller loses the set-user/group-ID bits (FUSE_OPEN_KILL_SUIDGID).
            if ctx.uid != 0 {
                Self::kill_suid_sgid(fd.as_fd(), ctx.gid)?;
            }
            self.after(ctx, Op::Truncate, &p, None);
        }
        Ok(self.add_handle(Handle {
            ino,
            fd,
            writable,
            close_later: writable && flags & libc::O_TRUNC != 0,
        }))
    }

    pub fn create(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> io::Result<(Looked, Stat, u64)> {
        let pp = self.path(parent)?;
        let p = self.child_path(parent, name)?;
        let mode = mode & !(umask & 0o777) & 0o7777;
        let existing = sys::lstat_opt(self.root(), &p)?;
        if existing.is_some() && flags & libc::O_EXCL != 0 {
            return Err(err(libc::EEXIST));
        }
        let op = if existing.is_some() {
            Op::Truncate
        } else {
            Op::Create
        };
        let _permit = if existing.is_none() || flags & libc::O_TRUNC != 0 {
            self.before(ctx, op, &p, None)?
        } else {
            None
        };
        let oflags = Self::open_flags(flags) | OFlags::CREATE;
        let fd = sys::openat(self.root(), &p, oflags, mode)?;
        if existing.is_none() {
            self.own(ctx, &pp, &p, mode, false)?;
        } else if flags & libc::O_TRUNC != 0 && ctx.uid != 0 {
            Self::kill_suid_sgid(fd.as_fd(), ctx.gid)?;
        }
        if existing.is_none() || flags & libc::O_TRUNC != 0 {
            self.after(ctx, op, &p, None);
        }
        let st = sys::fstat(fd.as_fd())?;
        let looked = self.inodes.lookup(parent, name, &st);
        if existing.is_none() {
            // A new inode has no capabilities.
            self.inodes.set_no_caps(looked.ino);
        }
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fh = self.add_handle(Handle {
            ino: looked.ino,
            fd,
            writable,
            close_later: existing.is_some() && writable && flags & libc::O_TRUNC != 0,
        });
        Ok((looked, st, fh))
    }

    /// Reads at `off` into `buf` (the reply's own buffer); returns the bytes read.
    pub fn read(&self, fh: u64, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        let h = self.handle(fh)?;
        sys::pread_full(h.fd.as_fd(), buf, off)
    }

    /// Writes `data` at `off`; `kill_suid_sgid` when the kernel says the writer may not keep
    /// the file's set-user/group-ID bits (`FUSE_WRITE_KILL_SUIDGID`).
    pub fn write(
        &self,
        ctx: &Ctx,
        fh: u64,
        off: u64,
        data: &[u8],
        kill_suid_sgid: bool,
    ) -> io::Result<usize> {
        let h = self.handle(fh)?;
        let p = self.path(h.ino).ok();
        let _permit = match &p {
            Some(p) => {
                self.before_node(ctx, Op::Write, h.ino, p, Some((off, data.len() as u64)))?
            }
            None => None,
        };
        if kill_suid_sgid {
            Self::kill_suid_sgid(h.fd.as_fd(), ctx.gid)?;
        }
        let mut done = 0;
        while done < data.len() {
            let n = sys::pwrite(h.fd.as_fd(), &data[done..], off + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        if let Some(p) = &p {
            self.after(ctx, Op::Write, p, None);
        }
        Ok(done)
    }

    /// What the kernel does for a write or truncate by a process without `CAP_FSETID`, and
    /// leaves to the daemon (`FUSE_HANDLE_KILLPRIV_V2`; the daemon itself has the capability,
    /// so the backing filesystem would keep the bits): clear set-user-ID, and set-group-ID when
    /// group-execute is set or the caller is not in the file's group (the kernel's
    /// `setattr_should_drop_sgid`; the request carries only the caller's primary group).
    fn kill_suid_sgid(fd: BorrowedFd<'_>, caller_gid: u32) -> io::Result<()> {
        let st = sys::fstat(fd)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(());
        }
        let mut mode = st.st_mode & 0o7777;
        mode &= !libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 || st.st_gid != caller_gid {
            mode &= !libc::S_ISGID;
        }
        if mode != st.st_mode & 0o7777 {
            sys::fchmod(fd, mode)?;
        }
        Ok(())
    }

    pub fn flush(&self, _fh: u64) -> io::Result<()> {
        Ok(())
    }

    pub fn release(&self, fh: u64) {
        let Some(h) = self.handles.write().unwrap().remove(&fh) else {
            return;
        };
        // The handle is gone at once (nothing reads or writes through it, and no check counts
        // it as open); only a costly close happens on the closer thread. Waking it costs more
        // than closing any other fd (grep -r: 1.6 -> 1.9 s when every close went there).
        if !h.close_later {
            return;
        }
        if let (Ok(h), Some(tx)) = (Arc::try_unwrap(h), self.closer.get()) {
            // A full queue or a stopped closer hands the fd back, and it closes here.
            let _ = tx.try_send(h.fd);
        }
    }

    pub fn fsync(&self, ctx: &Ctx, fh: u64, datasync: bool) -> io::Result<()> {
        let h = self.handle(fh)?;
        if sys::is_own_thread(ctx.pid) {
            // The daemon's own fsync through the mount at a message boundary: it only makes
            // the kernel hand over the file's dirty (mmap) pages, which it has done before
            // sending this; syncing the disk is not asked for.
            return Ok(());
        }
        sys::fsync(h.fd.as_fd(), datasync)
    }

    /// Up to `max` entries of directory `ino` from position `offset` (0 or an entry's `next`).
    ///
    /// Directories are read without an open handle (OPENDIR is declined, so the kernel sends
    /// neither OPENDIR nor RELEASEDIR, and caches listings): each call opens the directory by
    /// path and continues at the backing filesystem's own position cookie, which stays valid
    /// while the directory changes. `.` is the node itself and `..` the root's id for the
    /// root (the kernel looks neither up).
    pub fn readdir(&self, ino: u64, offset: u64, max: usize) -> io::Result<Vec<DirEnt>> {
        let p = self.path(ino)?;
        let fd = sys::open_beneath(self.root(), &p, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        let ents = sys::read_dir_from(fd, offset as i64, max)?;
        Ok(ents
            .into_iter()
            .map(|(name, backing_ino, dtype, next)| {
                let ino = match name.as_bytes() {
                    b"." => ino,
                    b".." if ino == ROOT => ROOT,
                    _ => backing_ino,
                };
                DirEnt {
                    name,
                    ino,
                    dtype,
                    next: next as u64,
                }
            })
            .collect())
    }

    /// fsync of a directory (no handle: directories are read without one).
    pub fn fsyncdir(&self, ctx: &Ctx, ino: u64, datasync: bool) -> io::Result<()> {
        if sys::is_own_thread(ctx.pid) {
            return Ok(());
        }
        let p = self.path(ino)?;
        let fd = sys::open_beneath(self.root(), &p, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        sys::fsync(fd.as_fd(), datasync)
    }

    pub fn statfs(&self) -> io::Result<rustix::fs::StatVfs> {
        sys::fstatvfs(self.root())
    }

    /// An fd usable for xattr calls through `/proc/self/fd`.
    fn xattr_fd(&self, ino: u64) -> io::Result<(PathBuf, OwnedFd, bool)> {
        let p = self.path(ino)?;
        let fd = sys::open_beneath(self.root(), &p, OFlags::PATH, 0)?;
        let is_link = self.inodes.kind(ino) == Some(libc::S_IFLNK);
        Ok((p, fd, is_link))
    }

    pub fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> io::Result<Vec<u8>> {
        let caps = name.as_bytes() == CAPS;
        if caps && self.inodes.no_caps(ino) {
            return Err(err(libc::ENODATA));
        }
        let epoch = self.inodes.caps_epoch(ino);
        let (_, fd, is_link) = self.xattr_fd(ino)?;
        if is_link {
            return Err(err(libc::ENODATA));
        }
        let r = sys::getxattr(fd.as_fd(), name, size as usize);
        if let (true, Some(epoch)) = (caps, epoch) {
            if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::ENODATA)) {
                self.inodes.learn_no_caps(ino, epoch);
            }
        }
        r
    }

    pub fn listxattr(&self, ino: u64, size: u32) -> io::Result<Vec<u8>> {
        let (_, fd, is_link) = self.xattr_fd(ino)?;
        if is_link {
            return Ok(Vec::new());
        }
        sys::listxattr(fd.as_fd(), size as usize)
    }

    pub fn setxattr(
        &self,
        ctx: &Ctx,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> io::Result<()> {
        let (p, fd, is_link) = self.xattr_fd(ino)?;
        if is_link {
            return Err(err(libc::EPERM));
        }
        if name.as_bytes() == CAPS {
            self.inodes.forget_no_caps(ino);
        }
        let _permit = self.before(ctx, Op::Setxattr, &p, None)?;
        sys::setxattr(fd.as_fd(), name, value, flags)?;
        self.after(ctx, Op::Setxattr, &p, None);
        Ok(())
    }

    pub fn removexattr(&self, ctx: &Ctx, ino: u64, name: &OsStr) -> io::Result<()> {
        let (p, fd, is_link) = self.xattr_fd(ino)?;
        if is_link {
            return Err(err(libc::ENODATA));
        }
        if name.as_bytes() == CAPS {
            self.inodes.forget_no_caps(ino);
        }
        let _permit = self.before(ctx, Op::Setxattr, &p, None)?;
        sys::removexattr(fd.as_fd(), name)?;
        self.after(ctx, Op::Setxattr, &p, None);
        Ok(())
    }

    pub fn access(&self, ino: u64, mask: i32) -> io::Result<()> {
        let p = self.path(ino)?;
        sys::accessat(self.root(), &p, mask)
    }

    pub fn fallocate(&self, ctx: &Ctx, fh: u64, off: u64, len: u64, mode: i32) -> io::Result<()> {
        let h = self.handle(fh)?;
        let p = self.path(h.ino).ok();
        let _permit = match &p {
            Some(p) => {
                // Punching or zeroing overwrites the range; shifting data (collapse, insert)
                // moves everything after it; plain allocation overwrites nothing.
                let range = if mode
                    & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE)
                    != 0
                {
                    None
                } else if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
                    Some((off, len))
                } else {
                    Some((0, 0))
                };
                self.before_node(ctx, Op::Fallocate, h.ino, p, range)?
            }
            None => None,
        };
        sys::fallocate(h.fd.as_fd(), mode, off, len)?;
        if let Some(p) = &p {
            self.after(ctx, Op::Fallocate, p, None);
        }
        Ok(())
    }

    pub fn lseek(&self, fh: u64, off: i64, whence: i32) -> io::Result<u64> {
        let h = self.handle(fh)?;
        sys::lseek(h.fd.as_fd(), off, whence)
    }

    pub fn copy_file_range(
        &self,
        ctx: &Ctx,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> io::Result<usize> {
        let hi = self.handle(fh_in)?;
        let ho = self.handle(fh_out)?;
        let p = self.path(ho.ino).ok();
        let _permit = match &p {
            Some(p) => self.before_node(ctx, Op::Write, ho.ino, p, Some((off_out, len)))?,
            None => None,
        };
        let n = sys::copy_file_range(
            hi.fd.as_fd(),
            off_in,
            ho.fd.as_fd(),
            off_out,
            len.min(1 << 30) as usize,
        )?;
        if let Some(p) = &p {
            self.after(ctx, Op::Write, p, None);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Mutex, OnceLock, Weak};

    /// Records the observer calls a removal makes; with `race` set, a writable open of the
    /// file being removed begins while its pre-image is taken.
    #[derive(Default)]
    struct Spy {
        core: OnceLock<Weak<Core>>,
        race: bool,
        calls: Mutex<Vec<&'static str>>,
    }

    impl Observer for Spy {
        fn before(&self, _pid: u32, change: &Change<'_>) -> io::Result<Permit<'_>> {
            if self.race && change.last_name {
                let core = self.core.get().unwrap().upgrade().unwrap();
                let st = sys::lstat_at(core.root(), change.path).unwrap();
                let ino = core.inodes.ino_of(&st).unwrap();
                core.opening.lock().unwrap().insert(ino, 1);
            }
            self.calls.lock().unwrap().push("before");
            Ok(None)
        }
        fn after(&self, _pid: u32, _change: &Change<'_>) {
            self.calls.lock().unwrap().push("after");
        }
        fn failed(&self, _change: &Change<'_>) {
            self.calls.lock().unwrap().push("failed");
        }
    }

    fn unlink_with(race: bool) -> Vec<&'static str> {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        let root = sys::open_dir_path(d.path()).unwrap();
        let spy = Arc::new(Spy {
            race,
            ..Default::default()
        });
        let core = Arc::new(Core::new(root, spy.clone()).unwrap());
        spy.core.set(Arc::downgrade(&core)).unwrap();
        core.lookup(ROOT, OsStr::new("f")).unwrap();
        let ctx = Ctx {
            uid: 0,
            gid: 0,
            pid: 1,
        };
        core.unlink(&ctx, ROOT, OsStr::new("f")).unwrap();
        assert!(!d.path().join("f").exists());
        spy.calls.lock().unwrap().clone()
    }

    /// A writable open that began after the removal's check, before the name went, leaves the
    /// file alive for a writer: the adopted pre-image is unshared (`failed`) before `after`.
    #[test]
    fn a_writable_open_racing_a_removal_unshares_the_pre_image() {
        assert_eq!(unlink_with(false), ["before", "after"]);
        assert_eq!(unlink_with(true), ["before", "failed", "after"]);
    }
}
