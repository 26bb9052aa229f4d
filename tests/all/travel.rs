//! Looking at checkpoints without rewinding: `show`, `ls` and `diff A B`, through a real
//! mount, over the socket and from the CLI; and a model-based property test that the tree
//! `show`/`ls` give at every checkpoint is the one a rewind to it produces, byte for byte.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;
use rewindfs::control::client::Client;
use rewindfs::control::cmd::{Diff, Export, Fork, Ls, Show, ShowReply};
use rewindfs::rewind::Scope;
use rewindfs::store::Kind;
use serde_json::json;

use crate::agent::Agent;
use crate::model::{Run, cases, step, tree_map};
use crate::support::{require_fuse, rewindfs, rewindfs_ok};

/// `show` of one path over the socket, bytes and all.
fn show(c: &mut Client, uuid: &str, path: &str) -> Result<ShowReply, String> {
    c.call(&Show {
        user_message_id: uuid.to_string(),
        path: path.to_string(),
        content: true,
        offset: 0,
        length: None,
    })
    .map_err(|e| e.to_string())
}

/// The tree as `ls` and `show` give it at checkpoint `uuid`, in the format of
/// `support::tree` (path → listing line).
pub(crate) fn tree_at(c: &mut Client, uuid: &str) -> Result<BTreeMap<String, String>, String> {
    fn walk(
        c: &mut Client,
        uuid: &str,
        dir: &str,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        let l = c
            .call(&Ls {
                user_message_id: uuid.to_string(),
                path: Some(dir.to_string()),
            })
            .map_err(|e| format!("ls {dir}: {e}"))?;
        for e in l.entries {
            let p = if dir == "." {
                e.name.clone()
            } else {
                format!("{dir}/{}", e.name)
            };
            let line = match e.kind {
                Kind::Dir => format!("{p} dir {:o}", e.mode),
                Kind::Symlink => format!("{p} link -> {}", e.target.clone().unwrap_or_default()),
                Kind::File => {
                    let s = show(c, uuid, &p)?;
                    let data = s.content.unwrap_or_default();
                    if data.len() as u64 != e.size || s.size != e.size {
                        return Err(format!(
                            "{p}: ls says {} bytes, show {} and gave {}",
                            e.size,
                            s.size,
                            data.len()
                        ));
                    }
                    let h = blake3::hash(&data).to_hex().to_string();
                    if s.hash.as_deref() != Some(h.as_str()) {
                        return Err(format!("{p}: show's hash {:?} is not {h}", s.hash));
                    }
                    format!("{p} file {:o} {} {h}", e.mode, data.len())
                }
                _ => format!("{p} other {:o}", e.mode),
            };
            out.insert(p.clone(), line);
            if e.kind == Kind::Dir {
                walk(c, uuid, &p, out)?;
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(c, uuid, ".", &mut out)?;
    Ok(out)
}

#[test]
fn show_ls_and_diff_look_at_a_checkpoint_without_changing_anything() {
    require_fuse();
    let mut a = Agent::new(|d| {
        std::fs::write(d.join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::create_dir_all(d.join("src/deep")).unwrap();
        std::fs::write(d.join("src/deep/lib.rs"), "fn a() {}\n").unwrap();
        std::fs::write(d.join("bin.dat"), [0u8, 1, 2, 255, 0, 7]).unwrap();
    });
    let u1 = a.turn();
    a.tool_write("a.txt", b"one\nTWO\nthree\n");
    a.bash("rm bin.dat && mv src lib && echo new > n.txt && chmod 600 n.txt");
    let u2 = a.turn();
    a.bash("printf '\\x00\\xff' > bin.dat && rm a.txt");
    let before = crate::support::tree(&a.m.dir);

    // show: the file as it was, raw bytes (binary too), from the store or from the tree.
    let s = show(&mut a.c, &u1, "a.txt").unwrap();
    assert_eq!(s.content.as_deref(), Some(&b"one\ntwo\n"[..]));
    assert_eq!((s.kind, s.size, s.unchanged), (Kind::File, 8, false));
    let s = show(&mut a.c, &u1, "bin.dat").unwrap();
    assert_eq!(s.content.as_deref(), Some(&[0u8, 1, 2, 255, 0, 7][..]));
    // Moved away since u1: found where the rename took it (nothing copied into the store).
    let s = show(&mut a.c, &u1, "src/deep/lib.rs").unwrap();
    assert_eq!(s.content.as_deref(), Some(&b"fn a() {}\n"[..]));
    assert_eq!(
        s.hash.as_deref(),
        Some(blake3::hash(b"fn a() {}\n").to_hex().as_str())
    );
    // Absolute paths are the workspace's.
    let abs = a.m.p("a.txt").display().to_string();
    let s = show(&mut a.c, &u2, &abs).unwrap();
    assert_eq!(s.content.as_deref(), Some(&b"one\nTWO\nthree\n"[..]));
    // A piece of a file.
    let piece =
        a.c.call(&Show {
            user_message_id: u1.clone(),
            path: "a.txt".into(),
            content: true,
            offset: 4,
            length: Some(2),
        })
        .unwrap();
    assert_eq!(
        (piece.content.as_deref(), piece.offset),
        (Some(&b"tw"[..]), 4)
    );
    // Errors name the checkpoint and the path.
    let e = show(&mut a.c, &u1, "n.txt").unwrap_err();
    assert!(
        e.contains("n.txt") && e.contains(&u1) && e.contains("no such file"),
        "{e}"
    );
    let unknown = crate::agent::uuid();
    let e = show(&mut a.c, &unknown, "a.txt").unwrap_err();
    assert!(e.contains(&unknown) && e.contains("no checkpoint"), "{e}");
    let e = show(&mut a.c, &u1, "../etc/passwd").unwrap_err();
    assert!(e.contains("not a path inside the workspace"), "{e}");

    // ls: the directory as it was.
    let l =
        a.c.call(&Ls {
            user_message_id: u1.clone(),
            path: None,
        })
        .unwrap();
    let names: Vec<_> = l.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "bin.dat", "src"]);
    let l2 =
        a.c.call(&Ls {
            user_message_id: u2.clone(),
            path: Some(".".into()),
        })
        .unwrap();
    let names: Vec<_> = l2.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt", "lib", "n.txt"]);
    let n = l2.entries.iter().find(|e| e.name == "n.txt").unwrap();
    assert_eq!(n.mode, 0o600);
    let e =
        a.c.call(&Ls {
            user_message_id: u1.clone(),
            path: Some("a.txt".into()),
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a directory") && e.contains(&u1), "{e}");

    // diff A B: from the tree when u1 began to the tree when u2 began.
    let d =
        a.c.call(&Diff {
            user_message_id: u1.clone(),
            to_message_id: Some(u2.clone()),
            fork_dir: None,
            path: None,
            scope: Scope::All,
            session_id: None,
        })
        .unwrap();
    // Absolute paths under the workspace, as every reply names them.
    assert_eq!(
        a.files(&d.files_changed),
        [
            "a.txt",
            "bin.dat",
            "lib/deep/lib.rs",
            "n.txt",
            "src/deep/lib.rs"
        ]
    );
    assert!(d.diff.contains("-two\n+TWO\n+three\n"), "{}", d.diff);
    assert!(d.diff.contains("--- /dev/null\n+++ b/n.txt"), "{}", d.diff);
    assert!(
        d.diff
            .contains("Binary files a/bin.dat and b/bin.dat differ")
    );
    let st = d
        .stats
        .iter()
        .find(|s| Path::new(&s.path) == a.m.p("a.txt"))
        .unwrap();
    assert_eq!((st.insertions, st.deletions), (2, 1));
    // Restricted to a path.
    let d =
        a.c.call(&Diff {
            user_message_id: u1.clone(),
            to_message_id: Some(u2.clone()),
            fork_dir: None,
            path: Some("a.txt".into()),
            scope: Scope::All,
            session_id: None,
        })
        .unwrap();
    assert_eq!(a.files(&d.files_changed), ["a.txt"]);

    // The CLI: raw bytes to stdout, --json, ls, diff A B --stat.
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();
    let out = rewindfs(&[
        "show",
        &u1,
        a.m.p("bin.dat").to_str().unwrap(),
        "--socket",
        sock,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, [0u8, 1, 2, 255, 0, 7]);
    let j: serde_json::Value = serde_json::from_str(&rewindfs_ok(&[
        "show",
        &u1,
        a.m.p("a.txt").to_str().unwrap(),
        "--json",
        "--socket",
        sock,
    ]))
    .unwrap();
    assert_eq!(j["type"], "file");
    assert_eq!(j["size"], 8);
    assert_eq!(j["hash"], blake3::hash(b"one\ntwo\n").to_hex().as_str());
    let out = rewindfs(&[
        "show",
        &u1,
        a.m.p("n.txt").to_str().unwrap(),
        "--socket",
        sock,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("n.txt") && err.contains(&u1), "{err}");
    let ls = rewindfs_ok(&["ls", &u1, a.m.dir.to_str().unwrap(), "--socket", sock]);
    assert!(ls.contains("src/") && ls.contains("bin.dat"), "{ls}");
    let stat = rewindfs_ok(&["diff", &u1, &u2, "--stat", "--socket", sock]);
    assert!(
        stat.contains("a.txt") && stat.contains("5 file(s) changed"),
        "{stat}"
    );
    let one = rewindfs_ok(&[
        "diff",
        &u1,
        &u2,
        a.m.p("a.txt").to_str().unwrap(),
        "--socket",
        sock,
    ]);
    assert!(one.contains("+TWO") && !one.contains("n.txt"), "{one}");

    // Nothing was changed by looking.
    assert_eq!(crate::support::tree(&a.m.dir), before);
}

/// Message ids need not be UUIDs: `diff A B` takes any two, and one word after A is a second
/// checkpoint only when it names one (else a path). The CLI shows paths relative.
#[test]
fn diff_a_b_takes_any_message_ids_and_one_word_is_a_checkpoint_only_when_it_names_one() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("a.txt"), "one\n").unwrap());
    let begin = |a: &mut Agent, id: &str| {
        a.c.request(
            "begin_message",
            serde_json::json!({"session_id": a.session, "user_message_id": id}),
        )
        .unwrap();
    };
    begin(&mut a, "first turn");
    a.tool_write("a.txt", b"two\n");
    begin(&mut a, "second turn");
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();
    let stat = rewindfs_ok(&[
        "diff",
        "first turn",
        "second turn",
        "--stat",
        "--socket",
        sock,
    ]);
    assert!(
        stat.contains(" a.txt ") && stat.contains("1 file(s) changed"),
        "{stat}"
    );
    assert!(!stat.contains(a.m.dir.to_str().unwrap()), "{stat}");
    // One word that names no checkpoint is a path: current -> the first turn, of a.txt.
    let path = a.m.p("a.txt");
    let one = rewindfs_ok(&[
        "diff",
        "first turn",
        path.to_str().unwrap(),
        "--socket",
        sock,
    ]);
    assert!(one.contains("-two\n+one\n"), "{one}");
}

/// A file over the range-capture threshold changed in place: `show` streams the state at the
/// first checkpoint from the chain of range pre-images (nothing is written to the store).
#[test]
fn show_streams_a_range_captured_file_from_its_chain() {
    require_fuse();
    let start: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut a = Agent::with_args(
        |d| std::fs::write(d.join("big.bin"), &start).unwrap(),
        &["--range-capture-min", "4096"],
    );
    let u1 = a.turn();
    a.bash("printf XYZ | dd of=big.bin bs=1 seek=100000 conv=notrunc status=none");
    let u2 = a.turn();
    a.bash("printf QQ | dd of=big.bin bs=1 seek=5 conv=notrunc status=none && truncate -s 150000 big.bin");
    let blobs_before = count_files(&a.m.store.join("blobs"));
    let s1 = show(&mut a.c, &u1, "big.bin").unwrap();
    assert!(s1.content.as_deref() == Some(&start[..]), "u1 differs");
    let mut at2 = start.clone();
    at2[100_000..100_003].copy_from_slice(b"XYZ");
    let s2 = show(&mut a.c, &u2, "big.bin").unwrap();
    assert!(s2.content.as_deref() == Some(&at2[..]), "u2 differs");
    assert_eq!(
        count_files(&a.m.store.join("blobs")),
        blobs_before,
        "show wrote to the store"
    );
}

/// A blob changed behind the daemon's back is never shown, forked or exported as the past:
/// `show` of a file whose pre-image is that blob, and of a range-captured file whose chain ends
/// on one, fails naming the path, the checkpoint and the blob; `fork` fails leaving no file
/// with those bytes, `export` leaving no bundle. With the blobs put back, all three go through.
#[test]
fn show_fork_and_export_refuse_a_damaged_blob_naming_it() {
    require_fuse();
    let start: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut a = Agent::with_args(
        |d| {
            std::fs::write(d.join("big.bin"), &start).unwrap();
            std::fs::write(d.join("small.txt"), "small then\n").unwrap();
        },
        &["--range-capture-min", "4096"],
    );
    let u1 = a.turn();
    // big.bin keeps only the 3 bytes overwritten under u1 ...
    a.bash("printf XYZ | dd of=big.bin bs=1 seek=100000 conv=notrunc status=none");
    let u2 = a.turn();
    // ... and its whole content under u2, where it goes: the end of u1's chain.
    a.bash("rm big.bin && echo 'small now' > small.txt");
    a.c.request("log", json!({})).unwrap(); // the journal is in the database
    let mut at2 = start.clone();
    at2[100_000..100_003].copy_from_slice(b"XYZ");
    let blob = |content: &[u8]| {
        let h = blake3::hash(content).to_hex().to_string();
        let p = a.m.store.join("blobs").join(&h[..2]).join(&h[2..]);
        assert!(p.exists(), "the pre-image {h} is in the store");
        (h, p)
    };
    let (big_hash, big_blob) = blob(&at2);
    let (small_hash, small_blob) = blob(b"small then\n");
    let damage = |p: &Path, at: usize| {
        let mut b = std::fs::read(p).unwrap();
        b[at] ^= 0xff;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(p, b).unwrap();
    };
    damage(&big_blob, 250_000);
    damage(&small_blob, 0);

    let names = |e: &str, path: &str, cp: Option<&str>, hash: &str| {
        for s in [path, hash, "corrupt"] {
            assert!(e.contains(s), "the error names {s}: {e}");
        }
        if let Some(cp) = cp {
            assert!(e.contains(cp), "the error names checkpoint {cp}: {e}");
        }
    };
    for (u, path, hash) in [
        (&u1, "big.bin", &big_hash), // the chain's base
        (&u2, "big.bin", &big_hash), // the whole pre-image
        (&u1, "small.txt", &small_hash),
    ] {
        let e = show(&mut a.c, u, path).expect_err(path);
        names(&e, path, Some(u), hash);
    }
    let fork_dir = a.m.tmp.path().join("fork");
    let fork = |c: &mut Client, dir: &Path| {
        c.call(&Fork {
            user_message_id: u1.clone(),
            dir: dir.display().to_string(),
            trust_imported: false,
        })
        .map_err(|e| e.to_string())
    };
    let e = fork(&mut a.c, &fork_dir).expect_err("fork");
    assert!(e.contains("corrupt"), "{e}");
    for (f, bad) in [("big.bin", &at2[..]), ("small.txt", b"small then\n")] {
        if let Ok(got) = std::fs::read(fork_dir.join(f)) {
            assert!(got != bad, "the fork kept {f} as the damaged blob gave it");
        }
    }
    let bundle = a.m.tmp.path().join("history.rwb");
    let export = |c: &mut Client| {
        c.call(&Export {
            path: bundle.display().to_string(),
            session_id: None,
            since: None,
        })
        .map_err(|e| e.to_string())
    };
    let e = export(&mut a.c).expect_err("export");
    assert!(e.contains("does not hash to its name"), "{e}");
    assert!(!bundle.exists(), "the failed export left its bundle");

    // Put back: the past shows, forks and exports again.
    damage(&big_blob, 250_000);
    damage(&small_blob, 0);
    assert!(show(&mut a.c, &u1, "big.bin").unwrap().content.as_deref() == Some(&start[..]));
    assert!(show(&mut a.c, &u2, "big.bin").unwrap().content.as_deref() == Some(&at2[..]));
    let small = show(&mut a.c, &u1, "small.txt").unwrap();
    assert_eq!(small.content.as_deref(), Some(&b"small then\n"[..]));
    let again = a.m.tmp.path().join("fork2");
    fork(&mut a.c, &again).unwrap();
    assert!(std::fs::read(again.join("big.bin")).unwrap() == start);
    assert_eq!(
        std::fs::read(again.join("small.txt")).unwrap(),
        b"small then\n"
    );
    export(&mut a.c).unwrap();
    assert!(bundle.exists());
}

fn count_files(d: &std::path::Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += count_files(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

/// For a random history, the tree `ls` and `show` give at every checkpoint is the tree observed
/// when it began; and a rewind (scope all) to one of them produces that very tree.
fn check_show(steps: Vec<crate::model::Step>, pick: usize) -> Result<(), TestCaseError> {
    let start: Vec<u8> = (0..10_000u32).map(|i| b'A' + (i % 23) as u8).collect();
    let mut run = Run::play(
        |d| std::fs::write(d.join(crate::model::PATHS[0]), &start).unwrap(),
        &steps,
    );
    let now = tree_map(&run.a);
    let mut seen = Vec::new();
    for (t, u) in run.turns.clone().iter().enumerate() {
        let got = tree_at(&mut run.a.c, u).map_err(TestCaseError::fail)?;
        prop_assert_eq!(
            got.values().collect::<Vec<_>>(),
            run.snapshots[t].values().collect::<Vec<_>>(),
            "show/ls at turn {} of {}",
            t,
            run.turns.len()
        );
        seen.push(got);
    }
    let after = tree_map(&run.a);
    prop_assert_eq!(
        after.values().collect::<Vec<_>>(),
        now.values().collect::<Vec<_>>(),
        "looking changed the tree"
    );
    // diff A B names exactly the paths whose state differs between the two trees (a
    // directory that comes or goes shows as its entries).
    let (i, j) = (pick % run.turns.len(), (pick / 7) % run.turns.len());
    let d = run
        .a
        .c
        .call(&Diff {
            user_message_id: run.turns[i].clone(),
            to_message_id: Some(run.turns[j].clone()),
            fork_dir: None,
            path: None,
            scope: Scope::All,
            session_id: None,
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let kind = |l: Option<&String>| l.and_then(|l| l.split(' ').nth(1)).map(str::to_string);
    let mut want: Vec<String> = seen[i]
        .keys()
        .chain(seen[j].keys())
        .filter(|p| seen[i].get(*p) != seen[j].get(*p))
        .filter(|p| {
            !matches!(
                (
                    kind(seen[i].get(*p)).as_deref(),
                    kind(seen[j].get(*p)).as_deref()
                ),
                (Some("dir"), None) | (None, Some("dir"))
            )
        })
        .cloned()
        .collect();
    want.sort();
    want.dedup();
    let got = run.a.files(&d.files_changed);
    prop_assert_eq!(&got, &want, "diff of turns {} and {}", i, j);
    let t = pick % run.turns.len();
    run.a
        .rewind(&run.turns[t], "all", false)
        .map_err(TestCaseError::fail)?;
    let rewound = tree_map(&run.a);
    prop_assert_eq!(
        rewound.values().collect::<Vec<_>>(),
        seen[t].values().collect::<Vec<_>>(),
        "a rewind to turn {} and show/ls disagree",
        t
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn show_and_ls_at_every_checkpoint_give_what_a_rewind_to_it_produces(steps in prop::collection::vec(step(), 1..30), pick in any::<usize>()) {
        require_fuse();
        check_show(steps, pick)?;
    }
}
