//! Mounting: the FUSE session's options, threads and transport (`/dev/fuse`, or io_uring
//! where the kernel offers it), as root directly or through `fusermount3` otherwise.

use std::path::Path;

use anyhow::{Context, bail};
use fuser::{MountOption, SessionACL};

use crate::config::{IoUring, MountConfig};
use crate::fs::RewindFs;
use crate::sys;

/// Mounts `fs` over the workspace; `source` is the mount's source field (the store).
///
/// # Errors
/// The kernel or `fusermount3` refused the mount (named with the directory), or `--io-uring
/// on` was asked for and the kernel did not offer it.
pub(super) fn mount(
    cfg: &MountConfig,
    fs: RewindFs,
    source: &str,
) -> anyhow::Result<fuser::Session<RewindFs>> {
    let mut fcfg = fuser::Config::default();
    fcfg.mount_options = vec![
        MountOption::FSName(source.to_string()),
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
        let opts = format!("fsname={source},subtype=rewindfs,default_permissions");
        let fd = sys::fusermount(&cfg.dir, &opts)
            .map_err(|e| anyhow::anyhow!("cannot mount {}: {e}", cfg.dir.display()))?;
        fuser::Session::from_fd(fs, fd, SessionACL::Owner, fcfg)
            .map_err(|e| anyhow::anyhow!("cannot mount {}: {e}", cfg.dir.display()))?
    };
    match request_timeout() {
        Some(t) => tracing::info!(
            "the kernel aborts this mount if a request waits longer than {}-{} s \
             (/proc/sys/fs/fuse: {}): no request waits for a rewind, which applies through the \
             mount, nor for a whole retention pass",
            t.limit,
            t.limit + TIMEOUT_CHECK_EVERY,
            t.from
        ),
        None => tracing::debug!("the kernel sets no FUSE request timeout"),
    }
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
    Ok(session)
}

/// The kernel's limit on how long one FUSE request may wait before it aborts the whole mount
/// (Linux >= 6.14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RequestTimeout {
    /// Seconds a request may wait.
    pub(super) limit: u64,
    /// The settings it comes from, for the log.
    pub(super) from: String,
}

/// How often the kernel looks for requests past their timeout, and so the shortest timeout it
/// applies (`FUSE_TIMEOUT_TIMER_FREQ`): a request is aborted between `limit` and `limit + 15`
/// seconds after it was sent.
const TIMEOUT_CHECK_EVERY: u64 = 15;

/// The timeout the kernel gives a mount made now whose daemon asks for none at INIT (fuser
/// asks for none): `default_request_timeout`, capped by `max_request_timeout` (which alone also
/// sets it), and at least [`TIMEOUT_CHECK_EVERY`]; `None` when both are 0 or the kernel has
/// neither.
pub(super) fn request_timeout() -> Option<RequestTimeout> {
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/proc/sys/fs/fuse/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (default, max) = (read("default_request_timeout"), read("max_request_timeout"));
    timeout_of(default.unwrap_or(0), max.unwrap_or(0)).map(|limit| RequestTimeout {
        limit,
        from: format!(
            "default_request_timeout={}, max_request_timeout={}",
            default.map_or("-".into(), |v| v.to_string()),
            max.map_or("-".into(), |v| v.to_string())
        ),
    })
}

/// The kernel's rule (fs/fuse/inode.c), for a daemon that asks for no timeout of its own.
fn timeout_of(default: u64, max: u64) -> Option<u64> {
    let t = match (default, max) {
        (0, 0) => return None,
        (d, 0) => d,
        (0, m) => m,
        (d, m) => d.min(m),
    };
    Some(t.max(TIMEOUT_CHECK_EVERY))
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

#[cfg(test)]
mod tests {
    use super::timeout_of;

    #[test]
    fn the_request_timeout_is_the_default_capped_by_the_max_and_never_under_15_s() {
        assert_eq!(timeout_of(0, 0), None);
        assert_eq!(timeout_of(60, 0), Some(60));
        assert_eq!(timeout_of(0, 40), Some(40));
        assert_eq!(timeout_of(60, 40), Some(40));
        assert_eq!(timeout_of(30, 40), Some(30));
        assert_eq!(timeout_of(0, 1), Some(15));
    }
}
