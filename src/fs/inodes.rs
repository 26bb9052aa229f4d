//! The inode table: FUSE node ids ↔ backing files, and each node's current name.
//!
//! rewindfs keeps **no fd per inode** (the open-file limit here is 20,000 and a 40k-file tree
//! would exhaust it). Each node remembers one name it is reachable by — its parent node and a
//! file name — and operations re-resolve that path from the workspace root fd. Captures are
//! keyed by path anyway, so the path is what every change needs.
//!
//! Invariants, all kept under the one `RwLock` in [`Inodes`]:
//! - a node id maps to exactly one backing `(dev, ino)` and back (`by_key`);
//! - node ids are the backing inode numbers where possible, so they are stable for the life of
//!   the mount and `ls -i` matches the disk; the workspace root is always node 1;
//! - when a backing inode number is reused by a new file while the kernel still holds the old
//!   node, the node's generation is bumped (the kernel then drops its stale inode instead of
//!   returning `ESTALE` forever);
//! - a node is removed only when the kernel has forgotten it (`nlookup == 0`) and no other
//!   node names it as parent (`children == 0`), so every live node's path can be rebuilt.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::PathBuf;
use std::sync::RwLock;

use rustix::fs::Stat;

/// The FUSE root node id.
pub const ROOT: u64 = 1;

/// One node the kernel knows about.
#[derive(Debug)]
struct Node {
    /// Backing `(st_dev, st_ino)`.
    key: (u64, u64),
    /// Bumped when the backing inode number is reused for another file.
    generation: u64,
    /// Lookups the kernel holds (decremented by `forget`).
    nlookup: u64,
    /// Nodes whose `parent` is this node.
    children: u64,
    /// Where the node currently lives; `None` for the root and for unlinked files.
    name: Option<(u64, OsString)>,
    /// `S_IFMT` bits of the backing file.
    kind: u32,
    /// The file has more than one name (hard links): a content change changes them all.
    multi: bool,
    /// Known to have no `security.capability` attribute: the daemon created it, or the backing
    /// filesystem said so. Every setxattr comes through the mount, so this stays true until
    /// one sets or removes that attribute (see [`Inodes::forget_no_caps`]).
    no_caps: bool,
    /// Bumped whenever `no_caps` is cleared, so an answer read from the disk before a
    /// concurrent setxattr cannot set it again (see [`Inodes::learn_no_caps`]).
    caps_epoch: u32,
}

#[derive(Default, Debug)]
struct Table {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    /// Next synthetic node id, for backing inodes whose own number is taken or on another dev.
    next_synthetic: u64,
    /// (parent, name) → node, for the names nodes currently carry (used to invalidate the
    /// kernel's entries for paths a rewind restored).
    names: HashMap<(u64, OsString), u64>,
    /// The other names of nodes with several (hard links): each `names` entry of a `multi` node
    /// besides its own `name`. Kept so that finding a surviving name or listing aliases never
    /// scans `names` (git links each new object and unlinks its temporary name: a scan there
    /// made `git add` quadratic). May hold stale entries; users check them against `names`.
    links: HashMap<u64, Vec<(u64, OsString)>>,
}

/// The inode table (one lock; see the module doc for its invariants).
#[derive(Debug)]
pub struct Inodes {
    table: RwLock<Table>,
    /// `st_dev` of the workspace root.
    root_dev: u64,
}

/// What a lookup hands to the kernel.
#[derive(Debug, Clone, Copy)]
pub struct Looked {
    pub ino: u64,
    pub generation: u64,
}

fn stale() -> io::Error {
    io::Error::from_raw_os_error(libc::ESTALE)
}

impl Inodes {
    pub fn new(root: &Stat) -> Self {
        let mut t = Table {
            next_synthetic: 1 << 56,
            ..Default::default()
        };
        let key = (root.st_dev, root.st_ino);
        t.nodes.insert(
            ROOT,
            Node {
                key,
                generation: 0,
                nlookup: 2,
                children: 0,
                name: None,
                kind: libc::S_IFDIR,
                multi: false,
                no_caps: false,
                caps_epoch: 0,
            },
        );
        t.by_key.insert(key, ROOT);
        Inodes {
            table: RwLock::new(t),
            root_dev: root.st_dev,
        }
    }

    /// The workspace-relative path of a node (empty for the root).
    ///
    /// # Errors
    /// `ESTALE` for an unknown node, `ENOENT` for one that no longer has a name (unlinked).
    pub fn path(&self, ino: u64) -> io::Result<PathBuf> {
        let t = self.table.read().unwrap();
        let mut parts: Vec<&OsStr> = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let n = t.nodes.get(&cur).ok_or_else(stale)?;
            match &n.name {
                Some((parent, name)) => {
                    parts.push(name);
                    cur = *parent;
                }
                None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
            if parts.len() > 4096 {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
        }
        let mut p = PathBuf::new();
        for part in parts.iter().rev() {
            p.push(part);
        }
        Ok(p)
    }

    /// The other names of a hard-linked file that the kernel has looked up (empty for a file
    /// with one name): a change to its content changes what every name shows.
    pub fn aliases(&self, ino: u64) -> Vec<PathBuf> {
        let names: Vec<(u64, OsString)> = {
            let t = self.table.read().unwrap();
            match t.nodes.get(&ino) {
                Some(n) if n.multi => Self::other_names(&t, ino, n.name.as_ref()).collect(),
                _ => return Vec::new(),
            }
        };
        names
            .into_iter()
            .filter_map(|(p, nm)| {
                self.path(p).ok().map(|pp| {
                    if pp.as_os_str().is_empty() {
                        PathBuf::from(&nm)
                    } else {
                        pp.join(&nm)
                    }
                })
            })
            .collect()
    }

    /// The names of `ino` recorded in `links` that still name it, other than `except`.
    fn other_names<'t>(
        t: &'t Table,
        ino: u64,
        except: Option<&'t (u64, OsString)>,
    ) -> impl Iterator<Item = (u64, OsString)> + 't {
        t.links
            .get(&ino)
            .into_iter()
            .flatten()
            .filter(move |k| t.names.get(*k) == Some(&ino) && Some(*k) != except)
            .cloned()
    }

    /// Records `key` as one more name of the multi-name node `ino`.
    fn add_link(t: &mut Table, ino: u64, key: (u64, OsString)) {
        let v = t.links.entry(ino).or_default();
        if !v.contains(&key) {
            v.push(key);
        }
    }

    /// The `S_IFMT` kind recorded for a node.
    pub fn kind(&self, ino: u64) -> Option<u32> {
        self.table.read().unwrap().nodes.get(&ino).map(|n| n.kind)
    }

    /// Whether the node is known to have no `security.capability` attribute. The kernel asks
    /// for it before the first write to every inode and before every chown (two of the ten
    /// requests `tar` makes per file); known nodes are answered without a system call.
    pub fn no_caps(&self, ino: u64) -> bool {
        self.table
            .read()
            .unwrap()
            .nodes
            .get(&ino)
            .is_some_and(|n| n.no_caps)
    }

    /// Records that the node, just created, has no `security.capability` attribute.
    pub fn set_no_caps(&self, ino: u64) {
        if let Some(n) = self.table.write().unwrap().nodes.get_mut(&ino) {
            n.no_caps = true;
        }
    }

    /// Forgets that the node has no `security.capability` attribute (it is being set or
    /// removed).
    pub fn forget_no_caps(&self, ino: u64) {
        if let Some(n) = self.table.write().unwrap().nodes.get_mut(&ino) {
            n.no_caps = false;
            n.caps_epoch = n.caps_epoch.wrapping_add(1);
        }
    }

    /// The node's capabilities epoch, read before asking the disk.
    pub fn caps_epoch(&self, ino: u64) -> Option<u32> {
        self.table
            .read()
            .unwrap()
            .nodes
            .get(&ino)
            .map(|n| n.caps_epoch)
    }

    /// The disk said the node has no `security.capability`: remembered unless a set or remove
    /// of it came in since `epoch` was read.
    pub fn learn_no_caps(&self, ino: u64, epoch: u32) {
        if let Some(n) = self.table.write().unwrap().nodes.get_mut(&ino) {
            if n.caps_epoch == epoch {
                n.no_caps = true;
            }
        }
    }

    /// Backing key of a node, to check a re-resolved path still names the same file.
    pub fn key(&self, ino: u64) -> Option<(u64, u64)> {
        self.table.read().unwrap().nodes.get(&ino).map(|n| n.key)
    }

    /// The node id a backing file has (or would get), without taking a lookup.
    pub fn ino_of(&self, st: &Stat) -> Option<u64> {
        self.table
            .read()
            .unwrap()
            .by_key
            .get(&(st.st_dev, st.st_ino))
            .copied()
    }

    /// Records that the kernel now holds one more lookup of the file `st` at `parent/name`.
    pub fn lookup(&self, parent: u64, name: &OsStr, st: &Stat) -> Looked {
        let key = (st.st_dev, st.st_ino);
        let kind = st.st_mode & libc::S_IFMT;
        let mut t = self.table.write().unwrap();
        if let Some(&ino) = t.by_key.get(&key) {
            if ino == ROOT {
                return Looked { ino, generation: 0 };
            }
            let old_parent = t
                .nodes
                .get(&ino)
                .and_then(|n| n.name.as_ref().map(|(p, _)| *p));
            let n = t.nodes.get_mut(&ino).expect("by_key and nodes agree");
            if n.kind != kind {
                // The inode number was reused by a different file.
                n.generation += 1;
                n.kind = kind;
                n.no_caps = false;
                n.caps_epoch = n.caps_epoch.wrapping_add(1);
            }
            n.nlookup += 1;
            n.multi = kind != libc::S_IFDIR && st.st_nlink > 1;
            let g = n.generation;
            let multi = n.multi;
            let same = matches!(&n.name, Some((p, nm)) if *p == parent && nm == name);
            if !same {
                let old = n.name.replace((parent, name.to_owned()));
                t.names.insert((parent, name.to_owned()), ino);
                if multi {
                    // The old name stays one of the file's names.
                    if let Some(old) = old {
                        Self::add_link(&mut t, ino, old);
                    }
                }
                if let Some(p) = t.nodes.get_mut(&parent) {
                    p.children += 1;
                }
                if let Some(op) = old_parent {
                    Self::release_child(&mut t, op);
                }
            }
            return Looked { ino, generation: g };
        }
        // A new node. Use the backing inode number when it is free and on the root's device.
        let ino =
            if st.st_dev == self.root_dev && st.st_ino != ROOT && !t.nodes.contains_key(&st.st_ino)
            {
                st.st_ino
            } else {
                t.next_synthetic += 1;
                t.next_synthetic
            };
        if let Some(p) = t.nodes.get_mut(&parent) {
            p.children += 1;
        }
        t.nodes.insert(
            ino,
            Node {
                key,
                generation: 0,
                nlookup: 1,
                children: 0,
                name: Some((parent, name.to_owned())),
                kind,
                multi: kind != libc::S_IFDIR && st.st_nlink > 1,
                no_caps: false,
                caps_epoch: 0,
            },
        );
        t.names.insert((parent, name.to_owned()), ino);
        t.by_key.insert(key, ino);
        Looked { ino, generation: 0 }
    }

    /// Like [`lookup`](Self::lookup) for a new hard link: one more lookup held, but an existing
    /// node keeps the name it has (the name writers most likely use).
    pub fn lookup_link(&self, parent: u64, name: &OsStr, st: &Stat) -> Looked {
        {
            let mut t = self.table.write().unwrap();
            if let Some(&ino) = t.by_key.get(&(st.st_dev, st.st_ino)) {
                t.names.insert((parent, name.to_owned()), ino);
                Self::add_link(&mut t, ino, (parent, name.to_owned()));
                let n = t.nodes.get_mut(&ino).expect("by_key and nodes agree");
                n.nlookup += 1;
                n.multi = true;
                return Looked {
                    ino,
                    generation: n.generation,
                };
            }
        }
        self.lookup(parent, name, st)
    }

    /// The name `from` of a node moved to `to` (rename), or went away (`to == None`: unlink,
    /// rmdir, or replaced by a rename). A hard-linked file whose primary name goes away keeps
    /// another name the kernel knows.
    pub fn renamed(&self, ino: u64, from: (u64, &OsStr), to: Option<(u64, &OsStr)>) {
        let mut t = self.table.write().unwrap();
        let from_key = (from.0, from.1.to_owned());
        if t.names.get(&from_key) == Some(&ino) {
            t.names.remove(&from_key);
        }
        if let Some(v) = t.links.get_mut(&ino) {
            v.retain(|k| *k != from_key);
        }
        if let Some((p, nm)) = to {
            t.names.insert((p, nm.to_owned()), ino);
        }
        let Some(n) = t.nodes.get(&ino) else { return };
        let is_primary = n.name.as_ref() == Some(&from_key);
        if !is_primary {
            // Another name of a hard-linked file; the node keeps its own.
            if let Some((p, nm)) = to {
                Self::add_link(&mut t, ino, (p, nm.to_owned()));
            }
            return;
        }
        let multi = n.multi;
        let new_name = match to {
            Some((p, nm)) => Some((p, nm.to_owned())),
            // Only a file with other names (hard links) can keep one.
            None if multi => Self::other_names(&t, ino, None).next(),
            None => None,
        };
        if let (Some(k), None) = (&new_name, to) {
            // The surviving name becomes the primary one.
            if let Some(v) = t.links.get_mut(&ino) {
                v.retain(|x| x != k);
            }
        }
        let old_parent = from.0;
        if let Some((p, _)) = &new_name {
            if let Some(pn) = t.nodes.get_mut(p) {
                pn.children += 1;
            }
        }
        let gone = new_name.is_none();
        t.nodes.get_mut(&ino).unwrap().name = new_name;
        Self::release_child(&mut t, old_parent);
        if gone {
            Self::maybe_remove(&mut t, ino);
        }
    }

    /// A node's file was deleted for good (nlink reached 0): forget its backing key so a new
    /// file reusing the inode number gets a fresh generation.
    pub fn unlinked(&self, ino: u64) {
        let mut t = self.table.write().unwrap();
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.generation += 1;
        }
    }

    /// The kernel dropped `count` lookups of a node.
    pub fn forget(&self, ino: u64, count: u64) {
        if ino == ROOT {
            return;
        }
        let mut t = self.table.write().unwrap();
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.nlookup = n.nlookup.saturating_sub(count);
        }
        Self::maybe_remove(&mut t, ino);
    }

    fn release_child(t: &mut Table, parent: u64) {
        if let Some(p) = t.nodes.get_mut(&parent) {
            p.children = p.children.saturating_sub(1);
        }
        Self::maybe_remove(t, parent);
    }

    fn maybe_remove(t: &mut Table, ino: u64) {
        let mut cur = ino;
        loop {
            if cur == ROOT {
                return;
            }
            let Some(n) = t.nodes.get(&cur) else { return };
            if n.nlookup > 0 || n.children > 0 {
                return;
            }
            let n = t.nodes.remove(&cur).unwrap();
            t.links.remove(&cur);
            if t.by_key.get(&n.key) == Some(&cur) {
                t.by_key.remove(&n.key);
            }
            if let Some(name) = &n.name {
                if t.names.get(name) == Some(&cur) {
                    t.names.remove(name);
                }
            }
            match n.name {
                Some((p, _)) => {
                    if let Some(pn) = t.nodes.get_mut(&p) {
                        pn.children = pn.children.saturating_sub(1);
                    }
                    cur = p;
                }
                None => return,
            }
        }
    }

    /// Number of nodes held (for `status`).
    pub fn len(&self) -> usize {
        self.table.read().unwrap().nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The node id of the directory entry `parent/name` if the kernel may have it cached.
    pub fn child(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.table
            .read()
            .unwrap()
            .names
            .get(&(parent, name.to_owned()))
            .copied()
    }

    /// For a workspace-relative path: the node of its parent directory and its own node, as
    /// far as the kernel may know them.
    pub fn resolve(&self, rel: &std::path::Path) -> (Option<u64>, Option<u64>) {
        let t = self.table.read().unwrap();
        let mut cur = Some(ROOT);
        let mut parent = None;
        for c in rel.components() {
            parent = cur;
            cur = cur.and_then(|p| t.names.get(&(p, c.as_os_str().to_owned())).copied());
        }
        (parent, cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
        assert_eq!(t.aliases(a.ino), vec![PathBuf::from("o/obj")]);
        t.renamed(a.ino, (o.ino, OsStr::new("tmp")), None);
        assert_eq!(t.path(a.ino).unwrap(), PathBuf::from("o/obj"));
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
        assert_eq!(t.path(a.ino).unwrap(), PathBuf::from("b"));
        assert_eq!(t.aliases(a.ino), vec![PathBuf::from("a")]);
        std::fs::rename(dir.path().join("a"), dir.path().join("c")).unwrap();
        t.renamed(
            a.ino,
            (ROOT, OsStr::new("a")),
            Some((ROOT, OsStr::new("c"))),
        );
        assert_eq!(t.aliases(a.ino), vec![PathBuf::from("c")]);
        t.renamed(a.ino, (ROOT, OsStr::new("b")), None);
        assert_eq!(t.path(a.ino).unwrap(), PathBuf::from("c"));
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
}
