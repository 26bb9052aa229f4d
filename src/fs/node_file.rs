//! A backing fd the node-fd cache holds for a node, and the marks that say what it stands for
//! (`files.rs` says when one is opened, kept and closed). A value of its own, apart from the
//! cache, so that the core's table of them and the cache's code need not reach each other.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// A backing fd held for a node, and the marks that say what it stands for (see the module
/// doc for when it is opened, kept and closed).
#[derive(Debug)]
pub(super) struct NodeFile {
    pub(super) fd: OwnedFd,
    /// Opened for reading and writing (else the backing file allowed reading only).
    pub(super) writable: bool,
    /// The file lost its last name while the kernel held the node, which may still be open:
    /// this fd is the only way to it, kept until the kernel forgets the node.
    pub(super) pinned: AtomicBool,
    /// ...and its inode may be kept by the store as the pre-image of that removal (adopted by
    /// a hard link): it is changed only after a copy has taken its place (see `for_change`).
    pub(super) adopted: AtomicBool,
    /// Truncated through this fd: ext4 writes such a file's data out at the close, which is
    /// left to the closer thread.
    pub(super) truncated: AtomicBool,
}

impl NodeFile {
    pub(super) fn new(fd: OwnedFd, writable: bool) -> NodeFile {
        NodeFile {
            fd,
            writable,
            pinned: AtomicBool::new(false),
            adopted: AtomicBool::new(false),
            truncated: AtomicBool::new(false),
        }
    }

    /// Takes over the marks of `old`, the fd this one replaces for the same node.
    pub(super) fn take_marks(&self, old: &NodeFile) {
        for (new, old) in [
            (&self.pinned, &old.pinned),
            (&self.adopted, &old.adopted),
            (&self.truncated, &old.truncated),
        ] {
            new.fetch_or(old.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}
