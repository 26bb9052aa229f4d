//! Rewind through a real mount: one test per observed SDK behaviour (docs/design.md §2), then the
//! agent and all scopes, conflicts, undo, and the response shapes.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use rewindfs::store::Scope;

use crate::agent::{Agent, uuid};
use crate::support::{require_fuse, tree};

#[test]
fn a_file_created_by_write_is_deleted_one_created_by_bash_survives() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    let t1 = a.turn();
    a.tool_write("made_by_tool.txt", b"one\ntwo\n");
    a.bash("echo shell > made_by_shell.txt");
    let dry = a.rewind(&t1, "tool", true).unwrap();
    assert!(dry.can_rewind);
    assert_eq!(a.files(&dry.files_changed), vec!["made_by_tool.txt"]);
    assert_eq!(dry.insertions, 0);
    assert_eq!(
        dry.deletions,
        json!(2),
        "a created file being removed counts its lines as deletions"
    );
    let r = a.rewind(&t1, "tool", false).unwrap();
    assert!(r.can_rewind);
    assert_eq!(r.skipped_links, Some(0));
    assert!(a.read("made_by_tool.txt").is_none());
    assert_eq!(a.read("made_by_shell.txt").as_deref(), Some("shell\n"));
}

#[test]
fn a_file_only_touched_by_bash_is_never_restored() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("s.txt"), "orig\n").unwrap());
    let t1 = a.turn();
    a.bash("echo more >> s.txt; echo new > n.txt");
    let dry = a.rewind(&t1, "tool", true).unwrap();
    assert_eq!(a.files(&dry.files_changed), Vec::<String>::new());
    a.rewind(&t1, "tool", false).unwrap();
    assert_eq!(a.read("s.txt").as_deref(), Some("orig\nmore\n"));
}

#[test]
fn later_bash_changes_to_a_tracked_file_are_undone_and_a_deleted_one_comes_back() {
    require_fuse();
    let mut a = Agent::new(|d| fs::create_dir(d.join("keep")).unwrap());
    let t1 = a.turn();
    a.tool_write("src/deep/t.txt", b"tool v1\n");
    fs::set_permissions(a.m.p("src/deep/t.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    a.tool_write("keep/u.txt", b"u1\n");
    let t2 = a.turn();
    a.tool_write("src/deep/t.txt", b"tool v2\n");
    a.bash("echo appended >> keep/u.txt; chmod 600 keep/u.txt");
    a.bash("rm -rf src");
    let r = a.rewind(&t2, "tool", false).unwrap();
    assert_eq!(
        a.files(&r.files_changed),
        vec!["keep/u.txt", "src/deep/t.txt"]
    );
    assert_eq!(
        a.read("src/deep/t.txt").as_deref(),
        Some("tool v1\n"),
        "deleted tracked file comes back with its parents"
    );
    assert_eq!(
        fs::metadata(a.m.p("src/deep/t.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o640
    );
    assert_eq!(a.read("keep/u.txt").as_deref(), Some("u1\n"));
    assert_eq!(
        fs::metadata(a.m.p("keep/u.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o644
    );
    // Back to before the first turn: both files were created by tools, so both go.
    a.rewind(&t1, "tool", false).unwrap();
    assert!(a.read("src/deep/t.txt").is_none());
    assert!(a.read("keep/u.txt").is_none());
    assert!(
        a.m.p("src/deep").is_dir(),
        "directories are never removed by the tool scope"
    );
}

#[test]
fn bash_then_edit_in_one_turn_restores_the_state_just_before_the_edit() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("h.txt"), "start\n").unwrap());
    let t1 = a.turn();
    a.bash("echo from-bash >> h.txt");
    a.tool_write("h.txt", b"edited\n");
    let r = a.rewind(&t1, "tool", false).unwrap();
    assert_eq!(a.files(&r.files_changed), vec!["h.txt"]);
    assert_eq!(a.read("h.txt").as_deref(), Some("start\nfrom-bash\n"));
}

#[test]
fn a_tracked_file_moved_by_bash_is_recreated_and_the_edited_target_stays() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    let t0 = a.turn();
    a.tool_write("a.txt", b"alpha\n");
    let t1 = a.turn();
    a.bash("mv a.txt b.txt");
    a.tool_write("b.txt", b"edited b\n");
    a.tool_write("newdir/x.txt", b"x\n");
    a.rewind(&t1, "tool", false).unwrap();
    assert_eq!(a.read("a.txt").as_deref(), Some("alpha\n"));
    assert_eq!(
        a.read("b.txt").as_deref(),
        Some("alpha\n"),
        "b.txt keeps its content from before the Edit"
    );
    assert!(
        a.m.p("newdir").is_dir(),
        "directories created by tools stay"
    );
    assert!(a.read("newdir/x.txt").is_none());
    let _ = t0;
}

#[test]
fn binary_content_and_modes_come_back_byte_exact() {
    require_fuse();
    let bin: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let mut a = Agent::new(|_| {});
    let t0 = a.turn();
    for (name, mode) in [("x.bin", 0o755), ("p.bin", 0o600), ("r.bin", 0o444)] {
        a.tool_write(name, &bin);
        fs::set_permissions(a.m.p(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    let t1 = a.turn();
    for name in ["x.bin", "p.bin", "r.bin"] {
        fs::set_permissions(a.m.p(name), fs::Permissions::from_mode(0o644)).unwrap();
        a.tool_write(name, b"garbage");
    }
    let dry = a.rewind(&t1, "tool", true).unwrap();
    // The SDK counts binary content as text too: lines end at each 0x0a byte.
    let lines = bin.split_inclusive(|b| *b == b'\n').count() as u64;
    assert_eq!(
        (&dry.insertions, &dry.deletions),
        (&(3 * lines), &(3)),
        "binary files count lines as the SDK counts them"
    );
    a.rewind(&t1, "tool", false).unwrap();
    for (name, mode) in [("x.bin", 0o755), ("p.bin", 0o600), ("r.bin", 0o444)] {
        assert_eq!(fs::read(a.m.p(name)).unwrap(), bin, "{name}");
        assert_eq!(
            fs::metadata(a.m.p(name)).unwrap().permissions().mode() & 0o7777,
            mode,
            "{name}"
        );
    }
    a.rewind(&t0, "tool", false).unwrap();
    assert!(!a.m.p("x.bin").exists());
}

#[test]
fn an_unknown_or_tool_result_uuid_gets_the_sdks_error() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    let missing = uuid();
    let dry = a.rewind(&missing, "tool", true).unwrap();
    assert!(!dry.can_rewind);
    assert_eq!(
        dry.error,
        Some("No file checkpoint found for this message.".to_string())
    );
    assert_eq!(
        a.rewind(&missing, "tool", false).unwrap_err(),
        "No file checkpoint found for this message."
    );
    // The SDK answers an id that is not a uuid the same way (tests/clients/FINDINGS.md §4).
    let bad = a.rewind("not-a-uuid", "tool", false).unwrap_err();
    assert_eq!(bad, "No file checkpoint found for this message.");
    let dry = a.rewind("not-a-uuid", "tool", true).unwrap();
    assert_eq!(
        dry.error,
        Some("No file checkpoint found for this message.".to_string())
    );
    // The connection is still usable.
    assert!(a.c.request("status", json!({})).is_ok());
}

#[test]
fn agent_scope_undoes_shell_work_including_directories_renames_and_symlinks() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::create_dir_all(d.join("lib/sub")).unwrap();
        fs::write(d.join("lib/sub/m.py"), "print(1)\n").unwrap();
        fs::write(d.join("lib/top.py"), "top\n").unwrap();
        std::os::unix::fs::symlink("lib/top.py", d.join("link")).unwrap();
        fs::write(d.join("script.sh"), "#!/bin/sh\n").unwrap();
    });
    let before = tree(&a.m.dir);
    let t1 = a.turn();
    a.bash("mv lib library && echo changed > library/sub/m.py && mkdir -p build/out && echo o > build/out/o.txt && rm link && ln -s script.sh link && chmod 755 script.sh && rm -rf library/sub");
    a.tool_write("notes.md", b"# notes\n");
    let dry = a.rewind(&t1, "agent", true).unwrap();
    assert!(dry.can_rewind);
    a.rewind(&t1, "agent", false).unwrap();
    assert_eq!(tree(&a.m.dir), before);
}

#[test]
fn agent_scope_refuses_when_the_user_also_changed_a_path_unless_forced() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("f.txt"), "v0\n").unwrap());
    let t1 = a.turn();
    a.tool_write("f.txt", b"agent\n");
    // An unrelated process (not a descendant of the agent): the user's editor.
    crate::support::as_stranger(&a.m.dir, "echo user >> f.txt");
    assert!(crate::support::wait_until(5, || a
        .read("f.txt")
        .is_some_and(|s| s.ends_with("user\n"))));
    let dry = a.rewind(&t1, "agent", true).unwrap();
    assert!(!dry.can_rewind);
    assert_eq!(dry.conflicts, [a.m.p("f.txt").display().to_string()]);
    let err = a.rewind(&t1, "agent", false).unwrap_err();
    assert!(err.starts_with("Failed to rewind: "), "{err}");
    assert_eq!(
        a.read("f.txt").as_deref(),
        Some("agent\nuser\n"),
        "a refused rewind changes nothing"
    );
    let r =
        a.c.request(
            "rewind_files",
            json!({"user_message_id": t1, "scope": "agent", "force": true}),
        )
        .unwrap();
    assert_eq!(r["canRewind"], json!(true));
    assert_eq!(a.read("f.txt").as_deref(), Some("v0\n"));
}

#[test]
fn undo_restores_the_exact_pre_rewind_tree_and_rewinding_again_works() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("base.txt"), "base\n").unwrap());
    let t1 = a.turn();
    a.tool_write("a.txt", b"a\n");
    a.bash("mkdir -p d && echo x > d/x && echo more >> base.txt && ln -s a.txt l");
    let after = tree(&a.m.dir);
    a.rewind(&t1, "all", false).unwrap();
    assert_ne!(tree(&a.m.dir), after);
    let u = a.c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(u["canRewind"], json!(true));
    assert_eq!(tree(&a.m.dir), after);
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(a.read("base.txt").as_deref(), Some("base\n"));
    assert!(!a.m.p("d").exists());
    let nothing = a.c.request("undo_rewind", json!({}));
    assert!(nothing.is_ok(), "the second rewind can be undone too");
    assert_eq!(tree(&a.m.dir), after);
}

#[test]
fn a_rewind_is_seen_at_once_by_processes_that_cached_the_old_state() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("c.txt"), "old\n").unwrap());
    let t1 = a.turn();
    a.tool_write("c.txt", b"new\n");
    // Warm the kernel's caches (entries, attributes, pages).
    assert_eq!(a.bash("cat c.txt; stat -c %s c.txt; ls"), "new\n4\nc.txt\n");
    a.tool_write("gone.txt", b"g\n");
    assert_eq!(a.bash("cat gone.txt"), "g\n");
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(a.bash("cat c.txt; stat -c %s c.txt; ls"), "old\n4\nc.txt\n");
    assert_eq!(
        a.bash("test -e gone.txt && echo present || echo absent"),
        "absent\n"
    );
}

#[test]
fn chained_directory_renames_rewind_to_the_checkpoint() {
    require_fuse();
    // `mv x d/e` then `mv d x`: each name maps into the other's subtree, which once made the
    // planner chain renames without end (x/a -> d/e/a -> x/e/a -> d/e/e/a -> ...).
    let mut a = Agent::new(|d| {
        fs::create_dir_all(d.join("d")).unwrap();
        fs::create_dir_all(d.join("x")).unwrap();
        fs::write(d.join("x/a.txt"), "a\n").unwrap();
        fs::write(d.join("d/b.txt"), "b\n").unwrap();
    });
    let t1 = a.turn();
    let at_t1 = tree(&a.m.dir);
    a.bash("mv x d/e && mv d x && echo more >> x/e/a.txt && mkdir x/e/n && echo n > x/e/n/f");
    let t2 = a.turn();
    let at_t2 = tree(&a.m.dir);
    a.bash("mv x d && mv d/e x && echo c > x/c.txt");
    for scope in ["agent", "all"] {
        let r = a.rewind(&t1, scope, false).unwrap();
        assert!(r.can_rewind);
        assert_eq!(tree(&a.m.dir), at_t1, "scope {scope} to the first turn");
        a.c.request("undo_rewind", json!({})).unwrap();
    }
    a.rewind(&t2, "agent", false).unwrap();
    assert_eq!(tree(&a.m.dir), at_t2, "agent scope to the second turn");
}

#[test]
fn a_restored_file_whose_directory_was_removed_is_seen_at_once() {
    require_fuse();
    // Long cache lifetimes: only the rewind's invalidation can make the kernel look again.
    let mut a = Agent::with_args(|_| {}, &["--ttl", "600"]);
    let _t0 = a.turn();
    a.tool_write("d/e/c.txt", b"tool\n");
    let t1 = a.turn();
    a.bash("rm -rf d");
    // The kernel now caches the root's listing and a negative entry for `d`.
    assert!(!a.m.p("d").exists());
    assert_eq!(tree(&a.m.dir), Vec::<String>::new());
    a.rewind(&t1, "tool", false).unwrap();
    assert_eq!(a.read("d/e/c.txt").as_deref(), Some("tool\n"));
    assert_eq!(tree(&a.m.dir).len(), 3, "{:?}", tree(&a.m.dir));
}

/// A command whose stdout is closed before it prints (`rewindfs undo | true`) ends as `ls | head`
/// does, by SIGPIPE, after it has done its work; not with a panic and exit status 101, which
/// reads as a failure of the undo itself.
#[test]
fn a_command_whose_stdout_is_closed_ends_by_sigpipe_after_its_work() {
    require_fuse();
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let mut a = Agent::new(|d| fs::write(d.join("f.txt"), "one\n").unwrap());
    let t1 = a.turn();
    a.bash("echo two > f.txt");
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(a.read("f.txt").as_deref(), Some("one\n"));
    let mut child = Command::new(crate::support::BIN)
        .args(["undo", "--socket", a.m.socket().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // long before the undo is done and printed
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        a.read("f.txt").as_deref(),
        Some("two\n"),
        "the undo was done"
    );
}

/// A scope that leaves out changes made since the checkpoint says so — how many, by whom, and
/// the command that includes them — in the socket's answer and the CLI's lines; it used to say
/// "changed 0 file(s)" and nothing else after a shell's `sed -i` and `rm -rf`.
#[test]
fn a_scope_that_leaves_out_changes_says_so_and_how_to_include_them() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::write(d.join("conf.txt"), "a=1\n").unwrap();
        fs::create_dir_all(d.join("d/e")).unwrap();
        fs::write(d.join("d/e/x.txt"), "x\n").unwrap();
    });
    let t1 = a.turn();
    a.bash("sed -i s/1/2/ conf.txt && rm -rf d");
    let dry = a.rewind(&t1, "tool", true).unwrap();
    assert_eq!(a.files(&dry.files_changed), Vec::<String>::new());
    let o = dry.omitted.as_ref().expect("omitted");
    assert!(o.count >= 3, "{dry:?}");
    assert_eq!(o.by_actor.get("shell"), Some(&o.count), "{dry:?}");
    assert_eq!(o.scope, Scope::Agent);
    assert_eq!(
        o.command,
        format!("rewindfs rewind {t1} --scope agent --dry-run")
    );
    // Agent scope includes them: nothing left out.
    let dry = a.rewind(&t1, "agent", true).unwrap();
    assert!(dry.omitted.is_none(), "{dry:?}");
    // Someone else's change needs scope all; the CLI says so too.
    crate::support::as_stranger(&a.m.dir, "echo user > notes.txt");
    assert!(crate::support::wait_until(5, || a
        .m
        .p("notes.txt")
        .exists()));
    let out = std::process::Command::new(crate::support::BIN)
        .args(["rewind", &t1, "--scope", "agent", "--dry-run"])
        .current_dir(&a.m.dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("left out 1 path(s)")
            && stdout.contains("external 1")
            && stdout.contains(&format!("rewindfs rewind {t1} --scope all --dry-run")),
        "{stdout}"
    );
}

/// A name that is not UTF-8 is named exactly on the wire (`wire_path.rs`: git's quoting), in
/// `filesChanged`, `conflicts`, `show` and `log`, and a client can send that form back to name
/// the file. Before, every bad byte went out as U+FFFD: `n\xff.txt` and `n\xfe.txt` were
/// reported under one name, and neither could be asked for.
#[test]
fn a_name_that_is_not_utf8_is_named_exactly_on_the_wire() {
    require_fuse();
    use std::os::unix::ffi::OsStrExt;
    let name: &[u8] = b"n\xff.txt";
    let mut a = Agent::new(|d| {
        fs::write(d.join(std::ffi::OsStr::from_bytes(name)), "v0\n").unwrap();
        fs::write(d.join(std::ffi::OsStr::from_bytes(b"n\xfe.txt")), "other\n").unwrap();
    });
    let t1 = a.turn();
    a.bash("printf 'agent\\n' > \"$(printf 'n\\377.txt')\"");
    crate::support::as_stranger(&a.m.dir, "printf 'user\\n' >> \"$(printf 'n\\377.txt')\"");
    let path = a.m.dir.join(std::ffi::OsStr::from_bytes(name));
    assert!(crate::support::wait_until(5, || fs::read(&path).is_ok_and(|b| b.ends_with(b"user\n"))));
    let wire = rewindfs::wire_path::encode(path.as_os_str().as_bytes());
    assert!(
        wire.starts_with('"') && wire.ends_with("n\\377.txt\""),
        "{wire}"
    );
    let dry = a.rewind(&t1, "agent", true).unwrap();
    assert_eq!(dry.conflicts, std::slice::from_ref(&wire), "{dry:?}");
    assert_eq!(dry.files_changed, std::slice::from_ref(&wire), "{dry:?}");
    let all = a.rewind(&t1, "all", true).unwrap();
    assert_eq!(all.files_changed, std::slice::from_ref(&wire), "{all:?}");
    // The same form names the file in a request: show it as it was, and its log.
    let shown =
        a.c.request(
            "show",
            json!({"user_message_id": t1, "path": wire, "content": true}),
        )
        .unwrap();
    assert_eq!(shown["path"], json!("\"n\\377.txt\""), "{shown}");
    let log =
        a.c.request("log", json!({"path": wire, "since": t1}))
            .unwrap();
    let entries = log["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{log}");
    for e in entries {
        assert_eq!(e["path"], json!("\"n\\377.txt\""), "{log}");
    }
    let diff =
        a.c.request(
            "diff",
            json!({"user_message_id": t1, "path": rewindfs::wire_path::encode(name)}),
        )
        .unwrap();
    assert_eq!(diff["filesChanged"], json!([wire]), "{diff}");
    assert_eq!(diff["stats"][0]["path"], json!(wire), "{diff}");
    // A quoted form that names no path inside the workspace (a NUL byte, `..`) is refused,
    // naming what was asked for, and the daemon goes on.
    for bad in ["\"n\\000x\"", "\"../\\377\""] {
        let e =
            a.c.request("show", json!({"user_message_id": t1, "path": bad}))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("not a path inside the workspace") && e.contains(bad),
            "{e}"
        );
    }
    assert!(a.c.request("status", json!({})).is_ok());
    // And a rewind restricted to that file (its workspace-relative form) restores it, not
    // its neighbour.
    a.c.request(
        "rewind_files",
        json!({"user_message_id": t1, "scope": "all", "paths": [rewindfs::wire_path::encode(name)]}),
    )
    .unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"v0\n");
    assert_eq!(
        fs::read(a.m.dir.join(std::ffi::OsStr::from_bytes(b"n\xfe.txt"))).unwrap(),
        b"other\n"
    );
}

/// A directory renamed away and back in one turn, nothing written between (`mv d e; mv e d`):
/// its files are where they were, and a rewind to the turn's checkpoint keeps them. Before,
/// the two renames shared one place in the history, the second was never followed, and the
/// rewind deleted `d/f` (found by the property test of `rewind/history.rs`).
#[test]
fn a_directory_renamed_away_and_back_keeps_its_files_through_a_rewind() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::create_dir_all(d.join("d/sub")).unwrap();
        fs::write(d.join("d/f"), "kept\n").unwrap();
        fs::write(d.join("d/sub/g"), "kept too\n").unwrap();
    });
    let before = tree(&a.m.dir);
    let t1 = a.turn();
    a.bash("mv d e && mv e d && mv d/sub d/sub2 && mv d/sub2 d/sub");
    let dry = a.rewind(&t1, "all", true).unwrap();
    assert!(dry.files_changed.is_empty(), "{dry:?}");
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(tree(&a.m.dir), before);
    // And with a change after the renames: only that change goes back.
    let t2 = a.turn();
    a.bash("mv d e && mv e d && echo changed > d/f");
    let r = a.rewind(&t2, "agent", false).unwrap();
    assert_eq!(
        r.files_changed,
        [a.m.p("d/f").display().to_string()],
        "{r:?}"
    );
    assert_eq!(tree(&a.m.dir), before);
}
