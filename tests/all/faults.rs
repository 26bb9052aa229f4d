//! Faults under a live mount: an unwritable blob directory, a locked database, the backing
//! directory changed behind the daemon's back. Each refused change gets an errno and a log line
//! naming the path and the cause; nothing unprotected reaches the disk; the mount lives on.
//! (A full store is `capture::a_full_store_refuses_the_change_and_loses_nothing`.)

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Mounted, require_fuse, sh};

fn log(m: &Mounted) -> String {
    fs::read_to_string(m.store.join("daemon.log")).unwrap_or_default()
}

/// The mount still answers: a status request, and a write and read-back of a fresh file.
fn alive(m: &Mounted, tag: &str) {
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    c.request("status", json!({})).unwrap();
    let p = m.p(&format!("alive-{tag}.txt"));
    fs::write(&p, tag).unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), tag);
}

/// Begins a new message, so the next change to any path needs a fresh pre-image.
fn boundary(m: &Mounted) {
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    c.request(
        "begin_message",
        json!({"session_id": "faults", "user_message_id": uuid::Uuid::new_v4().to_string()}),
    )
    .unwrap();
}

/// Lifts the immutable flag it set, whatever happens.
struct Mutable(PathBuf);
impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn an_unwritable_blob_directory_refuses_the_change_with_its_errno_and_a_log_line() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("f.txt"), "before\n").unwrap());
    // An immutable temp directory: not even root can create the file a new blob is written to
    // (the daemon holds the blob directory open, so remounting it read-only would not do).
    let tmp = m.store.join("blobs/tmp");
    assert!(
        Command::new("chattr")
            .arg("+i")
            .arg(&tmp)
            .status()
            .unwrap()
            .success()
    );
    let guard = Mutable(tmp);
    let e = fs::write(m.p("f.txt"), "after\n").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    drop(guard);
    assert_eq!(fs::read_to_string(m.p("f.txt")).unwrap(), "before\n");
    let l = log(&m);
    assert!(
        l.contains("f.txt") && l.contains("Operation not permitted"),
        "the log names the path and the cause: {l}"
    );
    // The store is writable again: the same change now goes through, protected.
    fs::write(m.p("f.txt"), "after\n").unwrap();
    assert_eq!(fs::read_to_string(m.p("f.txt")).unwrap(), "after\n");
    alive(&m, "blobs");
}

#[test]
fn a_locked_database_delays_only_reads_and_loses_no_pre_image() {
    require_fuse();
    // Pre-images go to the capture journal first, so changes go on while another process
    // holds the database locked; what reads the database waits for it (up to its busy
    // timeout, then EAGAIN-like errors), and nothing recorded meanwhile is lost.
    let m = Mounted::with(|d| fs::write(d.join("g.txt"), "before\n").unwrap());
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let cp = uuid::Uuid::new_v4().to_string();
    c.request(
        "begin_message",
        json!({"session_id": "s", "user_message_id": cp}),
    )
    .unwrap();
    let db = rusqlite::Connection::open(m.store.join("rewindfs.db")).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    fs::write(m.p("g.txt"), "after\n").unwrap();
    fs::write(m.p("new.txt"), "new\n").unwrap();
    let t = Instant::now();
    let e = c
        .request("list_checkpoints", json!({}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("locked"), "a read names the cause: {e}");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the daemon gave up within its busy timeout"
    );
    db.execute_batch("ROLLBACK").unwrap();
    drop(db);
    let r = c
        .request(
            "rewind_files",
            json!({"user_message_id": cp, "scope": "all"}),
        )
        .unwrap();
    assert_eq!(r["canRewind"], json!(true));
    assert_eq!(fs::read_to_string(m.p("g.txt")).unwrap(), "before\n");
    assert!(!m.p("new.txt").exists());
    alive(&m, "sqlite");
}

#[test]
fn files_and_directories_removed_behind_the_daemon_give_errors_not_a_dead_mount() {
    require_fuse();
    // A handle on the directory underneath the mount, taken before mounting. The kernel caches
    // entries for --ttl seconds (every change normally goes through the mount): 1 s here.
    let under: RefCell<Option<File>> = RefCell::new(None);
    let m = Mounted::with_args(
        |d| {
            fs::create_dir(d.join("sub")).unwrap();
            fs::write(d.join("sub/a.txt"), "a\n").unwrap();
            fs::write(d.join("v.txt"), "v\n").unwrap();
            fs::write(d.join("w.txt"), "w\n").unwrap();
            *under.borrow_mut() = Some(File::open(d).unwrap());
        },
        &["--ttl", "1"],
    );
    let under = under.into_inner().unwrap();
    let below = |rel: &str| -> PathBuf {
        Path::new(&format!("/proc/self/fd/{}", under.as_raw_fd())).join(rel)
    };
    // The kernel and the daemon know these now.
    for p in ["sub", "sub/a.txt", "v.txt", "w.txt"] {
        fs::metadata(m.p(p)).unwrap();
    }
    let mut open_w = OpenOptions::new().write(true).open(m.p("w.txt")).unwrap();
    boundary(&m);

    // A file vanishes between its lookup and the capture its change needs.
    fs::remove_file(below("v.txt")).unwrap();
    let e = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.p("v.txt"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    // It can be created again through the mount once the kernel's entry for it expires (the
    // entry TTL, 1 s here: entries are cached because every change normally goes through us).
    std::thread::sleep(Duration::from_millis(1200));
    fs::write(m.p("v.txt"), "new\n").unwrap();
    assert_eq!(fs::read_to_string(m.p("v.txt")).unwrap(), "new\n");

    // A file open for writing is removed underneath: writes go to the unlinked file, harmlessly.
    fs::remove_file(below("w.txt")).unwrap();
    let _ = open_w.write_all(b"late\n").and_then(|_| open_w.flush());
    drop(open_w);

    // A whole directory removed underneath.
    fs::remove_dir_all(below("sub")).unwrap();
    let e = fs::write(m.p("sub/a.txt"), "x").unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESTALE)),
        "{e}"
    );
    let e = fs::write(m.p("sub/new.txt"), "x").unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESTALE)),
        "{e}"
    );
    // Recreating it through the mount works once the kernel's entry expires.
    std::thread::sleep(Duration::from_millis(1200));
    sh(&m.dir, "mkdir -p sub && echo b > sub/b.txt");
    assert_eq!(fs::read_to_string(m.p("sub/b.txt")).unwrap(), "b\n");
    alive(&m, "removed");
    let l = log(&m);
    assert!(!l.contains("panicked"), "{l}");
}

/// A rewind that fails part-way stays 'applying', and the next mount finishes it from its plan.
/// The plan names blobs no row names (each file's state completed from its range pre-images):
/// the dry runs, diffs and rewinds that remove such blobs once done must leave those alone,
/// even when they put the same content together themselves.
#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
fn a_failed_rewinds_plan_keeps_its_blobs_until_the_next_mount_finishes_it() {
    require_fuse();
    let big = |seed: u32| -> Vec<u8> {
        (0..100_000u32)
            .map(|i| (i.wrapping_mul(seed) % 251) as u8)
            .collect()
    };
    let mut m = Mounted::new();
    m.umount();
    fs::write(m.p("a.bin"), big(7)).unwrap();
    fs::write(m.p("b.bin"), big(13)).unwrap();
    m.mount_with_env(
        &["--range-capture-min", "4096"],
        &[("REWINDFS_TEST_FAIL_REWIND_AFTER", "1")],
    );
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let t1 = uuid::Uuid::new_v4().to_string();
    c.request(
        "begin_message",
        json!({"session_id": "faults", "user_message_id": t1}),
    )
    .unwrap();
    for (i, f) in ["a.bin", "b.bin"].iter().enumerate() {
        sh(
            &m.dir,
            &format!(
                "printf x | dd of={f} bs=1 seek={} conv=notrunc status=none",
                1000 + i
            ),
        );
    }
    boundary(&m);
    for f in ["a.bin", "b.bin"] {
        sh(
            &m.dir,
            &format!("printf y | dd of={f} bs=1 seek=90000 conv=notrunc status=none"),
        );
    }
    let rewind = |c: &mut rewindfs::control::client::Client, dry: bool| {
        c.request(
            "rewind_files",
            json!({"user_message_id": t1, "scope": "all", "dry_run": dry}),
        )
    };
    let e = rewind(&mut c, false).unwrap_err();
    assert!(e.to_string().contains("injected failure"), "{e}");
    // A system call's failure keeps its errno through the helper and the reply.
    assert!(
        matches!(
            e,
            rewindfs::control::client::ClientError::Daemon(_, Some(libc::EIO))
        ),
        "the error frame names the errno: {e:?}"
    );
    // The same plan again (for the file the failed one did not reach), as a dry run, a diff,
    // and a rewind that succeeds: each removes what it put together once done.
    assert_eq!(
        rewind(&mut c, true).unwrap()["filesChanged"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    c.request("diff", json!({"user_message_id": t1})).unwrap();
    rewind(&mut c, false).unwrap();
    drop(c);
    m.umount();
    m.mount(&[]);
    alive(&m, "recovered");
    assert!(fs::read(m.p("a.bin")).unwrap() == big(7), "a.bin as at t1");
    assert!(fs::read(m.p("b.bin")).unwrap() == big(13), "b.bin as at t1");
    assert!(
        log(&m).contains("finishing rewind"),
        "the next mount finished the rewinds: {}",
        log(&m)
    );
}

/// (seq, op, path, path2) of every change-log entry, oldest first.
fn change_log(m: &Mounted) -> Vec<(i64, String, String, String)> {
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let r = c
        .request("log", json!({"limit": 1_000_000, "raw": true}))
        .unwrap();
    r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["seq"].as_i64().unwrap(),
                e["op"].as_str().unwrap().to_string(),
                e["path"].as_str().unwrap().to_string(),
                e["path2"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn kill9(pid: u32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

/// The change log survives `kill -9` the way pre-images do: the entries of changes done right
/// before the kill (well inside the 200 ms in which the flusher writes SQLite) are in the log
/// after the remount, after the entries the log showed before, which are all still there.
#[test]
fn killing_the_daemon_loses_no_change_log_entry() {
    require_fuse();
    let mut m = Mounted::with(|d| {
        fs::write(d.join("kept.txt"), "kept\n").unwrap();
        fs::create_dir(d.join("gone")).unwrap();
    });
    boundary(&m);
    fs::write(m.p("first.txt"), "first\n").unwrap();
    let before = change_log(&m);
    assert!(
        before.iter().any(|e| e.2 == "first.txt"),
        "the log shows the first change: {before:?}"
    );
    // Changes of every kind, then the kill at once.
    fs::create_dir(m.p("d")).unwrap();
    let mut want: Vec<(&str, String, String)> = vec![("mkdir", "d".into(), String::new())];
    for i in 0..20 {
        let p = format!("d/n{i}");
        fs::write(m.p(&p), format!("{i}\n")).unwrap();
        // Its writes, right after the create by the same process, are the create's entry.
        want.push(("create", p, String::new()));
    }
    fs::rename(m.p("d/n0"), m.p("d/m0")).unwrap();
    want.push(("rename", "d/n0".into(), "d/m0".into()));
    fs::remove_file(m.p("d/n1")).unwrap();
    want.push(("unlink", "d/n1".into(), String::new()));
    fs::set_permissions(m.p("d/n2"), fs::Permissions::from_mode(0o600)).unwrap();
    want.push(("chmod", "d/n2".into(), String::new()));
    std::os::unix::fs::symlink("n3", m.p("d/l")).unwrap();
    want.push(("symlink", "d/l".into(), String::new()));
    fs::remove_dir(m.p("gone")).unwrap();
    want.push(("rmdir", "gone".into(), String::new()));
    fs::write(m.p("kept.txt"), "changed\n").unwrap();
    want.push(("truncate", "kept.txt".into(), String::new()));
    want.push(("write", "kept.txt".into(), String::new()));
    kill9(m.daemon_pid());
    assert!(crate::support::wait_until(10, || {
        crate::support::is_stale_or_gone(&m.dir)
    }));
    crate::support::rewindfs_ok(&["umount", m.dir.to_str().unwrap()]);
    m.mount(&[]);
    let after = change_log(&m);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the entries shown before the kill are all still there, unchanged"
    );
    // Every change made before the kill, in order, among the entries after those.
    let mut rest = after[before.len()..].iter();
    for (op, path, path2) in &want {
        assert!(
            rest.any(|e| e.1 == *op && e.2 == *path && e.3 == *path2),
            "no entry for {op} {path} {path2} after the kill; the log after the remount:\n{}",
            after
                .iter()
                .map(|e| format!("{} {} {} {}", e.0, e.1, e.2, e.3))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
