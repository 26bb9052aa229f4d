//! Retention: gc drops the oldest checkpoints, keeps the live session rewindable to its first
//! message, frees blobs nothing refers to, and a rewind to a dropped checkpoint says why.

use std::path::Path;

use serde_json::json;

use crate::agent::Agent;
use crate::support::{Mounted, require_fuse, rewindfs, rewindfs_ok, sh, tree};

/// Blob files on disk (not the temp directory).
fn blob_files(store: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(store.join("blobs")).unwrap() {
        let d = d.unwrap();
        let name = d.file_name().into_string().unwrap();
        if name == "tmp" {
            continue;
        }
        for f in std::fs::read_dir(d.path()).unwrap() {
            out.push(format!(
                "{name}{}",
                f.unwrap().file_name().into_string().unwrap()
            ));
        }
    }
    out.sort();
    out
}

fn fsck_ok(store: &Path) {
    let out = rewindfs_ok(&["fsck", "--store", store.to_str().unwrap()]);
    assert!(out.contains(": ok"), "{out}");
}

#[test]
fn gc_drops_the_oldest_checkpoints_keeps_the_sessions_start_and_frees_their_blobs() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("keep.txt"), "original\n").unwrap());
    let mut at = Vec::new();
    at.push(tree(&a.m.dir));
    let t1 = a.turn();
    a.tool_write("keep.txt", b"A\n");
    a.bash("head -c 300000 /dev/urandom > big.bin");
    at.push(tree(&a.m.dir));
    let t2 = a.turn();
    a.bash("head -c 300000 /dev/urandom > big.bin");
    a.tool_write("keep.txt", b"B\n");
    at.push(tree(&a.m.dir));
    let t3 = a.turn();
    a.bash("head -c 300000 /dev/urandom > big.bin; mkdir -p sub && echo s > sub/f");
    at.push(tree(&a.m.dir));
    let t4 = a.turn();
    a.bash("rm big.bin; mv sub moved; echo x > new.txt");
    let now = tree(&a.m.dir);
    let blobs_before = blob_files(&a.m.store);
    let st = a.c.request("status", json!({})).unwrap();
    assert!(st["storeBytes"].as_u64().unwrap() > 900_000, "{st}");

    let r =
        a.c.request("gc", json!({"max_store_bytes": 1, "max_age_seconds": 0}))
            .unwrap();
    // The mount's own checkpoint, t2 and t3; t1 begins the live session, t4 is current.
    assert_eq!(r["checkpointsDropped"], json!(3), "{r}");
    assert_eq!(r["overBudget"], json!(true), "{r}");
    assert!(r["bytesFreed"].as_u64().unwrap() >= 600_000, "{r}");
    assert!(r["bytesAfter"].as_u64().unwrap() < r["bytesBefore"].as_u64().unwrap());
    let blobs_after = blob_files(&a.m.store);
    assert_eq!(
        blobs_before.len() - blobs_after.len(),
        r["blobsDeleted"].as_u64().unwrap() as usize,
        "every blob row gc deleted had its file removed"
    );
    fsck_ok(&a.m.store);

    for gone in [&t2, &t3] {
        let e = a.rewind(gone, "all", false).unwrap_err();
        assert!(
            e.starts_with("No file checkpoint found for this message.")
                && e.contains("removed by gc")
                && e.contains("budget"),
            "{e}"
        );
        let dry = a.rewind(gone, "all", true).unwrap();
        assert!(!dry.can_rewind);
    }
    let listed: Vec<String> = a.c.request("list_checkpoints", json!({})).unwrap()["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["uuid"].as_str().unwrap().to_string())
        .collect();
    assert!(listed.contains(&t1) && listed.contains(&t4), "{listed:?}");
    assert!(!listed.contains(&t2) && !listed.contains(&t3), "{listed:?}");
    assert_eq!(tree(&a.m.dir), now, "gc changes no file");
    // `status` counts what `list` shows, and the dropped apart.
    let st = a.c.request("status", json!({})).unwrap();
    assert_eq!(st["checkpoints"], json!(listed.len()), "{st}");
    assert_eq!(st["checkpointsDropped"], json!(3), "{st}");
    // The command line says why on stderr, and shows no "would change 0 file(s)" beside it.
    let sock = a.m.socket();
    let out = rewindfs(&[
        "rewind",
        &t2,
        "--scope",
        "all",
        "--dry-run",
        "--socket",
        sock.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot rewind") && err.contains("removed by gc"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{err}");

    // The session's first message and the current one still rewind exactly.
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(tree(&a.m.dir), at[0]);
    a.c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(tree(&a.m.dir), now);
    a.rewind(&t1, "tool", false).unwrap();
    assert_eq!(a.read("keep.txt").as_deref(), Some("original\n"));
    a.c.request("undo_rewind", json!({})).unwrap();
    a.rewind(&t4, "all", false).unwrap();
    assert_eq!(tree(&a.m.dir), at[3]);
    fsck_ok(&a.m.store);
}

#[test]
fn gc_without_a_daemon_and_by_age_keeps_the_last_checkpoint_and_sweeps_stray_blobs() {
    require_fuse();
    let mut m = Mounted::new();
    let sock = m.socket();
    let mut c = rewindfs::control::client::Client::connect(&sock).unwrap();
    let mut turns = Vec::new();
    for i in 0..4 {
        let u = uuid::Uuid::new_v4().to_string();
        c.request(
            "begin_message",
            json!({"session_id": format!("s{i}"), "user_message_id": u}),
        )
        .unwrap();
        sh(
            &m.dir,
            &format!(
                "head -c 100000 /dev/urandom > f{}.bin; head -c 100000 /dev/urandom > f0.bin",
                i
            ),
        );
        turns.push(u);
    }
    let store = m.store.to_str().unwrap().to_string();
    // With the daemon up, `gc --store` goes to it (it holds the store's lock).
    let out = rewindfs_ok(&[
        "gc",
        "--store",
        &store,
        "--max-store-bytes",
        "0",
        "--max-age",
        "0",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["checkpointsDropped"],
        json!(0),
        "no limits, nothing dropped: {v}"
    );
    m.umount();

    // A blob file no row names (as a crash between gc's commit and its unlinks leaves).
    let stray = m.store.join("blobs/ee");
    std::fs::create_dir_all(&stray).unwrap();
    std::fs::write(stray.join("0".repeat(62)), b"stray").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = rewindfs_ok(&[
        "gc",
        "--store",
        &store,
        "--max-store-bytes",
        "0",
        "--max-age",
        "1s",
    ]);
    assert!(out.contains("dropped 4 checkpoint(s)"), "{out}");
    assert!(
        !stray.join("0".repeat(62)).exists(),
        "the stray blob file was swept"
    );
    fsck_ok(&m.store);
    let out = rewindfs(&["gc", "--store", "/nonexistent/store"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/store"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    m.mount(&[]);
    let mut c = rewindfs::control::client::Client::connect(&sock).unwrap();
    let e = c
        .request(
            "rewind_files",
            json!({"user_message_id": turns[0], "scope": "all"}),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("removed by gc") && e.contains("age limit of 1s"),
        "{e}"
    );
    // The last message's checkpoint was kept and rewinds.
    let before = std::fs::read(m.p("f0.bin")).unwrap();
    sh(&m.dir, "rm f2.bin; echo changed > f0.bin");
    c.request(
        "rewind_files",
        json!({"user_message_id": turns[3], "scope": "all", "paths": ["f2.bin"]}),
    )
    .unwrap();
    assert!(
        m.p("f2.bin").exists(),
        "restored through the new mount's captures"
    );
    assert_ne!(
        std::fs::read(m.p("f0.bin")).unwrap(),
        before,
        "outside the paths given"
    );
}

/// What gc says it freed is what the store went down by: the blobs it deleted and the database
/// pages the rows it deleted (captures, the dropped checkpoints' change log) used. It counted
/// only blobs, and said "freed 0 B (93.4 MiB -> 88.9 MiB)".
#[test]
fn gc_reports_as_freed_what_the_store_went_down_by() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.turn();
    // Thousands of change-log entries and no blob at all.
    a.bash("for i in $(seq 1 3000); do : > f$i; rm f$i; done");
    a.turn();
    let r =
        a.c.request("gc", json!({"max_store_bytes": 1, "max_age_seconds": 0}))
            .unwrap();
    let n = |k: &str| r[k].as_u64().unwrap();
    assert!(n("checkpointsDropped") > 0, "{r}");
    assert!(n("bytesAfter") < n("bytesBefore"), "{r}");
    assert_eq!(n("bytesFreed"), n("bytesBefore") - n("bytesAfter"), "{r}");
    let sock = a.m.socket();
    let out = rewindfs_ok(&["gc", "--socket", sock.to_str().unwrap()]);
    assert!(
        out.contains("freed 0 B: the store holds "),
        "nothing more to drop: {out}"
    );
}
