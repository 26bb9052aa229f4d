//! The daemon seen from outside: start it in the background and wait until its mount
//! answers, tell whether a mount is live, unmount it and wait for the daemon to exit.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::files;
use crate::config::MountConfig;
use crate::host::mounts;
use crate::sys;

/// Starts the daemon in the background and returns once the mount answers.
///
/// # Errors
/// The daemon's own error message when it exits before the mount is live, or a timeout.
pub fn spawn_detached(cfg: &MountConfig) -> anyhow::Result<()> {
    cfg.create_store()?;
    let log_path = cfg.store.join(files::LOG);
    let log =
        crate::store::private::open_file(&log_path, OpenOptions::new().create(true).append(true))
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
    if cfg.passthrough {
        cmd.arg("--passthrough");
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
        Err(e) if e.kind() == io::ErrorKind::ResourceBusy || e.to_string().contains("busy") => {
            bail!(
                "cannot unmount {d}: it is busy (EBUSY): a process has its current directory or a \
                 file open in it (`fuser -vm {d}` lists them); cd out of it or close them and run \
                 `rewindfs umount {d}` again, or detach it now with `rewindfs umount --lazy {d}`",
                d = dir.display()
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
