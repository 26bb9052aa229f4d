//! Processes and the daemon's own: signals, fds, the heap, /proc, sockets, locks, mounting
//! with fusermount3 and unmounting.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::Mode;

use super::*;

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

/// Allocations from this size up get a mapping of their own, given back whole when freed.
/// Below it, READ and WRITE payloads stay on the heap: a READ is served from the ring
/// entry's buffer, and a range capture's buffer is at most one 1 MiB request.
pub const OWN_MAPPING_FROM: usize = 4 << 20;

/// Gives every allocation of [`OWN_MAPPING_FROM`] or more its own mapping, for the life of
/// the daemon: call it before any thread starts.
///
/// The large ones are the inode table's maps (10.5 MiB at 100k nodes), which the kernel's
/// forgets shrink and its look-ups grow again. glibc raises its mapping threshold to the size
/// of the first such block freed, so after that each map went on the heap of whichever
/// thread's arena grew it (a ring thread's, a forget thread's), where a trim cannot hand it
/// back while smaller blocks live after it. Measured (`scripts/bench.sh`'s workloads before
/// a look-up of 100k inodes): 53-66 MiB without this, 38 MiB with it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn tune_allocator() {
    // SAFETY: mallopt only sets the allocator's own parameters; it has no preconditions and
    // touches no memory the caller owns.
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM as libc::c_int) };
    if ok != 1 {
        tracing::debug!("mallopt(M_MMAP_THRESHOLD) refused");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

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
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut p = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut p, Some(&ts)) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(ctx(
                    errno(e),
                    format!(
                        "poll(fd {}, POLLIN, {} ms)",
                        fd.as_raw_fd(),
                        left.as_millis()
                    ),
                ));
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

/// Finds the files some process has mapped shared and writable (what a message boundary must
/// write back first), keeping each process's `/proc/PID/maps` open from one scan to the next.
///
/// Each process is asked with the `PROCMAP_QUERY` ioctl on its maps (Linux >= 6.11), which
/// filters the mappings in the kernel and formats no path: a process with no shared writable
/// file mapping costs one ioctl. Reading the maps as text formats every mapping's path, and
/// opening them costs a procfs lookup: the two were most of a message boundary's cost (2.6 ms
/// of a `begin_message` with 70 processes, release build: `scripts/bench-begin.sh`). Older
/// kernels read the text.
///
/// Each kept file is keyed by the pid and the inode number `/proc` lists for it, which a new
/// process under a reused pid does not share: a pid whose inode changed is opened afresh, and
/// a kept file whose process has exited or exec'd fails the ioctl (ESRCH) and is opened afresh
/// too, so a process is never answered for by another. A process with no memory to map
/// (a kernel thread, a zombie), or whose maps cannot be read, is remembered as such under its
/// inode and skipped: most of the pids of a machine are kernel threads.
#[derive(Default)]
pub struct MappingScanner {
    /// By pid, for the processes of the last scan (at most [`MAPS_KEPT`]): their `/proc` inode
    /// and their open maps (`None`: no memory map, or not readable).
    kept: std::sync::Mutex<std::collections::HashMap<u32, (u64, Option<std::fs::File>)>>,
}

/// How many processes a [`MappingScanner`] remembers (the open-file limit is shared with the
/// inode table: docs/design.md §6).
const MAPS_KEPT: usize = 512;

impl MappingScanner {
    /// The files on device `dev` that some process has mapped shared and writable: each file's
    /// inode number, and one such mapping, `/proc/PID/map_files/START-END` (opening that needs
    /// root). Processes that cannot be asked, or go away meanwhile, are skipped.
    pub fn shared_writable(&self, dev: u64) -> Vec<(u64, PathBuf)> {
        use std::os::unix::fs::DirEntryExt;
        let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return out;
        };
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let mut alive = std::collections::HashMap::with_capacity(kept.len());
        let mut query_works = true;
        for e in procs.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let ino = e.ino();
            let found = if query_works {
                let mut asked = match kept.remove(&pid) {
                    Some((i, None)) if i == ino => None,
                    Some((i, Some(maps))) if i == ino => Some(maps),
                    _ => Self::open(pid),
                }
                .map(|maps| (procmap_query_shared_writable(&maps, major, minor), maps));
                if matches!(&asked, Some((Err(e), _)) if e.raw_os_error() == Some(libc::ESRCH)) {
                    // Kept for a process that exited or exec'd since, or a fresh open of a
                    // process with no memory map: asked once more through a fresh open.
                    asked = Self::open(pid)
                        .map(|maps| (procmap_query_shared_writable(&maps, major, minor), maps));
                }
                match asked {
                    Some((Ok(found), maps)) => {
                        if alive.len() < MAPS_KEPT {
                            alive.insert(pid, (ino, Some(maps)));
                        }
                        found
                    }
                    Some((Err(e), _)) if e.raw_os_error() == Some(libc::ENOTTY) => {
                        query_works = false;
                        maps_shared_writable(pid, major, minor)
                    }
                    // No memory map (ESRCH), or not ours to read: skipped while it lives.
                    _ => {
                        if alive.len() < MAPS_KEPT {
                            alive.insert(pid, (ino, None));
                        }
                        continue;
                    }
                }
            } else {
                maps_shared_writable(pid, major, minor)
            };
            for (ino, start, end) in found {
                if seen.insert(ino) {
                    // map_files names mappings by their unpadded addresses.
                    out.push((
                        ino,
                        PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}")),
                    ));
                }
            }
        }
        // Processes no longer listed are closed with the old map.
        *kept = alive;
        out
    }

    /// Process `pid`'s maps, if they can be opened.
    fn open(pid: u32) -> Option<std::fs::File> {
        std::fs::File::open(format!("/proc/{pid}/maps")).ok()
    }
}

/// `struct procmap_query` of `<linux/fs.h>` (Linux 6.11).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `PROCMAP_QUERY`: `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = (3 << 30)
    | ((std::mem::size_of::<ProcmapQuery>() as libc::c_ulong) << 16)
    | ((b'f' as libc::c_ulong) << 8)
    | 17;
const PROCMAP_QUERY_VMA_WRITABLE: u64 = 0x02;
const PROCMAP_QUERY_VMA_SHARED: u64 = 0x08;
const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = 0x10;
const PROCMAP_QUERY_FILE_BACKED_VMA: u64 = 0x20;

/// The shared writable file mappings of device `major:minor` of the process whose open
/// `/proc/PID/maps` is `maps`, as (inode, start, end), asked with `PROCMAP_QUERY`: the kernel
/// skips every other mapping itself.
///
/// # Errors
/// `ENOTTY` when the kernel has no `PROCMAP_QUERY`; `ESRCH` when the process has exited or
/// exec'd since `maps` was opened.
#[allow(unsafe_code)]
fn procmap_query_shared_writable(
    maps: &std::fs::File,
    major: u32,
    minor: u32,
) -> io::Result<Vec<(u64, u64, u64)>> {
    let mut found = Vec::new();
    let mut addr = 0u64;
    loop {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: PROCMAP_QUERY_COVERING_OR_NEXT_VMA
                | PROCMAP_QUERY_FILE_BACKED_VMA
                | PROCMAP_QUERY_VMA_WRITABLE
                | PROCMAP_QUERY_VMA_SHARED,
            query_addr: addr,
            ..ProcmapQuery::default()
        };
        // SAFETY: `q` is a live, properly sized `procmap_query` the kernel reads and writes
        // for the duration of the call; the name and build-id buffers are null with size 0,
        // so the kernel writes nothing else.
        let rc = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut q) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // ENOENT: no matching mapping at or after `addr`.
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(found);
            }
            return Err(e);
        }
        if q.dev_major == major && q.dev_minor == minor {
            found.push((q.inode, q.vma_start, q.vma_end));
        }
        if q.vma_end <= addr {
            return Ok(found);
        }
        addr = q.vma_end;
    }
}

/// [`procmap_query_shared_writable`] from the text of `/proc/PID/maps` (kernels before 6.11).
fn maps_shared_writable(pid: u32, major: u32, minor: u32) -> Vec<(u64, u64, u64)> {
    let want = format!("{major:02x}:{minor:02x}");
    let mut found = Vec::new();
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return found;
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
        let (Ok(ino), Some((a, b))) = (ino.parse::<u64>(), range.split_once('-')) else {
            continue;
        };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        found.push((ino, a, b));
    }
    found
}

/// The process's umask is cleared once at start: modes from the kernel already carry the
/// caller's umask, and applying the daemon's on top would be wrong.
pub fn clear_umask() {
    rustix::process::umask(Mode::empty());
}

/// Runs `f` with the process's umask set to `mask`, then puts the old one back (a socket is
/// created 0600 from the start: no window in which another user could connect).
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    let old = rustix::process::umask(Mode::from_raw_mode(mask));
    let r = f();
    rustix::process::umask(old);
    r
}

/// Leaves the caller's session (`setsid`): a detached daemon no longer gets its terminal's
/// signals. An error (already a session leader) changes nothing and is ignored.
pub fn detach_session() {
    let _ = rustix::process::setsid();
}

/// Makes a FIFO at `path` (relative to the current directory), mode `mode`.
pub fn mkfifo(path: &Path, mode: u32) -> io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(mode),
        0,
    )
    .map_err(|e| ctx(errno(e), format!("mkfifo({}, {mode:o})", path.display())))
}

/// A close-on-exec duplicate of `fd` numbered 3 or above (never a standard stream's number).
pub fn dup_cloexec(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(fd, 3).map_err(errno)
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

/// Whether this process is in the initial pid namespace (the host's: its pid 1 is the host's
/// init), not a container's own. Unknown (no `/proc`) counts as the host's.
pub fn in_initial_pid_namespace() -> bool {
    /// The inode of the initial pid namespace (`PROC_PID_INIT_INO`), fixed by the kernel.
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    match std::fs::metadata("/proc/self/ns/pid") {
        Ok(md) => std::os::unix::fs::MetadataExt::ino(&md) == PROC_PID_INIT_INO,
        Err(_) => true,
    }
}

/// The parent pid of a process (for the hook command's agent).
pub fn parent_pid(pid: u32) -> Option<u32> {
    proc_status(pid).map(|(_, ppid, _)| ppid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A file this process maps shared and writable is found, by the ioctl and by the text of
    /// the maps alike, and a private mapping of another file is not.
    #[test]
    #[allow(unsafe_code)]
    fn a_shared_writable_mapping_is_found_and_a_private_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (shared, private) = (dir.path().join("shared"), dir.path().join("private"));
        std::fs::write(&shared, [0u8; 4096]).unwrap();
        std::fs::write(&private, [0u8; 4096]).unwrap();
        let (fs, fp) = (
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&shared)
                .unwrap(),
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&private)
                .unwrap(),
        );
        let meta = fs.metadata().unwrap();
        // A scan before the mapping exists keeps this process's maps open; the scans after it
        // ask through them.
        let scanner = MappingScanner::default();
        let before = scanner.shared_writable(meta.dev());
        assert!(
            !before.iter().any(|(ino, _)| *ino == meta.ino()),
            "{before:?}"
        );
        let map = |f: &std::fs::File, flags| {
            // SAFETY: a fresh mapping of 4096 bytes of an open file, unmapped below before
            // the file is closed; nothing reads or writes through it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    f.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p
        };
        let (ps, pp) = (map(&fs, libc::MAP_SHARED), map(&fp, libc::MAP_PRIVATE));
        let first = scanner.shared_writable(meta.dev());
        let found = scanner.shared_writable(meta.dev());
        // Other tests of this process map and unmap files of the same filesystem meanwhile
        // (SQLite's shared memory): the two scans agree on this file's mappings.
        let this_file = |v: &[(u64, PathBuf)]| -> Vec<(u64, PathBuf)> {
            v.iter()
                .filter(|(ino, _)| *ino == meta.ino())
                .cloned()
                .collect()
        };
        assert_eq!(this_file(&first), this_file(&found));
        let pid = std::process::id();
        let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
        let text = maps_shared_writable(pid, major, minor);
        let maps = std::fs::File::open(format!("/proc/{pid}/maps")).unwrap();
        let asked = procmap_query_shared_writable(&maps, major, minor);
        // SAFETY: the two mappings made above, each 4096 bytes, not used after this.
        unsafe {
            libc::munmap(ps, 4096);
            libc::munmap(pp, 4096);
        }
        let private_ino = fp.metadata().unwrap().ino();
        assert!(found.iter().any(|(ino, _)| *ino == meta.ino()), "{found:?}");
        assert!(
            !found.iter().any(|(ino, _)| *ino == private_ino),
            "{found:?}"
        );
        let start = ps as u64;
        let ours = format!("/proc/{pid}/map_files/{start:x}-{:x}", start + 4096);
        assert!(
            found.iter().any(|(_, p)| p == Path::new(&ours)),
            "{found:?} {ours}"
        );
        // Other tests of this process may map files of the same filesystem meanwhile: only
        // this file's mappings are compared.
        let mine = |v: Vec<(u64, u64, u64)>| -> Vec<_> {
            v.into_iter().filter(|m| m.0 == meta.ino()).collect()
        };
        let text = mine(text);
        assert_eq!(text, vec![(meta.ino(), start, start + 4096)]);
        // The ioctl answers what the text says (ENOTTY only on a kernel before 6.11).
        match asked {
            Ok(asked) => assert_eq!(mine(asked), text),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}"),
        }
    }

    /// Maps kept open for a process that has exited answer nothing: the scanner then opens the
    /// pid's maps afresh, so a reused pid is never answered for by the old process.
    #[test]
    fn kept_maps_of_an_exited_process_answer_with_an_error() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let maps = std::fs::File::open(format!("/proc/{}/maps", child.id())).unwrap();
        let alive = procmap_query_shared_writable(&maps, 0, 0);
        if alive
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::ENOTTY))
        {
            child.kill().unwrap();
            child.wait().unwrap();
            assert!(
                std::env::var_os("CI").is_none(),
                "needs PROCMAP_QUERY under CI"
            );
            eprintln!("skipped: no PROCMAP_QUERY on this kernel");
            return;
        }
        assert!(alive.is_ok(), "{alive:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        let gone = procmap_query_shared_writable(&maps, 0, 0);
        assert!(gone.is_err(), "{gone:?}");
    }

    /// A pid the scanner remembered as having no memory map (a zombie) and that a new process
    /// takes, mapping a file for writing, is asked afresh: its mapping is found.
    #[test]
    fn a_reused_pid_is_asked_afresh() {
        use std::io::BufRead;
        if !rustix::process::geteuid().is_root() {
            assert!(std::env::var_os("CI").is_none(), "needs root under CI");
            eprintln!("skipped: needs root (ns_last_pid)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mapped");
        std::fs::write(&file, [0u8; 4096]).unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        let scanner = MappingScanner::default();
        // Other processes may take the pid first: a few tries.
        for _ in 0..20 {
            // A zombie: exited, not yet waited for.
            let mut zombie = std::process::Command::new("true").spawn().unwrap();
            let pid = zombie.id();
            std::thread::sleep(std::time::Duration::from_millis(50));
            let before = scanner.shared_writable(meta.dev());
            assert!(
                !before.iter().any(|(ino, _)| *ino == meta.ino()),
                "{before:?}"
            );
            assert!(
                matches!(scanner.kept.lock().unwrap().get(&pid), Some((_, None))),
                "the zombie is remembered as having no map"
            );
            zombie.wait().unwrap();
            std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
            let mut child = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import mmap,sys,time; f=open(sys.argv[1],'r+b'); m=mmap.mmap(f.fileno(),4096); \
                     print('mapped',flush=True); time.sleep(30)",
                ])
                .arg(&file)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let reused = child.id() == pid;
            let found = scanner.shared_writable(meta.dev());
            child.kill().unwrap();
            child.wait().unwrap();
            if !reused {
                continue;
            }
            assert!(found.iter().any(|(ino, _)| *ino == meta.ino()), "{found:?}");
            return;
        }
        panic!("no pid was reused in 20 tries");
    }
}
