//! Processes that entered the directory before it was mounted still see the directory
//! underneath, where nothing is recorded: the mount names them, and `status` lists them while
//! they stay.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

use crate::support::{BIN, require_fuse, rewindfs, rewindfs_ok, wait_until};

/// Kills and reaps the processes when the test ends, passed or not.
struct Kids(Vec<Child>);
impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Unmounts (lazily, as processes may still be inside) when the test ends.
struct Unmount(PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        if crate::support::is_fuse(&self.0) {
            let _ = rewindfs(&["umount", "--lazy", self.0.to_str().unwrap()]);
        }
    }
}

fn spawn(cwd: &Path, script: &str) -> Child {
    Command::new("bash")
        .args(["-c", script])
        .current_dir(cwd)
        .spawn()
        .unwrap()
}

fn unprotected(sock: &Path) -> Vec<Value> {
    let out = rewindfs_ok(&["status", "--json", "--socket", sock.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["unprotectedProcesses"].as_array().unwrap().clone()
}

fn pids(list: &[Value]) -> Vec<u64> {
    list.iter().map(|p| p["pid"].as_u64().unwrap()).collect()
}

#[test]
fn processes_inside_the_directory_before_the_mount_are_named_and_listed_until_they_leave() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine\n").unwrap();
    let store = tmp.path().join("store");
    let sock = store.join("control.sock");

    // Before the mount: a shell in a subdirectory, and an editor holding a file open from
    // elsewhere.
    let mut kids = Kids(vec![
        spawn(&sub, "exec sleep 600"),
        spawn(&dir, "exec 3<>notes.txt; cd /; exec sleep 601"),
    ]);
    let (shell, editor) = (kids.0[0].id() as u64, kids.0[1].id() as u64);
    let ready = |pid: u64, cmd: &str| {
        wait_until(10, || {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c == format!("{}\0", cmd.replace(' ', "\0")).as_bytes())
        })
    };
    assert!(ready(shell, "sleep 600") && ready(editor, "sleep 601"));

    let out = Command::new(BIN)
        .args(["mount", dir.to_str().unwrap(), "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let _unmount = Unmount(dir.clone());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mount: {stderr}");
    for want in [
        format!(
            "pid {shell} (sleep 600): current directory {}",
            sub.display()
        ),
        format!(
            "pid {editor} (sleep 601): open file {}",
            dir.join("notes.txt").display()
        ),
        "cd out and back in".to_string(),
    ] {
        assert!(
            stderr.contains(&want),
            "the mount's warning has {want:?}:\n{stderr}"
        );
    }

    // A process that enters after the mount is inside it, and not listed.
    kids.0.push(spawn(&sub, "exec sleep 602"));
    let inside = kids.0[2].id() as u64;
    let list = unprotected(&sock);
    assert_eq!(pids(&list), [shell, editor], "{list:?}");
    assert_eq!(list[0]["holds"], "cwd");
    assert_eq!(list[0]["path"], sub.to_str().unwrap());
    assert_eq!(list[0]["command"], "sleep 600");
    assert_eq!(list[1]["holds"], "file");
    assert!(!pids(&list).contains(&inside));
    let text = rewindfs_ok(&["status", "--socket", sock.to_str().unwrap()]);
    assert!(
        text.contains(&format!("pid {shell} (sleep 600)")),
        "status says it: {text}"
    );

    // It leaves the list when it exits.
    kids.0[0].kill().unwrap();
    kids.0[0].wait().unwrap();
    let list = unprotected(&sock);
    assert_eq!(pids(&list), [editor], "{list:?}");
    kids.0[1].kill().unwrap();
    kids.0[1].wait().unwrap();
    assert!(unprotected(&sock).is_empty());
    let text = rewindfs_ok(&["status", "--socket", sock.to_str().unwrap()]);
    assert!(!text.contains("unprotected"), "{text}");
}
