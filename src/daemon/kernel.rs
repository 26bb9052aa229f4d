//! The kernel side of rewinds, on top of the FUSE session: write back what the kernel still
//! holds before a boundary or a rewind. (A rewind changes the tree through the mount, so what
//! the kernel caches of it follows by itself.)

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::fs::Core;
use crate::rewind::KernelCache;
use crate::sys;

/// The kernel side of rewinds, on top of the FUSE session: `syncfs` on the mount to write back
/// dirty pages.
pub(super) struct FuseKernel {
    /// Set once the session is up.
    pub(super) mounted: std::sync::atomic::AtomicBool,
    pub(super) core: Arc<Core>,
    /// The mount point (opened lazily, from a thread that is not serving FUSE requests).
    pub(super) dir: PathBuf,
}

impl KernelCache for FuseKernel {
    fn flush(&self) {
        if !self.mounted.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        // syncfs starts writing back every dirty page, but the kernel does not wait for a
        // FUSE daemon to have received them; fsync of a file does (it waits for the file's
        // pending writes to be answered). Only pages written through a shared mapping are
        // dirty here (a write() reaches the daemon before it returns), and the kernel writes a
        // file's pages back when it is closed: what is left are files still mapped for
        // writing, found in the processes' maps, and synced through them.
        let dev = match File::open(&self.dir) {
            Ok(f) => {
                if let Err(e) = sys::syncfs(f.as_fd()) {
                    tracing::warn!("syncfs {}: {e}", self.dir.display());
                }
                sys::fstat(f.as_fd()).map(|st| st.st_dev).ok()
            }
            Err(e) => {
                tracing::warn!("open {}: {e}", self.dir.display());
                None
            }
        };
        // The maps name each file by its node (the inode number the kernel shows), reopened
        // through the mount; one with no name left, through the mapping (root only).
        for (node, mapping) in dev.map(sys::shared_writable_mappings).unwrap_or_default() {
            let path = match self.core.inodes.path(node) {
                Ok(p) => self.dir.join(p),
                Err(_) => mapping,
            };
            if let Ok(f) = File::open(&path) {
                if let Err(e) = f.sync_data() {
                    tracing::warn!("flushing {}: {e}", path.display());
                }
            }
        }
    }
}
