//! The node-fd cache: the backing fds rewindfs keeps per node, for the reads and writes the
//! kernel sends by node, and to keep a file reachable after its last name went.
//!
//! OPEN and CREATE are declined (see `fs/mod.rs`), so the kernel reads and writes the files it
//! opens by node, with no handle. A node's fd ([`NodeFile`]) is opened by path at its first
//! such request, or kept from its creation (`mknod`), and stays in `Core::files` (a
//! [`NodeFiles`](super::node_files::NodeFiles), which owns the table and its lock) until the
//! kernel forgets the node or the cache is full.
//!
//! Invariants:
//! - at most one fd per node, and at most `NODE_FILES` in all (the open-file limit is 20,000
//!   and cannot be raised: docs/design.md §6). A full cache closes a batch of fds that can be opened
//!   again as they were ([`Core::reopenable`]), never a pinned one;
//! - an fd opened by path is checked against the node's backing `(dev, ino)` (`ESTALE`
//!   otherwise): the cache never holds another file's fd under a node;
//! - a cached fd is replaced only by a better one (writable for read-only), which takes over
//!   its marks ([`NodeFile::take_marks`]): a read that opened the file just before a removal
//!   pinned it can never drop the pin;
//! - `pinned`: the node's file lost, or is losing, its last name the kernel knows while the
//!   kernel holds the node (see `remove.rs`); this fd is the only way to it, kept until
//!   `forget`;
//! - `adopted`: the store may hold the inode as a removal's pre-image. Nothing changes that
//!   inode through the node any more: the first change puts an unnamed copy in its place
//!   ([`Core::for_change`], under `nameless`);
//! - an fd whose close costs (an unlinked file's frees it, a truncated one's writes it out) is
//!   closed on the closer thread when there is one ([`Core::closer`]); fds evicted, forgotten
//!   or replaced by a private copy are closed outside the cache's lock (`pin` drops the fd it
//!   does not keep under it, which costs little: the file stays open through the one kept).
//!
//! Lock order: `removing` (shared, a change to a named file; see `remove.rs`) or `nameless`
//! (a change to a nameless one), then the observer's locks (capture), then `inodes` and
//! `files`. Those two are leaves, never held while the other is taken; `files` is held only
//! for map operations and never across a path walk or a call to the observer (the one syscall
//! under it is the eviction's `fstat` of cached fds, when not running as root).
//!
//! Methods of `Core` (the passthrough core; its state is in `core.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, RwLockReadGuard};

use rustix::fs::OFlags;

use super::core::{Core, err};
pub(super) use super::node_file::NodeFile;
use crate::locks::{Locked, RwLocked};
use crate::sys;
use crate::wspath::Node;

/// What a change to a file's content works on (see [`Core::for_change`]).
pub(super) struct Target<'a> {
    pub(super) file: Arc<NodeFile>,
    /// The node's path; `None` when it has no name left.
    pub(super) path: Option<Node>,
    /// For a node with no name left: held until the change is done.
    _nameless: Option<MutexGuard<'a, ()>>,
    /// For a named one: held until the change is done (see `Core::removing`).
    _named: Option<RwLockReadGuard<'a, ()>>,
}

/// Batches of fds waiting for the closer; past this a release closes its fd itself.
const CLOSE_QUEUE: usize = 1024;

impl Core {
    /// The loop of a thread that closes released files opened with `O_TRUNC` (at most once;
    /// `None` after). Closing is then the costly part of a release — ext4 writes out a
    /// truncated-and-rewritten file's data when its last fd closes, ~40 µs — and the kernel
    /// does not wait for RELEASE, but a ring thread is pinned to the caller's CPU, so closing
    /// there delays the caller's next request; a closer thread lets the other CPU do it.
    pub fn closer(&self) -> Option<impl FnOnce() + Send + 'static> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<OwnedFd>>(CLOSE_QUEUE);
        self.closer.set(tx).ok()?;
        Some(move || {
            for fds in rx {
                drop(fds);
            }
        })
    }

    /// Closes `fds` on the closer thread when there is one (else here).
    fn close_elsewhere(&self, fds: Vec<OwnedFd>) {
        if fds.is_empty() {
            return;
        }
        if let Some(tx) = self.closer.get() {
            // A full queue or a stopped closer hands the fds back, and they close here.
            let _ = tx.try_send(fds);
        }
    }

    /// Node `ino`'s fd, opened by path if it has none yet (or only a read-only one, for a
    /// write). A node with no name left has only its pinned fd.
    pub(super) fn node_file(&self, ino: u64, write: bool) -> io::Result<Arc<NodeFile>> {
        if let Some(f) = self.files.get(ino) {
            if f.writable || !write {
                return Ok(f);
            }
        }
        let p = self.path(ino)?;
        let f = Arc::new(self.open_node(ino, p.as_path(), write)?);
        Ok(self.keep_file(ino, f))
    }

    /// Opens node `ino`'s file at `p` for reading and writing (the kernel checked the caller's
    /// access: default_permissions), or for reading only where the backing file allows no
    /// more and `write` is not needed.
    fn open_node(&self, ino: u64, p: &Path, write: bool) -> io::Result<NodeFile> {
        let (fd, writable) = match sys::open_beneath(self.root(), p, OFlags::RDWR, 0) {
            Ok(fd) => (fd, true),
            Err(e)
                if !write
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EACCES | libc::EPERM | libc::EROFS | libc::ETXTBSY)
                    ) =>
            {
                (sys::open_beneath(self.root(), p, OFlags::RDONLY, 0)?, false)
            }
            Err(e) => return Err(e),
        };
        let st = sys::fstat(fd.as_fd())?;
        if self.inodes.key(ino) != Some((st.st_dev, st.st_ino)) {
            return Err(err(libc::ESTALE));
        }
        Ok(NodeFile::new(fd, writable))
    }

    /// Keeps `f` as node `ino`'s fd and returns it, unless the node has one as good already
    /// (writable, or `f` is not), which is kept and returned instead: another request may have
    /// opened one meanwhile, or a removal pinned one. A replaced fd's marks carry over. A full
    /// cache first closes a batch of fds that can be opened again.
    pub(super) fn keep_file(&self, ino: u64, f: Arc<NodeFile>) -> Arc<NodeFile> {
        let (f, evicted) = self.files.keep(ino, f, |f| self.reopenable(f));
        // A request still using one keeps it open until it is done.
        let fds = evicted
            .into_iter()
            .filter_map(|f| Arc::try_unwrap(f).ok())
            .map(|f| f.fd)
            .collect();
        self.close_elsewhere(fds);
        f
    }

    /// Whether a cached fd can be given up: it can be opened again as it was. As root always;
    /// otherwise not a writable fd of a file its owner may no longer write (created read-only,
    /// or chmod'ed since), which the process that opened it may still write through.
    fn reopenable(&self, f: &NodeFile) -> bool {
        self.as_root
            || !f.writable
            || sys::fstat(f.fd.as_fd()).is_ok_and(|st| st.st_mode & libc::S_IWUSR != 0)
    }

    /// Before a change that may take away the last name of the file of node `ino` (at `p`):
    /// the node's fd is pinned, so whoever has the file open can still reach it; `adopted`
    /// when the store may keep that inode as the pre-image. Returns whether it was pinned.
    pub(super) fn pin(&self, ino: u64, p: &Path, adopted: bool) -> bool {
        let have = self.files.get(ino).is_some_and(|f| f.writable);
        // Read-only (or none yet): writing to the file once it has no name needs more.
        let fresh = if have {
            None
        } else {
            match self.open_node(ino, p, false) {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    // The removal goes on; only a process that still has the file open loses it
                    // (its reads and writes fail with ESTALE): said where it can be found.
                    tracing::warn!(
                        "{}: could not keep an fd of it before its last name goes ({e}); a \
                         process that has it open can no longer use it",
                        p.display()
                    );
                    None
                }
            }
        };
        // Marked in the entry the table holds: no eviction can take it out in between.
        self.files.pin(ino, fresh, adopted)
    }

    /// The removal did not happen after all: node `ino`'s fd need not be kept.
    pub(super) fn unpin(&self, ino: u64) {
        self.files.unpin(ino);
    }

    /// The fd, path and guard for a change to node `ino`'s content or attributes.
    ///
    /// A node with no name left is a file someone holds open after its last name went. If
    /// the store adopted its inode as the pre-image of that removal, the store's copy must not
    /// change: a copy of the file (unnamed, `O_TMPFILE`) takes the node's place before the
    /// first change, and the writer works on that. Such changes are rare, and run one at a
    /// time (the guard), so none can reach the inode the node had before.
    pub(super) fn for_change(&self, ino: u64) -> io::Result<Target<'_>> {
        let named = self.removing.shared();
        if let Ok(p) = self.path(ino) {
            return Ok(Target {
                file: self.node_file(ino, true)?,
                path: Some(p),
                _nameless: None,
                _named: Some(named),
            });
        }
        drop(named);
        let guard = self.nameless.locked();
        let mut file = self.node_file(ino, true)?;
        if file.adopted.load(Ordering::Relaxed) && sys::fstat(file.fd.as_fd())?.st_nlink > 0 {
            let copy = NodeFile::new(self.private_copy(file.fd.as_fd())?, true);
            copy.pinned.store(true, Ordering::Relaxed);
            file = Arc::new(copy);
            // In place of the adopted inode's fd, whatever the cache held.
            let old = self.files.replace(ino, file.clone());
            drop(old);
        }
        Ok(Target {
            file,
            path: None,
            _nameless: Some(guard),
            _named: None,
        })
    }

    /// An unnamed copy of `src` (content, mode, owner and times), on the backing filesystem.
    fn private_copy(&self, src: BorrowedFd<'_>) -> io::Result<OwnedFd> {
        let st = sys::fstat(src)?;
        let fd = sys::openat(
            self.root(),
            Path::new("."),
            OFlags::TMPFILE | OFlags::RDWR,
            st.st_mode & 0o7777,
        )?;
        sys::copy_all(src, fd.as_fd(), st.st_size as u64)?;
        if self.as_root {
            sys::fchown(fd.as_fd(), st.st_uid, st.st_gid)?;
            sys::fchmod(fd.as_fd(), st.st_mode & 0o7777)?;
        }
        let t = |s: i64, ns: u64| Some(Some((s, ns as i64)));
        sys::futimens(
            fd.as_fd(),
            t(st.st_atime, st.st_atime_nsec),
            t(st.st_mtime, st.st_mtime_nsec),
        )?;
        Ok(fd)
    }

    /// The kernel forgot node `ino` for good: its fd goes with it.
    pub(super) fn drop_file(&self, ino: u64) {
        let f = self.files.remove(ino);
        if let Some(f) = f.and_then(|f| Arc::try_unwrap(f).ok()) {
            // Closing frees an unlinked file, or writes out a truncated one: the closer's
            // work. Any other fd closes here (waking the closer costs more).
            if f.pinned.into_inner() || f.truncated.into_inner() {
                self.close_elsewhere(vec![f.fd]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;
    use crate::fs::inodes::ROOT;

    /// A cache fill racing a removal (a read that opened the file just before its name went)
    /// never replaces the fd the removal pinned, which carries the marks that keep changes off
    /// the store's inode; a writable fd replacing a read-only one takes those marks over.
    #[test]
    fn a_cache_fill_never_replaces_a_pinned_fd() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        let obs = Arc::new(crate::capture::Passthrough);
        let core = Core::new(sys::open_dir_path(d.path()).unwrap(), obs).unwrap();
        let (l, _) = core.lookup(ROOT, OsStr::new("f")).unwrap();
        let f = Path::new("f");
        assert!(core.pin(l.ino, f, true));
        let racing = Arc::new(core.open_node(l.ino, f, false).unwrap());
        let kept = core.keep_file(l.ino, racing.clone());
        assert!(!Arc::ptr_eq(&kept, &racing), "the pinned fd stays");
        assert!(kept.pinned.load(Ordering::Relaxed) && kept.adopted.load(Ordering::Relaxed));

        let mut ro = core.open_node(l.ino, f, false).unwrap();
        ro.writable = false;
        ro.pinned.store(true, Ordering::Relaxed);
        ro.adopted.store(true, Ordering::Relaxed);
        core.files.replace(l.ino, Arc::new(ro));
        let rw = Arc::new(core.open_node(l.ino, f, true).unwrap());
        let kept = core.keep_file(l.ino, rw.clone());
        assert!(
            Arc::ptr_eq(&kept, &rw),
            "a writable fd replaces a read-only one"
        );
        assert!(kept.pinned.load(Ordering::Relaxed) && kept.adopted.load(Ordering::Relaxed));
    }
}
