//! A file's content and attributes: read, write, copy_file_range, fallocate, lseek, fsync and
//! setattr.
//!
//! Reads go to the node's fd from the cache (`files.rs`): after the first, no path walk.
//!
//! Invariants every change here keeps:
//! - a change to a file's content, and any change to a file with no name left, works on the
//!   node's fd as [`Core::for_change`] hands it out and holds its guard until done:
//!   `removing` shared for a file found by its name (so a removal cannot adopt the inode
//!   under it, see `remove.rs`), `nameless` for one with no name left, whose adopted inode is
//!   then never the one changed (a private copy is). Other attribute changes go by path;
//! - the observer's `before` runs before anything changes — for a change to content, with the
//!   bytes it overwrites and the fd to read them from, so the pre-image costs what the change
//!   overwrites (docs/design.md §6b) — and `after` once it succeeded. A file with no name left is
//!   not observed: nothing in the workspace shows it any more;
//! - set-user/group-ID bits are cleared here, not by the backing filesystem, when the caller
//!   lacks `CAP_FSETID` (`FUSE_HANDLE_KILLPRIV_V2`; the daemon has the capability itself).
//!
//! Methods of `Core` (the passthrough core; its state is in `core.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

use rustix::fs::Stat;

use super::core::{Core, Ctx, SetAttr, err};
use crate::capture::Op;
use crate::sys;
use crate::wspath::Node;

impl Core {
    /// Reads at `off` into `buf` (the reply's own buffer); returns the bytes read.
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        let f = self.node_file(ino, false)?;
        sys::pread_full(f.fd.as_fd(), buf, off)
    }

    /// Writes `data` at `off`; `kill_suid_sgid` when the kernel says the writer may not keep
    /// the file's set-user/group-ID bits (`FUSE_WRITE_KILL_SUIDGID`).
    pub fn write(
        &self,
        ctx: &Ctx,
        ino: u64,
        off: u64,
        data: &[u8],
        kill_suid_sgid: bool,
    ) -> io::Result<usize> {
        let t = self.for_change(ino)?;
        if let (Some(hold), Some(_)) = (self.hold_named_write, &t.path) {
            std::thread::sleep(hold);
        }
        let _permit = match &t.path {
            Some(p) => {
                let range = Some((off, data.len() as u64));
                self.before_node(ctx, Op::Write, ino, p, range, Some(t.file.fd.as_fd()))?
            }
            None => None,
        };
        if kill_suid_sgid {
            Self::kill_suid_sgid(t.file.fd.as_fd(), ctx.gid)?;
        }
        let mut done = 0;
        while done < data.len() {
            let n = sys::pwrite(t.file.fd.as_fd(), &data[done..], off + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        if let Some(p) = &t.path {
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

    pub fn fsync(&self, ctx: &Ctx, ino: u64, datasync: bool) -> io::Result<()> {
        if sys::is_own_thread(ctx.pid) {
            // The daemon's own fsync through the mount at a message boundary: it only makes
            // the kernel hand over the file's dirty (mmap) pages, which it has done before
            // sending this; syncing the disk is not asked for.
            return Ok(());
        }
        let f = self.node_file(ino, false)?;
        sys::fsync(f.fd.as_fd(), datasync)
    }

    pub fn copy_file_range(
        &self,
        ctx: &Ctx,
        (ino_in, off_in): (u64, u64),
        (ino_out, off_out): (u64, u64),
        len: u64,
    ) -> io::Result<usize> {
        let src = self.node_file(ino_in, false)?;
        let t = self.for_change(ino_out)?;
        let _permit = match &t.path {
            Some(p) => {
                let range = Some((off_out, len));
                self.before_node(ctx, Op::Write, ino_out, p, range, Some(t.file.fd.as_fd()))?
            }
            None => None,
        };
        let n = sys::copy_file_range(
            src.fd.as_fd(),
            off_in,
            t.file.fd.as_fd(),
            off_out,
            len.min(1 << 30) as usize,
        )?;
        if let Some(p) = &t.path {
            self.after(ctx, Op::Write, p, None);
        }
        Ok(n)
    }

    pub fn fallocate(&self, ctx: &Ctx, ino: u64, off: u64, len: u64, mode: i32) -> io::Result<()> {
        let t = self.for_change(ino)?;
        let _permit = match &t.path {
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
                self.before_node(ctx, Op::Fallocate, ino, p, range, Some(t.file.fd.as_fd()))?
            }
            None => None,
        };
        sys::fallocate(t.file.fd.as_fd(), mode, off, len)?;
        if let Some(p) = &t.path {
            self.after(ctx, Op::Fallocate, p, None);
        }
        Ok(())
    }

    pub fn lseek(&self, ino: u64, off: i64, whence: i32) -> io::Result<u64> {
        let f = self.node_file(ino, false)?;
        sys::lseek(f.fd.as_fd(), off, whence)
    }

    pub fn setattr(&self, ctx: &Ctx, ino: u64, a: SetAttr) -> io::Result<Stat> {
        let kind = self.inodes.kind(ino).unwrap_or(0);
        let named = self.path(ino).ok();
        // A file's content or attributes change through its fd when it has no name left (and
        // then perhaps a copy's: see `for_change`); otherwise by path, except a truncate.
        let nameless = named.is_none() && kind == libc::S_IFREG;
        let target = if nameless || (a.size.is_some() && kind != libc::S_IFDIR) {
            Some(self.for_change(ino)?)
        } else {
            None
        };
        let p = match &target {
            Some(t) => t.path.clone(),
            None => named,
        };
        let fd = target.as_ref().map(|t| t.file.fd.as_fd());
        let op = if a.size.is_some() {
            Op::Truncate
        } else if a.mode.is_some() {
            Op::Chmod
        } else if a.uid.is_some() || a.gid.is_some() {
            Op::Chown
        } else {
            Op::Utimes
        };
        let _permit = if let Some(p) = &p {
            // A truncate overwrites what lies past the new size.
            let range = a.size.map(|n| (n, u64::MAX - n));
            self.before_node(ctx, op, ino, p, range, fd)?
        } else {
            None
        };
        if let Some(size) = a.size {
            let fd = fd.ok_or_else(|| err(libc::EISDIR))?;
            sys::ftruncate(fd, size)?;
            if let Some(t) = &target {
                t.file.truncated.store(true, Ordering::Relaxed);
            }
            // The kernel asks for this with FATTR_KILL_SUIDGID when the caller lacks CAP_FSETID;
            // fuser does not pass that bit on, and root is who has the capability.
            if ctx.uid != 0 {
                Self::kill_suid_sgid(fd, ctx.gid)?;
            }
        }
        self.set_meta(p.as_ref(), fd, kind, &a)?;
        if let Some(p) = &p {
            self.after(ctx, op, p, None);
        }
        match (fd, &p) {
            (Some(fd), _) => sys::fstat(fd),
            // By the path already built, unless the node has an fd, which `getattr` prefers.
            // A directory on the path renamed since is walked again: the change was made.
            (None, Some(p)) if self.files.get(ino).is_none() => {
                self.stat_node_at(ino, p).or_else(|_| self.getattr(ino))
            }
            (None, _) => self.getattr(ino),
        }
    }

    /// The owner, mode and times a setattr asks for: set by path when the node has one (`p`),
    /// else through its fd; `kind` is the node's `S_IFMT` bits.
    fn set_meta(
        &self,
        p: Option<&Node>,
        fd: Option<BorrowedFd<'_>>,
        kind: u32,
        a: &SetAttr,
    ) -> io::Result<()> {
        if a.uid.is_some() || a.gid.is_some() {
            match (p, fd) {
                (Some(p), _) => sys::lchownat(self.root(), p.as_path(), a.uid, a.gid)?,
                (None, Some(fd)) => {
                    let st = sys::fstat(fd)?;
                    sys::fchown(fd, a.uid.unwrap_or(st.st_uid), a.gid.unwrap_or(st.st_gid))?
                }
                (None, None) => return Err(err(libc::ENOENT)),
            }
        }
        if let Some(mode) = a.mode {
            if kind == libc::S_IFLNK {
                return Err(err(libc::EOPNOTSUPP));
            }
            match (p, fd) {
                (Some(p), _) => sys::chmodat(self.root(), p.as_path(), mode & 0o7777)?,
                (None, Some(fd)) => sys::fchmod(fd, mode & 0o7777)?,
                (None, None) => return Err(err(libc::ENOENT)),
            }
        }
        if a.atime.is_some() || a.mtime.is_some() {
            match (p, fd) {
                (Some(p), _) => sys::lutimensat(self.root(), p.as_path(), a.atime, a.mtime)?,
                (None, Some(fd)) => sys::futimens(fd, a.atime, a.mtime)?,
                (None, None) => return Err(err(libc::ENOENT)),
            }
        }
        Ok(())
    }
}
