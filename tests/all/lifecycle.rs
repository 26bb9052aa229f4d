//! The daemon's life: detach, answer, unmount, refuse bad mounts, recover a killed daemon.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::support::{
    BIN, Mounted, is_fuse, require_fuse, rewindfs, rewindfs_ok, tree, wait_until,
};

/// `rewindfs mount --foreground DIR --store STORE`, its output discarded.
fn foreground(dir: &Path, store: &Path) -> Child {
    Command::new(BIN)
        .args(["mount", "--foreground"])
        .arg(dir)
        .arg("--store")
        .arg(store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
        .unwrap();
}

#[test]
fn mount_detaches_and_umount_leaves_the_same_files() {
    require_fuse();
    let mut m = Mounted::with(|d| {
        fs::write(d.join("a.txt"), b"alpha\n").unwrap();
        fs::create_dir(d.join("src")).unwrap();
        fs::write(d.join("src/main.rs"), b"fn main() {}\n").unwrap();
    });
    let through_mount = tree(&m.dir);
    let pid = m.daemon_pid();
    assert!(
        rustix::process::test_kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap())
            .is_ok()
    );
    fs::write(m.p("new.txt"), b"made through the mount\n").unwrap();
    m.umount();
    assert!(!is_fuse(&m.dir));
    // `umount` waits for the daemon to exit (a zombie not yet reaped by init counts as exited).
    assert!(!rewindfs::sys::process_alive(pid));
    let after: Vec<_> = tree(&m.dir)
        .into_iter()
        .filter(|l| !l.starts_with("new.txt"))
        .collect();
    assert_eq!(through_mount, after);
    assert_eq!(
        fs::read(m.p("new.txt")).unwrap(),
        b"made through the mount\n"
    );
}

#[test]
fn bad_mount_requests_get_one_line_errors_and_fail() {
    require_fuse();
    let m = Mounted::new();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "mount".into(),
                m.dir.display().to_string(),
                "--store".into(),
                m.tmp.path().join("s2").display().to_string(),
            ],
            "already mounted",
        ),
        (
            vec![
                "mount".into(),
                m.tmp.path().join("missing").display().to_string(),
            ],
            "no such directory",
        ),
        (
            vec![
                "mount".into(),
                m.store.join("daemon.pid").display().to_string(),
            ],
            "not a directory",
        ),
        (
            vec!["umount".into(), m.tmp.path().display().to_string()],
            "not mounted",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = rewindfs(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{args:?}: not one line: {err:?}"
        );
    }
}

#[test]
fn a_store_inside_the_workspace_or_containing_it_is_refused_and_nothing_is_created() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    fs::create_dir(&dir).unwrap();
    let cases = [
        (dir.join(".rw/store"), "inside the workspace"),
        (tmp.path().to_path_buf(), "is inside the store"),
    ];
    for (store, want) in cases {
        let out = rewindfs(&[
            "mount",
            dir.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "--store {}: mounted",
            store.display()
        );
        assert!(
            err.contains(want),
            "--store {}: {err:?} lacks {want:?}",
            store.display()
        );
        assert!(!is_fuse(&dir));
    }
    // The refusal created nothing: neither the store nor its parent inside the workspace.
    assert!(
        !dir.join(".rw").exists(),
        "a refused mount created its store"
    );
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn a_killed_daemons_mount_is_recognised_and_cleared() {
    require_fuse();
    let mut m = Mounted::with(|d| fs::write(d.join("f"), b"data").unwrap());
    let pid = m.daemon_pid();
    crate::support::sh(&m.dir, "true");
    signal(pid, rustix::process::Signal::KILL);
    assert!(wait_until(10, || rustix::fs::statfs(&m.dir)
        .is_err_and(|e| e.raw_os_error() == libc::ENOTCONN)));
    let out = rewindfs(&[
        "mount",
        m.dir.to_str().unwrap(),
        "--store",
        m.store.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rewindfs umount"),
        "mount should say what to do: {err}"
    );
    rewindfs_ok(&["umount", m.dir.to_str().unwrap()]);
    assert_eq!(fs::read(m.p("f")).unwrap(), b"data");
    // And it mounts again.
    m.mount(&[]);
    assert_eq!(fs::read(m.p("f")).unwrap(), b"data");
}

/// A signal sent the moment the daemon's socket appears (before the mount may be up) still
/// ends in a clean unmount and exit: the daemon takes SIGTERM over before it binds the socket.
/// (It used to do so only once serving, so a signal in between killed it, mount left behind.)
#[test]
fn a_sigterm_right_at_startup_still_unmounts_cleanly() {
    require_fuse();
    for round in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        let store = tmp.path().join("s");
        fs::create_dir(&dir).unwrap();
        let mut child = foreground(&dir, &store);
        assert!(
            wait_until(20, || store.join("control.sock").exists()),
            "round {round}: the socket did not appear"
        );
        signal(child.id(), rustix::process::Signal::TERM);
        let status = child.wait().unwrap();
        if !status.success() {
            let _ = Command::new("umount").arg("-l").arg(&dir).status();
        }
        assert!(status.success(), "round {round}: exit status {status}");
        assert!(!is_fuse(&dir), "round {round}: still mounted");
    }
}

#[test]
fn a_foreground_daemon_unmounts_and_exits_cleanly_on_sigterm() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    let store = tmp.path().join("s");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("keep"), b"k").unwrap();
    let mut child = foreground(&dir, &store);
    assert!(
        wait_until(20, || is_fuse(&dir) && store.join("control.sock").exists()),
        "foreground mount did not come up"
    );
    fs::write(dir.join("new"), b"n").unwrap();
    signal(child.id(), rustix::process::Signal::TERM);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(!is_fuse(&dir));
    assert_eq!(fs::read(dir.join("new")).unwrap(), b"n");
}

#[test]
fn a_second_daemon_on_the_same_store_is_refused() {
    require_fuse();
    let m = Mounted::new();
    let other = m.tmp.path().join("other");
    fs::create_dir(&other).unwrap();
    let out = rewindfs(&[
        "mount",
        other.to_str().unwrap(),
        "--store",
        m.store.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another rewindfs daemon"));
}
