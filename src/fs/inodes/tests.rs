//! Tests of `inodes`.

use super::*;
use std::path::Path;

use crate::wspath::Node;

fn ws(p: &str) -> WsPath {
    WsPath::parse(p).unwrap()
}

fn st(p: &Path) -> Stat {
    rustix::fs::lstat(p).unwrap()
}

/// git's object write: a temporary name, a hard link to the final name, then the
/// temporary name unlinked — the node must live on under the link's name.
#[test]
fn unlinking_the_primary_name_keeps_a_hard_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = st(dir.path());
    std::fs::create_dir(dir.path().join("o")).unwrap();
    std::fs::write(dir.path().join("o/tmp"), b"x").unwrap();
    let t = Inodes::new(&root);
    let o = t.lookup(ROOT, OsStr::new("o"), &st(&dir.path().join("o")));
    let a = t.lookup(o.ino, OsStr::new("tmp"), &st(&dir.path().join("o/tmp")));
    std::fs::hard_link(dir.path().join("o/tmp"), dir.path().join("o/obj")).unwrap();
    let b = t.lookup_link(o.ino, OsStr::new("obj"), &st(&dir.path().join("o/obj")));
    assert_eq!(a.ino, b.ino);
    assert_eq!(t.aliases(a.ino), vec![ws("o/obj")]);
    t.renamed(a.ino, (o.ino, OsStr::new("tmp")), None);
    assert_eq!(t.path(a.ino).unwrap(), Node::from(ws("o/obj")));
    assert!(t.aliases(a.ino).is_empty());
    assert_eq!(t.child(o.ino, OsStr::new("tmp")), None);
    // The last name gone: the node has no path any more.
    t.renamed(a.ino, (o.ino, OsStr::new("obj")), None);
    assert_eq!(
        t.path(a.ino).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
}

/// A second name renamed, then the primary unlinked: the node follows the renamed link.
#[test]
fn a_renamed_link_is_the_surviving_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = st(dir.path());
    std::fs::write(dir.path().join("a"), b"x").unwrap();
    std::fs::hard_link(dir.path().join("a"), dir.path().join("b")).unwrap();
    let t = Inodes::new(&root);
    let a = t.lookup(ROOT, OsStr::new("a"), &st(&dir.path().join("a")));
    // Looking the other name up moves the primary name to it; "a" stays a link.
    let b = t.lookup(ROOT, OsStr::new("b"), &st(&dir.path().join("b")));
    assert_eq!(a.ino, b.ino);
    assert_eq!(t.path(a.ino).unwrap(), Node::from(ws("b")));
    assert_eq!(t.aliases(a.ino), vec![ws("a")]);
    std::fs::rename(dir.path().join("a"), dir.path().join("c")).unwrap();
    t.renamed(
        a.ino,
        (ROOT, OsStr::new("a")),
        Some((ROOT, OsStr::new("c"))),
    );
    assert_eq!(t.aliases(a.ino), vec![ws("c")]);
    t.renamed(a.ino, (ROOT, OsStr::new("b")), None);
    assert_eq!(t.path(a.ino).unwrap(), Node::from(ws("c")));
}
/// "No capabilities" read from the disk while a setxattr of them ran must not stick.
#[test]
fn a_set_of_capabilities_during_a_read_wins() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let t = Inodes::new(&st(dir.path()));
    let f = t.lookup(ROOT, OsStr::new("f"), &st(&dir.path().join("f")));
    let epoch = t.caps_epoch(f.ino).unwrap();
    t.forget_no_caps(f.ino); // a setxattr(security.capability) came in meanwhile
    t.learn_no_caps(f.ino, epoch);
    assert!(!t.no_caps(f.ino));
    t.learn_no_caps(f.ino, t.caps_epoch(f.ino).unwrap());
    assert!(t.no_caps(f.ino));
}

/// Checks the table's own invariants: the index agrees with the nodes, each name maps to
/// at most one node, every node is found by its key, and children counts are exact.
fn check_invariants(t: &Table) {
    let mut seen = std::collections::HashSet::new();
    for &(h, id) in t.primary.iter() {
        let n = t.nodes.get(&id).expect("primary entry of a live node");
        let (p, nm) = n.name.as_ref().expect("primary entry of a named node");
        assert_eq!(h, t.hash(*p, nm), "primary entry under its name's hash");
        assert!(seen.insert((*p, nm.clone())), "name indexed twice");
    }
    for e in t.extra.iter() {
        assert_eq!(e.hash, t.hash(e.parent, &e.name));
        assert!(t.nodes.contains_key(&e.ino), "extra entry of a live node");
        assert!(
            seen.insert((e.parent, e.name.clone())),
            "name indexed twice"
        );
    }
    for (&id, n) in &t.nodes {
        assert_eq!(t.id_of(n.key), Some(id), "node found by its key");
        let kids = t
            .nodes
            .values()
            .filter(|c| matches!(&c.name, Some((p, _)) if *p == id))
            .count();
        assert_eq!(n.children as usize, kids, "children of {id}");
    }
    for (key, id) in &t.synthetic {
        assert_eq!(t.nodes.get(id).map(|n| n.key), Some(*key));
    }
}

#[derive(Debug, Clone)]
enum Op {
    Lookup(usize, usize),
    Link(usize, usize, usize, usize),
    Rename(usize, usize, usize, usize),
    Unlink(usize, usize),
    Create(usize, usize),
    Forget(usize, usize),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0..3usize, 0..4usize).prop_map(|(d, n)| Op::Lookup(d, n)),
        (0..3usize, 0..4usize, 0..3usize, 0..4usize).prop_map(|(a, b, c, d)| Op::Link(a, b, c, d)),
        (0..3usize, 0..4usize, 0..3usize, 0..4usize)
            .prop_map(|(a, b, c, d)| Op::Rename(a, b, c, d)),
        (0..3usize, 0..4usize).prop_map(|(d, n)| Op::Unlink(d, n)),
        (0..3usize, 0..4usize).prop_map(|(d, n)| Op::Create(d, n)),
        (0..3usize, 0..4usize).prop_map(|(d, n)| Op::Forget(d, n)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(256))]
    /// Random lookups, hard links, renames, unlinks and forgets, driven the way `Core` drives
    /// the table and applied to real files: the index stays consistent, and every path and
    /// child the table answers is a current name of the node's own file.
    #[test]
    fn the_name_index_follows_the_files(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let dirs = ["", "d1", "d2"];
        for d in &dirs[1..] {
            std::fs::create_dir(root.join(d)).unwrap();
        }
        let names = ["a", "b", "c", "d"];
        let t = Inodes::new(&st(root));
        let mut dnode = vec![ROOT];
        for d in &dirs[1..] {
            dnode.push(t.lookup(ROOT, OsStr::new(d), &st(&root.join(d))).ino);
        }
        let rel = |d: usize, n: usize| Path::new(dirs[d]).join(names[n]);
        let key = |p: &Path| {
            let s = st(&root.join(p));
            (s.st_dev, s.st_ino)
        };
        // The names the table was told about, and the file each names.
        let mut known: std::collections::HashMap<std::path::PathBuf, (u64, u64)> = Default::default();
        let mut serial = 0;
        for op in ops {
            match op {
                Op::Create(d, n) => {
                    if !root.join(rel(d, n)).exists() {
                        serial += 1;
                        std::fs::write(root.join(rel(d, n)), serial.to_string()).unwrap();
                        t.lookup(dnode[d], OsStr::new(names[n]), &st(&root.join(rel(d, n))));
                        known.insert(rel(d, n), key(&rel(d, n)));
                    }
                }
                Op::Lookup(d, n) => {
                    if let Ok(s) = rustix::fs::lstat(root.join(rel(d, n))) {
                        t.lookup(dnode[d], OsStr::new(names[n]), &s);
                        known.insert(rel(d, n), (s.st_dev, s.st_ino));
                    }
                }
                Op::Link(d, n, d2, n2) => {
                    let (a, b) = (root.join(rel(d, n)), root.join(rel(d2, n2)));
                    if a.exists() && !b.exists() {
                        std::fs::hard_link(&a, &b).unwrap();
                        t.lookup_link(dnode[d2], OsStr::new(names[n2]), &st(&b));
                        known.insert(rel(d2, n2), key(&rel(d2, n2)));
                    }
                }
                Op::Rename(d, n, d2, n2) => {
                    let (a, b) = (root.join(rel(d, n)), root.join(rel(d2, n2)));
                    let Ok(src) = rustix::fs::lstat(&a) else { continue };
                    let dst = rustix::fs::lstat(&b).ok();
                    std::fs::rename(&a, &b).unwrap();
                    // Renaming a name onto another name of the same file changes nothing.
                    if dst.as_ref().is_some_and(|x| (x.st_dev, x.st_ino) == (src.st_dev, src.st_ino)) {
                        continue;
                    }
                    known.remove(&rel(d2, n2));
                    if let Some(k) = known.remove(&rel(d, n)) {
                        known.insert(rel(d2, n2), k);
                    }
                    if let Some(x) = dst {
                        if let Some(i) = t.ino_of(&x) {
                            t.renamed(i, (dnode[d2], OsStr::new(names[n2])), None);
                            if x.st_nlink <= 1 {
                                t.unlinked(i);
                            }
                        }
                    }
                    if let Some(i) = t.ino_of(&src) {
                        t.renamed(
                            i,
                            (dnode[d], OsStr::new(names[n])),
                            Some((dnode[d2], OsStr::new(names[n2]))),
                        );
                    }
                }
                Op::Unlink(d, n) => {
                    let a = root.join(rel(d, n));
                    let Ok(s) = rustix::fs::lstat(&a) else { continue };
                    std::fs::remove_file(&a).unwrap();
                    known.remove(&rel(d, n));
                    if let Some(i) = t.ino_of(&s) {
                        t.renamed(i, (dnode[d], OsStr::new(names[n])), None);
                        if s.st_nlink <= 1 {
                            t.unlinked(i);
                        }
                    }
                }
                Op::Forget(d, n) => {
                    if let Ok(s) = rustix::fs::lstat(root.join(rel(d, n))) {
                        if let Some(i) = t.ino_of(&s) {
                            t.forget(i, 1);
                        }
                    }
                }
            }
            let tab = t.table.shared();
            check_invariants(&tab);
            let ids: Vec<(u64, (u64, u64))> =
                tab.nodes.iter().map(|(&i, n)| (i, n.key)).collect();
            drop(tab);
            for (id, key) in ids {
                if let Ok(p) = t.path(id) {
                    let s = st(&root.join(&p));
                    proptest::prop_assert_eq!((s.st_dev, s.st_ino), key, "path {:?} of {}", p, id);
                }
                for a in t.aliases(id) {
                    let s = st(&root.join(&a));
                    proptest::prop_assert_eq!((s.st_dev, s.st_ino), key, "alias {:?}", a);
                }
            }
            // Every name the table was told about, of a node it still holds, is the node's
            // path or one of its aliases.
            known.retain(|_, k| t.table.shared().id_of(*k).is_some());
            for (p, k) in &known {
                let id = t.table.shared().id_of(*k).unwrap();
                let mut all: Vec<std::path::PathBuf> =
                    t.aliases(id).iter().map(|a| a.as_path().to_path_buf()).collect();
                all.extend(t.path(id).ok().map(|p| p.as_path().to_path_buf()));
                proptest::prop_assert!(all.contains(p), "{:?} missing from {:?}", p, all);
            }
            for (d, dn) in dnode.iter().enumerate() {
                for (n, nm) in names.iter().enumerate() {
                    if let Some(id) = t.child(*dn, OsStr::new(nm)) {
                        let s = st(&root.join(rel(d, n)));
                        proptest::prop_assert_eq!(Some((s.st_dev, s.st_ino)), t.key(id));
                    }
                }
            }
        }
    }
}

/// A forget says how many nodes went with it (a parent kept only by its child goes too), and
/// once most nodes are gone the maps give back their space.
#[test]
fn forgets_count_the_nodes_that_went_and_the_maps_shrink() {
    let dir = tempfile::tempdir().unwrap();
    let root = st(dir.path());
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/f"), b"x").unwrap();
    let d_st = st(&dir.path().join("d"));
    let f = st(&dir.path().join("d/f"));
    let t = Inodes::new(&root);
    let d = t.lookup(ROOT, OsStr::new("d"), &d_st).ino;
    let n = SHRINK_EVERY + 10;
    let inos: Vec<u64> = (0..n)
        .map(|i| {
            let mut s = f;
            s.st_ino = 1_000_000 + i as u64;
            t.lookup(d, OsStr::new(&format!("f{i}")), &s).ino
        })
        .collect();
    let full = t.table.shared().nodes.capacity();
    // The directory stays while it has children.
    assert_eq!(t.forget(d, 1), 0);
    let (last, rest) = inos.split_last().unwrap();
    let gone: usize = rest.iter().map(|&ino| t.forget(ino, 1)).sum();
    assert_eq!(gone, n - 1);
    assert!(
        t.table.shared().nodes.capacity() < full / 4,
        "the node map kept {} slots of {full} for {} nodes",
        t.table.shared().nodes.capacity(),
        t.table.shared().nodes.len()
    );
    // The last child takes its directory with it.
    assert_eq!(t.forget(*last, 1), 2);
    assert!(t.key(d).is_none());
    // A node still looked up is not removed.
    let kept = t.lookup(ROOT, OsStr::new("kept"), &f).ino;
    t.lookup(ROOT, OsStr::new("kept"), &f);
    assert_eq!(t.forget(kept, 1), 0);
    assert!(t.key(kept).is_some());
}
