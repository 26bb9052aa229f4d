//! The two ways requests reach the daemon: FUSE over io_uring (ring threads pinned per CPU) and
//! plain /dev/fuse. The POSIX differential script runs over both (`posix.rs`); the rest of the
//! suite runs with the default (`auto`: io_uring as root on a kernel that has it).

use std::fs;
use std::path::Path;

use crate::support::{Mounted, require_fuse, rewindfs_ok, sh, tree, wait_until};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Panics unless this kernel can serve FUSE over io_uring (Linux ≥ 6.14 with
/// CONFIG_FUSE_IO_URING). Every test that needs it has `io_uring` in its name, which is how
/// `scripts/test.sh` leaves them out (and says so) on a kernel without it.
pub fn require_io_uring() {
    assert!(
        Path::new(ENABLE_URING).exists(),
        "{ENABLE_URING} is missing: this kernel has no FUSE over io_uring (Linux >= 6.14 with \
         CONFIG_FUSE_IO_URING); {}",
        crate::support::HOW_TO_SKIP
    );
}

/// The daemon's thread names.
fn threads(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    names.sort();
    names
}

/// The scheduling policy (`SCHED_OTHER`, `SCHED_IDLE`, ...) of each of the daemon's threads
/// whose name starts with `prefix` and not with `fuser-ring-`.
fn policies(pid: u32, prefix: &str) -> Vec<(String, i32)> {
    let mut out: Vec<(String, i32)> = fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = fs::read_to_string(e.path().join("comm"))
                .ok()?
                .trim()
                .to_string();
            // Field 41 of `stat` (proc(5)): the policy; fields are counted from the pid, and
            // the name in parentheses may hold spaces.
            let stat = fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let policy: i32 = rest.split_whitespace().nth(41 - 3)?.parse().ok()?;
            (name.starts_with(prefix) && !name.starts_with("fuser-ring-")).then_some((name, policy))
        })
        .collect();
    out.sort();
    out
}

/// The number of fds the daemon has open.
fn open_fds(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Creates, writes, renames, lists, reads back and removes `n` files under `dir/t`.
fn churn(dir: &Path, n: usize) {
    let t = dir.join("t");
    fs::create_dir_all(&t).unwrap();
    for i in 0..n {
        let p = t.join(format!("f{i}"));
        fs::write(&p, format!("file {i}\n").repeat(i % 7 + 1)).unwrap();
        if i % 3 == 0 {
            fs::rename(&p, t.join(format!("g{i}"))).unwrap();
        }
    }
    assert_eq!(fs::read_dir(&t).unwrap().count(), n);
    for i in 0..n {
        let name = if i % 3 == 0 {
            format!("g{i}")
        } else {
            format!("f{i}")
        };
        let data = fs::read_to_string(t.join(&name)).unwrap();
        assert_eq!(data, format!("file {i}\n").repeat(i % 7 + 1), "{name}");
        fs::remove_file(t.join(&name)).unwrap();
    }
    fs::remove_dir(&t).unwrap();
}

#[test]
fn io_uring_mount_serves_requests_from_ring_threads_and_rewinds() {
    require_fuse();
    require_io_uring();
    let m = Mounted::with_args(
        |d| fs::write(d.join("a.txt"), "one\n").unwrap(),
        &["--io-uring", "on"],
    );
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(
        log.contains("serving requests over io_uring"),
        "the daemon did not report io_uring:\n{log}"
    );
    let names = threads(m.daemon_pid());
    let cpus = fs::read_dir("/sys/devices/system/cpu")
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name().into_string().unwrap();
            n.strip_prefix("cpu")
                .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    let ring = names
        .iter()
        .filter(|n| n.starts_with("fuser-ring-"))
        .count();
    // Two threads per CPU queue, and the placement guard.
    assert!(
        ring > cpus,
        "expected ring threads for each of {cpus} CPUs, got {names:?}"
    );

    churn(&m.dir, 300);

    // Once the ring serves, the /dev/fuse threads are sent only FORGET and INTERRUPT, and
    // run at SCHED_IDLE (vendor/fuser/src/uring.rs, `Placement`).
    let devfuse = policies(m.daemon_pid(), "fuser-");
    assert!(!devfuse.is_empty(), "no /dev/fuse threads in {names:?}");
    assert!(
        devfuse.iter().all(|(_, p)| *p == libc::SCHED_IDLE),
        "the /dev/fuse threads of a mount served over io_uring: {devfuse:?}"
    );

    // Captures and rewinds work the same over the ring.
    let sock = m.socket();
    let sock = sock.to_str().unwrap();
    let uuid = "5b0d1f4e-2f39-4bf5-9d0e-1c0b9a8f3c11";
    rewindfs_ok(&["checkpoint", uuid, "--session", "s", "--socket", sock]);
    let before = tree(&m.dir);
    sh(
        &m.dir,
        "echo two >> a.txt; mkdir d; echo x > d/x; rm a.txt; echo new > a.txt",
    );
    rewindfs_ok(&["rewind", uuid, "--scope", "all", "--socket", sock]);
    assert_eq!(tree(&m.dir), before);
}

#[test]
fn dev_fuse_mount_has_no_ring_threads() {
    require_fuse();
    let m = Mounted::with_args(|_| {}, &["--io-uring", "off"]);
    let names = threads(m.daemon_pid());
    assert!(
        !names.iter().any(|n| n.starts_with("fuser-ring-")),
        "--io-uring off started ring threads: {names:?}"
    );
    churn(&m.dir, 100);
    // They serve every request here, so they stay ordinary threads.
    let devfuse = policies(m.daemon_pid(), "fuser-");
    assert!(
        !devfuse.is_empty() && devfuse.iter().all(|(_, p)| *p == libc::SCHED_OTHER),
        "the /dev/fuse threads of a mount served over /dev/fuse: {devfuse:?}"
    );
}

/// With every CPU busy with ordinary threads, requests served by ring threads still complete
/// (ring threads run at SCHED_IDLE while CPUs are free; the guard makes them ordinary when
/// one is starved), and the forgets that the /dev/fuse threads read, at SCHED_IDLE and with no
/// guard, still come: the fds kept for the removed files are closed while the CPUs stay busy.
#[test]
fn io_uring_mount_keeps_serving_while_every_cpu_is_busy() {
    require_fuse();
    require_io_uring();
    let m = Mounted::with_args(|_| {}, &["--io-uring", "on"]);
    let pid = m.daemon_pid();
    // The baseline after a first churn, on idle CPUs: the daemon's own fds (rings, the store,
    // the flusher's) are all open by then.
    churn(&m.dir, 20);
    let fds_before = open_fds(pid);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let dir = m.dir.clone();
    let worker = std::thread::spawn(move || churn(&dir, 300));
    // Generous: a few seconds on a loaded 2-CPU machine; a starved ring thread takes minutes.
    let done = wait_until(120, || worker.is_finished());
    // Each removed file's fd was kept until the kernel forgot its node; the cache of fds the
    // churn opened for files it wrote is bounded, so this settles near where it began.
    let fds_settled = done && wait_until(60, || open_fds(pid) <= fds_before + 8);
    let fds_now = open_fds(pid);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    assert!(
        done,
        "300 file cycles did not finish in 120 s with every CPU busy"
    );
    worker.join().unwrap();
    assert!(
        fds_settled,
        "with every CPU busy the daemon still held {fds_now} fds 60 s after the churn ({fds_before} before it): its /dev/fuse threads did not get the forgets"
    );
}

/// The daemon widens the mount's read-ahead window to one READ of the largest size a request
/// carries (1 MiB; the kernel starts every FUSE mount at 128 KiB and lets the daemon only
/// narrow it in INIT), so a large sequential read takes an eighth of the round trips.
#[test]
fn a_mount_reads_ahead_a_whole_request_at_a_time() {
    use std::os::unix::fs::MetadataExt;
    require_fuse();
    let m = Mounted::new();
    let dev = fs::metadata(&m.dir).unwrap().dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let bdi = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let kb = fs::read_to_string(&bdi).unwrap_or_else(|e| panic!("{bdi}: {e}"));
    assert_eq!(
        kb.trim(),
        "1024",
        "{bdi}: the mount's read-ahead window (src/fs/mod.rs READAHEAD_KB)"
    );
    // Reads still return what was written, across a window's end.
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    fs::write(m.p("big"), &data).unwrap();
    sh(&m.dir, "echo 1 > /proc/sys/vm/drop_caches");
    assert!(
        fs::read(m.p("big")).unwrap() == data,
        "a cold read of 3 MiB"
    );
}
