//! Containment: a rewind or diff never reads or writes outside the workspace, whatever symlinks
//! the agent planted; the store is not reachable through the mount; one daemon per workspace.

use std::fs;

use serde_json::json;

use crate::agent::Agent;
use crate::support::{Mounted, require_fuse, rewindfs};

#[test]
fn a_symlink_planted_over_a_directory_is_never_written_or_read_through() {
    require_fuse();
    for (scope, absolute) in [("tool", true), ("all", true), ("agent", false)] {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("f.txt"), "secret\n").unwrap();
        fs::write(outside.path().join("new.txt"), "also theirs\n").unwrap();
        let mut a = Agent::new(|d| {
            fs::create_dir(d.join("a")).unwrap();
            fs::write(d.join("a/f.txt"), "original\n").unwrap();
        });
        let t1 = a.turn();
        a.tool_write("a/f.txt", b"by the tool\n");
        // Absent at t1: a rewind removes it — it must not remove the file the link shows.
        a.tool_write("a/new.txt", b"made by the tool\n");
        let target = if absolute {
            outside.path().to_str().unwrap().to_string()
        } else {
            // Relative, climbing out of the workspace.
            let depth = a.m.dir.components().count();
            format!(
                "{}{}",
                "../".repeat(depth),
                &outside.path().to_str().unwrap()[1..]
            )
        };
        a.bash(&format!("rm -rf a && ln -s {target} a"));
        assert_eq!(
            a.read("a/f.txt").as_deref(),
            Some("secret\n"),
            "the link works"
        );

        let d =
            a.c.request("diff", json!({"user_message_id": t1, "scope": scope}))
                .unwrap_or_else(|e| json!({"diff": "", "error": e.to_string()}));
        eprintln!("{scope}: diff {d}");
        assert!(
            !d["diff"].as_str().unwrap().contains("secret"),
            "{scope}: diff read through the link: {d}"
        );
        let _ = a.rewind(&t1, scope, false);
        assert_eq!(
            fs::read_to_string(outside.path().join("f.txt")).unwrap(),
            "secret\n",
            "{scope}: the rewind wrote through the link"
        );
        assert_eq!(
            fs::read_to_string(outside.path().join("new.txt")).unwrap(),
            "also theirs\n",
            "{scope}: the rewind removed or wrote a file through the link"
        );
        assert_eq!(
            fs::read_dir(outside.path()).unwrap().count(),
            2,
            "{scope}: the rewind created files outside"
        );
        if scope != "tool" {
            // The directory comes back in place of the link.
            assert!(
                !a.m.p("a").is_symlink() && a.m.p("a").is_dir(),
                "{scope}: a is a directory again"
            );
            assert_eq!(a.read("a/f.txt").as_deref(), Some("original\n"));
            assert_eq!(a.read("a/new.txt"), None);
        }
    }
}

#[test]
fn the_store_cannot_be_inside_the_workspace_and_a_workspace_has_one_daemon() {
    require_fuse();
    let m = Mounted::new();
    let other_store = m.tmp.path().join("store2");
    let out = rewindfs(&[
        "mount",
        m.dir.to_str().unwrap(),
        "--store",
        other_store.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already mounted by rewindfs"), "{err}");
    let inside = m.dir.join(".rewindfs-store");
    let out = rewindfs(&[
        "mount",
        m.tmp.path().to_str().unwrap(),
        "--store",
        inside.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success(),
        "a store beneath the workspace is refused"
    );
    // The socket is the owner's only.
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(m.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
}
