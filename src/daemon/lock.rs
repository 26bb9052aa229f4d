//! One daemon per store: an exclusive `flock` on `<store>/lock`, held for the daemon's life
//! (and by `gc --store` while it works on a store no daemon serves).

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::files;
use crate::sys;

/// The store's lock, released when dropped.
pub struct StoreLock {
    _file: File,
}

fn open(store: &Path) -> anyhow::Result<File> {
    let lock_path = store.join(files::LOCK);
    crate::store::private::open_file(
        &lock_path,
        OpenOptions::new().create(true).truncate(false).write(true),
    )
    .with_context(|| format!("locking {}", lock_path.display()))
}

impl StoreLock {
    /// Takes the lock for a daemon. A daemon that was killed holds the lock until its exit
    /// completes, which waits for the FUSE requests it had in flight to be cancelled (the
    /// unmount does that): a mount right after `kill -9` and `umount` waits for that exit,
    /// never for a live daemon.
    ///
    /// # Errors
    /// Another daemon holds the store (the message says what to do), or the lock file cannot
    /// be opened.
    pub fn acquire(store: &Path) -> anyhow::Result<StoreLock> {
        let file = open(store)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match sys::try_lock(file.as_fd()) {
                Ok(()) => return Ok(StoreLock { _file: file }),
                Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                    if !holder_exiting(store) || Instant::now() > deadline {
                        let pid = std::fs::read_to_string(store.join(files::PID))
                            .map(|s| format!(" (pid {})", s.trim()))
                            .unwrap_or_default();
                        bail!(
                            "store {} is in use by another rewindfs daemon{pid}: unmount its \
                             directory first (`rewindfs umount DIR`), or give this mount its own \
                             --store",
                            store.display()
                        );
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(e)
                        .context(format!("locking {}", store.join(files::LOCK).display()));
                }
            }
        }
    }

    /// Takes the lock if no daemon holds it (`Ok(None)` if one does).
    ///
    /// # Errors
    /// The lock file cannot be opened or locked for another reason.
    pub fn try_acquire(store: &Path) -> anyhow::Result<Option<StoreLock>> {
        let file = open(store)?;
        match sys::try_lock(file.as_fd()) {
            Ok(()) => Ok(Some(StoreLock { _file: file })),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
            Err(e) => Err(e).context(format!("locking {}", store.join(files::LOCK).display())),
        }
    }
}

/// Whether the daemon recorded in the store's pid file is exiting (or gone): its lock on the
/// store is about to be released.
fn holder_exiting(store: &Path) -> bool {
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
