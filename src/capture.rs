//! "Before this change": the hook every mutating filesystem operation calls.
//!
//! The FUSE core calls [`Observer::before`] with the workspace-relative path(s) a change is
//! about to touch, and applies the change only if it returns `Ok`. The recording observer
//! (see `Recorder`) saves the pre-image there — once per (checkpoint, path) — so no change
//! reaches the disk without its backup.

use std::io;
use std::path::Path;

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
}

/// Sees every change before and after it is applied.
pub trait Observer: Send + Sync {
    /// Called before the change is applied; an error refuses the change (its errno goes to
    /// the caller).
    fn before(&self, pid: u32, change: &Change<'_>) -> io::Result<()>;
    /// Called after the change succeeded.
    fn after(&self, pid: u32, change: &Change<'_>);
}

/// An observer that records nothing: a plain passthrough.
#[derive(Debug, Default)]
pub struct Passthrough;

impl Observer for Passthrough {
    fn before(&self, _pid: u32, _change: &Change<'_>) -> io::Result<()> {
        Ok(())
    }
    fn after(&self, _pid: u32, _change: &Change<'_>) {}
}
