//! Files and directories by fd or beneath a directory fd: create, link, rename, remove, modes,
//! owners, times, reads and writes, sync, copies.

use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, Stat};

use super::*;

/// A time to set: `None` leaves it alone (`UTIME_OMIT`), `Some(None)` is `UTIME_NOW`.
pub type SetTime = Option<Option<(i64, i64)>>;

/// Runs `f` with `O_NOATIME` set on `fd`'s open file, then puts its flags back: reads by `f`
/// leave the file's access time alone. `None` (and `f` not run) when the flag cannot be set
/// (only the file's owner or a holder of CAP_FOWNER may). The flag is the open file's, so a
/// read through another clone of the fd meanwhile leaves the access time alone too.
pub fn with_noatime<T>(fd: BorrowedFd<'_>, f: impl FnOnce() -> T) -> Option<T> {
    let flags = rustix::fs::fcntl_getfl(fd).ok()?;
    if flags.contains(OFlags::NOATIME) {
        return Some(f());
    }
    rustix::fs::fcntl_setfl(fd, flags | OFlags::NOATIME).ok()?;
    let out = f();
    let _ = rustix::fs::fcntl_setfl(fd, flags);
    Some(out)
}

pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    rustix::fs::fstat(fd).map_err(errno)
}

pub fn openat(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        at_path(rel),
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(errno)
}

pub fn mkdirat(dir: BorrowedFd<'_>, rel: &Path, mode: u32) -> io::Result<()> {
    rustix::fs::mkdirat(dir, rel, Mode::from_raw_mode(mode)).map_err(errno)
}

pub fn mknodat(dir: BorrowedFd<'_>, rel: &Path, mode: u32, rdev: u64) -> io::Result<()> {
    let kind = rustix::fs::FileType::from_raw_mode(mode);
    rustix::fs::mknodat(dir, rel, kind, Mode::from_raw_mode(mode & 0o7777), rdev).map_err(errno)
}

pub fn symlinkat(target: &Path, dir: BorrowedFd<'_>, rel: &Path) -> io::Result<()> {
    rustix::fs::symlinkat(target, dir, rel).map_err(errno)
}

pub fn readlinkat(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<OsString> {
    let v = rustix::fs::readlinkat(dir, at_path(rel), Vec::new()).map_err(errno)?;
    Ok(OsString::from(std::ffi::OsStr::from_bytes(v.as_bytes())))
}

pub fn linkat(dir: BorrowedFd<'_>, old: &Path, new: &Path) -> io::Result<()> {
    rustix::fs::linkat(dir, old, dir, new, AtFlags::empty()).map_err(errno)
}

/// `linkat` between two directories, not following a symlink at `old`.
pub fn linkat_between(
    olddir: BorrowedFd<'_>,
    old: &Path,
    newdir: BorrowedFd<'_>,
    new: &Path,
) -> io::Result<()> {
    rustix::fs::linkat(olddir, old, newdir, new, AtFlags::empty()).map_err(errno)
}

/// `renameat` between two directories (replaces `new`).
pub fn renameat_between(
    olddir: BorrowedFd<'_>,
    old: &Path,
    newdir: BorrowedFd<'_>,
    new: &Path,
) -> io::Result<()> {
    rustix::fs::renameat(olddir, old, newdir, new).map_err(errno)
}

pub fn unlinkat(dir: BorrowedFd<'_>, rel: &Path, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(dir, rel, flags).map_err(errno)
}

/// `renameat2` with the raw `RENAME_*` flags the kernel sent.
pub fn renameat2(dir: BorrowedFd<'_>, old: &Path, new: &Path, flags: u32) -> io::Result<()> {
    let flags = rustix::fs::RenameFlags::from_bits(flags)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    rustix::fs::renameat_with(dir, old, dir, new, flags).map_err(errno)
}

pub fn chmodat(dir: BorrowedFd<'_>, rel: &Path, mode: u32) -> io::Result<()> {
    rustix::fs::chmodat(
        dir,
        at_path(rel),
        Mode::from_raw_mode(mode),
        AtFlags::empty(),
    )
    .map_err(errno)
}

/// `chmod` of the file an fd (an `O_PATH` one too) stands for, through `/proc/self/fd`: no
/// name is looked up, so no symlink can be followed.
pub fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    rustix::fs::chmod(proc_fd(fd), Mode::from_raw_mode(mode)).map_err(|e| {
        ctx(
            errno(e),
            format!("chmod({}, {mode:o})", proc_fd(fd).display()),
        )
    })
}

/// `fchownat(fd, "", AT_EMPTY_PATH)`: the owner of the file an fd (an `O_PATH` one too)
/// stands for.
pub fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    rustix::fs::chownat(
        fd,
        "",
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(errno)
}

pub fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(errno)
}

pub fn lchownat(
    dir: BorrowedFd<'_>,
    rel: &Path,
    uid: Option<u32>,
    gid: Option<u32>,
) -> io::Result<()> {
    // SAFETY-free: rustix validates ids; -1 (None) leaves an id unchanged.
    let uid = uid.map(rustix::fs::Uid::from_raw);
    let gid = gid.map(rustix::fs::Gid::from_raw);
    rustix::fs::chownat(dir, at_path(rel), uid, gid, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}

pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    let uid = Some(rustix::fs::Uid::from_raw(uid));
    let gid = Some(rustix::fs::Gid::from_raw(gid));
    rustix::fs::fchown(fd, uid, gid).map_err(errno)
}

pub(super) fn timespec(t: SetTime) -> rustix::fs::Timespec {
    match t {
        None => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(None) => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(Some((s, ns))) => rustix::fs::Timespec {
            tv_sec: s,
            tv_nsec: ns as _,
        },
    }
}

pub fn lutimensat(
    dir: BorrowedFd<'_>,
    rel: &Path,
    atime: SetTime,
    mtime: SetTime,
) -> io::Result<()> {
    let ts = rustix::fs::Timestamps {
        last_access: timespec(atime),
        last_modification: timespec(mtime),
    };
    rustix::fs::utimensat(dir, at_path(rel), &ts, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}

pub fn futimens(fd: BorrowedFd<'_>, atime: SetTime, mtime: SetTime) -> io::Result<()> {
    let ts = rustix::fs::Timestamps {
        last_access: timespec(atime),
        last_modification: timespec(mtime),
    };
    rustix::fs::futimens(fd, &ts).map_err(errno)
}

pub fn ftruncate(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    rustix::fs::ftruncate(fd, size).map_err(errno)
}

pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<usize> {
    rustix::io::pread(fd, buf, off).map_err(errno)
}

/// Reads up to `buf.len()` bytes, retrying short reads until EOF.
pub fn pread_full(fd: BorrowedFd<'_>, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(done)
}

pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], off: u64) -> io::Result<usize> {
    rustix::io::pwrite(fd, buf, off).map_err(errno)
}

/// `write(2)` at the file position: the only way to honour `O_APPEND` atomically.
pub fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    rustix::io::write(fd, buf).map_err(errno)
}

pub fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> io::Result<()> {
    if datasync {
        rustix::fs::fdatasync(fd).map_err(errno)
    } else {
        rustix::fs::fsync(fd).map_err(errno)
    }
}

pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::fs::syncfs(fd).map_err(errno)
}

pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, off: u64, len: u64) -> io::Result<()> {
    let flags = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
    rustix::fs::fallocate(fd, flags, off, len).map_err(errno)
}

/// `lseek` with any whence the kernel forwards (SEEK_DATA / SEEK_HOLE included).
pub fn lseek(fd: BorrowedFd<'_>, off: i64, whence: i32) -> io::Result<u64> {
    use rustix::fs::SeekFrom;
    let pos = match whence {
        libc::SEEK_SET => SeekFrom::Start(off as u64),
        libc::SEEK_CUR => SeekFrom::Current(off),
        libc::SEEK_END => SeekFrom::End(off),
        libc::SEEK_DATA => SeekFrom::Data(off as u64),
        libc::SEEK_HOLE => SeekFrom::Hole(off as u64),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    rustix::fs::seek(fd, pos).map_err(errno)
}

pub fn copy_file_range(
    fd_in: BorrowedFd<'_>,
    off_in: u64,
    fd_out: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
) -> io::Result<usize> {
    let mut oi = off_in;
    let mut oo = off_out;
    rustix::fs::copy_file_range(fd_in, Some(&mut oi), fd_out, Some(&mut oo), len).map_err(errno)
}

/// Copies a whole file's content: reflink where the filesystem shares extents, else
/// `copy_file_range` (in-kernel, no user-space buffer), else read/write.
pub fn copy_all(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Whether reflinks worked here; after the first refusal (ext4 has none) stop asking.
    static FICLONE: AtomicBool = AtomicBool::new(true);
    if FICLONE.load(Ordering::Relaxed) {
        match rustix::fs::ioctl_ficlone(dst, src) {
            Ok(()) => return Ok(()),
            Err(
                rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOTTY | rustix::io::Errno::INVAL,
            ) => {
                FICLONE.store(false, Ordering::Relaxed);
            }
            Err(_) => {}
        }
    }
    let mut off = 0u64;
    while off < len {
        let chunk = (len - off).min(1 << 30) as usize;
        match copy_file_range(src, off, dst, off, chunk) {
            Ok(0) => break,
            Ok(n) => off += n as u64,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP)
                ) =>
            {
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = pread(src, &mut buf, off)?;
                    if n == 0 {
                        return Ok(());
                    }
                    let mut w = 0;
                    while w < n {
                        w += pwrite(dst, &buf[w..n], off + w as u64)?;
                    }
                    off += n as u64;
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub fn accessat(dir: BorrowedFd<'_>, rel: &Path, mask: i32) -> io::Result<()> {
    let access = rustix::fs::Access::from_bits_retain(mask as _);
    rustix::fs::accessat(dir, at_path(rel), access, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
}
