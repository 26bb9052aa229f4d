//! Raw system calls, in one place.
//!
//! Everything that talks to the kernel about the backing directory goes through here, on top
//! of rustix (so the crate stays free of `unsafe`). Two rules hold for every function:
//! - paths are always relative to a directory fd that the caller holds (the workspace's
//!   underlying directory, opened before the mount covered it); nothing here builds an
//!   absolute path into the project;
//! - untrusted paths (from the control socket or a rewind plan) are resolved with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a symlink planted in the workspace
//!   can never redirect a write outside it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Stat};

/// Longest file name the kernel allows on the backing filesystems we support.
pub const NAME_MAX: usize = 255;

/// The filesystem magic FUSE mounts report in `statfs`.
pub const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

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

/// Returns the allocator's free memory to the kernel. glibc keeps freed heap otherwise, so a
/// checkpoint that drops the set of 100k paths the last one changed leaves RSS at its
/// high-water mark.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim_heap() {
    // SAFETY: malloc_trim takes the allocator's own locks and only releases memory that is
    // free; it has no preconditions on the caller and touches no memory the caller owns.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_heap() {}

/// Writes all of `buf` to a socket without raising SIGPIPE if the peer has gone (the command
/// line lets SIGPIPE end it, see [`default_sigpipe`]; a daemon that hung up reports why on the
/// socket, and the client reads that instead of dying).
pub fn send_all(sock: BorrowedFd<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::net::send(sock, buf, rustix::net::SendFlags::NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(())
}

/// Closes every fd from `first` up (`close_range(first, ~0, 0)`): a helper process starting,
/// rid of whatever it inherited that was not marked close-on-exec (a FUSE device, say, which
/// would keep its parent's mount alive).
///
/// # Errors
/// The kernel refused (before Linux 5.9 it has no `close_range`).
#[allow(unsafe_code)]
pub fn close_fds_from(first: u32) -> io::Result<()> {
    // SAFETY: the syscall takes integers and touches no memory. It is called first thing in a
    // helper process, before it opens anything: no object of this process owns an fd from
    // `first` up, so none is closed under its owner.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
    if r < 0 {
        return Err(ctx(
            io::Error::last_os_error(),
            format!("close_range({first}, ~0, 0)"),
        ));
    }
    Ok(())
}

/// Makes the kernel kill the calling process when its parent dies (`PR_SET_PDEATHSIG`), and
/// fails if the parent is already gone.
pub fn die_with_parent() -> io::Result<()> {
    let parent = rustix::process::getppid();
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(errno)?;
    if rustix::process::getppid() != parent {
        return Err(io::Error::other("the parent process is gone"));
    }
    Ok(())
}

/// Waits up to `timeout` for `fd` (a pipe) to have something to read, or to be closed at the
/// other end. `false`: nothing came in time.
#[allow(unsafe_code)]
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    loop {
        // SAFETY: `p` is one valid pollfd that lives across the call, and the count says one.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        match r {
            0 => return Ok(false),
            n if n > 0 => return Ok(true),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(ctx(e, format!("poll(fd {}, POLLIN, {ms} ms)", p.fd)));
                }
            }
        }
    }
}

/// Lets a closed stdout end the process as it ends `ls | head`: Rust ignores SIGPIPE, and a
/// `println!` to a closed pipe then panics. Only for commands whose work is done when they
/// print; the daemon and the hook keep ignoring it, and the control client sends with
/// MSG_NOSIGNAL ([`send_all`]).
#[allow(unsafe_code)]
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler and touches no
    // memory; it is done before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// Wraps an io error with the call and its argument, keeping the errno.
pub fn ctx(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    match e.raw_os_error() {
        Some(code) => {
            // `base` says "… (os error N)" itself.
            let base = io::Error::from_raw_os_error(code);
            io::Error::new(base.kind(), format!("{what}: {base}"))
        }
        None => io::Error::new(e.kind(), format!("{what}: {e}")),
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
    let fd = rustix::fs::openat2(
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
    })?;
    rustix::fs::fstat(&fd).map_err(errno)
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

/// The files on device `dev` that some process has mapped shared and writable: each file's
/// inode number, and one such mapping, `/proc/PID/map_files/START-END` (opening that needs
/// root). Read from every process's `/proc/PID/maps` that can be read; processes that go away
/// meanwhile are skipped.
pub fn shared_writable_mappings(dev: u64) -> Vec<(u64, PathBuf)> {
    let want = format!(
        "{:02x}:{:02x}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    );
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in procs.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        for line in maps.lines() {
            // start-end perms offset dev inode [path]
            let mut f = line.split_ascii_whitespace();
            let (Some(range), Some(perms), Some(_), Some(d), Some(ino)) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let p = perms.as_bytes();
            if d != want || p.len() != 4 || p[1] != b'w' || p[3] != b's' {
                continue;
            }
            // maps pads addresses to 8 digits; map_files names them without padding.
            let (Ok(ino), Some((a, b))) = (ino.parse::<u64>(), range.split_once('-')) else {
                continue;
            };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
                continue;
            };
            if seen.insert(ino) {
                out.push((
                    ino,
                    PathBuf::from(format!("/proc/{pid}/map_files/{a:x}-{b:x}")),
                ));
            }
        }
    }
    out
}

pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    let uid = Some(rustix::fs::Uid::from_raw(uid));
    let gid = Some(rustix::fs::Gid::from_raw(gid));
    rustix::fs::fchown(fd, uid, gid).map_err(errno)
}

/// A time to set: `None` leaves it alone (`UTIME_OMIT`), `Some(None)` is `UTIME_NOW`.
pub type SetTime = Option<Option<(i64, i64)>>;

fn timespec(t: SetTime) -> rustix::fs::Timespec {
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

pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<rustix::fs::StatVfs> {
    rustix::fs::fstatvfs(fd).map_err(errno)
}

/// Whether `fd` is the root of a FUSE mount (the filesystem's magic, and the root's node id).
pub fn is_fuse_root(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|s| s.f_type == FUSE_SUPER_MAGIC)
        && rustix::fs::fstat(fd).is_ok_and(|st| st.st_ino == 1)
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

/// The `/proc/self/fd/N` name of an fd: how xattr calls reach an `O_PATH` handle.
fn proc_fd(fd: BorrowedFd<'_>) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

pub fn getxattr(fd: BorrowedFd<'_>, name: &OsStr, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_fd(fd);
    if size == 0 {
        let n = rustix::fs::getxattr_query(&p, name).map_err(errno)?;
        return Ok(vec![0; n]);
    }
    let mut buf = vec![0u8; size];
    let n = rustix::fs::getxattr(&p, name, &mut buf[..]).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

pub fn listxattr(fd: BorrowedFd<'_>, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_fd(fd);
    if size == 0 {
        let n = rustix::fs::listxattr_query(&p).map_err(errno)?;
        return Ok(vec![0; n]);
    }
    let mut buf = vec![0u8; size];
    let n = rustix::fs::listxattr(&p, &mut buf[..]).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

pub fn setxattr(fd: BorrowedFd<'_>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let p = proc_fd(fd);
    let flags = rustix::fs::XattrFlags::from_bits_retain(flags as _);
    rustix::fs::setxattr(&p, name, value, flags).map_err(errno)
}

pub fn removexattr(fd: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    rustix::fs::removexattr(proc_fd(fd), name).map_err(errno)
}

/// Every extended attribute of the file open at `fd`, as (name, value) pairs in the order the
/// filesystem lists them. `fd` may be an `O_PATH` fd (then read through `/proc/self/fd`, as the
/// `f*xattr` calls refuse it with `EBADF`). A filesystem without extended attributes has none;
/// an attribute removed between the listing and its read is left out.
///
/// # Errors
/// The listing or a read failed otherwise; the error names the call.
pub fn xattrs_of(fd: BorrowedFd<'_>) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use rustix::io::Errno;
    // A buffer that grows until what it receives fits (`ERANGE`: it changed meanwhile).
    fn sized(
        mut call: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
    ) -> rustix::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        loop {
            match call(&mut buf) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(Errno::RANGE) if buf.len() < 1 << 21 => buf = vec![0u8; buf.len() * 4],
                Err(e) => return Err(e),
            }
        }
    }
    let proc = proc_fd(fd);
    let mut by_path = false;
    let names = match sized(|b| rustix::fs::flistxattr(fd, b)) {
        Err(Errno::BADF) => {
            by_path = true;
            sized(|b| rustix::fs::listxattr(&proc, b))
        }
        r => r,
    };
    let names = match names {
        Ok(n) => n,
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(ctx(errno(e), format!("listxattr({})", proc.display()))),
    };
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let n = OsStr::from_bytes(name);
        let value = if by_path {
            sized(|b| rustix::fs::getxattr(&proc, n, b))
        } else {
            sized(|b| rustix::fs::fgetxattr(fd, n, b))
        };
        match value {
            Ok(v) => out.push((name.to_vec(), v)),
            Err(Errno::NODATA) => {}
            Err(e) => {
                return Err(ctx(
                    errno(e),
                    format!("getxattr({}, {n:?})", proc.display()),
                ));
            }
        }
    }
    Ok(out)
}

pub fn accessat(dir: BorrowedFd<'_>, rel: &Path, mask: i32) -> io::Result<()> {
    let access = rustix::fs::Access::from_bits_retain(mask as _);
    rustix::fs::accessat(dir, at_path(rel), access, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
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

fn dtype(t: rustix::fs::FileType) -> u8 {
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

/// The process's umask is cleared once at start: modes from the kernel already carry the
/// caller's umask, and applying the daemon's on top would be wrong.
pub fn clear_umask() {
    rustix::process::umask(Mode::empty());
}

/// Whether a FUSE request's pid (a thread id) is one of this process's threads.
pub fn is_own_thread(tid: u32) -> bool {
    tid != 0 && rustix::fs::stat(format!("/proc/self/task/{tid}").as_str()).is_ok()
}

pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub fn getpid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// Unmounts `path`; `lazy` detaches a mount whose daemon is gone.
pub fn unmount(path: &Path, lazy: bool) -> io::Result<()> {
    let flags = if lazy {
        rustix::mount::UnmountFlags::DETACH
    } else {
        rustix::mount::UnmountFlags::empty()
    };
    rustix::mount::unmount(path, flags).map_err(errno)
}

/// Whether a process exists and has not exited (a zombie waiting to be reaped counts as gone).
pub fn process_alive(pid: u32) -> bool {
    let exists = match rustix::process::Pid::from_raw(pid as i32) {
        Some(p) => rustix::process::test_kill_process(p).is_ok(),
        None => false,
    };
    if !exists {
        return false;
    }
    // /proc/<pid>/stat: "pid (comm) S ..."; the state follows the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                != Some('Z')
        }
        Err(_) => false,
    }
}

/// Takes an exclusive, non-blocking `flock` on an fd: the one-daemon-per-store lock.
pub fn try_lock(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(errno)
}

/// The uid of the peer of a connected Unix socket.
pub fn peer_uid(fd: BorrowedFd<'_>) -> io::Result<u32> {
    rustix::net::sockopt::socket_peercred(fd)
        .map(|c| c.uid.as_raw())
        .map_err(errno)
}

/// Mounts a FUSE filesystem as an ordinary user through the setuid `fusermount3` helper and
/// returns the `/dev/fuse` fd it passes back over a socket (`_FUSE_COMMFD`, as libfuse does).
///
/// # Errors
/// `fusermount3` is missing or refused (its message is in the error), or sent no fd.
pub fn fusermount(dir: &Path, options: &str) -> io::Result<OwnedFd> {
    use rustix::net::{
        AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketFlags,
        SocketType,
    };
    use std::os::fd::AsRawFd;
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(errno)?;
    // The helper must inherit its end.
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).map_err(errno)?;
    let out = std::process::Command::new("fusermount3")
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(dir)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| ctx(e, "running fusermount3 (install the fuse3 package)"))?;
    drop(theirs);
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "fusermount3: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        &ours,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::empty(),
    )
    .map_err(errno)?;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            if let Some(fd) = fds.next() {
                return Ok(fd);
            }
        }
    }
    Err(io::Error::other("fusermount3 sent no /dev/fuse descriptor"))
}

/// An error whose message says what happened and which keeps its errno through `io::Error`
/// (whose `new` keeps only the kind): the store's `EROFS` reaches a FUSE caller as `EROFS`,
/// not `EIO`.
#[derive(Debug)]
pub struct Coded {
    /// The errno a FUSE caller gets.
    pub errno: i32,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for Coded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// An `io::Error` saying `message` that carries `errno` (see [`errno_of`]).
pub fn coded(errno: i32, message: String) -> io::Error {
    io::Error::new(
        io::Error::from_raw_os_error(errno).kind(),
        Coded { errno, message },
    )
}

/// The errno of an error: its own, or the one a [`Coded`] carries; else the closest to its
/// kind (a full disk `ENOSPC`, a busy resource `EAGAIN`), else `EIO`.
pub fn errno_of(e: &io::Error) -> i32 {
    if let Some(code) = e.raw_os_error() {
        return code;
    }
    if let Some(c) = e.get_ref().and_then(|i| i.downcast_ref::<Coded>()) {
        return c.errno;
    }
    match e.kind() {
        io::ErrorKind::StorageFull => libc::ENOSPC,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        _ => libc::EIO,
    }
}

/// `(tgid, ppid, comm)` of a pid (or thread id) from /proc.
pub fn proc_status(pid: u32) -> Option<(u32, u32, String)> {
    use std::io::Read;
    // Name, Tgid and PPid are among the first lines: one read of 1 KiB (this runs for every
    // new process that changes a file, so no metadata call and no growing reads).
    let mut buf = [0u8; 1024];
    let mut f = std::fs::File::open(format!("/proc/{pid}/status")).ok()?;
    let n = f.read(&mut buf).ok()?;
    let s = String::from_utf8_lossy(&buf[..n]);
    let mut tgid = None;
    let mut ppid = None;
    let mut name = String::new();
    for line in s.lines() {
        if let Some(v) = line.strip_prefix("Tgid:") {
            tgid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("PPid:") {
            ppid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("Name:") {
            name = v.trim().to_string();
        }
    }
    Some((tgid?, ppid?, name))
}

/// The parent pid of a process (for the hook command's agent).
pub fn parent_pid(pid: u32) -> Option<u32> {
    proc_status(pid).map(|(_, ppid, _)| ppid)
}
