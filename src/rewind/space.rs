//! Room in the store for what a rewind captures: a rewind, undo or redo saves everything it
//! overwrites under its own checkpoint before writing (that is what makes it undoable), so on
//! a store whose filesystem cannot hold that, it is refused before it changes anything — never
//! started and cut short by `ENOSPC` half-way (issue 29: on a full store a rewind deleted 202
//! paths, then failed).
//!
//! The estimate is an upper bound: every regular file a target replaces or removes is counted
//! whole (a pre-image equal to a blob the store has costs nothing, and a reflink nothing either,
//! but neither is known without reading), in whole blocks, plus room for the rows.

use super::{Rewinder, Target};
use crate::store::Kind;
use crate::sys;
use crate::units::human_bytes;

/// Room kept for the database, the journal and the log besides the blobs.
const SLACK: u64 = 1 << 20;
/// Per path, for its rows.
const PER_PATH: u64 = 1 << 10;

/// Blocks this daemon may still write on a filesystem: root may use the blocks kept back for
/// it, others may not.
pub(super) fn free_blocks(vfs: &rustix::fs::StatVfs) -> u64 {
    if sys::geteuid() == 0 {
        vfs.f_bfree
    } else {
        vfs.f_bavail
    }
}

impl Rewinder {
    /// `Err`, in words that say how much is needed, how much is free and where, when the
    /// store's filesystem cannot hold what applying `targets` would capture.
    pub(super) fn check_space<'a>(
        &self,
        targets: impl IntoIterator<Item = &'a Target>,
    ) -> Result<(), String> {
        let dir = self.g.store.blobs.dir();
        let Ok(fd) = sys::open_dir_path(dir) else {
            return Ok(());
        };
        let Ok(vfs) = sys::fstatvfs(std::os::fd::AsFd::as_fd(&fd)) else {
            return Ok(());
        };
        let block = vfs.f_frsize.max(512);
        let free = free_blocks(&vfs).saturating_mul(block);
        let mut needed = SLACK;
        let mut files = 0u64;
        // Stat'ed on a few threads: a rewind of 10k paths took 70 ms here on one.
        let targets: Vec<&Target> = targets.into_iter().collect();
        let present = super::parallel::map(&targets, |t| {
            sys::lstat_beneath_opt(self.g.root(), t.path.as_path())
                .ok()
                .flatten()
                .map(|st| (st.st_mode, st.st_size))
        });
        for (t, now) in targets.iter().zip(present) {
            let Some((mode, size)) = now else {
                continue;
            };
            needed += PER_PATH;
            // A file that stays a file with the same content is not rewritten.
            let replaced = mode & libc::S_IFMT == libc::S_IFREG
                && !(t.kind == Kind::File && t.blob.is_none() && size == 0);
            if replaced {
                files += 1;
                needed += (size as u64).div_ceil(block) * block;
            }
        }
        if needed <= free {
            return Ok(());
        }
        Err(format!(
            "the store {} has {} free, and saving what this rewind overwrites ({files} file(s)) \
             needs about {}; nothing was changed. Free space on that filesystem, or drop old \
             checkpoints (`rewindfs gc --max-store-bytes SIZE`), then repeat",
            dir.parent().unwrap_or(dir).display(),
            human_bytes(free),
            human_bytes(needed)
        ))
    }
}
