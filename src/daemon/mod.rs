//! Wiring and lifetime: open the root fd, open the store, mount, serve, shut down in order.
//!
//! Order of start: lock the store (one daemon per store) → open the workspace's directory fd
//! (before the mount covers it) → open the store, finish an interrupted rewind → take over
//! the signals → bind the socket → mount → serve the control socket.
//! Order of stop (signal, `rewindfs umount`, or the kernel ending the session): unmount →
//! the FUSE session threads return → the control server stops → the store is flushed.

mod detach;
mod kernel;
pub use self::kernel::{FLUSH_SUBCOMMAND, run_flush};
mod lock;
mod mount;
mod offline;
mod origin;
mod retention;

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

pub use self::detach::{is_live, spawn_detached, store_of, umount};
use self::kernel::FuseKernel;
use self::lock::StoreLock;
pub use self::offline::{ask_offline, history_offline};
pub use self::origin::{begin_fork_store, import_offline, store_of_workspace};
pub use self::retention::gc_offline;
use self::retention::{GC_EVERY, gc_pass};
use crate::capture::{Observer, Recorder};
use crate::config::MountConfig;
use crate::control::Daemon;
use crate::fs::{CacheConfig, Core, RewindFs};
use crate::host::mounts;
use crate::rewind::Rewinder;
use crate::store::Store;
use crate::sys;
use crate::turns::Turns;

/// Files the daemon keeps in the store directory.
pub use crate::store::layout as files;

/// How often the journal's records (pre-images and change-log entries) reach SQLite.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// The parts a running daemon is made of.
struct Parts {
    recorder: Arc<Recorder>,
    core: Arc<Core>,
    kernel: Arc<FuseKernel>,
    rewinder: Arc<Rewinder>,
    turns: Arc<Turns>,
}

/// Runs the daemon in the foreground until unmounted or signalled.
///
/// # Errors
/// Any failure to lock the store, open the workspace, or mount.
pub fn run(cfg: MountConfig) -> anyhow::Result<()> {
    sys::tune_allocator();
    if cfg.detached {
        // Leave the caller's session so its terminal's signals do not reach us.
        sys::detach_session();
    }
    // For the workspace: modes the kernel sends already carry the caller's umask. The store
    // sets its modes explicitly (`store::private`), so this does not open it up.
    sys::clear_umask();
    cfg.create_store()?;
    make_private(&cfg.store)?;
    let lock = StoreLock::acquire(&cfg.store)?;
    let source = mount_source(&cfg.store)?;
    crate::store::private::write_file(
        &cfg.store.join(files::PID),
        format!("{}\n", sys::getpid()).as_bytes(),
    )?;

    let parts = open(&cfg)?;
    let policy = cfg.retention;
    gc_pass(&parts.rewinder, &policy, true);
    let fs = RewindFs::new(
        parts.core.clone(),
        CacheConfig {
            ttl: cfg.ttl,
            passthrough: cfg.passthrough,
        },
    );

    // SIGTERM and SIGINT are taken over before the socket and the mount appear: a signal sent
    // as soon as they are seen unmounts cleanly instead of killing the process (which left
    // the mount dead until `rewindfs umount`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        let _in_rt = rt.enter();
        (
            signal(SignalKind::terminate()).context("handling SIGTERM")?,
            signal(SignalKind::interrupt()).context("handling SIGINT")?,
        )
    };
    let listener = bind_socket(&cfg.store)?;
    let session = mount::mount(&cfg, fs, &source)?;
    parts.kernel.mounted.store(true, Ordering::Release);
    // Read from what the kernel holds (no request to the mount, which does not serve yet).
    match sys::dev_cached(&cfg.dir) {
        Ok(dev) => {
            parts.rewinder.mounted_on(dev);
            let _ = parts.kernel.dev.set(rustix::fs::makedev(dev.0, dev.1));
            widen_readahead(dev);
        }
        Err(e) => tracing::error!(
            "the mount's device cannot be read ({e}): rewinds, undos and redos will fail"
        ),
    }
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<io::Result<()>>();
    let fuse_thread = std::thread::Builder::new()
        .name("fuse".into())
        .spawn(move || {
            let r = session.run();
            let _ = done_tx.send(r);
        })?;
    let flush_stop = Arc::new(AtomicBool::new(false));
    let flusher = start_background(&parts, &flush_stop)?;
    if !cfg.detached {
        // Run in the foreground, this is where the user looks; a detached daemon's CLI says it.
        let list = crate::control::cmd::unprotected_processes(&cfg.dir, &[]);
        if !list.is_empty() {
            let msg = crate::control::cmd::unprotected_warning(&cfg.dir, &list);
            tracing::warn!("{msg}");
        }
    }

    let daemon = Arc::new(Daemon {
        views: Arc::new(parts.rewinder.views()),
        rewinder: parts.rewinder.clone(),
        turns: parts.turns.clone(),
        workspace: cfg.dir.clone(),
        store_dir: cfg.store.clone(),
        retention: policy,
        trust_file: crate::config::trust_file(),
        passthrough: parts.core.passthrough.clone(),
        forks: Default::default(),
    });
    let result = rt.block_on(serve(listener, daemon, signals, done_rx, &cfg.dir));
    let _ = fuse_thread.join();
    flush_stop.store(true, Ordering::Release);
    parts.recorder.wake_flusher();
    let _ = flusher.join();
    parts.recorder.flush_log();
    let _ = std::fs::remove_file(cfg.store.join(files::SOCKET));
    let _ = std::fs::remove_file(cfg.store.join(files::PID));
    drop(lock);
    result
}

/// Refuses a store that belongs to someone else, and makes this one private: modes looser
/// than 0700 / 0600 are tightened, and the log says which (docs/design.md §3).
pub(super) fn make_private(store: &Path) -> anyhow::Result<()> {
    let tightened = crate::store::private::secure(store, true)?;
    if !tightened.is_empty() {
        let shown: Vec<String> = tightened
            .iter()
            .take(8)
            .map(|p| p.display().to_string())
            .collect();
        tracing::warn!(
            "the store {} was open to other users: tightened {} path(s) to 0700/0600 ({}{})",
            store.display(),
            tightened.len(),
            shown.join(", "),
            if tightened.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// The store's path as the mount's source field (the mount table shows it; clients find the
/// socket by it), which must not hold the characters that separate mount options.
fn mount_source(store: &Path) -> anyhow::Result<String> {
    let s = store
        .to_str()
        .context("the store path must be valid UTF-8")?;
    if s.contains(',') || s.contains(char::is_whitespace) {
        bail!("store path {s:?} must not contain commas or spaces (it is the mount's source)");
    }
    Ok(s.to_string())
}

/// Opens the workspace's fd (before the mount covers it) and the store, builds the recorder,
/// the FUSE core, the turns and the rewinder, and finishes a rewind a crash interrupted before
/// anyone sees the tree.
fn open(cfg: &MountConfig) -> anyhow::Result<Parts> {
    let root = sys::open_dir_path(&cfg.dir)?;
    let store = Arc::new(Store::open(&cfg.store, cfg.sync)?);
    let recorder = Arc::new(Recorder::new(root.as_fd(), store.clone())?);
    if let Some(pid) = cfg.agent_pid {
        recorder.register_agent(pid, None);
    }
    recorder.set_range_capture_min(cfg.range_capture_min);
    let observer: Arc<dyn Observer> = recorder.clone();
    #[cfg(feature = "bench-nocapture")]
    let observer = crate::capture::bench_observer(observer);
    let core = Arc::new(Core::new(root, observer)?);
    let kernel = Arc::new(FuseKernel {
        mounted: AtomicBool::new(false),
        dev: std::sync::OnceLock::new(),
        core: core.clone(),
        dir: cfg.dir.clone(),
        mappings: crate::sys::MappingScanner::default(),
    });
    let turns = Arc::new(Turns::new(recorder.clone(), store.clone(), kernel.clone()));
    let rewinder = Arc::new(Rewinder::new(
        turns.clone(),
        recorder.clone(),
        store,
        kernel.clone(),
        cfg.dir.clone(),
    ));
    // A rewind that cannot be finished now (a full store) stays unfinished and is named by
    // `status`; it never keeps the workspace from being mounted.
    let (recovered, failed) = rewinder
        .recover()
        .map_err(|e| anyhow::anyhow!("finishing an interrupted rewind: {e}"))?;
    if recovered > 0 {
        tracing::warn!("finished {recovered} interrupted rewind(s)");
    }
    if !failed.is_empty() {
        tracing::warn!("{} interrupted rewind(s) left unfinished", failed.len());
    }
    Ok(Parts {
        recorder,
        core,
        kernel,
        rewinder,
        turns,
    })
}

/// Binds the control socket before the mount appears, so "mounted" implies "answers" (a
/// stale socket file of a killed daemon is replaced here, before anyone can see the new
/// mount).
fn bind_socket(store: &Path) -> anyhow::Result<std::os::unix::net::UnixListener> {
    let socket_path = store.join(files::SOCKET);
    let _ = std::fs::remove_file(&socket_path);
    // Created 0600 from the start: no window in which another user could connect.
    let l = sys::with_umask(0o177, || {
        std::os::unix::net::UnixListener::bind(&socket_path)
    });
    let l = l.with_context(|| format!("binding {}", socket_path.display()))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Starts the flusher (the change log and capture journal reach SQLite on their own thread)
/// and the closer (released files are closed off the request path, see `Core::closer`; it
/// ends with the process). Returns the flusher, which `stop` ends.
fn start_background(
    parts: &Parts,
    stop: &Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    let flusher = {
        let (r, stop) = (parts.recorder.clone(), stop.clone());
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
    if let Some(close_loop) = parts.core.closer() {
        std::thread::Builder::new()
            .name("closer".into())
            .spawn(move || {
                run_idle("closer");
                close_loop()
            })?;
    }
    Ok(flusher)
}

type Signals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

/// Serves the control socket and runs retention until the FUSE session ends; a signal
/// unmounts, which ends the session.
async fn serve(
    listener: std::os::unix::net::UnixListener,
    daemon: Arc<Daemon>,
    (mut term, mut int): Signals,
    mut done_rx: tokio::sync::oneshot::Receiver<io::Result<()>>,
    dir: &Path,
) -> anyhow::Result<()> {
    let listener = tokio::net::UnixListener::from_std(listener)?;
    tracing::info!(
        "mounted {} (store {})",
        dir.display(),
        daemon.store_dir.join(files::SOCKET).display()
    );
    let (shutdown_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let policy = daemon.retention;
    let rewinder = daemon.rewinder.clone();
    let server = tokio::spawn(crate::control::serve(
        listener,
        daemon,
        shutdown_tx.subscribe(),
    ));
    let mut gc_tick = tokio::time::interval_at(tokio::time::Instant::now() + GC_EVERY, GC_EVERY);
    let mut stopping = false;
    let unmount = |dir: &Path| {
        let d: PathBuf = dir.to_path_buf();
        tokio::task::spawn_blocking(move || stop(&d));
    };
    let res = loop {
        tokio::select! {
            _ = term.recv(), if !stopping => { stopping = true; unmount(dir); }
            _ = int.recv(), if !stopping => { stopping = true; unmount(dir); }
            _ = gc_tick.tick() => {
                let e = rewinder.clone();
                let _ = tokio::task::spawn_blocking(move || gc_pass(&e, &policy, false)).await;
            }
            r = &mut done_rx => {
                break match r {
                    Ok(Err(e)) => Err(anyhow::anyhow!("FUSE session ended: {e}")),
                    _ => Ok(()),
                };
            }
        }
    };
    let _ = shutdown_tx.send(());
    let _ = server.await;
    res
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

/// Widens the mount's read-ahead window to [`crate::fs::READAHEAD_KB`] (the kernel starts a
/// FUSE mount at 128 KiB and lets the daemon only narrow it). Only root may; anyone else keeps
/// the kernel's window, which is correct, only slower for large sequential reads.
fn widen_readahead(dev: (u32, u32)) {
    let want = crate::fs::READAHEAD_KB;
    match sys::readahead_kb(dev) {
        Ok(kb) if kb >= want => {}
        Ok(_) => match sys::set_readahead_kb(dev, want) {
            Ok(()) => tracing::debug!("read-ahead window widened to {want} KiB"),
            Err(e) => tracing::debug!("the read-ahead window stays the kernel's: {e}"),
        },
        Err(e) => tracing::debug!("the read-ahead window stays the kernel's: {e}"),
    }
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
