//! Undo and redo through a real mount (design.md §2, "A rewind is itself a change"): every
//! rewind, undo and redo gives back everything — directories' modes, owners and extended
//! attributes as exactly as files' — and undo/redo work as a stack.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::json;

use crate::agent::Agent;
use crate::support::require_fuse;

/// A listing of a tree with everything a rewind restores: path, type, mode, owner, size and
/// content hash, symlink target, and every extended attribute (by name, with its value).
fn full_tree(root: &Path) -> Vec<String> {
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

fn setxattr(p: &Path, name: &str, value: &str) {
    rustix::fs::lsetxattr(p, name, value.as_bytes(), rustix::fs::XattrFlags::empty())
        .unwrap_or_else(|e| panic!("setxattr {} {name}: {e}", p.display()));
}

fn undo(a: &mut Agent) -> serde_json::Value {
    a.c.request("undo_rewind", json!({})).unwrap()
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
    assert_eq!(undo(&mut a)["canRewind"], json!(true));
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
/// changed in place, on one a tool replaced (a new inode, without them), and on a directory.
#[test]
fn extended_attributes_of_files_and_directories_come_back_on_rewind_and_on_undo() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::create_dir_all(d.join("d/e")).unwrap();
        for f in ["d/kept.txt", "d/appended.txt", "d/replaced.txt"] {
            fs::write(d.join(f), "v1\n").unwrap();
            setxattr(&d.join(f), "user.origin", f);
        }
        setxattr(&d.join("d/e"), "user.dir", "old");
        setxattr(&d.join("d/e"), "user.gone", "soon");
    });
    let t1 = a.turn();
    let before = full_tree(&a.m.dir);
    setxattr(&a.m.p("d/kept.txt"), "user.origin", "changed");
    setxattr(&a.m.p("d/kept.txt"), "user.added", "new");
    a.bash("echo more >> d/appended.txt");
    a.tool_write("d/replaced.txt", b"v2\n");
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
