//! The passthrough core: every filesystem operation, as a plain function returning
//! `io::Result`, on the backing directory that the mount covers.
//!
//! The FUSE adapter (`fs/mod.rs`) only decodes requests and encodes replies; everything that
//! touches the disk happens in [`Core`], through `crate::sys`, relative to the root fd opened
//! before the mount.
//!
//! # Layout
//!
//! `Core`'s operations live one job to a file, each file an `impl Core` block beside this one:
//! - `core.rs`: `Core` and its state, the values the adapter passes in and gets back ([`Ctx`],
//!   [`SetAttr`], [`DirEnt`]), what the other files share (a node's path, the observer's
//!   calls), and the operations small enough to need no file of their own: lookup, forget,
//!   getattr, readlink, access, statfs, and those that give a file a new name (mknod, mkdir,
//!   symlink, link);
//! - `files.rs`: the node-fd cache — the fds kept per node for reads and writes, and for files
//!   whose last name went — with its invariants and the lock order;
//! - `remove.rs`: the removal protocol (unlink, rmdir, rename, a rewind replacing files) and
//!   the fs side of adopting a deleted file's inode;
//! - `content.rs`: reads and changes of a file's content and attributes (read, write,
//!   copy_file_range, fallocate, lseek, fsync, setattr);
//! - `dir.rs`: readdir, readdirplus and fsyncdir, without a handle;
//! - `xattr.rs`: extended attributes, and the `security.capability` shortcut.
//!
//! # Invariants
//!
//! - Every path is relative to the root fd, and every name from the kernel is checked
//!   ([`sys::validate_name`]) before it is joined to one.
//! - Nodes are re-resolved by path (see `inodes.rs`); a file reached by path is checked
//!   against the node's backing `(dev, ino)` before it is trusted (`ESTALE` otherwise). The
//!   only fds held past a request are the node-fd cache's, bounded (`files.rs`).
//! - Every change calls the [`Observer`] *before* it is applied (so its pre-image is saved
//!   first) and again after it succeeded (for the change log), or, for a removal, `failed`.
//! - Locks are taken in one order (stated in `files.rs`): `removing` or `nameless`, then the
//!   observer's, then `inodes` and `files`, which are leaves.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use rustix::fs::{OFlags, Stat};

use super::inodes::{Inodes, Looked};
use super::node_file::NodeFile;
use super::node_files::NodeFiles;
use crate::capture::{Change, Observer, Op, Permit};
use crate::sys;
use crate::wspath::{Node, WsPath};

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
    pub(super) root: OwnedFd,
    /// Node ids ↔ backing files and their names.
    pub inodes: Inodes,
    /// Saves pre-images and logs changes.
    pub(super) observer: Arc<dyn Observer>,
    /// Whether the daemon runs as root, so created files must be given to the caller.
    pub(super) as_root: bool,
    /// Where released files go to be closed, when the daemon runs a closer (see
    /// [`Core::closer`]).
    pub(super) closer: std::sync::OnceLock<std::sync::mpsc::SyncSender<Vec<OwnedFd>>>,
    /// Backing fds of nodes, for reads and writes (see [`NodeFile`]; `files.rs` states the
    /// cache's invariants and the lock order). A leaf lock, never held across a path walk.
    pub(super) files: NodeFiles,
    /// Held while a node with no name left is changed (see [`Core::for_change`]).
    pub(super) nameless: Mutex<()>,
    /// Changes to a named file's content hold this shared, and a removal that may hand a
    /// file's inode to the store holds it exclusive until the file's name is gone from the
    /// table: no write that found the file by its name lands after the store took the inode
    /// (the removal protocol: `remove.rs`).
    pub(super) removing: RwLock<()>,
    /// Opens answered under `--passthrough` and their modes (`opens.rs`; empty without it).
    pub opens: super::Opens,
    /// Whether passthrough is in effect, as INIT settled it (shared with `status`).
    pub passthrough: Arc<super::PassthroughState>,
    /// Fault injection for tests only ([`crate::faults::hold_named_write`]; `None` in a
    /// build without the `fault-injection` feature).
    pub(super) hold_named_write: Option<std::time::Duration>,
}

pub(super) fn err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl Core {
    /// # Errors
    /// Fails if the root cannot be stat'ed.
    pub fn new(root: OwnedFd, observer: Arc<dyn Observer>) -> io::Result<Core> {
        let st = sys::fstat(root.as_fd())?;
        Ok(Core {
            inodes: Inodes::new(&st),
            root,
            observer,
            as_root: sys::geteuid() == 0,
            closer: std::sync::OnceLock::new(),
            files: NodeFiles::default(),
            nameless: Mutex::new(()),
            removing: RwLock::new(()),
            opens: super::Opens::default(),
            passthrough: Arc::default(),
            hold_named_write: crate::faults::hold_named_write(),
        })
    }

    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The node's path: the root, or a valid path inside the workspace.
    pub(super) fn path(&self, ino: u64) -> io::Result<Node> {
        self.inodes.path(ino)
    }

    /// The path of `name` in directory `parent`: where the FUSE edge turns the kernel's names
    /// into workspace paths (errno as the call would give: `EINVAL`, `ENAMETOOLONG`).
    pub(super) fn child_path(&self, parent: u64, name: &OsStr) -> io::Result<WsPath> {
        // The name first: a bad name is refused as such even in a directory that is gone.
        sys::validate_name(name)?;
        Ok(self.path(parent)?.join(name.as_bytes())?)
    }

    /// [`Self::child_path`] with the parent's path already built (`parent`).
    pub(super) fn child_of(parent: &Node, name: &OsStr) -> io::Result<WsPath> {
        sys::validate_name(name)?;
        Ok(parent.join(name.as_bytes())?)
    }

    pub(super) fn before(
        &self,
        ctx: &Ctx,
        op: Op,
        path: &Node,
        path2: Option<&WsPath>,
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
                file: None,
                gone: None,
            },
        )
    }

    /// Before a change to an existing file's content or attributes, which every hard link of
    /// it shows.
    /// `range`: the bytes the change overwrites (see [`Change::range`]); `file`: the node's fd
    /// (see [`Change::file`]).
    pub(super) fn before_node(
        &self,
        ctx: &Ctx,
        op: Op,
        ino: u64,
        path: &Node,
        range: Option<(u64, u64)>,
        file: Option<BorrowedFd<'_>>,
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
                file,
                gone: None,
            },
        )
    }

    pub(super) fn after(&self, ctx: &Ctx, op: Op, path: &Node, path2: Option<&WsPath>) {
        self.observer.after(
            ctx.pid,
            &Change {
                op,
                path,
                path2,
                aliases: &[],
                last_name: false,
                range: None,
                file: None,
                gone: None,
            },
        );
    }

    /// Stats a node by path, checking it is still the file the node stands for.
    fn stat_node(&self, ino: u64) -> io::Result<(Node, Stat)> {
        let p = self.path(ino)?;
        let st = self.stat_node_at(ino, &p)?;
        Ok((p, st))
    }

    /// [`Self::stat_node`] with the node's path already built (`p`).
    pub(super) fn stat_node_at(&self, ino: u64, p: &Node) -> io::Result<Stat> {
        let st = sys::lstat_at(self.root(), p.as_path())?;
        if self.inodes.key(ino) != Some((st.st_dev, st.st_ino)) {
            return Err(err(libc::ESTALE));
        }
        Ok(st)
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> io::Result<(Looked, Stat)> {
        let p = self.child_path(parent, name)?;
        let st = sys::lstat_at(self.root(), p.as_path())?;
        Ok((self.inodes.lookup(parent, name, &st), st))
    }

    pub fn forget(&self, ino: u64, n: u64) {
        let gone = self.inodes.forget(ino, n);
        if gone > 0 {
            self.observer.nodes_removed(gone);
        }
        if self.inodes.key(ino).is_none() {
            // The node is gone, and its fd with it.
            self.drop_file(ino);
        }
    }

    /// Saves node `ino`'s whole pre-image in the current checkpoint, as before a change of all
    /// of it, and logs a write by `ctx`: for an open the kernel serves without the daemon
    /// (`opens.rs`). A file with no name left is refused (ETXTBSY): its inode may be the
    /// store's pre-image, which a write the daemon does not see would change.
    pub fn capture_whole(&self, ctx: &Ctx, ino: u64) -> io::Result<()> {
        let t = self.for_change(ino)?;
        let Some(p) = &t.path else {
            tracing::warn!(
                "node {ino}: a file with no name left cannot be opened for writing while \
                 another process reads it (--passthrough); refused with ETXTBSY"
            );
            return Err(err(libc::ETXTBSY));
        };
        let permit = self.before_node(ctx, Op::Write, ino, p, None, Some(t.file.fd.as_fd()))?;
        drop(permit);
        self.after(ctx, Op::Write, p, None);
        Ok(())
    }

    /// At a message boundary, after the new checkpoint began: saves the whole pre-image of
    /// every file open for writing through passthrough (`opens.rs`: the daemon sees none of
    /// their writes, so each must be saved before it could need it). A failure is logged: the
    /// boundary goes on, and the file's writes in this checkpoint lack a pre-image.
    pub fn capture_open_writers(&self) {
        for (ino, ctx) in self.opens.writers() {
            if let Err(e) = self.capture_whole(&ctx, ino) {
                tracing::error!(
                    "node {ino}: could not save the pre-image of a file open for writing \
                     through passthrough at a message boundary ({e}); a rewind to this message \
                     cannot restore it"
                );
            }
        }
    }

    /// Whether node `ino` is known (looked up and not forgotten).
    pub fn knows(&self, ino: u64) -> bool {
        self.inodes.key(ino).is_some()
    }

    pub fn getattr(&self, ino: u64) -> io::Result<Stat> {
        // A node with an fd (a file being read or written, after which the kernel asks again;
        // or one whose last name went) is answered by it, without a path walk.
        let f = self.files.get(ino);
        match f {
            Some(f) => {
                let mut st = sys::fstat(f.fd.as_fd())?;
                if f.adopted.load(Ordering::Relaxed) && self.path(ino).is_err() {
                    // Its links are the store's, not names of the file.
                    st.st_nlink = 0;
                }
                Ok(st)
            }
            None => self.stat_node(ino).map(|(_, st)| st),
        }
    }

    pub fn readlink(&self, ino: u64) -> io::Result<OsString> {
        let p = self.path(ino)?;
        sys::readlinkat(self.root(), p.as_path())
    }

    /// Gives a newly created file to the caller (the daemon creates as itself).
    fn own(&self, ctx: &Ctx, parent: &Node, rel: &Path, mode: u32, is_dir: bool) -> io::Result<()> {
        if !self.as_root || (ctx.uid == 0 && ctx.gid == 0) {
            return Ok(());
        }
        let pst = sys::lstat_at(self.root(), sys::at_path(parent.as_path()))?;
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
        p: &Node,
        op: Op,
    ) -> io::Result<(Looked, Stat)> {
        let st = sys::lstat_at(self.root(), p.as_path())?;
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
        let p = Node::from(Self::child_of(&pp, name)?);
        let mode = mode & !(umask & 0o777);
        let _permit = self.before(ctx, Op::Create, &p, None)?;
        if mode & libc::S_IFMT != libc::S_IFREG {
            sys::mknodat(self.root(), p.as_path(), mode, rdev as u64)?;
            self.own(ctx, &pp, p.as_path(), mode, false)?;
            return self.created(ctx, parent, name, &p, Op::Create);
        }
        // A regular file: CREATE is declined, so this is how open(O_CREAT) creates one, and its
        // writes follow. The fd is kept as the node's, for them.
        let fd = sys::openat(
            self.root(),
            p.as_path(),
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR,
            mode & 0o7777,
        )?;
        self.own(ctx, &pp, p.as_path(), mode, false)?;
        let st = sys::fstat(fd.as_fd())?;
        self.after(ctx, Op::Create, &p, None);
        let looked = self.inodes.lookup(parent, name, &st);
        self.inodes.set_no_caps(looked.ino); // a new inode has no capabilities
        self.keep_file(looked.ino, Arc::new(NodeFile::new(fd, true)));
        Ok((looked, st))
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
        let p = Node::from(Self::child_of(&pp, name)?);
        let mode = mode & !(umask & 0o777) & 0o7777;
        let _permit = self.before(ctx, Op::Mkdir, &p, None)?;
        sys::mkdirat(self.root(), p.as_path(), mode)?;
        self.own(ctx, &pp, p.as_path(), mode, true)?;
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
        let p = Node::from(Self::child_of(&pp, name)?);
        let _permit = self.before(ctx, Op::Symlink, &p, None)?;
        sys::symlinkat(target, self.root(), p.as_path())?;
        self.own(ctx, &pp, p.as_path(), 0, false)?;
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
        // The kernel links no directory, so never the root.
        let old = old.path().ok_or_else(|| err(libc::EPERM))?;
        let p = Node::from(p);
        let _permit = self.before(ctx, Op::Link, &p, Some(old))?;
        sys::linkat(self.root(), old.as_path(), p.as_path())?;
        let st = sys::lstat_at(self.root(), p.as_path())?;
        self.after(ctx, Op::Link, &p, Some(old));
        // Keep the node's existing name; only count the lookup the kernel now holds.
        let looked = self.inodes.lookup_link(newparent, newname, &st);
        Ok((looked, st))
    }

    pub fn statfs(&self) -> io::Result<rustix::fs::StatVfs> {
        sys::fstatvfs(self.root())
    }

    pub fn access(&self, ino: u64, mask: i32) -> io::Result<()> {
        let p = self.path(ino)?;
        sys::accessat(self.root(), p.as_path(), mask)
    }
}
