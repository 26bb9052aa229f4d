//! Extended attributes, through an `O_PATH` fd of the node opened for each request.
//!
//! The kernel reads `security.capability` before a write or chown, which may have to drop it,
//! so that question is answered from the inode table when it can be (`Inodes::no_caps`,
//! docs/design.md §6). Invariant: a file is known to have no such attribute only while nothing set
//! or removed it — every setxattr and removexattr comes through here and forgets that
//! knowledge before it acts (`Inodes::forget_no_caps`), and an answer read from the disk
//! before then cannot restore it (`Inodes::learn_no_caps`, with the epoch read first).
//!
//! Symlinks carry no extended attributes here (none listed, `ENODATA` to read or remove,
//! `EPERM` to set). setxattr and removexattr are changes like any other: observed before and
//! after.
//!
//! Methods of `Core` (the passthrough core; its state is in `core.rs`).

use crate::wspath::Node;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::OFlags;

use super::core::{Core, Ctx, err};
use crate::capture::Op;
use crate::sys;

/// The attribute the kernel reads before a write or chown may drop privileges.
const CAPS: &[u8] = b"security.capability";

impl Core {
    /// An fd usable for xattr calls through `/proc/self/fd`.
    fn xattr_fd(&self, ino: u64) -> io::Result<(Node, OwnedFd, bool)> {
        let p = self.path(ino)?;
        let fd = sys::open_beneath(self.root(), p.as_path(), OFlags::PATH, 0)?;
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
}
