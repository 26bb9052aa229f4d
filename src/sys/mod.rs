//! Raw system calls, in one place.
//!
//! Everything that talks to the kernel about the backing directory goes through here, on top
//! of rustix (the crate denies `unsafe`; `process.rs` has its exceptions, `malloc_trim`,
//! `mallopt`, `close_range`, `signal` and the `PROCMAP_QUERY` ioctl, each with its `SAFETY`
//! note). Two rules hold for every function:
//! - paths are always relative to a directory fd that the caller holds (the workspace's
//!   underlying directory, opened before the mount covered it); nothing here builds an
//!   absolute path into the project;
//! - untrusted paths (from the control socket or a rewind plan) are resolved with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a symlink planted in the workspace
//!   can never redirect a write outside it.
//!
//! Files: `paths.rs` (resolving and checking paths, opening beneath a directory), `files.rs`
//! (changing files and directories, reading and writing them), `fsinfo.rs` (filesystems and
//! directory listings), `xattr.rs` (extended attributes), `process.rs` (processes, /proc,
//! sockets, mounting); errors with their errno here.

mod files;
mod fsinfo;
mod paths;
mod process;
mod xattr;

pub use self::files::*;
pub use self::fsinfo::*;
pub use self::paths::*;
pub use self::process::*;
pub use self::xattr::*;

use std::io;

/// Longest file name the kernel allows on the backing filesystems we support.
pub const NAME_MAX: usize = 255;

/// The filesystem magic FUSE mounts report in `statfs`.
pub const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// Wraps an io error with the call and its argument, keeping the errno.
pub fn ctx(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    match (e.raw_os_error(), known_errno(&e)) {
        (Some(code), _) => {
            // `base` says "… (os error N)" itself.
            // `coded`, not `io::Error::new`: that keeps only the kind, and `EROFS` would reach a
            // FUSE caller as `EIO`.
            let base = io::Error::from_raw_os_error(code);
            coded(code, format!("{what}: {base}"))
        }
        // Wrapped before: its message already names the errno.
        (None, Some(code)) => coded(code, format!("{what}: {e}")),
        (None, None) => io::Error::new(e.kind(), format!("{what}: {e}")),
    }
}

/// The errno an error carries, its own or a [`Coded`]'s; `None` if it came from no system call.
pub fn known_errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|i| i.downcast_ref::<Coded>())
            .map(|c| c.errno)
    })
}

/// An error whose message says what happened and which keeps its errno through `io::Error`
/// (whose `new` keeps only the kind): the store's `EROFS` reaches a FUSE caller as `EROFS`,
/// not `EIO`.
#[derive(Debug)]
pub struct Coded {
    /// The errno a FUSE caller gets.
    pub errno: i32,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// An `io::Error` saying `message` that carries `errno` (see [`errno_of`]).
pub fn coded(errno: i32, message: String) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        Coded { errno, message },
    )
}

/// The errno of an error: its own, or the one a [`Coded`] carries; else the closest to its
/// kind (a full disk `ENOSPC`, a busy resource `EAGAIN`), else `EIO`.
pub fn errno_of(e: &io::Error) -> i32 {
    if let Some(code) = known_errno(e) {
        return code;
    }
    match e.kind() {
        io::ErrorKind::StorageFull => libc::ENOSPC,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        _ => libc::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call wrapped with what it was keeps its errno, and says it once.
    #[test]
    fn an_error_named_by_its_call_keeps_its_errno() {
        for code in [libc::EROFS, libc::ENOENT, libc::ENOSPC, libc::EACCES] {
            let e = ctx(
                io::Error::from_raw_os_error(code),
                "renameat2(\"a\", \"b\")",
            );
            assert_eq!(errno_of(&e), code, "{e}");
            let s = e.to_string();
            assert!(s.starts_with("renameat2(\"a\", \"b\"): "), "{s}");
            assert_eq!(s.matches("os error").count(), 1, "{s}");
            // Wrapped again (the store's error around it), it still carries the number.
            let store: io::Error = crate::store::StoreError::Io(e).into();
            assert_eq!(errno_of(&store), code, "{store}");
        }
    }
}
