//! Fault injection for tests only. Compiled in with the `fault-injection` cargo feature, which
//! `scripts/test.sh` enables for the test build; without it every fault is `None` and a build
//! for users cannot be made to fail on purpose. Each fault is read from its environment
//! variable once, and logged when set, so a daemon running with one says so.

use std::time::Duration;

/// `REWINDFS_TEST_HOLD_NAMED_WRITE_MS`: how long a write that found its file by name waits,
/// holding the removal lock shared, before its capture and write (widens the window a removal
/// must not use to one a test can hit every time; see `fs::core`'s `removing`).
pub fn hold_named_write() -> Option<Duration> {
    read("REWINDFS_TEST_HOLD_NAMED_WRITE_MS").map(Duration::from_millis)
}

/// `REWINDFS_TEST_FAIL_REWIND_AFTER=N`: a rewind fails after writing N files, as one that runs
/// out of space would, and stays 'applying' for the next mount to finish.
pub fn fail_rewind_after() -> Option<usize> {
    static N: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *N.get_or_init(|| read("REWINDFS_TEST_FAIL_REWIND_AFTER").map(|n| n as usize))
}

/// `REWINDFS_TEST_PAUSE_PLANNED_MS=N`: a live rewind (undo, redo) waits N ms once it has
/// planned, before its plan is journalled (a test's window for a change made after planning
/// and before journalling, which the journalled plan must leave out).
pub fn pause_planned() -> Option<Duration> {
    read("REWINDFS_TEST_PAUSE_PLANNED_MS").map(Duration::from_millis)
}

/// `REWINDFS_TEST_PAUSE_JOURNALLED_MS=N`: a live rewind (undo, redo) waits N ms once its plan is
/// journalled, before it changes anything (a test's window for a change the FUSE core must keep
/// the rewind from overwriting).
pub fn pause_journalled() -> Option<Duration> {
    read("REWINDFS_TEST_PAUSE_JOURNALLED_MS").map(Duration::from_millis)
}

/// `REWINDFS_TEST_PAUSE_APPLYING_MS=N`: the helper of a live rewind (undo, redo) waits N ms once
/// it has written the content of the first file it restores in place, before cutting it to
/// length, and says nothing meanwhile (a test's window for a change between two steps of one
/// file, for a boundary while a rewind applies, to kill the daemon half-way, or to find a
/// stuck helper).
pub fn pause_applying() -> Option<Duration> {
    read("REWINDFS_TEST_PAUSE_APPLYING_MS").map(Duration::from_millis)
}

/// `REWINDFS_TEST_PAUSE_FORK_FILES_MS=N`: a fork waits N ms once it has made its directories,
/// before it writes its files (a test's window for another user to swap a directory the fork
/// made for a symlink, which the fork must never follow).
pub fn pause_fork_files() -> Option<Duration> {
    read("REWINDFS_TEST_PAUSE_FORK_FILES_MS").map(Duration::from_millis)
}

/// `REWINDFS_TEST_PAUSE_PULL_MS=N`: `rewindfs pull` waits N ms once it has put a history back
/// together as a bundle, before importing it (a test's window for another user to look for the
/// bundle, which must be private).
pub fn pause_pull() -> Option<Duration> {
    read("REWINDFS_TEST_PAUSE_PULL_MS").map(Duration::from_millis)
}

/// `REWINDFS_TEST_PUSH_FAIL_AFTER=N`: a push fails after uploading N blobs, as one cut off by
/// the network would (the next push must resume, skipping what is there).
pub fn push_fail_after() -> Option<u64> {
    read("REWINDFS_TEST_PUSH_FAIL_AFTER")
}

/// `REWINDFS_TEST_HELPER_SILENCE_MS=N`: how long the daemon waits for a word from a rewind's
/// helper before it gives up on it (not set: `helper::SILENCE`).
pub fn helper_silence() -> Option<Duration> {
    read("REWINDFS_TEST_HELPER_SILENCE_MS").map(Duration::from_millis)
}

#[cfg(feature = "fault-injection")]
fn read(var: &str) -> Option<u64> {
    let v = std::env::var(var).ok()?;
    match v.parse() {
        Ok(n) => {
            tracing::warn!("fault injection: {var}={n} (a test build)");
            Some(n)
        }
        Err(_) => {
            tracing::warn!("fault injection: {var}={v:?} is not a number; ignored");
            None
        }
    }
}

#[cfg(not(feature = "fault-injection"))]
fn read(_var: &str) -> Option<u64> {
    None
}
