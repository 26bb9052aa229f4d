//! Whole pre-images: the state of one path — its kind, metadata and, for a regular file, its
//! whole content as a blob — read just before a change, or kept by a hard link when the change
//! takes away the file's only name (see [`super::adopt`]).
//!
//! Invariants:
//! - a path that does not exist (`ENOENT`, `ENOTDIR`) has an *absent* pre-image, not an error:
//!   a rewind then removes whatever the change created;
//! - reading never changes the file's access time (`O_NOATIME` where the kernel allows it);
//! - with an open fd of the file ([`Change::file`](super::Change::file)) the content is read
//!   through it and the file is not looked up again, nor any of its fds closed (see the
//!   comment on that field);
//! - nothing here takes a recorder lock: the callers hold the capture lock while it runs;
//! - a file's, directory's or special file's extended attributes are read with it (a regular
//!   file's through the fd its content is read from); one that cannot be read is recorded as
//!   not known (`None`), which a rewind leaves alone, rather than refusing the change.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{OFlags, Stat};

use super::adopt::Adopt;
use super::{Op, Recorder};
use crate::store::BlobRef;
use crate::store::Purpose;
use crate::store::{Actor, Kind, PreImage, Store, Xattrs};
use crate::sys;
use crate::wspath::Node;

/// Reads the current state of `rel` beneath `root`, storing a regular file's content as a blob.
///
/// # Errors
/// I/O errors reading the file or writing the blob (a full store gives `ENOSPC`).
pub fn snapshot(root: BorrowedFd<'_>, rel: &Path, store: &Store) -> io::Result<PreImage> {
    Ok(snapshot_or_adopt(root, rel, store, Adopt::No, None, None)?.0)
}

impl Recorder {
    /// Takes a whole pre-image of `p` — its content read into a blob, or with `adopt` its file
    /// kept by a link — and records it as a capture in checkpoint `seq`: the capture's id.
    /// Write-ahead: on any error the change is refused (and logged), and a link made for it is
    /// discarded. `file` and `st`: the file's fd and stat if the caller has them (see
    /// [`snapshot_or_adopt`]). The caller holds the capture lock.
    // The capture's identity (path, checkpoint, actor, op) and how to read it (adopt, fd, stat).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn capture_whole(
        &self,
        p: &Node,
        seq: i64,
        actor: Actor,
        op: Op,
        adopt: Adopt<'_>,
        file: Option<BorrowedFd<'_>>,
        st: Option<io::Result<Stat>>,
    ) -> io::Result<i64> {
        let rel = p.as_path();
        let (pre, linked) = snapshot_or_adopt(self.root(), rel, &self.store, adopt, file, st)
            .map_err(|e| {
                tracing::error!(
                    "refusing {} of {}: its pre-image could not be saved: {e}",
                    op.as_str(),
                    rel.display()
                );
                e
            })?;
        let id = self
            .store
            .insert_capture(seq, p, Purpose::Checkpoint, &pre, actor, op)
            .map_err(|e| {
                tracing::error!(
                    "refusing {} of {}: its pre-image could not be recorded: {e}",
                    op.as_str(),
                    rel.display()
                );
                if let Some(key) = &linked {
                    self.store.blobs.discard(key);
                }
                io::Error::from(e)
            })?;
        if let Some(key) = linked {
            self.remember_adopted(p.as_bytes(), key);
        }
        Ok(id)
    }
}

/// [`snapshot`]; with `adopt`, a regular file about to lose its only name is kept by a hard link
/// where the store allows (the hash of such a blob is returned: it must be unshared if the
/// change fails). `file`: the file at `rel`, open (see
/// [`Change::file`](super::Change::file)); `known`: what its stat gave, if the caller has just
/// taken it (through `file` when given).
pub(super) fn snapshot_or_adopt(
    root: BorrowedFd<'_>,
    rel: &Path,
    store: &Store,
    adopt: Adopt<'_>,
    file: Option<BorrowedFd<'_>>,
    known: Option<io::Result<Stat>>,
) -> io::Result<(PreImage, Option<String>)> {
    if let Adopt::Yes(gone) = adopt {
        // The caller saw a regular file with one name here: keep it by a link, unread.
        if let Some(a) = store.blobs.adopt(root, rel, gone)? {
            // A linked file is read through its pending name (one system call when it has none).
            let xattrs = if a.linked {
                recorded(store.blobs.adopted_xattrs(&a.hash), rel)
            } else {
                xattrs_at(root, rel)
            };
            let pre = PreImage {
                xattrs,
                ..a.pre_image()
            };
            return Ok((pre, a.linked.then_some(a.hash)));
        }
    }
    let st = match known.unwrap_or_else(|| stat_of(root, rel, file)) {
        Ok(st) => st,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Ok((PreImage::absent(), None));
        }
        Err(e) => return Err(e),
    };
    let base = |kind| PreImage {
        imported: false,
        kind,
        blob: None,
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        target: None,
        partial: false,
        xattrs: None,
    };
    Ok((
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {
                let (hash, size, xattrs) = put_content(root, rel, store, file, st.st_size as u64)?;
                PreImage {
                    blob: Some(BlobRef::hash(hash)),
                    size,
                    xattrs,
                    ..base(Kind::File)
                }
            }
            libc::S_IFDIR => PreImage {
                xattrs: xattrs_at(root, rel),
                ..base(Kind::Dir)
            },
            libc::S_IFLNK => {
                let t = sys::readlinkat(root, rel)?;
                PreImage {
                    target: Some(t.as_bytes().to_vec()),
                    ..base(Kind::Symlink)
                }
            }
            _ => PreImage {
                size: st.st_rdev,
                xattrs: xattrs_at(root, rel),
                ..base(Kind::Other)
            },
        },
        None,
    ))
}

/// Stores the content of regular file `rel` as a blob: its hash, the size read, and the
/// file's extended attributes (read through the same fd). `size`: what the caller's stat gave.
fn put_content(
    root: BorrowedFd<'_>,
    rel: &Path,
    store: &Store,
    file: Option<BorrowedFd<'_>>,
    size: u64,
) -> io::Result<(String, u64, Option<Xattrs>)> {
    // Read without touching its access time: through `file` with O_NOATIME set
    // for the read, or a fresh fd opened so. Through `file` the size is the one
    // just stat'ed; a fresh fd may have found another file by now.
    match file.and_then(|fd| sys::with_noatime(fd, || store.blobs.put_fd(fd, Some(size)))) {
        Some(got) => {
            let (hash, size) = got?;
            Ok((hash, size, file.and_then(|fd| xattrs_of(fd, rel))))
        }
        None => {
            let fd = sys::open_beneath(
                root,
                rel,
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOATIME,
                0,
            )
            .or_else(|_| sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK, 0))?;
            let (hash, size) = store.blobs.put_fd(fd.as_fd(), None)?;
            Ok((hash, size, xattrs_of(fd.as_fd(), rel)))
        }
    }
}

/// The extended attributes of `rel` (not a symlink), read through an `O_PATH` fd; `None` if
/// they cannot be read (see the module doc).
pub(crate) fn xattrs_at(root: BorrowedFd<'_>, rel: &Path) -> Option<Xattrs> {
    match sys::open_beneath(root, rel, OFlags::PATH, 0) {
        Ok(fd) => xattrs_of(fd.as_fd(), rel),
        Err(e) => {
            tracing::debug!("extended attributes of {} not recorded: {e}", rel.display());
            None
        }
    }
}

/// The extended attributes of the file open at `fd` (`rel`: its name, for the log).
pub(crate) fn xattrs_of(fd: BorrowedFd<'_>, rel: &Path) -> Option<Xattrs> {
    recorded(sys::xattrs_of(fd), rel)
}

/// The extended attributes a read gave, or `None` (said in the log) if it failed.
fn recorded(read: io::Result<Vec<(Vec<u8>, Vec<u8>)>>, rel: &Path) -> Option<Xattrs> {
    match read {
        Ok(pairs) => Some(Xattrs::new(pairs)),
        Err(e) => {
            tracing::warn!("extended attributes of {} not recorded: {e}", rel.display());
            None
        }
    }
}

/// The file at `rel` beneath `root`, stat'ed through `file` (its open fd) when given.
pub(super) fn stat_of(
    root: BorrowedFd<'_>,
    rel: &Path,
    file: Option<BorrowedFd<'_>>,
) -> io::Result<Stat> {
    file.map_or_else(|| sys::lstat_beneath(root, rel), sys::fstat)
}
