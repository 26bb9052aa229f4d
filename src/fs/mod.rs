//! The FUSE adapter: decode a request, call one [`Core`] function, reply on every path.
//!
//! Nothing here touches the disk; errors from the core keep their errno (`errno_of`).

mod content;
pub mod core;
mod dir;
mod files;
pub mod inodes;
mod node_file;
mod node_files;
mod opens;
mod remove;
mod xattr;

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType,
    Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use rustix::fs::Stat;

pub use self::core::{Core, Ctx, SetAttr};
use self::opens::Grant;
pub use self::opens::{Opens, Passthrough, PassthroughState};

/// The one place an `io::Error` becomes an errno: the real errno passes through unchanged, and
/// only an error without one becomes `EIO`.
pub fn errno_of(e: &io::Error) -> Errno {
    Errno::from_i32(crate::sys::errno_of(e))
}

/// Directory entries read per readdir request: more than a reply of the kernel's usual size
/// holds (those that do not fit are read again by the next request).
const READDIR_BATCH: usize = 1024;
/// The same for readdirplus, whose entries carry attributes (about 170 bytes each).
const READDIRPLUS_BATCH: usize = 256;
/// The read-ahead window of the mount, in KiB: one READ of the largest size a request carries
/// (`FUSE_MAX_PAGES`, 1 MiB) instead of eight of 128 KiB, the kernel's default for a FUSE
/// mount. A cold sequential read of 1 GiB: 1.06-1.24 s → 0.98-1.20 s (5 runs each, ext4 loop
/// filesystem). A random read still reads ahead only 16 KiB.
pub const READAHEAD_KB: u64 = 1024;

/// Kernel cache settings.
#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// How long the kernel may trust attributes and entries.
    pub ttl: Duration,
    /// Answer OPEN and pass reads through to the backing file (`--passthrough`, see
    /// `opens.rs`); otherwise OPEN is declined.
    pub passthrough: bool,
}

/// The mounted filesystem.
pub struct RewindFs {
    pub core: Arc<Core>,
    cache: CacheConfig,
    /// Whether OPEN is answered (`--passthrough` on a kernel that offers it; the open-mode
    /// table is `Core::opens`).
    passthrough: bool,
}

impl RewindFs {
    pub fn new(core: Arc<Core>, cache: CacheConfig) -> Self {
        let passthrough = cache.passthrough;
        RewindFs {
            core,
            cache,
            passthrough,
        }
    }
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn time(s: i64, ns: i64) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns as u32)
    } else {
        UNIX_EPOCH - Duration::new((-s) as u64, 0) + Duration::new(0, ns as u32)
    }
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn dkind(dtype: u8) -> FileType {
    match dtype {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// Converts a backing stat to the attributes the kernel sees under node id `ino`.
fn attr(ino: u64, st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec as i64),
        mtime: time(st.st_mtime, st.st_mtime_nsec as i64),
        ctime: time(st.st_ctime, st.st_ctime_nsec as i64),
        crtime: time(st.st_ctime, st.st_ctime_nsec as i64),
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// The attributes sent with a negative entry (node 0); the kernel does not look at them.
fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// Asks the kernel for passthrough (Linux >= 6.9; registering a backing file needs
/// CAP_SYS_ADMIN, so as root only). False where it cannot be had: OPEN is then declined, as
/// without `--passthrough`, and the mount works as it always did.
fn passthrough_init(config: &mut KernelConfig) -> bool {
    if crate::sys::geteuid() != 0 {
        tracing::warn!(
            "--passthrough: not root (registering a backing file needs CAP_SYS_ADMIN); every \
             read goes through the daemon"
        );
        return false;
    }
    if let Err(missing) = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH) {
        tracing::warn!(
            "--passthrough: this kernel does not offer FUSE passthrough (Linux >= 6.9; missing \
             {missing:?}); every read goes through the daemon"
        );
        return false;
    }
    // 1: backing files on a filesystem that is not stacked itself (ext4, xfs, btrfs, tmpfs).
    // One on overlayfs is refused when registered, and that file is then read through the
    // daemon (`Opens::open_reader`); the mount itself can still be stacked under an overlayfs.
    let _ = config.set_max_stack_depth(1);
    true
}

fn set_time(t: Option<TimeOrNow>) -> crate::sys::SetTime {
    t.map(|t| match t {
        TimeOrNow::Now => None,
        TimeOrNow::SpecificTime(st) => Some(match st.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
            Err(e) => {
                let d = e.duration();
                let (s, ns) = (d.as_secs() as i64, d.subsec_nanos() as i64);
                if ns == 0 {
                    (-s, 0)
                } else {
                    (-s - 1, 1_000_000_000 - ns)
                }
            }
        }),
    })
}

impl Filesystem for RewindFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Each of these removes round trips or is needed for correctness (see docs/design.md §6).
        for flag in [
            // Every listing carries attributes, not only its first request
            // (`FUSE_READDIRPLUS_AUTO` is left off): find, grep -r and git read a whole
            // directory before they stat its entries, so the kernel would otherwise look up
            // each entry past the first reply (80k LOOKUPs for a first `find` of 100k files:
            // 2.0-3.2 s against 0.9-1.0 s with every listing a READDIRPLUS). The cost is one
            // fstatat per entry where a listing's entries are already cached.
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_MAX_PAGES,
            // The daemon clears set-user/group-ID bits itself (see `Core::kill_suid_sgid`), so
            // the kernel need not ask for the file's attributes before a chown or truncate, nor
            // for its `security.capability` before every write (once per inode is enough).
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        ] {
            let _ = config.add_capabilities(flag);
        }
        if self.passthrough {
            self.passthrough = passthrough_init(config);
            self.core.passthrough.set(if self.passthrough {
                Passthrough::On
            } else {
                Passthrough::Unavailable
            });
        }
        let _ = config.set_max_write(1 << 20);
        // The kernel takes the smaller of this and its own proposal (128 KiB): the daemon
        // widens the window after mounting instead (`READAHEAD_KB`).
        let _ = config.set_max_readahead(READAHEAD_KB as u32 * 1024);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.core.lookup(parent.0, name) {
            Ok((l, st)) => {
                reply.entry(&self.cache.ttl, &attr(l.ino, &st), Generation(l.generation))
            }
            // A missing name is answered as node 0, which the kernel caches as a negative entry
            // for the TTL (an ENOENT error is not cached): every change comes through the
            // mount, and a rewind invalidates the entries of the paths it restores.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                reply.entry(&self.cache.ttl, &negative_attr(), Generation(0))
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.core.forget(ino.0, nlookup);
        if !self.core.knows(ino.0) {
            self.core.opens.forget(ino.0);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.core.getattr(ino.0) {
            Ok(st) => reply.attr(&self.cache.ttl, &attr(ino.0, &st)),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        match self.core.setattr(&ctx(req), ino.0, a) {
            Ok(st) => reply.attr(&self.cache.ttl, &attr(ino.0, &st)),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        use std::os::unix::ffi::OsStrExt;
        match self.core.readlink(ino.0) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        match self
            .core
            .mknod(&ctx(req), parent.0, name, mode, umask, rdev)
        {
            Ok((l, st)) => {
                reply.entry(&self.cache.ttl, &attr(l.ino, &st), Generation(l.generation))
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.core.mkdir(&ctx(req), parent.0, name, mode, umask) {
            Ok((l, st)) => {
                reply.entry(&self.cache.ttl, &attr(l.ino, &st), Generation(l.generation))
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.core.unlink(&ctx(req), parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.core.rmdir(&ctx(req), parent.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        match self.core.symlink(&ctx(req), parent.0, link_name, target) {
            Ok((l, st)) => {
                reply.entry(&self.cache.ttl, &attr(l.ino, &st), Generation(l.generation))
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.core.rename(
            &ctx(req),
            parent.0,
            name,
            newparent.0,
            newname,
            flags.bits(),
        ) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.core.link(&ctx(req), ino.0, newparent.0, newname) {
            Ok((l, st)) => {
                reply.entry(&self.cache.ttl, &attr(l.ino, &st), Generation(l.generation))
            }
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// Declined, as OPENDIR is (unless `--passthrough`): the kernel then opens files itself
    /// (every later open too), sending neither OPEN nor RELEASE, and keeps their cached pages
    /// across opens. A warm `grep -r` then sends nothing at all, where it sent two round trips
    /// per file. Reads and writes come by node, with no handle (see `Core::node_file`); a
    /// truncating open comes as a truncate (hence no `FUSE_ATOMIC_O_TRUNC`, which would leave
    /// the truncate to an OPEN that is never sent; with `--passthrough` the kernel still sends
    /// the truncate after the OPEN).
    ///
    /// With `--passthrough`, answered by the open-mode table (`opens.rs`): a reader is served
    /// by the kernel from the backing file, a writer comes here as before, unless a reader
    /// passes through already (then it passes through too, its file's whole pre-image saved
    /// first). The handle only carries the mode to the RELEASE.
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if !self.passthrough {
            return reply.error(Errno::from_i32(libc::ENOSYS));
        }
        let opens = &self.core.opens;
        let send = |reply: ReplyOpen, grant: Grant<'_>| {
            let fh = FileHandle(grant.mode().fh());
            match grant {
                Grant::Passthrough(_, b) => reply.opened_passthrough(fh, FopenFlags::empty(), b),
                Grant::Cached { keep_cache } => {
                    let flags = if keep_cache {
                        FopenFlags::FOPEN_KEEP_CACHE
                    } else {
                        FopenFlags::empty()
                    };
                    reply.opened(fh, flags)
                }
            }
        };
        if flags.0 & libc::O_ACCMODE == libc::O_RDONLY {
            let backing = |reply: &ReplyOpen| {
                let f = self.core.node_file(ino.0, false)?;
                reply.open_backing(f.fd.as_fd())
            };
            return opens.open_reader(ino.0, reply, backing, send);
        }
        let ctx = ctx(req);
        if let Some(grant) = opens.open_writer(ino.0, ctx) {
            return send(reply, grant);
        }
        let captured = self.core.capture_whole(&ctx, ino.0);
        opens.writer_captured(ino.0, captured, reply, |reply, g| match g {
            Ok(g) => send(reply, g),
            Err(e) => reply.error(errno_of(&e)),
        })
    }

    /// Sent only for an open answered by `open` (`--passthrough`).
    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.core.opens.release(ino.0, fh.0);
        reply.ok();
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Over io_uring the data is read straight into the ring entry's buffer.
        reply.data_with(size as usize, |buf| self.core.read(ino.0, offset, buf));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.core.write(&ctx(req), ino.0, offset, data, kill) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// Declined: the kernel then never sends FLUSH again. It writes a file's dirty pages back
    /// at each close itself (files it opens have no `FOPEN_NOFLUSH`), and locks are its own.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.core.fsync(&ctx(req), ino.0, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// Declined: the kernel then never sends OPENDIR or RELEASEDIR (two round trips per
    /// directory listed, e.g. 600 per `git status` of a 300-directory tree) and caches listings
    /// by default (`FOPEN_CACHE_DIR`); readdir works without a handle (see `Core::readdir`).
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let ents = match self.core.readdir(ino.0, offset, READDIR_BATCH) {
            Ok(e) => e,
            Err(e) => return reply.error(errno_of(&e)),
        };
        for e in &ents {
            if reply.add(INodeNo(e.ino), e.next, dkind(e.dtype), &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = self.cache.ttl;
        let res = self
            .core
            .readdirplus(ino.0, offset, READDIRPLUS_BATCH, |e, st, l| match l {
                // The kernel takes no lookup for `.` and `..`; their attributes are not used.
                None => reply.add(
                    INodeNo(e.ino),
                    e.next,
                    &e.name,
                    &Duration::ZERO,
                    &attr(e.ino, st),
                    Generation(0),
                ),
                Some(l) => reply.add(
                    INodeNo(l.ino),
                    e.next,
                    &e.name,
                    &ttl,
                    &attr(l.ino, st),
                    Generation(l.generation),
                ),
            });
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.core.fsyncdir(&ctx(req), ino.0, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.core.statfs() {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self.core.setxattr(&ctx(req), ino.0, name, value, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.core.getxattr(ino.0, name, size) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.core.listxattr(ino.0, size) {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.core.removexattr(&ctx(req), ino.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.core.access(ino.0, mask.bits()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// Declined: the kernel then creates a file with MKNOD and opens it itself (see `open`),
    /// one round trip where CREATE took two (its RELEASE).
    #[allow(clippy::too_many_arguments)]
    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::from_i32(libc::ENOSYS));
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.core.fallocate(&ctx(req), ino.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.core.lseek(ino.0, offset, whence) {
            Ok(off) => reply.offset(off as i64),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        match self.core.copy_file_range(
            &ctx(req),
            (ino_in.0, offset_in),
            (ino_out.0, offset_out),
            len,
        ) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno_of(&e)),
        }
    }
}
