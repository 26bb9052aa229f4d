//! The inode table: FUSE node ids ↔ backing files, and each node's current name.
//!
//! rewindfs keeps **no fd per inode** (the open-file limit here is 20,000 and a 40k-file tree
//! would exhaust it). Each node remembers one name it is reachable by — its parent node and a
//! file name — and operations re-resolve that path from the workspace root fd. Captures are
//! keyed by path anyway, so the path is what every change needs.
//!
//! Invariants, all kept under the one `RwLock` in [`Inodes`]:
//! - a node id maps to exactly one backing `(dev, ino)` and back (`Table::id_of`);
//! - node ids are the backing inode numbers where possible, so they are stable for the life of
//!   the mount and `ls -i` matches the disk; the workspace root is always node 1;
//! - when a backing inode number is reused by a new file while the kernel still holds the old
//!   node, the node's generation is bumped (the kernel then drops its stale inode instead of
//!   returning `ESTALE` forever);
//! - a node is removed only when the kernel has forgotten it (`nlookup == 0`) and no other
//!   node names it as parent (`children == 0`), so every live node's path can be rebuilt.

use std::ffi::OsStr;
use std::hash::BuildHasher;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::RwLock;

use crate::locks::RwLocked;
use crate::wspath::{self, WsPath};
use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use rustix::fs::Stat;

/// The FUSE root node id.
pub const ROOT: u64 = 1;

/// A directory entry: the parent node and the file name in it.
type Name = (u64, Box<OsStr>);

/// One node the kernel knows about. Kept small: a tree of 100k files holds 100k of them.
#[derive(Debug)]
struct Node {
    /// Backing `(st_dev, st_ino)`.
    key: (u64, u64),
    /// Bumped when the backing inode number is reused for another file.
    generation: u64,
    /// Lookups the kernel holds (decremented by `forget`).
    nlookup: u64,
    /// Where the node currently lives; `None` for the root and for unlinked files. Only changed
    /// through [`Table::set_name`], which keeps the name index in step.
    name: Option<Name>,
    /// Nodes whose `parent` is this node.
    children: u32,
    /// Bumped whenever `no_caps` is cleared, so an answer read from the disk before a
    /// concurrent setxattr cannot set it again (see [`Inodes::learn_no_caps`]).
    caps_epoch: u32,
    /// `S_IFMT` bits of the backing file.
    kind: u32,
    /// The file has more than one name (hard links): a content change changes them all.
    multi: bool,
    /// Known to have no `security.capability` attribute: the daemon created it, or the backing
    /// filesystem said so. Every setxattr comes through the mount, so this stays true until
    /// one sets or removes that attribute (see [`Inodes::forget_no_caps`]).
    no_caps: bool,
}

/// A name of a hard-linked node other than its own `name`.
#[derive(Debug)]
struct Extra {
    hash: u64,
    parent: u64,
    name: Box<OsStr>,
    ino: u64,
}

/// The table. Each name is stored once, in its node; the `(parent, name) → node` index holds
/// only the hash and the node id (the index used to hold a second copy of every name, and with
/// a per-node reverse map it took ~350 bytes per inode; docs/design.md §6 sets 64 MiB for 100k).
#[derive(Default, Debug)]
struct Table {
    nodes: HashMap<u64, Node>,
    /// `(dev, ino) → node` for the nodes whose id is not their backing inode number: the root
    /// and files on other devices. Every other node's id *is* its `st_ino` on the root's
    /// device, so it needs no entry here (see [`Table::id_of`]).
    synthetic: HashMap<(u64, u64), u64>,
    /// `(hash of (parent, name), node)` for each node whose own `name` currently maps to it;
    /// a `(parent, name)` is in at most one of `primary` and `extra`.
    primary: HashTable<(u64, u64)>,
    /// The other names of nodes with several (hard links) that currently map to them.
    extra: HashTable<Extra>,
    /// The other names of nodes with several, per node: so that finding a surviving name or
    /// listing aliases never scans the index (git links each new object and unlinks its
    /// temporary name: a scan there made `git add` quadratic). May hold stale entries; users
    /// check them against the index.
    links: HashMap<u64, Vec<Name>>,
    hasher: DefaultHashBuilder,
    /// Next synthetic node id, for backing inodes whose own number is taken or on another dev.
    next_synthetic: u64,
    /// `st_dev` of the workspace root.
    root_dev: u64,
    /// Nodes removed since the maps were last shrunk (see [`Table::shrink`]).
    removed: usize,
}

/// Nodes removed between two looks at whether the maps are mostly empty (see
/// [`Table::shrink`]).
const SHRINK_EVERY: usize = 10_000;

/// The inode table (one lock; see the module doc for its invariants).
#[derive(Debug)]
pub struct Inodes {
    table: RwLock<Table>,
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

fn is(name: &Option<Name>, parent: u64, nm: &OsStr) -> bool {
    matches!(name, Some((p, n)) if *p == parent && **n == *nm)
}

impl Table {
    fn hash(&self, parent: u64, name: &OsStr) -> u64 {
        self.hasher.hash_one((parent, name.as_bytes()))
    }

    /// The node a backing file is, if the table holds it.
    fn id_of(&self, key: (u64, u64)) -> Option<u64> {
        if key.0 == self.root_dev {
            if let Some(n) = self.nodes.get(&key.1) {
                if n.key == key {
                    return Some(key.1);
                }
            }
        }
        self.synthetic.get(&key).copied()
    }

    /// The node `parent/name` maps to.
    fn get(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.get_h(self.hash(parent, name), parent, name)
    }

    /// [`get`](Self::get) with the name's hash.
    fn get_h(&self, h: u64, parent: u64, name: &OsStr) -> Option<u64> {
        let nodes = &self.nodes;
        if let Some(&(_, ino)) = self.primary.find(h, |&(eh, ino)| {
            eh == h && nodes.get(&ino).is_some_and(|n| is(&n.name, parent, name))
        }) {
            return Some(ino);
        }
        self.extra
            .find(h, |e| e.parent == parent && *e.name == *name)
            .map(|e| e.ino)
    }

    /// Removes whatever `parent/name` maps to.
    fn unmap(&mut self, parent: u64, name: &OsStr) {
        self.unmap_h(self.hash(parent, name), parent, name);
    }

    fn unmap_h(&mut self, h: u64, parent: u64, name: &OsStr) {
        let nodes = &self.nodes;
        if let Ok(e) = self.primary.find_entry(h, |&(eh, ino)| {
            eh == h && nodes.get(&ino).is_some_and(|n| is(&n.name, parent, name))
        }) {
            e.remove();
            return; // a name is in at most one of the two
        }
        if let Ok(e) = self
            .extra
            .find_entry(h, |e| e.parent == parent && *e.name == *name)
        {
            e.remove();
        }
    }

    /// Removes the mapping `parent/name → ino`, if that is what it maps to.
    fn unmap_if(&mut self, parent: u64, name: &OsStr, ino: u64) {
        let h = self.hash(parent, name);
        if self.get_h(h, parent, name) == Some(ino) {
            self.unmap_h(h, parent, name);
        }
    }

    /// Maps `parent/name` to `ino` (replacing what it mapped to).
    fn map(&mut self, parent: u64, name: &OsStr, ino: u64) {
        let h = self.hash(parent, name);
        match self.get_h(h, parent, name) {
            Some(cur) if cur == ino => return,
            Some(_) => self.unmap_h(h, parent, name),
            None => {}
        }
        let own = self
            .nodes
            .get(&ino)
            .is_some_and(|n| is(&n.name, parent, name));
        if own {
            self.primary.insert_unique(h, (h, ino), |&(eh, _)| eh);
        } else {
            let e = Extra {
                hash: h,
                parent,
                name: name.into(),
                ino,
            };
            self.extra.insert_unique(h, e, |e| e.hash);
        }
    }

    /// Gives node `ino` the name `name`, moving its index entry: the old name stops mapping
    /// to it, the new one maps to it (replacing whatever it mapped to before).
    fn set_name(&mut self, ino: u64, name: Option<Name>) {
        let old = match self.nodes.get_mut(&ino) {
            Some(n) => n.name.take(),
            None => return,
        };
        if let Some((p, nm)) = &old {
            // A node has at most one `primary` entry, under its own name's hash.
            let h = self.hash(*p, nm);
            if let Ok(e) = self.primary.find_entry(h, |&(eh, id)| eh == h && id == ino) {
                e.remove();
            }
        }
        let Some((p, nm)) = name else { return };
        let h = self.hash(p, &nm);
        // Whatever the new name mapped to (another node, or this one as an extra name) goes
        // first, so the entry lands in `primary`.
        self.unmap_h(h, p, &nm);
        self.nodes.get_mut(&ino).unwrap().name = Some((p, nm));
        self.primary.insert_unique(h, (h, ino), |&(eh, _)| eh);
    }
}

impl Table {
    /// Gives back the space of the maps that are mostly empty: a map keeps the capacity of its
    /// largest size (a `find` over 60k files left 12 MiB of empty slots). Rehashing what is
    /// left costs a few milliseconds at most, since it is under a quarter of the capacity, and
    /// happens once every [`SHRINK_EVERY`] removals.
    fn shrink(&mut self) {
        fn sparse(len: usize, capacity: usize) -> bool {
            capacity > 1024 && len < capacity / 4
        }
        if sparse(self.nodes.len(), self.nodes.capacity()) {
            self.nodes.shrink_to(self.nodes.len() * 2);
        }
        if sparse(self.links.len(), self.links.capacity()) {
            self.links.shrink_to(self.links.len() * 2);
        }
        if sparse(self.primary.len(), self.primary.capacity()) {
            let n = self.primary.len() * 2;
            self.primary.shrink_to(n, |&(h, _)| h);
        }
        if sparse(self.extra.len(), self.extra.capacity()) {
            let n = self.extra.len() * 2;
            self.extra.shrink_to(n, |e| e.hash);
        }
    }
}

impl Inodes {
    pub fn new(root: &Stat) -> Self {
        let mut t = Table {
            next_synthetic: 1 << 56,
            root_dev: root.st_dev,
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
        t.synthetic.insert(key, ROOT);
        Inodes {
            table: RwLock::new(t),
        }
    }

    /// The workspace-relative path of a node (empty for the root).
    ///
    /// # Errors
    /// `ESTALE` for an unknown node, `ENOENT` for one that no longer has a name (unlinked).
    pub fn path(&self, ino: u64) -> io::Result<wspath::Node> {
        let t = self.table.shared();
        let mut parts: Vec<&OsStr> = Vec::new();
        let mut cur = ino;
        let mut len = 0;
        while cur != ROOT {
            let n = t.nodes.get(&cur).ok_or_else(stale)?;
            match &n.name {
                Some((parent, name)) => {
                    parts.push(name);
                    len += name.len() + 1;
                    cur = *parent;
                }
                None => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
            if parts.len() > 4096 {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
        }
        let mut p = Vec::with_capacity(len);
        for part in parts.iter().rev() {
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(part.as_bytes());
        }
        // Each name was checked when the kernel looked it up; what is left to fail is the
        // length of the whole (`ENAMETOOLONG`, as the call on it would fail).
        Ok(wspath::Node::parse(p)?)
    }

    /// The other names of a hard-linked file that the kernel has looked up (empty for a file
    /// with one name): a change to its content changes what every name shows.
    pub fn aliases(&self, ino: u64) -> Vec<WsPath> {
        let names: Vec<Name> = {
            let t = self.table.shared();
            match t.nodes.get(&ino) {
                Some(n) if n.multi => Self::other_names(&t, ino, n.name.as_ref()).collect(),
                _ => return Vec::new(),
            }
        };
        names
            .into_iter()
            .filter_map(|(p, nm)| self.path(p).ok()?.join(nm.as_bytes()).ok())
            .collect()
    }

    /// The names of `ino` recorded in `links` that still name it, other than `except`.
    fn other_names<'t>(
        t: &'t Table,
        ino: u64,
        except: Option<&'t Name>,
    ) -> impl Iterator<Item = Name> + 't {
        t.links
            .get(&ino)
            .into_iter()
            .flatten()
            .filter(move |k| t.get(k.0, &k.1) == Some(ino) && Some(*k) != except)
            .cloned()
    }

    /// Records `key` as one more name of the multi-name node `ino`.
    fn add_link(t: &mut Table, ino: u64, key: Name) {
        let v = t.links.entry(ino).or_default();
        if !v.contains(&key) {
            v.push(key);
        }
    }

    /// The `S_IFMT` kind recorded for a node.
    pub fn kind(&self, ino: u64) -> Option<u32> {
        self.table.shared().nodes.get(&ino).map(|n| n.kind)
    }

    /// Whether the node is known to have no `security.capability` attribute. The kernel asks
    /// for it before the first write to every inode and before every chown (two of the ten
    /// requests `tar` makes per file); known nodes are answered without a system call.
    pub fn no_caps(&self, ino: u64) -> bool {
        self.table
            .shared()
            .nodes
            .get(&ino)
            .is_some_and(|n| n.no_caps)
    }

    /// Records that the node, just created, has no `security.capability` attribute.
    pub fn set_no_caps(&self, ino: u64) {
        if let Some(n) = self.table.exclusive().nodes.get_mut(&ino) {
            n.no_caps = true;
        }
    }

    /// Forgets that the node has no `security.capability` attribute (it is being set or
    /// removed).
    pub fn forget_no_caps(&self, ino: u64) {
        if let Some(n) = self.table.exclusive().nodes.get_mut(&ino) {
            n.no_caps = false;
            n.caps_epoch = n.caps_epoch.wrapping_add(1);
        }
    }

    /// The node's capabilities epoch, read before asking the disk.
    pub fn caps_epoch(&self, ino: u64) -> Option<u32> {
        self.table.shared().nodes.get(&ino).map(|n| n.caps_epoch)
    }

    /// The disk said the node has no `security.capability`: remembered unless a set or remove
    /// of it came in since `epoch` was read.
    pub fn learn_no_caps(&self, ino: u64, epoch: u32) {
        if let Some(n) = self.table.exclusive().nodes.get_mut(&ino) {
            if n.caps_epoch == epoch {
                n.no_caps = true;
            }
        }
    }

    /// Backing key of a node, to check a re-resolved path still names the same file.
    pub fn key(&self, ino: u64) -> Option<(u64, u64)> {
        self.table.shared().nodes.get(&ino).map(|n| n.key)
    }

    /// The node id a backing file has (or would get), without taking a lookup.
    pub fn ino_of(&self, st: &Stat) -> Option<u64> {
        self.table.shared().id_of((st.st_dev, st.st_ino))
    }

    /// Records that the kernel now holds one more lookup of the file `st` at `parent/name`.
    pub fn lookup(&self, parent: u64, name: &OsStr, st: &Stat) -> Looked {
        let key = (st.st_dev, st.st_ino);
        let kind = st.st_mode & libc::S_IFMT;
        let mut t = self.table.exclusive();
        if let Some(ino) = t.id_of(key) {
            if ino == ROOT {
                return Looked { ino, generation: 0 };
            }
            let n = t.nodes.get_mut(&ino).expect("id_of and nodes agree");
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
            if !is(&n.name, parent, name) {
                let old = n.name.clone();
                let old_mapped = old
                    .as_ref()
                    .is_some_and(|(p, nm)| t.get(*p, nm) == Some(ino));
                t.set_name(ino, Some((parent, name.into())));
                if let Some(p) = t.nodes.get_mut(&parent) {
                    p.children += 1;
                }
                if let Some((op, onm)) = old {
                    if multi {
                        // The old name stays one of the file's names.
                        if old_mapped {
                            t.map(op, &onm, ino);
                        }
                        Self::add_link(&mut t, ino, (op, onm));
                    }
                    Self::release_child(&mut t, op);
                }
            }
            return Looked { ino, generation: g };
        }
        // A new node. Use the backing inode number when it is free and on the root's device.
        let own_number =
            st.st_dev == t.root_dev && st.st_ino != ROOT && !t.nodes.contains_key(&st.st_ino);
        let ino = if own_number {
            st.st_ino
        } else {
            t.next_synthetic += 1;
            let id = t.next_synthetic;
            t.synthetic.insert(key, id);
            id
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
                name: None,
                kind,
                multi: kind != libc::S_IFDIR && st.st_nlink > 1,
                no_caps: false,
                caps_epoch: 0,
            },
        );
        t.set_name(ino, Some((parent, name.into())));
        Looked { ino, generation: 0 }
    }

    /// Like [`lookup`](Self::lookup) for a new hard link: one more lookup held, but an existing
    /// node keeps the name it has (the name writers most likely use).
    pub fn lookup_link(&self, parent: u64, name: &OsStr, st: &Stat) -> Looked {
        {
            let mut t = self.table.exclusive();
            if let Some(ino) = t.id_of((st.st_dev, st.st_ino)) {
                t.map(parent, name, ino);
                Self::add_link(&mut t, ino, (parent, name.into()));
                let n = t.nodes.get_mut(&ino).expect("id_of and nodes agree");
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
        let mut t = self.table.exclusive();
        let from_key: Name = (from.0, from.1.into());
        if let Some(v) = t.links.get_mut(&ino) {
            v.retain(|k| *k != from_key);
        }
        let Some(n) = t.nodes.get(&ino) else {
            // Not a node the table holds: its names map to nothing it knows.
            t.unmap_if(from.0, from.1, ino);
            if let Some((p, nm)) = to {
                t.unmap(p, nm);
            }
            return;
        };
        let is_primary = n.name.as_ref() == Some(&from_key);
        let multi = n.multi;
        if !is_primary {
            // Another name of a hard-linked file; the node keeps its own.
            t.unmap_if(from.0, from.1, ino);
            if let Some((p, nm)) = to {
                t.map(p, nm, ino);
                Self::add_link(&mut t, ino, (p, nm.into()));
            }
            return;
        }
        let new_name: Option<Name> = match to {
            Some((p, nm)) => Some((p, nm.into())),
            // Only a file with other names (hard links) can keep one.
            None if multi => Self::other_names(&t, ino, Some(&from_key)).next(),
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
        t.set_name(ino, new_name);
        Self::release_child(&mut t, old_parent);
        if gone {
            Self::maybe_remove(&mut t, ino);
        }
    }

    /// A node's file was deleted for good (nlink reached 0): forget its backing key so a new
    /// file reusing the inode number gets a fresh generation.
    pub fn unlinked(&self, ino: u64) {
        let mut t = self.table.exclusive();
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.generation += 1;
        }
    }

    /// The kernel dropped `count` lookups of a node; the number of nodes that went with it
    /// (the node and parents it kept), whose memory the caller may want handed back.
    pub fn forget(&self, ino: u64, count: u64) -> usize {
        if ino == ROOT {
            return 0;
        }
        let mut t = self.table.exclusive();
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.nlookup = n.nlookup.saturating_sub(count);
        }
        let before = t.removed;
        Self::maybe_remove(&mut t, ino);
        let gone = t.removed - before;
        if t.removed >= SHRINK_EVERY {
            t.removed = 0;
            t.shrink();
        }
        gone
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
            let parent = n.name.as_ref().map(|(p, _)| *p);
            let key = n.key;
            // Unindex every name while the node still exists (the index checks names
            // against it).
            t.set_name(cur, None);
            for (p, nm) in t.links.remove(&cur).unwrap_or_default() {
                t.unmap_if(p, &nm, cur);
            }
            t.nodes.remove(&cur);
            t.removed += 1;
            if t.synthetic.get(&key) == Some(&cur) {
                t.synthetic.remove(&key);
            }
            match parent {
                Some(p) => {
                    if let Some(pn) = t.nodes.get_mut(&p) {
                        pn.children = pn.children.saturating_sub(1);
                    }
                    cur = p;
                }
                None => return,
            }
        }
    }

    /// The node id of the directory entry `parent/name` if the kernel may have it cached.
    #[cfg(test)]
    pub fn child(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.table.shared().get(parent, name)
    }
}

#[cfg(test)]
mod tests;
