//! Directories: readdir, readdirplus and fsyncdir, all without a handle.
//!
//! OPENDIR is declined (see `fs/mod.rs`), so the kernel sends neither OPENDIR nor RELEASEDIR
//! and caches listings itself. Each request opens the directory by path, reads on from the
//! backing filesystem's own position cookie (which stays valid while the directory changes),
//! and closes it: no directory fd outlives a request, so walking a tree holds none (the
//! open-file limit, docs/design.md §6).
//!
//! Invariants: `.` is the node itself and `..` is the root's own id for the root (the kernel
//! looks neither up); readdirplus counts a lookup for every entry its reply carries and for
//! no other, as LOOKUP would (the kernel forgets each one it was handed).
//!
//! Methods of `Core` (the passthrough core; its state is in `core.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{OFlags, Stat};

use super::core::{Core, Ctx, DirEnt};
use super::inodes::{Looked, ROOT};
use crate::sys;

impl Core {
    /// Up to `max` entries of directory `ino` from position `offset` (0 or an entry's `next`).
    ///
    /// Directories are read without an open handle (OPENDIR is declined, so the kernel sends
    /// neither OPENDIR nor RELEASEDIR, and caches listings): each call opens the directory by
    /// path and continues at the backing filesystem's own position cookie, which stays valid
    /// while the directory changes. `.` is the node itself and `..` the root's id for the
    /// root (the kernel looks neither up).
    pub fn readdir(&self, ino: u64, offset: u64, max: usize) -> io::Result<Vec<DirEnt>> {
        let p = self.path(ino)?;
        let fd = sys::open_beneath(
            self.root(),
            p.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            0,
        )?;
        Self::entries(ino, fd.as_fd(), offset, max)
    }

    /// Like [`readdir`](Self::readdir), with each entry looked up (as LOOKUP would) and handed
    /// to `add` with its node and attributes, until `add` says the reply is full (that entry's
    /// lookup is then taken back). `.` and `..` come with the directory's own attributes and
    /// are not looked up. An entry gone since the directory was read is skipped.
    ///
    /// Entries are stat'ed relative to the directory's fd: one path walk per request instead
    /// of one per entry, and no path built per entry.
    pub fn readdirplus(
        &self,
        ino: u64,
        offset: u64,
        max: usize,
        mut add: impl FnMut(&DirEnt, &Stat, Option<Looked>) -> bool,
    ) -> io::Result<()> {
        let p = self.path(ino)?;
        let fd = sys::open_beneath(
            self.root(),
            p.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            0,
        )?;
        let ents = Self::entries(ino, fd.as_fd(), offset, max)?;
        let mut own: Option<Stat> = None;
        for e in &ents {
            if e.name == "." || e.name == ".." {
                // Not an error for the whole reply: entries before it may be added already.
                let st = match own.or_else(|| sys::fstat(fd.as_fd()).ok()) {
                    Some(st) => *own.insert(st),
                    None => continue,
                };
                if add(e, &st, None) {
                    break;
                }
                continue;
            }
            if sys::validate_name(&e.name).is_err() {
                continue;
            }
            let Ok(st) = sys::lstat_at(fd.as_fd(), Path::new(&e.name)) else {
                continue;
            };
            let l = self.inodes.lookup(ino, &e.name, &st);
            if add(e, &st, Some(l)) {
                // Not sent: the kernel did not take this lookup.
                self.forget(l.ino, 1);
                break;
            }
        }
        Ok(())
    }

    fn entries(ino: u64, fd: BorrowedFd<'_>, offset: u64, max: usize) -> io::Result<Vec<DirEnt>> {
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
        let fd = sys::open_beneath(
            self.root(),
            p.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            0,
        )?;
        sys::fsync(fd.as_fd(), datasync)
    }
}
