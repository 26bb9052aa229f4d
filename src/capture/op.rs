//! What a change is, as the FUSE core describes it to the recorder: the operation ([`Op`]),
//! the path(s) it touches ([`Change`]) and which bytes of the content it overwrites
//! ([`Need`]).
//!
//! Plain data, no locks and no I/O. The one rule kept here is how a change maps to the part
//! of a file's state that must be saved before it runs: metadata changes need no content,
//! a write, truncate or hole punch with a known range needs only those bytes, anything else
//! needs all of it.

use crate::wspath::{Node, WsPath};
use std::os::fd::BorrowedFd;

use rustix::fs::Stat;

pub use crate::store::Op;

/// One change: the operation, its path and (for rename and link) the second path.
///
/// For `Rename`, `path` is the source and `path2` the target; for `Link`, `path` is the new
/// name and `path2` the existing one.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    pub op: Op,
    pub path: &'a Node,
    pub path2: Option<&'a WsPath>,
    /// Other names of the same file (hard links) whose content the change also changes.
    pub aliases: &'a [WsPath],
    /// The change takes away the only name of the regular file at its target (`path` of an
    /// unlink, `path2` of a rename over it) and nobody has that file open for writing: its
    /// pre-image may be kept by hard-linking the file into the store instead of copying it.
    pub last_name: bool,
    /// For a write, truncate or hole punch: the bytes it overwrites, `(offset, length)` (the
    /// length may run past the end of the file). `None`: the whole content, or for changes
    /// of metadata, none of it.
    pub range: Option<(u64, u64)>,
    /// The file at `path`, open (the node's fd), for a change to its content: the pre-image is
    /// read from it, with no lookup of the path and no fd of the file closed. (Closing any fd of
    /// a file truncated and written again makes ext4 write its data out, and the next truncate
    /// waits for that write: a capture that opened and closed the file put a disk write on
    /// every truncating edit after a boundary.)
    pub file: Option<BorrowedFd<'a>>,
    /// With `last_name`: the stat the caller has just taken of the file that loses its name
    /// (an adoption's link is checked against it; `None`: the store stats the file itself).
    pub gone: Option<&'a Stat>,
}

/// Which bytes of a file's content a change is about to overwrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// None: the change touches metadata only.
    Meta,
    /// `(offset, length)`.
    Bytes(u64, u64),
    /// All of them (or the file's name goes away).
    All,
}

impl Change<'_> {
    /// Which of the file's bytes this change overwrites, so which must be saved first.
    pub(super) fn need(&self) -> Need {
        match (self.op, self.range) {
            (Op::Chmod | Op::Chown | Op::Utimes | Op::Setxattr, _) => Need::Meta,
            (Op::Write | Op::Truncate | Op::Fallocate, Some((off, len))) => Need::Bytes(off, len),
            _ => Need::All,
        }
    }
}
