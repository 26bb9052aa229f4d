//! Undo and redo through a real mount (docs/design.md §2, "A rewind is itself a change"): every
//! rewind, undo and redo gives back everything — directories' modes, owners and extended
//! attributes as exactly as files' — and undo/redo work as a stack.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rewindfs::control::cmd::{
    CheckpointInfo, ListCheckpoints, RedoRewind, RewindReply, UndoRewind,
};
use rewindfs::store::CheckpointKind;

use crate::agent::Agent;
use crate::support::require_fuse;

/// A listing of a tree with everything a rewind restores: path, type, mode, owner, size and
/// content hash, symlink target, and every extended attribute (by name, with its value).
pub(crate) fn full_tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) {
        let mut ents: Vec<_> = fs::read_dir(root.join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        ents.sort();
        for name in ents {
            let r = rel.join(&name);
            let p = root.join(&r);
            let md = fs::symlink_metadata(&p).unwrap();
            let what = if md.is_symlink() {
                format!("link -> {}", fs::read_link(&p).unwrap().display())
            } else if md.is_dir() {
                "dir".to_string()
            } else {
                let data = fs::read(&p).unwrap();
                format!("file {} {}", data.len(), blake3::hash(&data).to_hex())
            };
            let xattrs = if md.is_symlink() {
                String::new()
            } else {
                xattrs(&p).join(" ")
            };
            out.push(format!(
                "{} {what} {:o} {}:{} [{xattrs}]",
                r.display(),
                md.mode() & 0o7777,
                md.uid(),
                md.gid()
            ));
            if md.is_dir() {
                walk(root, &r, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// `name=value` for each extended attribute of `p`, sorted.
fn xattrs(p: &Path) -> Vec<String> {
    let mut names = vec![0u8; 64 * 1024];
    let n = rustix::fs::llistxattr(p, &mut names[..]).unwrap();
    let mut out: Vec<String> = names[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|name| {
            let mut v = vec![0u8; 64 * 1024];
            let name = std::str::from_utf8(name).unwrap();
            let m = rustix::fs::lgetxattr(p, name, &mut v[..]).unwrap();
            format!("{name}={}", String::from_utf8_lossy(&v[..m]))
        })
        .collect();
    out.sort();
    out
}

pub(crate) fn setxattr(p: &Path, name: &str, value: &str) {
    rustix::fs::lsetxattr(p, name, value.as_bytes(), rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("setxattr {} {name}: {e}", p.display()));
}

/// An undo or redo through the typed client: its reply, or the daemon's error.
fn stack(a: &mut Agent, redo: bool, dry_run: bool, force: bool) -> Result<RewindReply, String> {
    let r = if redo {
        a.c.call(&RedoRewind {
            dry_run,
            force,
            session_id: None,
        })
    } else {
        a.c.call(&UndoRewind {
            dry_run,
            force,
            session_id: None,
        })
    };
    r.map_err(|e| e.to_string())
}

/// `rel` as a reply names it: absolute, in the workspace.
fn abs(a: &Agent, rel: &str) -> String {
    a.m.p(rel).to_string_lossy().into_owned()
}

/// A reply's `conflictsBy`.
fn by(who: &[(&str, &[&str])]) -> std::collections::BTreeMap<String, Vec<String>> {
    who.iter()
        .map(|(p, w)| (p.to_string(), w.iter().map(|x| x.to_string()).collect()))
        .collect()
}

fn undo(a: &mut Agent) -> RewindReply {
    stack(a, false, false, false).unwrap()
}

/// A tree of `n` nested and side-by-side directories with a file in each, all 0755 / 0644.
fn dirs_with_files(d: &Path, n: usize) {
    for i in 0..n {
        let dir = d.join(format!("d/{}/sub{i}", i % 3));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("f.txt"), format!("{i}\n")).unwrap();
    }
}

/// Measured (issue 24): `chmod -R go-rwx d`, rewind, undo gave back the files' modes but left
/// every directory 0755 instead of 0700: the rewind changed the directories' modes without
/// capturing them under its own checkpoint, so the undo did not know them.
#[test]
fn directory_modes_come_back_on_rewind_and_on_undo() {
    require_fuse();
    let mut a = Agent::new(|d| dirs_with_files(d, 12));
    let t1 = a.turn();
    let before = full_tree(&a.m.dir);
    a.bash("chmod -R go-rwx d");
    let after = full_tree(&a.m.dir);
    assert!(after.iter().any(|l| l.contains(" dir 700 ")), "{after:#?}");
    a.rewind(&t1, "agent", false).unwrap();
    assert_eq!(full_tree(&a.m.dir), before, "the rewind");
    assert!(undo(&mut a).can_rewind);
    assert_eq!(full_tree(&a.m.dir), after, "the undo");
}

/// As root, a rewind and its undo give files and directories back their owners, including a
/// change of nothing but the owner.
#[test]
fn owners_of_files_and_directories_come_back_on_rewind_and_on_undo() {
    require_fuse();
    let mut a = Agent::new(|d| dirs_with_files(d, 4));
    let t1 = a.turn();
    let before = full_tree(&a.m.dir);
    a.bash("chown -R 65534:65534 d/0 && chown 65534 d/1 && chgrp 65534 d/2/sub2/f.txt");
    let after = full_tree(&a.m.dir);
    assert_ne!(after, before);
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(full_tree(&a.m.dir), before, "the rewind");
    undo(&mut a);
    assert_eq!(full_tree(&a.m.dir), after, "the undo");
}

/// Extended attributes (`user.*`, as `setfattr` sets them) of files and directories come back
/// on a rewind and on its undo: set, changed and removed ones, on a file whose content
/// changed in place, on one a tool replaced (a new inode, without them), on one removed (both
/// kept by a link into the store, their attributes read through it), and on a directory.
#[test]
fn extended_attributes_of_files_and_directories_come_back_on_rewind_and_on_undo() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::create_dir_all(d.join("d/e")).unwrap();
        for f in [
            "d/kept.txt",
            "d/appended.txt",
            "d/replaced.txt",
            "d/removed.txt",
        ] {
            fs::write(d.join(f), "v1\n").unwrap();
            setxattr(&d.join(f), "user.origin", f);
        }
        setxattr(&d.join("d/e"), "user.dir", "old");
        setxattr(&d.join("d/e"), "user.gone", "soon");
        // Past the range-capture threshold (1 MiB): its first write saves only the bytes it
        // overwrites, and its attributes through the writer's fd.
        fs::write(d.join("d/big.bin"), vec![7u8; 3 << 20]).unwrap();
        setxattr(&d.join("d/big.bin"), "user.origin", "big");
    });
    let t1 = a.turn();
    let before = full_tree(&a.m.dir);
    setxattr(&a.m.p("d/kept.txt"), "user.origin", "changed");
    setxattr(&a.m.p("d/kept.txt"), "user.added", "new");
    a.bash("echo more >> d/appended.txt");
    a.tool_write("d/replaced.txt", b"v2\n");
    a.bash("rm d/removed.txt");
    a.bash("printf 'new bytes' | dd of=d/big.bin bs=1 seek=2000000 conv=notrunc status=none");
    setxattr(&a.m.p("d/big.bin"), "user.origin", "changed");
    setxattr(&a.m.p("d/e"), "user.dir", "new");
    rustix::fs::lremovexattr(a.m.p("d/e"), "user.gone").unwrap();
    setxattr(&a.m.p("d"), "user.top", "t");
    let after = full_tree(&a.m.dir);
    assert_ne!(after, before);
    a.rewind(&t1, "all", false).unwrap();
    assert_eq!(full_tree(&a.m.dir), before, "the rewind");
    undo(&mut a);
    assert_eq!(full_tree(&a.m.dir), after, "the undo");
}

fn redo(a: &mut Agent) -> RewindReply {
    stack(a, true, false, false).unwrap()
}

/// The `rewind` checkpoints of `list_checkpoints`, oldest first.
fn rewind_checkpoints(a: &mut Agent) -> Vec<CheckpointInfo> {
    let l = a.c.call(&ListCheckpoints { session_id: None }).unwrap();
    l.checkpoints
        .into_iter()
        .filter(|c| c.kind == CheckpointKind::Rewind)
        .collect()
}

/// Measured (issue 24): two rewinds then two undos left the tree at the second rewind's result,
/// the second undo undoing the first. Undo is a stack: each undo undoes the newest rewind not
/// yet undone, back to the first; redo re-applies them in order; a new rewind clears the redo
/// stack; `list` says which rewind each undo and redo undid or redid, and what is next.
#[test]
fn undo_and_redo_walk_a_stack_of_rewinds_both_ways() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("f.txt"), "v0\n").unwrap());
    let t1 = a.turn();
    a.tool_write("f.txt", b"v1\n");
    a.bash("mkdir -p d && echo 1 > d/one");
    let t2 = a.turn();
    a.tool_write("f.txt", b"v2\n");
    a.bash("echo 2 > d/two && chmod 700 d");
    let s0 = full_tree(&a.m.dir);
    let id = |v: RewindReply| v.rewind_id.expect("a rewind id");
    let r1 = id(a.rewind(&t2, "all", false).unwrap());
    let s1 = full_tree(&a.m.dir);
    let r2 = id(a.rewind(&t1, "all", false).unwrap());
    let s2 = full_tree(&a.m.dir);
    assert!(s0 != s1 && s1 != s2 && s0 != s2);

    let u = undo(&mut a);
    assert_eq!(full_tree(&a.m.dir), s1, "the first undo");
    let u2 = undo(&mut a);
    assert_eq!(
        full_tree(&a.m.dir),
        s0,
        "the second undo: before the first rewind"
    );
    assert_eq!(u.undone.as_ref(), Some(&r2));
    assert_eq!(u.rewound_to.as_ref(), Some(&t1));
    assert_eq!((u.undoable, u.redoable), (Some(1), Some(1)));
    assert_eq!(u2.undone.as_ref(), Some(&r1));
    let none = stack(&mut a, false, false, false).unwrap_err();
    assert!(none.contains("there is no rewind to undo"), "{none}");
    assert_eq!(full_tree(&a.m.dir), s0);

    // The list says what each rewind checkpoint was, and what undo and redo do next.
    let list = rewind_checkpoints(&mut a);
    let info: Vec<(String, String, String, Option<String>)> = list
        .iter()
        .map(|c| {
            let r = c.rewind.as_ref().unwrap();
            (
                r.action.as_str().to_string(),
                r.target.clone(),
                r.state.as_str().to_string(),
                r.next.map(|n| {
                    serde_json::to_value(n)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string()
                }),
            )
        })
        .collect();
    assert_eq!(
        info,
        vec![
            (
                "rewind".into(),
                t2.clone(),
                "undone".into(),
                Some("redo".into())
            ),
            ("rewind".into(), t1.clone(), "undone".into(), None),
            ("undo".into(), r2.clone(), "done".into(), None),
            ("undo".into(), r1.clone(), "done".into(), None),
        ]
    );
    assert_eq!(list[0].uuid, r1, "a rewind's id is its checkpoint's uuid");

    let r = redo(&mut a);
    assert_eq!(r.redone.as_ref(), Some(&r1));
    assert_eq!(full_tree(&a.m.dir), s1, "the first redo");
    // Through the command line, as people use it.
    let sock = a.m.socket();
    let out = crate::support::rewindfs_ok(&["redo", "--socket", sock.to_str().unwrap()]);
    assert!(out.starts_with(&format!("redid rewind {r2}")), "{out}");
    assert_eq!(full_tree(&a.m.dir), s2, "the second redo");
    let none = stack(&mut a, true, false, false).unwrap_err();
    assert!(none.contains("there is no rewind to redo"), "{none}");

    // Undo once, then a new rewind: what was undone can no longer be redone.
    let out = crate::support::rewindfs_ok(&["undo", "--socket", sock.to_str().unwrap()]);
    assert!(out.starts_with(&format!("undid rewind {r2}")), "{out}");
    assert_eq!(full_tree(&a.m.dir), s1);
    let dry = stack(&mut a, true, true, false).unwrap();
    assert_eq!(dry.redone.as_ref(), Some(&r2), "{dry:?}");
    let r3 = id(a.rewind(&t1, "tool", false).unwrap());
    let dry = stack(&mut a, true, true, false).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(undo(&mut a).undone, Some(r3.clone()));
    assert_eq!(
        undo(&mut a).undone,
        Some(r1.clone()),
        "the cleared rewind is passed over"
    );
    assert_eq!(redo(&mut a).redone, Some(r1));
    assert_eq!(redo(&mut a).redone, Some(r3));
    assert!(stack(&mut a, true, false, false).is_err());
}

/// Runs `cmd` in a process that is not a descendant of the agent: the user's editor.
fn as_user(a: &Agent, cmd: &str) {
    crate::support::as_stranger(&a.m.dir, cmd);
}

/// Measured (issue 24): `echo work > f` after a rewind, then `undo`, silently overwrote the
/// edit. An undo (and a redo) checks for changes made since by anyone other than rewindfs to
/// what it would change: a dry run lists them, a real one refuses and changes nothing, unless
/// forced; and a forced one is itself captured, so the opposite command gives the edit back.
#[test]
fn undo_and_redo_never_clobber_a_change_made_since_unless_forced() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::write(d.join("f.txt"), "v0\n").unwrap();
        fs::write(d.join("g.txt"), "g0\n").unwrap();
    });
    let t1 = a.turn();
    a.tool_write("f.txt", b"v1\n");
    a.tool_write("g.txt", b"g1\n");
    let rewind = a.rewind(&t1, "all", false).unwrap().rewind_id;
    as_user(&a, "echo work > f.txt");
    assert!(crate::support::wait_until(5, || a.read("f.txt").as_deref() == Some("work\n")));
    let edited = full_tree(&a.m.dir);

    let dry = stack(&mut a, false, true, false).unwrap();
    assert_eq!(full_tree(&a.m.dir), edited, "a dry run changes nothing");
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(dry.undone, rewind);
    assert_eq!(dry.conflicts, [abs(&a, "f.txt")]);
    assert_eq!(dry.conflicts_by, by(&[("f.txt", &["external"])]));
    assert_eq!(
        dry.files_changed,
        [abs(&a, "f.txt"), abs(&a, "g.txt")],
        "{dry:?}"
    );
    let err = stack(&mut a, false, false, false).unwrap_err();
    for says in [
        "cannot undo rewind",
        "f.txt (external)",
        "nothing was changed",
        "--force",
        "`rewindfs redo`",
    ] {
        assert!(err.contains(says), "{says:?} not in {err}");
    }
    assert_eq!(
        full_tree(&a.m.dir),
        edited,
        "a refused undo changes nothing"
    );
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();
    let out = crate::support::rewindfs(&["undo", "--socket", sock]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot undo rewind"));
    let out = crate::support::rewindfs(&["undo", "--dry-run", "--socket", sock]);
    assert!(
        !out.status.success(),
        "a dry run that would be refused fails too"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("  f.txt (external)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(full_tree(&a.m.dir), edited);

    // Forced: overwritten, and captured like a rewind, so a redo gives the edit back.
    let forced = stack(&mut a, false, false, true).unwrap();
    assert_eq!(forced.conflicts, [abs(&a, "f.txt")]);
    assert_eq!(a.read("f.txt").as_deref(), Some("v1\n"));
    assert_eq!(a.read("g.txt").as_deref(), Some("g1\n"));
    let undone = full_tree(&a.m.dir);
    redo(&mut a);
    assert_eq!(
        full_tree(&a.m.dir),
        edited,
        "the redo gives back what the forced undo overwrote"
    );

    // The same for a redo over a change made since the undo.
    undo(&mut a);
    assert_eq!(full_tree(&a.m.dir), undone);
    a.bash("echo mine >> g.txt");
    let dry = stack(&mut a, true, true, false).unwrap();
    assert_eq!(dry.conflicts_by, by(&[("g.txt", &["shell"])]), "{dry:?}");
    let err = stack(&mut a, true, false, false).unwrap_err();
    assert!(
        err.contains("cannot redo rewind") && err.contains("`rewindfs undo`"),
        "{err}"
    );
    assert_eq!(a.read("g.txt").as_deref(), Some("g1\nmine\n"));
    stack(&mut a, true, false, true).unwrap();
    assert_eq!(a.read("g.txt").as_deref(), Some("g0\n"));
    undo(&mut a);
    assert_eq!(a.read("g.txt").as_deref(), Some("g1\nmine\n"));
}

/// A directory an undo would remove (the rewind brought it back), beneath which someone made a
/// file since the rewind, is a conflict too: the undo would take the file with it.
#[test]
fn undo_refuses_to_remove_a_directory_someone_filled_since() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::create_dir(d.join("d")).unwrap();
        fs::write(d.join("d/a.txt"), "a\n").unwrap();
    });
    let t1 = a.turn();
    a.bash("rm -rf d");
    a.rewind(&t1, "agent", false).unwrap();
    assert_eq!(a.read("d/a.txt").as_deref(), Some("a\n"));
    a.bash("echo kept > d/new.txt");
    let dry = stack(&mut a, false, true, false).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(
        dry.conflicts_by,
        by(&[("d/new.txt", &["shell"])]),
        "{dry:?}"
    );
    assert!(stack(&mut a, false, false, false).is_err());
    assert_eq!(a.read("d/new.txt").as_deref(), Some("kept\n"));
}
