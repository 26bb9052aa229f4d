//! Extended attributes in a rewind: which ones a rewind restores, whether the present differs
//! from a target in them, and giving a file, directory or special file exactly a target's.
//!
//! Invariants:
//! - a target whose attributes were not recorded (`None`: a capture by an older rewindfs) is
//!   never compared and its path's attributes are left alone;
//! - only [`restorable`] names are compared or changed, so a rewind run without privileges
//!   neither reports a difference it cannot undo nor fails on it;
//! - a failure to set or remove one attribute is logged and the others go on: a rewind does
//!   not fail, nor stay half applied, for an attribute (as for an owner it cannot set).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;

use crate::store::Xattrs;
use crate::sys;

/// Whether a rewind restores attribute `name`: every one when the daemon runs as root;
/// otherwise those a file's owner may set, `user.*` and POSIX ACLs (`system.posix_acl_*`).
/// (`security.*` and `trusted.*` need privileges, and others are not even shown `trusted.*`.)
pub(super) fn restorable(name: &[u8]) -> bool {
    sys::geteuid() == 0 || name.starts_with(b"user.") || name.starts_with(b"system.posix_acl_")
}

/// The restorable attributes of `x`.
fn restorable_of(x: &Xattrs) -> Vec<(&[u8], &[u8])> {
    x.iter().filter(|(n, _)| restorable(n)).collect()
}

/// Whether the present's attributes (`None`: unreadable) differ from `want` in what a rewind
/// restores.
pub(super) fn differ(now: Option<&Xattrs>, want: &Xattrs) -> bool {
    match now {
        Some(now) => restorable_of(now) != restorable_of(want),
        None => !restorable_of(want).is_empty(),
    }
}

/// The attributes of the file open at `fd`; `None` if they cannot be read.
pub(super) fn read(fd: BorrowedFd<'_>) -> Option<Xattrs> {
    sys::xattrs_of(fd).ok().map(Xattrs::new)
}

/// The attributes of `rel` beneath `root` (not a symlink); `None` if they cannot be read.
pub(super) fn read_at(root: BorrowedFd<'_>, rel: &Path) -> Option<Xattrs> {
    let fd = sys::open_beneath(root, rel, OFlags::PATH, 0).ok()?;
    read(fd.as_fd())
}

/// Gives the file open at `fd` (`rel`: its name, for the log) exactly the restorable
/// attributes of `want`: the others are removed, those that differ set. `None`: left alone.
pub(super) fn restore(fd: BorrowedFd<'_>, rel: &Path, want: Option<&Xattrs>) {
    let Some(want) = want else { return };
    let now = match sys::xattrs_of(fd) {
        Ok(pairs) => Xattrs::new(pairs),
        Err(e) => {
            tracing::warn!("rewind: extended attributes of {}: {e}", rel.display());
            Xattrs::default()
        }
    };
    let os = |n: &[u8]| OsStr::from_bytes(n).to_os_string();
    let mut failed: Vec<io::Error> = Vec::new();
    for (n, _) in now.iter().filter(|(n, _)| restorable(n)) {
        if want.get(n).is_none() {
            if let Err(e) = sys::removexattr(fd, &os(n)) {
                if e.raw_os_error() != Some(libc::ENODATA) {
                    failed.push(sys::ctx(
                        e,
                        format!("removexattr({}, {:?})", rel.display(), os(n)),
                    ));
                }
            }
        }
    }
    for (n, v) in want.iter().filter(|(n, _)| restorable(n)) {
        if now.get(n) != Some(v) {
            if let Err(e) = sys::setxattr(fd, &os(n), v, 0) {
                failed.push(sys::ctx(
                    e,
                    format!("setxattr({}, {:?})", rel.display(), os(n)),
                ));
            }
        }
    }
    for e in failed {
        tracing::warn!("rewind: an extended attribute was not restored: {e}");
    }
}

/// [`restore`] for `rel` beneath `root`, through an `O_PATH` fd (a directory, a special file).
pub(super) fn restore_at(root: BorrowedFd<'_>, rel: &Path, want: Option<&Xattrs>) {
    if want.is_none() {
        return;
    }
    match sys::open_beneath(root, rel, OFlags::PATH, 0) {
        Ok(fd) => restore(fd.as_fd(), rel, want),
        Err(e) => tracing::warn!("rewind: extended attributes of {}: {e}", rel.display()),
    }
}
