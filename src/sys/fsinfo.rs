//! What a filesystem is and holds: statfs, the FUSE root, device numbers, directory listings.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::*;

pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<rustix::fs::StatVfs> {
    rustix::fs::fstatvfs(fd).map_err(errno)
}

/// Whether `fd` is the root of a FUSE mount (the filesystem's magic, and the root's node id).
pub fn is_fuse_root(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|s| s.f_type == FUSE_SUPER_MAGIC)
        && rustix::fs::fstat(fd).is_ok_and(|st| st.st_ino == 1)
}

/// Whether `statfs(path)` fails with `ENOTCONN`: a FUSE mount whose daemon is gone.
pub fn is_disconnected(path: &Path) -> bool {
    matches!(rustix::fs::statfs(path), Err(e) if e.raw_os_error() == libc::ENOTCONN)
}

pub fn statfs_type(path: &Path) -> io::Result<i64> {
    rustix::fs::statfs(path).map(|s| s.f_type).map_err(errno)
}

/// The device (major, minor) of what `path` names, from what the kernel has cached: with
/// `AT_STATX_DONT_SYNC` a FUSE inode costs no request (not even to this daemon's own mount).
pub fn dev_cached(path: &Path) -> io::Result<(u32, u32)> {
    use rustix::fs::{AtFlags, StatxFlags};
    rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::STATX_DONT_SYNC,
        StatxFlags::empty(),
    )
    .map(|s| (s.stx_dev_major, s.stx_dev_minor))
    .map_err(|e| ctx(errno(e), format!("statx({path:?}, AT_STATX_DONT_SYNC)")))
}

/// The kernel's read-ahead window for the block-device-info of device `dev`, in KiB
/// (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`).
pub fn readahead_kb(dev: (u32, u32)) -> io::Result<u64> {
    let p = bdi_readahead_path(dev);
    let s = std::fs::read_to_string(&p).map_err(|e| ctx(e, format!("reading {}", p.display())))?;
    s.trim()
        .parse()
        .map_err(|e| ctx(io::Error::other(e), format!("reading {}", p.display())))
}

/// Sets that window (root only: the file is the root's, mode 0644).
pub fn set_readahead_kb(dev: (u32, u32), kb: u64) -> io::Result<()> {
    let p = bdi_readahead_path(dev);
    std::fs::write(&p, format!("{kb}\n")).map_err(|e| ctx(e, format!("writing {}", p.display())))
}

fn bdi_readahead_path((major, minor): (u32, u32)) -> std::path::PathBuf {
    format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb").into()
}

/// Reads every entry of a directory (except `.` and `..`): name, inode number, `d_type`.
pub fn read_dir_all(dir: OwnedFd) -> io::Result<Vec<(OsString, u64, u8)>> {
    let mut d = rustix::fs::Dir::new(dir).map_err(errno)?;
    let mut out = Vec::new();
    while let Some(ent) = d.read() {
        let ent = ent.map_err(errno)?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push((
            OsStr::from_bytes(name).to_owned(),
            ent.ino(),
            dtype(ent.file_type()),
        ));
    }
    Ok(out)
}

/// Up to `max` entries of directory `dir` from position `offset` (0: the start; otherwise a
/// position an earlier call returned), each with its name, inode number, `DT_*` type and the
/// position just after it. Positions are the backing filesystem's own `d_off` cookies, which
/// stay valid while the directory changes (as `telldir`/`seekdir` require), so a listing read
/// in several calls through fresh fds neither skips nor repeats an entry that stays.
pub fn read_dir_from(
    dir: BorrowedFd<'_>,
    offset: i64,
    max: usize,
) -> io::Result<Vec<(OsString, u64, u8, i64)>> {
    // `Dir` owns its fd: it gets a duplicate, so the caller can go on using `dir` (to stat
    // the entries relative to it).
    let mut d = rustix::fs::Dir::new(rustix::io::dup(dir).map_err(errno)?).map_err(errno)?;
    if offset != 0 {
        d.seek(offset).map_err(errno)?;
    }
    let mut out = Vec::new();
    while out.len() < max {
        let Some(ent) = d.read() else { break };
        let ent = ent.map_err(errno)?;
        let name = ent.file_name().to_bytes();
        out.push((
            OsStr::from_bytes(name).to_owned(),
            ent.ino(),
            dtype(ent.file_type()),
            ent.offset(),
        ));
    }
    Ok(out)
}

pub(super) fn dtype(t: rustix::fs::FileType) -> u8 {
    match t {
        rustix::fs::FileType::RegularFile => libc::DT_REG,
        rustix::fs::FileType::Directory => libc::DT_DIR,
        rustix::fs::FileType::Symlink => libc::DT_LNK,
        rustix::fs::FileType::Fifo => libc::DT_FIFO,
        rustix::fs::FileType::Socket => libc::DT_SOCK,
        rustix::fs::FileType::CharacterDevice => libc::DT_CHR,
        rustix::fs::FileType::BlockDevice => libc::DT_BLK,
        _ => libc::DT_UNKNOWN,
    }
}
