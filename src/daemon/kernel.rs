//! The kernel side of rewinds, on top of the FUSE session: write back what the kernel still
//! holds before a boundary or a rewind. (A rewind changes the tree through the mount, so what
//! the kernel caches of it follows by itself.)
//!
//! The write-back goes through the mount, so it is made from a short-lived child process
//! (`rewindfs __flush`, [`run_flush`]), never from a daemon thread: a daemon killed while one of
//! its threads waits on its own mount would never exit (see `rewind/helper.rs`). The daemon
//! waits for the child at most [`FLUSH_WAIT`], then kills it and goes on (the data it did not
//! flush lands in the next checkpoint instead).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::fs::Core;
use crate::sys;
use crate::turns::KernelCache;

/// The hidden subcommand that runs [`run_flush`].
pub const FLUSH_SUBCOMMAND: &str = "__flush";

/// How long the daemon waits for a flush before it gives up on it.
const FLUSH_WAIT: Duration = Duration::from_secs(30);

/// The kernel side of rewinds, on top of the FUSE session: `syncfs` on the mount to write back
/// dirty pages.
pub(super) struct FuseKernel {
    /// Set once the session is up.
    pub(super) mounted: std::sync::atomic::AtomicBool,
    /// The mount's device, set with `mounted` (read without a request to the mount).
    pub(super) dev: OnceLock<u64>,
    pub(super) core: Arc<Core>,
    /// The mount point.
    pub(super) dir: PathBuf,
    /// Finds the files mapped for writing (each process's maps kept open between boundaries).
    pub(super) mappings: sys::MappingScanner,
}

impl KernelCache for FuseKernel {
    fn after_boundary(&self) {
        self.core.capture_open_writers();
    }

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
        //
        // The maps name each file by its node (the inode number the kernel shows), reopened
        // through the mount; one with no name left, through the mapping (root only).
        let files: Vec<PathBuf> = self
            .dev
            .get()
            .map(|dev| self.mappings.shared_writable(*dev))
            .unwrap_or_default()
            .into_iter()
            .map(|(node, mapping)| match self.core.inodes.path(node) {
                Ok(p) => self.dir.join(p.as_path()),
                Err(_) => mapping,
            })
            .collect();
        // No file is mapped for writing: nothing is dirty that a write has not already brought
        // here (no writeback cache), and the helper's syncfs alone would not wait for it
        // anyway. Starting it would only cost the boundary a process (about 10 ms of the
        // 11 ms a begin_message took: scripts/bench-begin.sh).
        if files.is_empty() {
            return;
        }
        let t = Instant::now();
        let mut child = match Command::new("/proc/self/exe")
            .arg(FLUSH_SUBCOMMAND)
            .arg(&self.dir)
            .args(&files)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    "flushing {}: starting `rewindfs {FLUSH_SUBCOMMAND}`: {e}",
                    self.dir.display()
                );
                return;
            }
        };
        let mut pause = Duration::from_micros(200);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        tracing::warn!("flushing {}: {status} (see above)", self.dir.display());
                    }
                    return;
                }
                Ok(None) if t.elapsed() < FLUSH_WAIT => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Ok(None) => {
                    tracing::warn!(
                        "flushing {}: no answer in {FLUSH_WAIT:?}; stopped (what it did not \
                         write back counts in the next checkpoint)",
                        self.dir.display()
                    );
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Err(e) => {
                    tracing::warn!("flushing {}: waiting: {e}", self.dir.display());
                    return;
                }
            }
        }
    }
}

/// `rewindfs __flush DIR [FILE...]`: `syncfs` on the mount at `dir`, then `fsync` of each of
/// `files` (files mapped for writing), from a process of its own (see the module doc).
///
/// # Errors
/// The last failure; every file is tried.
pub fn run_flush(dir: &Path, files: &[PathBuf]) -> io::Result<()> {
    sys::close_fds_from(3)?;
    sys::die_with_parent()?;
    let mut last = Ok(());
    match File::open(dir) {
        Ok(f) => {
            if let Err(e) = sys::syncfs(f.as_fd()) {
                last = Err(sys::ctx(e, format!("syncfs {}", dir.display())));
            }
        }
        Err(e) => last = Err(sys::ctx(e, format!("open {}", dir.display()))),
    }
    for path in files {
        if let Err(e) = File::open(path).and_then(|f| f.sync_data()) {
            last = Err(sys::ctx(e, format!("flushing {}", path.display())));
        }
    }
    last
}
