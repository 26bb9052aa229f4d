//! A long rewind must not kill the mount (docs/design.md §4): kernels with FUSE request timeouts
//! (Linux >= 6.14, `/proc/sys/fs/fuse/max_request_timeout`) abort the whole connection when a
//! request waits too long, and a rewind used to hold every writer off while it planned and
//! applied. It now holds nobody: it applies through the mount, and a writer's request never
//! waits for it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rewindfs::control::client::Client;
use serde_json::json;

use crate::support::{Mounted, require_fuse};

/// The kernel setting a test lowers, put back when the guard goes (also when the test fails).
struct Sysctl {
    path: PathBuf,
    old: String,
}

impl Sysctl {
    /// Sets the setting at `path` to `value`, or says why it cannot: the setting is missing
    /// (a kernel before 6.14) or not writable (not root, a read-only `/proc/sys`).
    fn set(path: &str, value: &str) -> Result<Sysctl, String> {
        let path = PathBuf::from(path);
        let old = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        fs::write(&path, value).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(Sysctl { path, old })
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = fs::write(&self.path, self.old.trim());
    }
}

/// Files in the rewind: `REWINDFS_TEST_REWIND_FILES` (default 20,000; the 100,000 is
/// run by hand: `REWINDFS_TEST_REWIND_FILES=100000 cargo test --test all -- timeouts`).
fn file_count() -> usize {
    std::env::var("REWINDFS_TEST_REWIND_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// How long the apply pauses, at the least (see the test's doc).
const PAUSE: Duration = Duration::from_secs(20);

fn name(i: usize) -> String {
    format!("t/d{:03}/f{i:06}", i % 100)
}

/// What the writer did and saw.
#[derive(Debug, Default)]
struct Hammered {
    ops: u64,
    errors: Vec<String>,
    slowest: Duration,
}

/// Writes, creates, renames and removes files in `w/` of the mount until `stop`, timing each
/// operation. `w/k*.txt` existed at the checkpoint and are changed since, so the rewind
/// restores them too — unless the writer changed them meanwhile.
fn hammer(dir: PathBuf, stop: Arc<AtomicBool>) -> Hammered {
    let mut h = Hammered::default();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let k = i % 20;
        let t = Instant::now();
        let r = fs::write(dir.join(format!("w/k{k}.txt")), format!("write {i}\n"))
            .and_then(|()| fs::write(dir.join("w/tmp.txt"), b"tmp"))
            .and_then(|()| fs::rename(dir.join("w/tmp.txt"), dir.join("w/renamed.txt")))
            .and_then(|()| fs::remove_file(dir.join("w/renamed.txt")))
            .and_then(|()| rustix::fs::statfs(&dir).map(|_| ()).map_err(Into::into));
        h.slowest = h.slowest.max(t.elapsed());
        h.ops += 5;
        if let Err(e) = r {
            h.errors.push(e.to_string());
            if h.errors.len() > 10 {
                break;
            }
        }
        i += 1;
    }
    h
}

/// A rewind of many files with a writer hammering the mount, on a mount made with the kernel's
/// request timeout at its minimum (`max_request_timeout=1`: the kernel applies at least 15 s,
/// and checks every 15 s): the mount stays alive — the writer never gets `ENOTCONN` — and no
/// writer's request waits long. Before, the rewind held the writer at the gate for the whole
/// plan and apply (the writer's slowest request was the rewind's length: 20k files, ~3 s; at
/// 100k files long enough for the kernel to abort the mount). So that a writer held for the
/// rewind's length fails the test on any machine, the fault-injection build makes the apply
/// last at least 20 s (`REWINDFS_TEST_PAUSE_APPLYING_MS`, a pause in the helper half-way
/// through its first file): a writer held that long would wait past the bound below, and past
/// the kernel's timeout.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_long_rewind_with_a_writer_hammering_the_mount_never_trips_the_kernels_request_timeout() {
    require_fuse();
    let n = file_count();
    let mut m = Mounted::with(|d| {
        for i in 0..n {
            let p = d.join(name(i));
            if i < 100 {
                fs::create_dir_all(p.parent().unwrap()).unwrap();
            }
            fs::write(p, format!("version one of {i}\n")).unwrap();
        }
        fs::create_dir(d.join("w")).unwrap();
        for k in 0..20 {
            fs::write(d.join(format!("w/k{k}.txt")), "at the checkpoint\n").unwrap();
        }
    });
    m.umount();
    {
        // Only the mount made meanwhile gets it (the kernel reads it at INIT); the guard puts
        // it back whatever happens, a failed mount included.
        // Never "ok" without having run: a kernel without the timeout fails the test, naming
        // it (scripts/test.sh leaves the test out there, and says so).
        let _timeout = match Sysctl::set("/proc/sys/fs/fuse/max_request_timeout", "1") {
            Ok(guard) => guard,
            Err(why) => panic!(
                "this test needs the kernel's FUSE request timeout (Linux >= 6.14), and root \
                 to lower it: {why}; {}",
                crate::support::HOW_TO_SKIP
            ),
        };
        m.mount_with_env(
            &[],
            &[(
                "REWINDFS_TEST_PAUSE_APPLYING_MS",
                &PAUSE.as_millis().to_string(),
            )],
        );
    }
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(
        log.contains("waits longer than 15-30 s"),
        "the daemon read the kernel's timeout at mount: {log}"
    );
    let mut c = Client::connect(&m.socket()).unwrap();
    c.set_timeout(Duration::from_secs(1200)).unwrap();
    let cp = uuid::Uuid::new_v4().to_string();
    c.request(
        "begin_message",
        json!({"session_id": "timeouts", "user_message_id": cp}),
    )
    .unwrap();
    for i in 0..n {
        fs::write(
            m.p(&name(i)),
            format!("version two of {i}, a little longer\n"),
        )
        .unwrap();
    }
    for k in 0..20 {
        fs::write(m.p(&format!("w/k{k}.txt")), "since\n").unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (dir, stop) = (m.dir.clone(), stop.clone());
        std::thread::spawn(move || hammer(dir, stop))
    };
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let r = c
        .request(
            "rewind_files",
            json!({"user_message_id": cp, "scope": "all"}),
        )
        .unwrap();
    let took = t.elapsed();
    assert!(took >= PAUSE, "the rewind paused in its apply ({took:?})");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let h = writer.join().unwrap();
    eprintln!(
        "rewind of {n} files with a writer on the mount: {took:?}; the writer made {} changes, \
         its slowest round of five {:?}; {} path(s) left as it changed them",
        h.ops,
        h.slowest,
        r["changedMeanwhile"].as_array().map_or(0, Vec::len)
    );
    assert!(h.errors.is_empty(), "the writer got errors: {:?}", h.errors);
    assert!(
        rustix::fs::statfs(&m.dir).is_ok(),
        "the mount answers statfs after the rewind"
    );
    assert_eq!(r["canRewind"], json!(true), "{r}");
    assert!(h.ops > 0);
    // A third of the kernel's shortest timeout is "well under" it, and a quarter of the pause
    // (a writer held for the rewind waits all of it); on this machine the slowest round is a
    // few milliseconds.
    assert!(
        h.slowest < Duration::from_secs(5),
        "a writer's round waited {:?} while the rewind ran",
        h.slowest
    );
    for i in (0..n).step_by((n / 1000).max(1)) {
        assert_eq!(
            fs::read_to_string(m.p(&name(i))).unwrap(),
            format!("version one of {i}\n")
        );
    }
    for p in r["changedMeanwhile"].as_array().into_iter().flatten() {
        let rel = Path::new(p.as_str().unwrap()).strip_prefix(&m.dir).unwrap();
        assert!(
            rel.starts_with("w"),
            "only what the writer changed is left: {}",
            rel.display()
        );
    }
}
