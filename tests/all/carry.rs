//! Carrying history: `export` a run of checkpoints as one bundle, `import` it into another
//! store (a daemon's, or offline with --store); the imported checkpoints show and rewind as
//! they did at home; importing twice does nothing; a damaged or cut bundle is refused with its
//! offset and nothing is imported.

use std::path::Path;

use proptest::prelude::*;
use rewindfs::control::client::Client;
use rewindfs::control::cmd::{Export, Import, ImportReply, ListCheckpoints, Log, LogLine};
use serde_json::json;

use crate::agent::{Agent, uuid};
use crate::model::{PATHS, Run, Step, cases, step, tree_map};
use crate::support::{Mounted, require_fuse, rewindfs, rewindfs_ok, sh, tree};
use crate::travel::tree_at;
use crate::undo::{full_tree, setxattr};

fn export(c: &mut Client, file: &Path) -> rewindfs::control::cmd::ExportReply {
    c.call(&Export {
        path: file.display().to_string(),
        session_id: None,
        since: None,
    })
    .unwrap()
}

fn import(c: &mut Client, file: &Path) -> Result<ImportReply, String> {
    c.call(&Import {
        path: file.display().to_string(),
    })
    .map_err(|e| e.to_string())
}

/// A second mount whose tree is a copy of `from`'s.
fn copy_of(from: &Path) -> Mounted {
    let src = from.display().to_string();
    Mounted::with(|d| {
        sh(d, &format!("cp -a {src}/. ."));
    })
}

fn check_round_trip(steps: Vec<Step>, pick: usize) -> Result<(), TestCaseError> {
    let start: Vec<u8> = (0..10_000u32).map(|i| b'A' + (i % 23) as u8).collect();
    let mut run = Run::play(
        |d| std::fs::write(d.join(PATHS[0]), &start).unwrap(),
        &steps,
    );
    let file = run.a.m.tmp.path().join("history.rwb");
    let e = export(&mut run.a.c, &file);
    for u in &run.turns {
        prop_assert!(e.checkpoints.contains(u), "{} is not in the bundle", u);
    }
    let other = copy_of(&run.a.m.dir);
    let mut c = Client::connect(&other.socket()).unwrap();
    let r = import(&mut c, &file).map_err(TestCaseError::fail)?;
    prop_assert!(!r.already_imported);
    prop_assert_eq!(r.checkpoints as usize, e.checkpoints.len());
    // Every checkpoint shows on the other side as it was at home.
    for (t, u) in run.turns.iter().enumerate() {
        let got = tree_at(&mut c, u).map_err(TestCaseError::fail)?;
        prop_assert_eq!(
            got.values().collect::<Vec<_>>(),
            run.snapshots[t].values().collect::<Vec<_>>(),
            "show/ls of turn {} after import",
            t
        );
    }
    // Again: nothing to do.
    let again = import(&mut c, &file).map_err(TestCaseError::fail)?;
    prop_assert!(again.already_imported);
    // A rewind there gives what a rewind here gives.
    let t = pick % run.turns.len();
    run.a
        .rewind(&run.turns[t], "all", false)
        .map_err(TestCaseError::fail)?;
    c.request(
        "rewind_files",
        json!({"user_message_id": run.turns[t], "scope": "all"}),
    )
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let (here, there) = (tree_map(&run.a), tree(&other.dir));
    prop_assert_eq!(
        here.values().cloned().collect::<Vec<_>>(),
        there,
        "rewinds to turn {} differ",
        t
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn an_exported_history_rewinds_identically_after_import_elsewhere(steps in prop::collection::vec(step(), 1..30), pick in any::<usize>()) {
        require_fuse();
        check_round_trip(steps, pick)?;
    }
}

/// Extended attributes travel with the history (`captures.xattrs` is in the bundle, and the
/// export's own checkpoint records the present's): in another store, a rewind to an imported
/// checkpoint gives files and directories the attributes they had then at home, and a rewind
/// to the export's checkpoint those they had at export, whatever that tree's were.
#[test]
fn extended_attributes_travel_with_the_history() {
    require_fuse();
    let mut a = Agent::new(|d| {
        std::fs::create_dir_all(d.join("d")).unwrap();
        std::fs::write(d.join("d/f.txt"), "v1\n").unwrap();
        setxattr(&d.join("d/f.txt"), "user.origin", "home");
        setxattr(&d.join("d"), "user.dir", "old");
    });
    let u1 = a.turn();
    let at_u1 = full_tree(&a.m.dir);
    setxattr(&a.m.p("d/f.txt"), "user.origin", "changed");
    setxattr(&a.m.p("d/f.txt"), "user.added", "new");
    a.bash("echo more >> d/f.txt");
    setxattr(&a.m.p("d"), "user.dir", "new");
    let at_export = full_tree(&a.m.dir);
    assert_ne!(at_export, at_u1);
    let file = a.m.tmp.path().join("h.rwb");
    let e = export(&mut a.c, &file);

    // Another tree: the same files, other attributes.
    let other = copy_of(&a.m.dir);
    setxattr(&other.p("d/f.txt"), "user.origin", "elsewhere");
    setxattr(&other.p("d"), "user.dir", "elsewhere");
    let mut c = Client::connect(&other.socket()).unwrap();
    import(&mut c, &file).unwrap();
    for (u, want, what) in [(&u1, &at_u1, "u1"), (&e.export_id, &at_export, "export")] {
        c.request(
            "rewind_files",
            json!({"user_message_id": u, "scope": "all"}),
        )
        .unwrap();
        assert_eq!(full_tree(&other.dir), *want, "a rewind to {what} there");
    }
}

#[test]
fn a_damaged_or_cut_bundle_is_refused_with_its_offset_and_nothing_is_imported() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("a.txt"), "a\n").unwrap());
    let u1 = a.turn();
    a.bash("echo b > b.txt && echo changed > a.txt");
    let u2 = a.turn();
    a.bash("rm a.txt");
    let file = a.m.tmp.path().join("h.rwb");
    let e = export(&mut a.c, &file);
    let good = std::fs::read(&file).unwrap();
    assert_eq!(good.len() as u64, e.bytes);

    let other = copy_of(&a.m.dir);
    let mut c = Client::connect(&other.socket()).unwrap();
    let list_before = c.request("list_checkpoints", json!({})).unwrap();
    let blobs_before = count(&other.store.join("blobs"));
    let bad = a.m.tmp.path().join("bad.rwb");
    let mut flipped = good.clone();
    let mid = good.len() / 2;
    flipped[mid] ^= 0x55;
    for (what, bytes) in [("flipped", flipped), ("cut", good[..mid].to_vec())] {
        std::fs::write(&bad, &bytes).unwrap();
        let err = import(&mut c, &bad).unwrap_err();
        assert!(err.contains("at byte "), "{what}: {err}");
        assert_eq!(
            c.request("list_checkpoints", json!({})).unwrap(),
            list_before,
            "{what}: a refused bundle changed the list"
        );
        assert_eq!(count(&other.store.join("blobs")), blobs_before, "{what}");
    }
    // The CLI names the offset too.
    let out = rewindfs(&[
        "import",
        bad.to_str().unwrap(),
        "--socket",
        other.socket().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at byte "));

    // The good one imports: listed (with where it came from) and showable.
    let r = import(&mut c, &file).unwrap();
    assert_eq!(r.checkpoints, 4, "mount, two turns, the export's own");
    let l = rewindfs_ok(&["list", "--socket", other.socket().to_str().unwrap()]);
    assert!(
        l.contains(&u1) && l.contains(&u2) && l.contains("imported from"),
        "{l}"
    );
    let s = rewindfs(&[
        "show",
        &u1,
        other.dir.join("a.txt").to_str().unwrap(),
        "--socket",
        other.socket().to_str().unwrap(),
    ]);
    assert_eq!(s.stdout, b"a\n");
}

/// What the store knows of prompts and sessions travels too: a checkpoint a prompt began (its
/// text; bound to its message uuid, or not yet) and the session of each change show the same
/// after an import as at home.
#[test]
fn prompts_and_the_sessions_of_changes_travel_with_the_history() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("a.txt"), "one\n").unwrap());
    let session = a.session.clone();
    a.c.request(
        "register_agent",
        json!({"pid": std::process::id(), "session_id": session}),
    )
    .unwrap();
    let (p1, u1, p2) = (uuid(), uuid(), uuid());
    a.c.request(
        "begin_prompt",
        json!({"session_id": session, "prompt_id": p1, "prompt": "make it two\nplease"}),
    )
    .unwrap();
    a.c.request(
        "bind_message",
        json!({"prompt_id": p1, "user_message_id": u1}),
    )
    .unwrap();
    a.tool_write("a.txt", b"two\n");
    a.c.request(
        "begin_prompt",
        json!({"session_id": session, "prompt_id": p2, "prompt": "and three"}),
    )
    .unwrap();
    a.tool_write("a.txt", b"three\n");
    let file = a.m.tmp.path().join("h.rwb");
    export(&mut a.c, &file);
    let other = copy_of(&a.m.dir);
    let mut c = Client::connect(&other.socket()).unwrap();
    import(&mut c, &file).unwrap();

    let list = c
        .call(&ListCheckpoints {
            session_id: Some(session.clone()),
        })
        .unwrap();
    let got: Vec<_> = list
        .checkpoints
        .iter()
        .map(|c| (c.uuid.as_str(), c.prompt.as_deref(), c.bound))
        .collect();
    assert_eq!(
        got,
        [
            (u1.as_str(), Some("make it two"), true),
            (p2.as_str(), Some("and three"), false)
        ]
    );
    // Entries as the log shows them, but for their seq (an import renumbers them).
    let log = |c: &mut Client| -> Vec<LogLine> {
        c.call(&Log {
            path: Some("a.txt".into()),
            since: None,
            session_id: Some(session.clone()),
            limit: 1000,
            after: None,
            newest_first: false,
            raw: false,
        })
        .unwrap()
        .entries
        .into_iter()
        .map(|e| LogLine { seq: 0, ..e })
        .collect()
    };
    let (home, there) = (log(&mut a.c), log(&mut c));
    assert_eq!(home.len(), 2, "{home:?}");
    assert!(
        home.iter()
            .all(|e| e.session.as_deref() == Some(session.as_str())),
        "{home:?}"
    );
    assert_eq!(there, home);
}

/// `import --store` into a store no daemon serves; the next mount with it rewinds to the
/// imported checkpoints, and changes made after the import stay out of their way.
#[test]
fn an_offline_import_is_rewindable_at_the_next_mount() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("a.txt"), "one\n").unwrap());
    let u1 = a.turn();
    a.tool_write("a.txt", b"two\n");
    a.bash("mkdir d && echo x > d/x");
    let file = a.m.tmp.path().join("h.rwb");
    export(&mut a.c, &file);
    let now = tree(&a.m.dir);
    let tmp = tempfile::tempdir().unwrap();
    let (dir, store) = (tmp.path().join("w"), tmp.path().join("s"));
    std::fs::create_dir(&dir).unwrap();
    sh(&dir, &format!("cp -a {}/. .", a.m.dir.display()));
    let out = rewindfs_ok(&[
        "import",
        file.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    assert!(out.contains("imported 3 checkpoint(s)"), "{out}");
    let again = rewindfs_ok(&[
        "import",
        file.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    assert!(again.contains("already imported"), "{again}");
    rewindfs_ok(&[
        "mount",
        dir.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = rewindfs(&["umount", self.0.to_str().unwrap()]);
        }
    }
    let _u = Umount(&dir);
    assert_eq!(tree(&dir), now);
    sh(&dir, "echo after > after.txt && echo three > a.txt");
    let sock = store.join("control.sock");
    rewindfs_ok(&[
        "rewind",
        &u1,
        "--scope",
        "all",
        "--socket",
        sock.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "one\n");
    assert!(!dir.join("d").exists() && !dir.join("after.txt").exists());
}

fn count(d: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += count(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

/// A store with its own history imports another tree's: a rewind to one of its own earlier
/// checkpoints gives its own tree, untouched by the imported pre-images (the splice), and the
/// imported checkpoints still rewind as they did at home.
#[test]
fn an_import_leaves_rewinds_to_the_stores_own_earlier_checkpoints_alone() {
    require_fuse();
    let mut a = Agent::new(|d| {
        std::fs::write(d.join("a.txt"), "a at home\n").unwrap();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/f"), "f\n").unwrap();
    });
    let ua = a.turn();
    let a_at = tree(&a.m.dir);
    a.bash("echo changed > a.txt && mv dir moved && echo extra > x.txt");
    let file = a.m.tmp.path().join("a.rwb");
    export(&mut a.c, &file);

    // The other workspace: the same paths, other content, a history of its own.
    let mut b = Agent::new(|d| {
        std::fs::write(d.join("a.txt"), "b's own\n").unwrap();
        std::fs::write(d.join("x.txt"), "b's x\n").unwrap();
    });
    let ub = b.turn();
    let b_at = tree(&b.m.dir);
    b.bash("echo b later > a.txt && mkdir moved && echo m > moved/f");
    let r = import(&mut b.c, &file).unwrap();
    assert!(!r.already_imported && r.checkpoints >= 2, "{r:?}");
    b.bash("echo after import >> a.txt");
    b.rewind(&ub, "all", false).unwrap();
    assert_eq!(tree(&b.m.dir), b_at, "b's own checkpoint, after the import");
    // And the imported one gives the tree at home, for the paths its history touched.
    b.rewind(&ua, "all", false).unwrap();
    assert_eq!(b.read("a.txt").as_deref(), Some("a at home\n"));
    assert_eq!(
        std::fs::read_to_string(b.m.p("dir/f")).unwrap(),
        "f\n",
        "{:?} vs {a_at:?}",
        tree(&b.m.dir)
    );
    assert!(!b.m.p("x.txt").exists() && !b.m.p("moved").exists());
}

/// `export --since` carries the checkpoints from that one on, and no earlier one: imported
/// elsewhere (a copy of the tree as it was exported), they show and rewind as at home, and
/// the earlier one is not there.
#[test]
fn an_export_since_a_checkpoint_carries_that_one_and_later_ones_only() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("f.txt"), "v0\n").unwrap());
    let t1 = a.turn();
    a.bash("echo v1 > f.txt && echo one > one.txt");
    let t2 = a.turn();
    let at_t2 = tree(&a.m.dir);
    a.bash("echo v2 > f.txt && rm one.txt && mkdir d && echo two > d/two.txt");
    let t3 = a.turn();
    let at_t3 = tree(&a.m.dir);
    a.bash("echo v3 > f.txt");
    let file = a.m.tmp.path().join("since.rwb");
    let e =
        a.c.call(&Export {
            path: file.display().to_string(),
            session_id: None,
            since: Some(t2.clone()),
        })
        .unwrap();
    assert!(
        e.checkpoints.contains(&t2) && e.checkpoints.contains(&t3),
        "{e:?}"
    );
    assert!(!e.checkpoints.contains(&t1), "{e:?}");
    let other = copy_of(&a.m.dir);
    let mut c = Client::connect(&other.socket()).unwrap();
    let r = import(&mut c, &file).unwrap();
    assert_eq!(r.checkpoints as usize, e.checkpoints.len(), "{r:?}");
    let listed: Vec<String> = c
        .call(&ListCheckpoints { session_id: None })
        .unwrap()
        .checkpoints
        .into_iter()
        .map(|c| c.uuid)
        .collect();
    assert!(
        listed.contains(&t2) && listed.contains(&t3) && !listed.contains(&t1),
        "{listed:?}"
    );
    let e = c
        .request(
            "rewind_files",
            json!({"user_message_id": t1, "scope": "all", "dry_run": true}),
        )
        .unwrap();
    assert_eq!(e["canRewind"], json!(false), "t1 was not carried: {e}");
    for (u, want) in [(&t3, &at_t3), (&t2, &at_t2)] {
        c.request(
            "rewind_files",
            json!({"user_message_id": u, "scope": "all"}),
        )
        .unwrap();
        assert_eq!(&tree(&other.dir), want, "rewound to {u} after import");
    }
}
