//! The table of node fds: at most one [`NodeFile`] per node, at most [`NODE_FILES`] in all. It
//! owns its map and the map's lock, which no caller sees: each method is one operation on the
//! table (HandleMap in fuse-backend-rs is the model). What goes in, when, and how an fd is
//! closed is `files.rs`'s.
//!
//! The lock is a leaf (see `files.rs` for the order): held only for the map operation itself,
//! never across a path walk, a call to the observer or the closing of an fd. The one call made
//! under it is the caller's `reopenable` test of eviction candidates.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::node_file::NodeFile;
use crate::locks::Locked;

/// The most node fds kept at once (the open-file limit is 20,000 and cannot be raised).
pub(super) const NODE_FILES: usize = 4096;
/// How many a full table gives up at once.
const NODE_FILES_EVICT: usize = 256;

/// Node fds by node id.
#[derive(Default)]
pub(super) struct NodeFiles(Mutex<HashMap<u64, Arc<NodeFile>>>);

impl NodeFiles {
    /// Node `ino`'s fd, if one is kept.
    pub(super) fn get(&self, ino: u64) -> Option<Arc<NodeFile>> {
        self.0.locked().get(&ino).cloned()
    }

    /// Keeps `f` as node `ino`'s fd, unless the node has one as good already (writable, or `f`
    /// is not), which is returned instead; a replaced fd's marks carry over to `f`. A full table
    /// first gives up a batch of unpinned fds that `reopenable` says can be opened again.
    /// Returns the fd kept and those given up, for the caller to close outside the lock.
    pub(super) fn keep(
        &self,
        ino: u64,
        f: Arc<NodeFile>,
        reopenable: impl Fn(&NodeFile) -> bool,
    ) -> (Arc<NodeFile>, Vec<Arc<NodeFile>>) {
        let mut evicted = Vec::new();
        let mut files = self.0.locked();
        if let Some(old) = files.get(&ino) {
            if old.writable || !f.writable {
                return (old.clone(), evicted);
            }
            f.take_marks(old);
        } else if files.len() >= NODE_FILES {
            let victims: Vec<u64> = files
                .iter()
                .filter(|(_, f)| !f.pinned.load(Ordering::Relaxed) && reopenable(f))
                .map(|(&i, _)| i)
                .take(NODE_FILES_EVICT)
                .collect();
            for i in victims {
                evicted.extend(files.remove(&i));
            }
        }
        if let Some(old) = files.insert(ino, f.clone()) {
            evicted.push(old);
        }
        (f, evicted)
    }

    /// Marks node `ino`'s fd pinned (and `adopted`, if so) in the entry the table holds, with
    /// no eviction in between: the table's fd, or `fresh` in its place where the table has none
    /// or only a read-only one (taking over its marks). `false`: no fd to pin.
    pub(super) fn pin(&self, ino: u64, fresh: Option<Arc<NodeFile>>, adopted: bool) -> bool {
        let mut files = self.0.locked();
        let f = match (files.get(&ino), fresh) {
            (Some(old), Some(new)) if !old.writable && new.writable => {
                new.take_marks(old);
                files.insert(ino, new.clone());
                new
            }
            (Some(old), _) => old.clone(),
            (None, Some(new)) => {
                files.insert(ino, new.clone());
                new
            }
            (None, None) => return false,
        };
        f.adopted.fetch_or(adopted, Ordering::Relaxed);
        f.pinned.store(true, Ordering::Relaxed);
        true
    }

    /// Node `ino`'s fd need not be kept past its forget any more (the removal did not happen).
    pub(super) fn unpin(&self, ino: u64) {
        if let Some(f) = self.0.locked().get(&ino) {
            f.pinned.store(false, Ordering::Relaxed);
            f.adopted.store(false, Ordering::Relaxed);
        }
    }

    /// Puts `f` in place of whatever node `ino` had, which is returned (to close outside the
    /// lock).
    pub(super) fn replace(&self, ino: u64, f: Arc<NodeFile>) -> Option<Arc<NodeFile>> {
        self.0.locked().insert(ino, f)
    }

    /// Takes node `ino`'s fd out of the table.
    pub(super) fn remove(&self, ino: u64) -> Option<Arc<NodeFile>> {
        self.0.locked().remove(&ino)
    }
}
