//! Wiring and lifetime: open the root fd, open the store, mount, serve, shut down in order.
//!
//! Order of start: lock the store (one daemon per store) → open the workspace's directory fd
//! (before the mount covers it) → open the store → mount → serve the control socket.
//! Order of stop (signal, `rewindfs umount`, or the kernel ending the session): unmount →
//! the FUSE session threads return → the control server stops → the store is flushed.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fuser::{MountOption, SessionACL};

use crate::capture::{Observer, Recorder};
use crate::config::{IoUring, MountConfig};
use crate::control::Daemon;
use crate::fs::{CacheConfig, Core, RewindFs};
use crate::rewind::{Engine, KernelCache};
use crate::store::Store;
use crate::{mounts, sys};

/// The kernel side of rewinds, on top of the FUSE session: `syncfs` on the mount to write back
/// dirty pages, and the notifier to drop cached entries and pages.
struct FuseKernel {
    /// Set once the session is up.
    notifier: std::sync::OnceLock<fuser::Notifier>,
    core: Arc<Core>,
    /// The mount point (opened lazily, from a thread that is not serving FUSE requests).
    dir: PathBuf,
}

impl KernelCache for FuseKernel {
    fn flush(&self) {
        if self.notifier.get().is_none() {
            return;
        }
        // syncfs starts writing back every dirty page, but the kernel does not wait for a
        // FUSE daemon to have received them; fsync of a file does (it waits for the file's
        // pending writes to be answered). Only pages written through a shared mapping are
        // dirty here (a write() reaches the daemon before it returns), and the kernel writes a
        // file's pages back when it is closed: what is left are files still mapped for
        // writing, found in the processes' maps, and synced through them.
        let dev = match File::open(&self.dir) {
            Ok(f) => {
                if let Err(e) = sys::syncfs(f.as_fd()) {
                    tracing::warn!("syncfs {}: {e}", self.dir.display());
                }
                sys::fstat(f.as_fd()).map(|st| st.st_dev).ok()
            }
            Err(e) => {
                tracing::warn!("open {}: {e}", self.dir.display());
                None
            }
        };
        // The maps name each file by its node (the inode number the kernel shows), reopened
        // through the mount; one with no name left, through the mapping (root only).
        for (node, mapping) in dev.map(sys::shared_writable_mappings).unwrap_or_default() {
            let path = match self.core.inodes.path(node) {
                Ok(p) => self.dir.join(p),
                Err(_) => mapping,
            };
            if let Ok(f) = File::open(&path) {
                if let Err(e) = f.sync_data() {
                    tracing::warn!("flushing {}: {e}", path.display());
                }
            }
        }
    }

    fn replaced(&self, paths: &[PathBuf]) {
        self.core.replaced(paths);
    }

    fn invalidate(&self, paths: &[PathBuf]) {
        let Some(n) = self.notifier.get() else { return };
        // Every directory entry along each path, as far as the kernel may know the path: a
        // rewind also creates and removes parents (a negative entry or a cached listing of the
        // last known ancestor would hide a restored directory).
        let mut entries: std::collections::HashSet<(u64, std::ffi::OsString)> = Default::default();
        let mut nodes: std::collections::HashSet<u64> = Default::default();
        for p in paths {
            let mut cur = crate::fs::inodes::ROOT;
            for c in p.components() {
                let name = c.as_os_str();
                // The directory's own attributes (mtime, nlink) and listing changed too.
                nodes.insert(cur);
                entries.insert((cur, name.to_owned()));
                match self.core.inodes.child(cur, name) {
                    Some(child) => cur = child,
                    None => break,
                }
            }
            if let (_, Some(node)) = self.core.inodes.resolve(p) {
                nodes.insert(node);
            }
        }
        for (parent, name) in &entries {
            let _ = n.inval_entry(fuser::INodeNo(*parent), name);
        }
        for node in nodes {
            let _ = n.inval_inode(fuser::INodeNo(node), 0, 0);
        }
    }
}

/// Whether the daemon recorded in the store's pid file is exiting (or gone): its lock on the
/// store is about to be released.
fn holder_exiting(store: &std::path::Path) -> bool {
    /// `PF_EXITING` in the flags of `/proc/<pid>/stat`.
    const PF_EXITING: u64 = 0x4;
    let Some(pid) = std::fs::read_to_string(store.join(files::PID))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        return false;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true; // gone; whoever holds the lock now is not a daemon of this store's mount
    };
    // After the command name (which may hold spaces): state, ppid, pgrp, session, tty_nr,
    // tpgid, flags.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let state = fields.first().copied().unwrap_or("");
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0
}

/// Files the daemon keeps in the store directory.
pub mod files {
    pub const LOCK: &str = "lock";
    pub const PID: &str = "daemon.pid";
    pub const LOG: &str = "daemon.log";
    pub const SOCKET: &str = "control.sock";
}

/// Starts the daemon in the background and returns once the mount answers.
///
/// # Errors
/// The daemon's own error message when it exits before the mount is live, or a timeout.
pub fn spawn_detached(cfg: &MountConfig) -> anyhow::Result<()> {
    let log_path = cfg.store.join(files::LOG);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let start = log.metadata()?.len();
    let exe = std::env::current_exe().context("finding the rewindfs binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg(&cfg.dir)
        .arg("--foreground")
        .arg("--detached")
        .arg("--store")
        .arg(&cfg.store)
        .arg("--threads")
        .arg(cfg.threads.to_string())
        .arg("--ttl")
        .arg(cfg.ttl.as_secs_f64().to_string())
        .arg("--io-uring")
        .arg(cfg.io_uring.as_str());
    if let Some(pid) = cfg.agent_pid {
        cmd.arg("--agent-pid").arg(pid.to_string());
    }
    if cfg.sync {
        cmd.arg("--sync");
    }
    cmd.arg("--range-capture-min")
        .arg(if cfg.range_capture_min == u64::MAX {
            "0".to_string()
        } else {
            cfg.range_capture_min.to_string()
        });
    cmd.arg("--max-store-bytes")
        .arg(cfg.retention.max_bytes.unwrap_or(0).to_string())
        .arg("--max-age")
        .arg(format!(
            "{}s",
            cfg.retention.max_age.map_or(0.0, |d| d.as_secs_f64())
        ));
    // Each thread that allocates gets its own malloc arena, which keeps what it freed; two
    // arenas keep the daemon's RSS down (a full benchmark run: 69 -> about 60 MiB after 100k
    // inodes were looked up) at no measurable cost.
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        cmd.env("MALLOC_ARENA_MAX", "2");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the daemon")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            let msg = read_from(&log_path, start).unwrap_or_default();
            let msg = msg
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string();
            let msg = msg.strip_prefix("rewindfs: ").unwrap_or(&msg).to_string();
            if msg.is_empty() {
                bail!(
                    "the daemon exited ({status}) before the mount was live; see {}",
                    log_path.display()
                );
            }
            bail!("{msg}");
        }
        if is_live(&cfg.dir, &cfg.store) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "the mount did not come up within 60 s; see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn read_from(path: &Path, start: u64) -> io::Result<String> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(start))?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    Ok(s)
}

/// Whether `dir` is a rewindfs mount of `store` that answers, with its socket up.
pub fn is_live(dir: &Path, store: &Path) -> bool {
    let Ok(Some(m)) = mounts::mount_at(dir) else {
        return false;
    };
    m.fstype == mounts::FSTYPE
        && m.source == store
        && sys::statfs_type(dir).ok() == Some(sys::FUSE_SUPER_MAGIC)
        && store.join(files::SOCKET).exists()
}

/// `rewindfs gc --store` with no daemon on the store: one full retention pass under the store's
/// lock, keeping the last checkpoint (and its session) as the current one. `Ok(None)` when a
/// daemon holds the store (ask it over its socket instead).
///
/// # Errors
/// The store cannot be locked or opened; store errors.
pub fn gc_offline(
    store_dir: &Path,
    policy: &crate::store::gc::Policy,
) -> anyhow::Result<Option<crate::store::gc::Report>> {
    if !store_dir.join("rewindfs.db").exists() {
        bail!("{}: no store database", store_dir.display());
    }
    let lock_path = store_dir.join(files::LOCK);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    if let Err(e) = sys::try_lock(lock.as_fd()) {
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Ok(None);
        }
        return Err(e).context(format!("locking {}", lock_path.display()));
    }
    let store = Store::open(store_dir, false)?;
    let (keep_from, session) = match store.last_checkpoint()? {
        Some(c) => (c.seq, c.session_id),
        None => return Ok(Some(crate::store::gc::Report::default())),
    };
    let r = store.gc(policy, keep_from, session.as_deref(), true)?;
    drop(lock);
    Ok(Some(r))
}

/// How often buffered change-log entries and journal records reach SQLite.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// How often the daemon checks the store against its retention limits.
const GC_EVERY: Duration = Duration::from_secs(60);

/// One automatic retention pass; what it freed (or why it failed) goes to the log.
fn gc_pass(engine: &Engine, policy: &crate::store::gc::Policy, full: bool) {
    use crate::store::gc::human_bytes;
    match engine.gc(policy, full) {
        Ok(r) if r.checkpoints_dropped > 0 || r.blobs_deleted > 0 => tracing::info!(
            "gc: dropped {} checkpoint(s), {} capture(s), {} blob(s); freed {} ({} -> {})",
            r.checkpoints_dropped,
            r.captures_deleted,
            r.blobs_deleted,
            human_bytes(r.bytes_freed),
            human_bytes(r.bytes_before),
            human_bytes(r.bytes_after)
        ),
        Ok(r) if r.over_budget && full => tracing::warn!(
            "gc: the store holds {} (over its budget) but nothing more may be dropped: the current checkpoint and live sessions' first captures stay",
            human_bytes(r.bytes_after)
        ),
        Ok(_) => {}
        Err(e) => tracing::error!("gc: {e}"),
    }
}

/// Runs the daemon in the foreground until unmounted or signalled.
///
/// # Errors
/// Any failure to lock the store, open the workspace, or mount.
pub fn run(cfg: MountConfig) -> anyhow::Result<()> {
    if cfg.detached {
        // Leave the caller's session so its terminal's signals do not reach us.
        let _ = rustix::process::setsid();
    }
    sys::clear_umask();
    let lock_path = cfg.store.join(files::LOCK);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    // A daemon that was killed holds the lock until its exit completes, which waits for the
    // FUSE requests it had in flight to be cancelled (the unmount does that): a mount right
    // after `kill -9` and `umount` waits for that exit, never for a live daemon.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sys::try_lock(lock.as_fd()) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                if !holder_exiting(&cfg.store) || std::time::Instant::now() > deadline {
                    let pid = std::fs::read_to_string(cfg.store.join(files::PID))
                        .map(|s| format!(" (pid {})", s.trim()))
                        .unwrap_or_default();
                    bail!(
                        "store {} is in use by another rewindfs daemon{pid}: unmount its \
                         directory first (`rewindfs umount DIR`), or give this mount its own \
                         --store",
                        cfg.store.display()
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e).context(format!("locking {}", lock_path.display())),
        }
    }
    let store_s = cfg
        .store
        .to_str()
        .context("the store path must be valid UTF-8")?;
    if store_s.contains(',') || store_s.contains(char::is_whitespace) {
        bail!(
            "store path {store_s:?} must not contain commas or spaces (it is the mount's source)"
        );
    }
    std::fs::write(cfg.store.join(files::PID), format!("{}\n", sys::getpid()))?;

    let root = sys::open_dir_path(&cfg.dir)?;
    let store = Arc::new(Store::open(&cfg.store, cfg.sync)?);
    let recorder = Arc::new(Recorder::new(root.as_fd(), store.clone())?);
    if let Some(pid) = cfg.agent_pid {
        recorder.register_agent(pid);
    }
    recorder.set_range_capture_min(cfg.range_capture_min);
    let observer: Arc<dyn Observer> = recorder.clone();
    let core = Arc::new(Core::new(root, observer)?);
    let kernel = Arc::new(FuseKernel {
        notifier: std::sync::OnceLock::new(),
        core: core.clone(),
        dir: cfg.dir.clone(),
    });
    let engine = Arc::new(Engine::new(recorder.clone(), store.clone(), kernel.clone()));
    // A rewind a crash interrupted is finished before anyone sees the tree.
    let recovered = engine
        .recover()
        .map_err(|e| anyhow::anyhow!("finishing an interrupted rewind: {e}"))?;
    if recovered > 0 {
        tracing::warn!("finished {recovered} interrupted rewind(s)");
    }
    let policy = cfg.retention.policy();
    gc_pass(&engine, &policy, true);
    let fs = RewindFs::new(core.clone(), CacheConfig { ttl: cfg.ttl });

    // SIGTERM and SIGINT are taken over before the socket and the mount appear: a signal sent
    // as soon as they are seen unmounts cleanly instead of killing the process (which left
    // the mount dead until `rewindfs umount`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (mut term, mut int) = {
        use tokio::signal::unix::{SignalKind, signal};
        let _in_rt = rt.enter();
        (
            signal(SignalKind::terminate()).context("handling SIGTERM")?,
            signal(SignalKind::interrupt()).context("handling SIGINT")?,
        )
    };
    // The socket is up before the mount appears, so "mounted" implies "answers" (a stale
    // socket file of a killed daemon is replaced here, before anyone can see the new mount).
    let socket_path = cfg.store.join(files::SOCKET);
    let _ = std::fs::remove_file(&socket_path);
    let std_listener = {
        // Created 0600 from the start: no window in which another user could connect.
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
        let l = std::os::unix::net::UnixListener::bind(&socket_path);
        rustix::process::umask(old);
        l.with_context(|| format!("binding {}", socket_path.display()))?
    };
    std_listener.set_nonblocking(true)?;

    let mut fcfg = fuser::Config::default();
    fcfg.mount_options = vec![
        MountOption::FSName(store_s.to_string()),
        // The kernel shows it as `fuse.rewindfs` in the mount table.
        MountOption::CUSTOM("subtype=rewindfs".into()),
        MountOption::DefaultPermissions,
        MountOption::Suid,
        MountOption::Dev,
    ];
    // As root, let every user in (the permission checks are the kernel's: default_permissions).
    fcfg.acl = if sys::geteuid() == 0 {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    fcfg.n_threads = Some(cfg.threads);
    fcfg.clone_fd = cfg.threads > 1;
    if io_uring_wanted(cfg.io_uring)? {
        // One ring (and payload buffer) per thread: on a large machine one thread per CPU.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        fcfg.io_uring_threads_per_queue = if cpus <= 8 { RING_THREADS_PER_QUEUE } else { 1 };
        fcfg.io_uring_entries = 1;
        fcfg.io_uring_idle_placement = true;
    }
    let session = if sys::geteuid() == 0 {
        fuser::Session::new(fs, &cfg.dir, &fcfg)
            .map_err(|e| anyhow::anyhow!("cannot mount {}: {e}", cfg.dir.display()))?
    } else {
        // An ordinary user cannot open /dev/fuse or call mount(2): the setuid fusermount3
        // helper mounts and hands us the fd (fuser only falls back to it on EPERM from mount).
        let opts = format!("fsname={store_s},subtype=rewindfs,default_permissions");
        let fd = sys::fusermount(&cfg.dir, &opts)
            .map_err(|e| anyhow::anyhow!("cannot mount {}: {e}", cfg.dir.display()))?;
        fuser::Session::from_fd(fs, fd, SessionACL::Owner, fcfg)
            .map_err(|e| anyhow::anyhow!("cannot mount {}: {e}", cfg.dir.display()))?
    };
    let _ = kernel.notifier.set(session.notifier());
    if session.io_uring_active() {
        tracing::info!(
            "serving requests over io_uring (negotiated; /dev/fuse serves until every CPU's queue has registered)"
        );
    } else if cfg.io_uring == IoUring::On {
        bail!(
            "cannot mount {}: the kernel did not offer FUSE over io_uring",
            cfg.dir.display()
        );
    }
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<io::Result<()>>();
    let fuse_thread = std::thread::Builder::new()
        .name("fuse".into())
        .spawn(move || {
            let r = session.run();
            let _ = done_tx.send(r);
        })?;

    let dir = cfg.dir.clone();
    let daemon = Arc::new(Daemon {
        engine: engine.clone(),
        workspace: cfg.dir.clone(),
        store_dir: cfg.store.clone(),
        retention: policy,
    });
    let gc_engine = engine.clone();
    // The change log and capture journal are written to SQLite by their own thread.
    let flush_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (r, stop) = (recorder.clone(), flush_stop.clone());
        std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || {
                // SQLite work is background work: at SCHED_IDLE it never delays a FUSE
                // request. Ring threads run at SCHED_IDLE too (vendor/fuser/src/uring.rs), and
                // an ordinary thread on their CPU held a request for a whole transaction
                // (1-15 ms stalls, a tenth of an `rm -rf`). A flusher starved by a busy CPU
                // only falls behind: changes write the backlog themselves past a bound
                // (`LOG_FLUSH_INLINE_AT`), and every read of the store applies it first.
                run_idle("flusher");
                r.run_flusher(FLUSH_EVERY, &stop)
            })?
    };
    // Released files are closed off the request path (see `Core::closer`); the thread ends
    // with the process.
    if let Some(close_loop) = core.closer() {
        std::thread::Builder::new()
            .name("closer".into())
            .spawn(move || {
                run_idle("closer");
                close_loop()
            })?;
    }
    let result: anyhow::Result<()> = rt.block_on(async move {
        let listener = tokio::net::UnixListener::from_std(std_listener)?;
        tracing::info!("mounted {} (store {})", dir.display(), socket_path.display());
        let mut done_rx = done_rx;
        let (shutdown_tx, _) = tokio::sync::broadcast::channel::<()>(1);
        let server = tokio::spawn(crate::control::serve(listener, daemon, shutdown_tx.subscribe()));
        let mut gc_tick = tokio::time::interval_at(
            tokio::time::Instant::now() + GC_EVERY,
            GC_EVERY,
        );
        let mut stopping = false;
        let res = loop {
            tokio::select! {
                _ = term.recv(), if !stopping => { stopping = true; let d = dir.clone(); tokio::task::spawn_blocking(move || stop(&d)); }
                _ = int.recv(), if !stopping => { stopping = true; let d = dir.clone(); tokio::task::spawn_blocking(move || stop(&d)); }
                _ = gc_tick.tick() => { let e = gc_engine.clone(); let _ = tokio::task::spawn_blocking(move || gc_pass(&e, &policy, false)).await; }
                r = &mut done_rx => {
                    break match r { Ok(Err(e)) => Err(anyhow::anyhow!("FUSE session ended: {e}")), _ => Ok(()) };
                }
            }
        };
        let _ = shutdown_tx.send(());
        let _ = server.await;
        res
    });
    let _ = fuse_thread.join();
    flush_stop.store(true, std::sync::atomic::Ordering::Release);
    recorder.wake_flusher();
    let _ = flusher.join();
    recorder.flush_log();
    let _ = std::fs::remove_file(cfg.store.join(files::SOCKET));
    let _ = std::fs::remove_file(cfg.store.join(files::PID));
    drop(lock);
    result
}

/// Threads per CPU queue of the io_uring transport, each with one ring entry: a request that
/// blocks (a large capture) holds up only its own thread, not the next request of its CPU.
const RING_THREADS_PER_QUEUE: usize = 2;

/// The kernel parameter that lets FUSE servers use io_uring.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether to ask for io_uring at the handshake. The kernel parameter is only a gate for
/// FUSE servers that ask for io_uring, as this one does; root opens it unless told `off`.
fn io_uring_wanted(mode: IoUring) -> anyhow::Result<bool> {
    let open_gate = || std::fs::write(ENABLE_URING, "Y");
    match mode {
        IoUring::Off => Ok(false),
        IoUring::Auto if fuser::io_uring_enabled() => Ok(true),
        IoUring::Auto if sys::geteuid() == 0 && Path::new(ENABLE_URING).exists() => {
            match open_gate() {
                Ok(()) => {
                    tracing::info!("switched on {ENABLE_URING} (FUSE over io_uring)");
                    Ok(true)
                }
                Err(e) => {
                    tracing::info!("FUSE over io_uring not used: {ENABLE_URING}: {e}");
                    Ok(false)
                }
            }
        }
        IoUring::Auto => Ok(false),
        IoUring::On => {
            if !fuser::io_uring_enabled() {
                open_gate().with_context(|| {
                    format!(
                        "--io-uring on: switching on {ENABLE_URING} (needs root and Linux >= 6.14 with CONFIG_FUSE_IO_URING)"
                    )
                })?;
            }
            Ok(true)
        }
    }
}

/// Unmounts on a signal: a clean unmount, or a lazy one if files are still open.
fn stop(dir: &Path) {
    tracing::info!("signal received: unmounting {}", dir.display());
    if let Err(e) = mounts::unmount(dir, false) {
        tracing::warn!("{e}; detaching lazily");
        if let Err(e) = mounts::unmount(dir, true) {
            tracing::error!("{e}");
        }
    }
}

/// `rewindfs umount DIR`: unmount, clear a dead mount, and wait for the daemon to exit.
///
/// # Errors
/// `DIR` is not a rewindfs mount, or the unmount failed (busy: the message says what to do).
pub fn umount(dir: &Path, lazy: bool) -> anyhow::Result<()> {
    let dir = mounts::absolute(dir)?;
    let Some(m) = mounts::mount_at(&dir)? else {
        bail!("{} is not mounted", dir.display());
    };
    if m.fstype != mounts::FSTYPE {
        bail!("{} is a {} mount, not rewindfs", dir.display(), m.fstype);
    }
    let store = m.source.clone();
    let pid: Option<u32> = std::fs::read_to_string(store.join(files::PID))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    if mounts::is_stale(&dir) {
        mounts::unmount(&dir, true)?;
        return Ok(());
    }
    match mounts::unmount(&dir, lazy) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.to_string().contains("busy") => {
            bail!(
                "{}: {e}; close the files open in it (see `fuser -m {}`) or use --lazy",
                dir.display(),
                dir.display()
            )
        }
        Err(e) => return Err(e.into()),
    }
    // Wait for the daemon to flush its store and exit.
    if let Some(pid) = pid {
        let deadline = Instant::now() + Duration::from_secs(30);
        while sys::process_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}

/// The store of the mount containing `path`, for clients.
pub fn store_of(path: &Path) -> Option<PathBuf> {
    mounts::containing(path).ok().flatten().map(|m| m.source)
}

/// Puts the calling thread at `SCHED_IDLE`: it runs only on a CPU nothing else wants, so
/// background work never delays a request (or the caller, who shares its CPU with that CPU's
/// ring threads). Without the permission it stays an ordinary thread.
fn run_idle(what: &str) {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    if let Err(e) = thread_priority::set_thread_priority_and_policy(
        thread_priority::thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    ) {
        tracing::debug!("{what} stays an ordinary thread: {e:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mount waits for the store's lock only while the daemon that holds it is exiting: a
    /// live one is reported at once, a zombie or a vanished one is waited for.
    #[test]
    fn only_an_exiting_daemon_is_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let pid_file = d.path().join(files::PID);
        assert!(
            !holder_exiting(d.path()),
            "no pid file: not ours to wait for"
        );
        std::fs::write(&pid_file, format!("{}\n", std::process::id())).unwrap();
        assert!(!holder_exiting(d.path()), "a live daemon");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        std::fs::write(&pid_file, format!("{}\n", child.id())).unwrap();
        // Not reaped yet: a zombie once it has exited.
        let zombie = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            holder_exiting(d.path())
        });
        assert!(zombie, "an exited, unreaped process");
        child.wait().unwrap();
        assert!(holder_exiting(d.path()), "a vanished process");
    }
}
