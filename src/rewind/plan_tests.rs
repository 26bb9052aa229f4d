//! Planning without a mount: changes made through the passthrough core (`fs::Core`, the code
//! every FUSE request runs, here called directly) with the recorder capturing them, then a dry
//! run of a rewind to each checkpoint, held against the tree as it was when that checkpoint
//! began.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::{Request, Rewinder, Scope};
use crate::capture::{Observer, Recorder};
use crate::fs::inodes::ROOT;
use crate::fs::{Core, Ctx, SetAttr};
use crate::store::{Kind, Store};
use crate::turns::{KernelCache, Turns};

/// No kernel here: nothing to flush.
struct NoKernel;

impl KernelCache for NoKernel {
    fn flush(&self) {}
}

/// An unregistered process: an external actor (scope `all` restores everyone's changes).
const CTX: Ctx = Ctx {
    uid: 0,
    gid: 0,
    pid: 1,
};

#[derive(Debug, Clone)]
enum Change {
    /// Writes a file whole (`O_TRUNC`, then the bytes), creating it if needed.
    Write(u8, u8, u8),
    Delete(u8, u8),
    Mkdir(u8),
    /// Renames a directory to a name that is free.
    RenameDir(u8, u8),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (0u8..3, 0u8..3, any::<u8>()).prop_map(|(d, f, x)| Change::Write(d, f, x)),
        1 => (0u8..3, 0u8..3).prop_map(|(d, f)| Change::Delete(d, f)),
        1 => (0u8..3).prop_map(Change::Mkdir),
        2 => (0u8..3, 0u8..3).prop_map(|(a, b)| Change::RenameDir(a, b)),
    ]
}

/// The tree as it is: each path, `dir` or the file's content.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for d in std::fs::read_dir(root).unwrap() {
        let d = d.unwrap();
        let name = d.file_name().to_string_lossy().into_owned();
        out.insert(name.clone(), "dir".to_string());
        for f in std::fs::read_dir(d.path()).unwrap() {
            let f = f.unwrap();
            let content = std::fs::read_to_string(f.path()).unwrap();
            out.insert(
                format!("{name}/{}", f.file_name().to_string_lossy()),
                content,
            );
        }
    }
    out
}

fn apply(core: &Core, root: &Path, c: &Change) {
    let name = |s: String| std::ffi::OsString::from(s);
    match *c {
        Change::Write(d, f, x) => {
            let Ok((dir, _)) = core.lookup(ROOT, &name(format!("d{d}"))) else {
                return;
            };
            let file = name(format!("f{f}"));
            let ino = match core.lookup(dir.ino, &file) {
                Ok((l, _)) => l.ino,
                Err(_) => {
                    core.mknod(&CTX, dir.ino, &file, libc::S_IFREG | 0o644, 0, 0)
                        .unwrap()
                        .0
                        .ino
                }
            };
            let truncate = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            core.setattr(&CTX, ino, truncate).unwrap();
            core.write(&CTX, ino, 0, format!("v{x}\n").as_bytes(), false)
                .unwrap();
        }
        Change::Delete(d, f) => {
            if let Ok((dir, _)) = core.lookup(ROOT, &name(format!("d{d}"))) {
                let _ = core.unlink(&CTX, dir.ino, &name(format!("f{f}")));
            }
        }
        Change::Mkdir(d) => {
            if !root.join(format!("d{d}")).exists() {
                core.mkdir(&CTX, ROOT, &name(format!("d{d}")), 0o755, 0)
                    .unwrap();
            }
        }
        Change::RenameDir(a, b) => {
            let (a, b) = (format!("d{a}"), format!("d{b}"));
            if a != b && root.join(&a).exists() && !root.join(&b).exists() {
                core.lookup(ROOT, OsStr::new(&a)).unwrap();
                core.rename(&CTX, ROOT, OsStr::new(&a), ROOT, OsStr::new(&b), 0)
                    .unwrap();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// For any turns of writes, deletions, new directories and directory renames, a dry run
    /// of a rewind (scope `all`) to each turn's checkpoint plans exactly the paths that differ
    /// from the tree when that turn began, and plans each back to what it was then.
    #[test]
    fn a_rewind_plans_each_turns_tree_back(
        turns in proptest::collection::vec(proptest::collection::vec(change(), 0..6), 1..5),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("w");
        std::fs::create_dir_all(root.join("d0")).unwrap();
        std::fs::create_dir_all(root.join("d1")).unwrap();
        std::fs::write(root.join("d0/f0"), "first\n").unwrap();
        std::fs::write(root.join("d1/f1"), "second\n").unwrap();
        let store = Arc::new(Store::open(&tmp.path().join("store"), false).unwrap());
        let fd = crate::sys::open_dir_path(&root).unwrap();
        let recorder = Arc::new(Recorder::new(fd.as_fd(), store.clone()).unwrap());
        let observer: Arc<dyn Observer> = recorder.clone();
        let core = Core::new(crate::sys::open_dir_path(&root).unwrap(), observer).unwrap();
        let kernel: Arc<dyn KernelCache> = Arc::new(NoKernel);
        let bookkeeping = Arc::new(Turns::new(recorder.clone(), store.clone(), kernel.clone()));
        let rewinder = Rewinder::new(bookkeeping.clone(), recorder.clone(), store, kernel, root.clone());
        let mut began = Vec::new();
        for (k, changes) in turns.iter().enumerate() {
            let uuid = format!("00000000-0000-4000-8000-{k:012}");
            bookkeeping.begin_message("s", &uuid).unwrap();
            began.push((uuid, tree(&root)));
            for c in changes {
                apply(&core, &root, c);
            }
        }
        recorder.flush_log();
        let now = tree(&root);
        for (uuid, then) in &began {
            let out = rewinder
                .rewind(&Request {
                    user_message_id: uuid.clone(),
                    dry_run: true,
                    scope: Scope::All,
                    force: true,
                    paths: Vec::new(),
                    session_id: None,
                    trust_imported: false,
                })
                .unwrap();
            prop_assert!(out.can_rewind, "{:?}", out.error);
            let mut differ: Vec<String> = then
                .keys()
                .chain(now.keys())
                .filter(|p| then.get(*p) != now.get(*p))
                .cloned()
                .collect();
            differ.sort();
            differ.dedup();
            let mut planned: Vec<String> = out.files_changed.clone();
            planned.sort();
            prop_assert_eq!(&planned, &differ, "checkpoint {} after {:?}", uuid, turns);
            for p in &out.planned {
                let path = p.target.path.to_string();
                let want = then.get(&path);
                match p.target.kind {
                    Kind::Absent => prop_assert_eq!(want, None, "{}", path),
                    Kind::Dir => prop_assert_eq!(want.map(String::as_str), Some("dir"), "{}", path),
                    Kind::File => {
                        if let Some(c) = &p.content {
                            prop_assert_eq!(want, Some(&String::from_utf8(c.clone()).unwrap()), "{}", path);
                        }
                    }
                    k => prop_assert!(false, "{path}: a {k:?} planned"),
                }
            }
        }
    }
}

/// Planning's batches keep path order, hold at most `PROBE_BATCH` paths, and give a large target
/// a batch of its own (several read at once would hold several large files in memory).
#[test]
fn probe_batches_keep_order_and_probe_large_targets_alone() {
    use super::plan::probe_batches;
    use crate::store::PreImage;
    let big = 8 << 20;
    let sizes: Vec<u64> = (0..700)
        .map(|i| {
            if i == 3 || i == 4 || i == 600 {
                big
            } else {
                10
            }
        })
        .collect();
    let wanted: Vec<(Vec<u8>, PreImage)> = sizes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pre = PreImage {
                size: *s,
                ..PreImage::absent()
            };
            (format!("p{i:04}").into_bytes(), pre)
        })
        .collect();
    let batches = probe_batches(&wanted);
    let flat: Vec<&[u8]> = batches
        .iter()
        .flat_map(|b| b.iter().map(|(p, _)| p.as_slice()))
        .collect();
    let want: Vec<&[u8]> = wanted.iter().map(|(p, _)| p.as_slice()).collect();
    assert_eq!(flat, want, "every path once, in order");
    for b in &batches {
        assert!(!b.is_empty() && b.len() <= 256, "a batch of {}", b.len());
        if b.iter().any(|(_, t)| t.size >= big) {
            assert_eq!(b.len(), 1, "a large target shares its batch");
        }
    }
    assert_eq!(batches.iter().filter(|b| b.len() == 1).count(), 3);
}
