//! Paths: resolving what a user names, checking untrusted names, opening and stat-ing beneath
//! a directory fd (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Stat};

use super::*;

/// `p` with symlinks resolved as far as it exists, and the rest appended as it is: the path
/// `p` will have once created, without creating it. For the places a user names outside the
/// project (a store, a fork's directory, a bundle), to tell whether they lie in the workspace
/// or the store; never for a path beneath the workspace's fd.
///
/// # Errors
/// A component that exists cannot be resolved (other than not found).
pub fn resolve_uncreated(p: &Path) -> io::Result<PathBuf> {
    let p = std::path::absolute(p)?;
    let mut tail = Vec::new();
    let mut base = p.as_path();
    loop {
        match base.canonicalize() {
            Ok(real) => {
                let mut out = real;
                for c in tail.iter().rev() {
                    out.push(c);
                }
                return Ok(out);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
                    return Err(e);
                };
                tail.push(name.to_os_string());
                base = parent;
            }
            Err(e) => return Err(e),
        }
    }
}

/// [`resolve_uncreated`] of `p`'s parent, with `p`'s own last name appended as it is: where a
/// file or directory the daemon creates will be, without following a symlink someone may have
/// planted at that name (the creation then refuses it instead).
///
/// # Errors
/// As [`resolve_uncreated`]; `p` has no last name (`/`, `..`).
pub fn resolve_parent(p: &Path) -> io::Result<PathBuf> {
    let p = std::path::absolute(p)?;
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) => Ok(resolve_uncreated(parent)?.join(name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a name that can be created", p.display()),
        )),
    }
}

/// Checks one name handed to us by the kernel: a single component, not `.`/`..`, not too long.
///
/// # Errors
/// `ENAMETOOLONG` for names over 255 bytes (the kernel does not check this for FUSE), `EINVAL`
/// for anything that is not a plain component.
pub fn validate_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

/// Checks a workspace-relative path from an untrusted source and normalises it.
///
/// # Errors
/// `EINVAL` for absolute paths, `..` components or empty paths.
pub fn validate_rel(path: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => {
                validate_name(n)?;
                out.push(n);
            }
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: not a path inside the workspace", path.display()),
                ));
            }
        }
    }
    Ok(out)
}

/// The path to hand to `*at` calls for a workspace-relative path (`.` for the root).
pub fn at_path(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// Opens a directory as an `O_PATH` handle: the anchor every other call is relative to.
pub fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ctx(errno(e), format!("open {}", path.display())))
}

/// Opens a directory for reading (`getdents`, `fsync`, `fchmod`): a directory a user named
/// outside the project (where a bundle is written).
pub fn open_dir_read(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ctx(errno(e), format!("open {}", path.display())))
}

/// Opens `rel` beneath `root` without following any symlink on the way, including the last
/// component (an `O_PATH` open of a symlink returns the link itself).
pub fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: u32,
) -> io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        at_path(rel),
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(errno)
}

/// `fstatat(root, rel, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Stat> {
    rustix::fs::statat(root, at_path(rel), AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}

/// Like [`lstat_at`], but contained: no symlink is followed on the way either, so a parent
/// that is a symlink (planted to point out of the workspace, say) makes the path not exist as
/// such (`ENOTDIR`) instead of being looked up through the link. For paths that come from the
/// store (rewinds, captures), not from the kernel's own resolution.
pub fn lstat_beneath(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Stat> {
    let fd = open_path_beneath(root, rel)?;
    rustix::fs::fstat(&fd).map_err(errno)
}

/// An `O_PATH` handle on `rel` itself (a symlink is not followed), resolved as
/// [`lstat_beneath`] resolves it.
fn open_path_beneath(root: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        at_path(rel),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        if e == rustix::io::Errno::LOOP {
            io::Error::from_raw_os_error(libc::ENOTDIR)
        } else {
            errno(e)
        }
    })
}

/// What [`lstat_beneath_mode_owner`] and [`fstat_mode_owner`] tell of an inode: its kind and
/// mode, links and owner, and nothing of its size or times.
///
/// On a FUSE mount a write leaves the size and times stale in the kernel's cache (and only
/// those), so a `stat` after one asks the daemon again, and its answer makes the kernel forget
/// that the file has no `security.capability`, which the next write then asks for too. Asking
/// for these fields alone spares both requests; the kernel still asks the daemon for them when
/// it does not hold them valid (after a link is removed, say, or once the attribute timeout has
/// passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeOwner {
    /// Type and permission bits, as `st_mode`.
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
}

impl From<&Stat> for ModeOwner {
    fn from(st: &Stat) -> ModeOwner {
        ModeOwner {
            mode: st.st_mode,
            nlink: st.st_nlink,
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }
}

/// The fields of [`ModeOwner`] (its doc says why not the size and times).
const MODE_OWNER: rustix::fs::StatxFlags = rustix::fs::StatxFlags::TYPE
    .union(rustix::fs::StatxFlags::MODE)
    .union(rustix::fs::StatxFlags::NLINK)
    .union(rustix::fs::StatxFlags::UID)
    .union(rustix::fs::StatxFlags::GID);

/// `statx` of `fd` itself (`AT_EMPTY_PATH`) for the fields of [`ModeOwner`].
pub fn fstat_mode_owner(fd: BorrowedFd<'_>) -> io::Result<ModeOwner> {
    let x = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, MODE_OWNER).map_err(errno)?;
    if x.stx_mask & MODE_OWNER.bits() != MODE_OWNER.bits() {
        return Err(io::Error::other(format!(
            "statx answered fields {:#x} of the {:#x} asked for",
            x.stx_mask,
            MODE_OWNER.bits()
        )));
    }
    Ok(ModeOwner {
        mode: u32::from(x.stx_mode),
        nlink: u64::from(x.stx_nlink),
        uid: x.stx_uid,
        gid: x.stx_gid,
    })
}

/// [`lstat_beneath_opt`] for the fields of [`ModeOwner`] only.
pub fn lstat_beneath_mode_owner(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Option<ModeOwner>> {
    match open_path_beneath(root, rel) {
        Ok(fd) => fstat_mode_owner(fd.as_fd()).map(Some),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// [`lstat_beneath`], `Ok(None)` when nothing is there (or a parent is not a directory).
pub fn lstat_beneath_opt(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Option<Stat>> {
    match lstat_beneath(root, rel) {
        Ok(st) => Ok(Some(st)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Like [`lstat_at`], but `Ok(None)` when nothing is there.
pub fn lstat_opt(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Option<Stat>> {
    match lstat_at(root, rel) {
        Ok(st) => Ok(Some(st)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}
