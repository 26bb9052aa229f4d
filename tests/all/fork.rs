//! `rewindfs fork`: the tree as it was at a checkpoint, written into a new directory and
//! (with --mount) mounted with a history that begins where it came from; several forks of one
//! checkpoint side by side; `diff --fork`; and the destinations refused.

use std::path::PathBuf;
use std::process::Command;

use crate::agent::Agent;
use crate::support::{BIN, is_fuse, rewindfs, rewindfs_ok, tree};
use crate::undo::{full_tree, setxattr};

/// A mount made by `rewindfs fork --mount`, unmounted when dropped.
struct ForkMount(PathBuf);

impl Drop for ForkMount {
    fn drop(&mut self) {
        if is_fuse(&self.0) {
            let p = self.0.to_str().unwrap();
            if !rewindfs(&["umount", p]).status.success() {
                let _ = rewindfs(&["umount", "--lazy", p]);
            }
        }
    }
}

/// A workspace with a little of everything, changed over two turns: returns the agent, the
/// first turn's uuid and the tree when it began.
fn history() -> (Agent, String, Vec<String>) {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let mut a = Agent::with_args(
        |d| {
            std::fs::write(d.join("a.txt"), "one\n").unwrap();
            std::fs::create_dir_all(d.join("src/m")).unwrap();
            std::fs::write(d.join("src/m/lib.rs"), "fn f() {}\n").unwrap();
            std::fs::write(d.join("big.bin"), &big).unwrap();
            std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
            std::fs::write(d.join("ro.txt"), "keep\n").unwrap();
            std::fs::set_permissions(
                d.join("ro.txt"),
                std::os::unix::fs::PermissionsExt::from_mode(0o444),
            )
            .unwrap();
        },
        &["--range-capture-min", "4096"],
    );
    let u1 = a.turn();
    let at_u1 = tree(&a.m.dir);
    a.tool_write("a.txt", b"two\n");
    a.bash("printf Z | dd of=big.bin bs=1 seek=1000 conv=notrunc status=none");
    a.bash("mv src lib && rm ro.txt -f && mkdir -p new && echo n > new/f && ln -sfn nowhere link");
    a.turn();
    a.bash("echo later >> a.txt");
    (a, u1, at_u1)
}

#[test]
fn forks_of_one_checkpoint_run_side_by_side_with_their_own_history() {
    crate::support::require_fuse();
    let (a, u1, at_u1) = history();
    let now = tree(&a.m.dir);
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();
    let base = a.m.tmp.path();
    let mut forks = Vec::new();
    for i in 0..2 {
        let dir = base.join(format!("fork{i}"));
        let store = base.join(format!("fork{i}-store"));
        let out = rewindfs_ok(&[
            "fork",
            &u1,
            dir.to_str().unwrap(),
            "--mount",
            "--store",
            store.to_str().unwrap(),
            "--json",
            "--socket",
            sock,
        ]);
        forks.push(ForkMount(dir.clone()));
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["checkpoint"], u1.as_str());
        assert!(r["filesFromStore"].as_u64().unwrap() >= 2, "{r}");
        assert!(is_fuse(&dir), "fork {i} is not mounted");
        assert_eq!(
            tree(&dir),
            at_u1,
            "fork {i} is not the tree at the checkpoint"
        );
        // Its history begins with a checkpoint that says where it came from.
        let fsock = store.join("control.sock");
        let l: serde_json::Value = serde_json::from_str(&rewindfs_ok(&[
            "list",
            "--json",
            "--socket",
            fsock.to_str().unwrap(),
        ]))
        .unwrap();
        let first = &l["checkpoints"][0];
        assert_eq!(first["origin"]["kind"], "fork", "{l}");
        assert_eq!(first["origin"]["checkpoint"], u1.as_str());
        assert_eq!(
            first["origin"]["workspace"],
            a.m.dir.to_str().unwrap(),
            "{l}"
        );
        let text = rewindfs_ok(&["list", "--socket", fsock.to_str().unwrap()]);
        assert!(text.contains("forked from") && text.contains(&u1), "{text}");
    }
    // Each fork goes its own way; the workspace and the other fork are untouched.
    std::fs::write(base.join("fork0/a.txt"), "fork zero\n").unwrap();
    std::fs::write(base.join("fork1/only-in-one"), "x\n").unwrap();
    assert_eq!(tree(&a.m.dir), now);
    assert_eq!(
        std::fs::read_to_string(base.join("fork1/a.txt")).unwrap(),
        "one\n"
    );
    // diff --fork: from the origin checkpoint to the fork as it is now.
    let d0 = rewindfs_ok(&["diff", "--fork", base.join("fork0").to_str().unwrap()]);
    assert!(d0.contains("-one\n+fork zero"), "{d0}");
    assert!(!d0.contains("only-in-one"), "{d0}");
    let d1 = rewindfs_ok(&[
        "diff",
        "--fork",
        base.join("fork1").to_str().unwrap(),
        "--stat",
    ]);
    assert!(
        d1.contains("only-in-one") && d1.contains("1 file(s) changed"),
        "{d1}"
    );
    // A fork's changes rewind to its first checkpoint: the tree it was forked with.
    let fsock = base.join("fork0-store/control.sock");
    let l: serde_json::Value = serde_json::from_str(&rewindfs_ok(&[
        "list",
        "--json",
        "--socket",
        fsock.to_str().unwrap(),
    ]))
    .unwrap();
    let first = l["checkpoints"][0]["uuid"].as_str().unwrap().to_string();
    rewindfs_ok(&[
        "rewind",
        &first,
        "--scope",
        "all",
        "--socket",
        fsock.to_str().unwrap(),
    ]);
    assert_eq!(tree(&base.join("fork0")), at_u1);
    drop(forks);
}

#[test]
fn a_fork_without_mount_keeps_its_origin_for_diff_and_a_later_mount() {
    crate::support::require_fuse();
    let (a, u1, at_u1) = history();
    let base = a.m.tmp.path();
    let state = base.join("xdg-state");
    let dir = base.join("plain-fork");
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("XDG_STATE_HOME", &state)
            .output()
            .unwrap()
    };
    let out = run(&[
        "fork",
        &u1,
        dir.to_str().unwrap(),
        "--socket",
        a.m.socket().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_fuse(&dir));
    assert_eq!(tree(&dir), at_u1);
    std::fs::write(dir.join("a.txt"), "edited in the fork\n").unwrap();
    let out = run(&["diff", "--fork", dir.to_str().unwrap(), "a.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = String::from_utf8_lossy(&out.stdout);
    assert!(d.contains("-one\n+edited in the fork"), "{d}");
    // A later mount of the fork (its default store) begins after the origin.
    let out = run(&["mount", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _m = ForkMount(dir.clone());
    let out = Command::new(BIN)
        .args(["list", "--json"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let l: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        l["checkpoints"][0]["origin"]["checkpoint"],
        u1.as_str(),
        "{l}"
    );
    assert_eq!(l["checkpoints"][1]["kind"], "mount", "{l}");
}

#[test]
fn a_fork_goes_nowhere_near_the_workspace_or_the_store_nor_over_a_full_directory() {
    crate::support::require_fuse();
    let (a, u1, _) = history();
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();
    let full = a.m.tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "x").unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (a.m.dir.join("inside"), "inside the workspace"),
        (a.m.store.join("f"), "inside the store"),
        (full.clone(), "not empty"),
        (a.m.tmp.path().to_path_buf(), "holds the workspace"),
    ];
    for (dir, want) in cases {
        let out = rewindfs(&["fork", &u1, dir.to_str().unwrap(), "--socket", sock]);
        assert!(
            !out.status.success(),
            "fork into {} succeeded",
            dir.display()
        );
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "{}: {e}", dir.display());
    }
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    assert!(!a.m.dir.join("inside").exists());
    let unknown = crate::agent::uuid();
    let out = rewindfs(&[
        "fork",
        &unknown,
        a.m.tmp.path().join("nf").to_str().unwrap(),
        "--socket",
        sock,
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains(&unknown), "{e}");
    assert!(!a.m.tmp.path().join("nf").exists());
}

/// A fork gives files and directories the extended attributes they had at the checkpoint, as a
/// rewind to it would: those the store recorded for what changed since (a file rewritten, a
/// file that kept only its overwritten bytes, a directory), those of the present for what did
/// not.
#[test]
fn a_fork_keeps_extended_attributes_as_a_rewind_to_the_checkpoint_would() {
    crate::support::require_fuse();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let mut a = Agent::with_args(
        |d| {
            std::fs::create_dir_all(d.join("d")).unwrap();
            std::fs::write(d.join("d/changed.txt"), "v1\n").unwrap();
            std::fs::write(d.join("d/kept.txt"), "same\n").unwrap();
            std::fs::write(d.join("big.bin"), &big).unwrap();
            setxattr(&d.join("d"), "user.dir", "old");
            setxattr(&d.join("d/changed.txt"), "user.v", "1");
            setxattr(&d.join("d/kept.txt"), "user.k", "kept");
            setxattr(&d.join("big.bin"), "user.big", "1");
        },
        &["--range-capture-min", "4096"],
    );
    let u1 = a.turn();
    let at_u1 = full_tree(&a.m.dir);
    setxattr(&a.m.p("d"), "user.dir", "new");
    a.bash("echo v2 > d/changed.txt");
    setxattr(&a.m.p("d/changed.txt"), "user.v", "2");
    a.bash("printf Z | dd of=big.bin bs=1 seek=1000 conv=notrunc status=none");
    setxattr(&a.m.p("big.bin"), "user.big", "2");
    assert_ne!(full_tree(&a.m.dir), at_u1);
    let dir = a.m.tmp.path().join("fork");
    a.c.call(&rewindfs::control::cmd::Fork {
        user_message_id: u1.clone(),
        dir: dir.display().to_string(),
        trust_imported: false,
    })
    .unwrap();
    assert_eq!(full_tree(&dir), at_u1);
}
