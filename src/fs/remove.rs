//! Taking names away — unlink, rmdir, rename — by the removal protocol, and the fs side of
//! adopting a deleted file's inode.
//!
//! A name that goes may be its file's last: the file's content must be saved before, and
//! whoever holds the file open must still reach it after. Every removal runs through
//! [`Core::removal`]:
//!
//! 1. With `last_name` ([`Core::is_last_name`]: the name is the only one of a regular file,
//!    the target of an unlink or of a rename over it), `removing` is taken exclusive and held
//!    until the name is gone from the inode table. A change to a named file holds `removing`
//!    shared from finding the file by its name until it is done ([`Core::for_change`]): each
//!    lands before the store can take the inode, and one that comes later finds the node
//!    nameless.
//! 2. The observer's `before` saves the pre-image; with `last_name` the store may *adopt* the
//!    inode (hard-link it into its `pending/` directory) instead of copying it.
//! 3. If the kernel holds a node for the file and the file may be left with no name the
//!    kernel knows ([`Core::victim`]), the node's fd is pinned — marked `adopted` too with
//!    `last_name` — before the name goes, as the kernel may have the file open (`files.rs`).
//! 4. The change is applied. On success the observer's `after` logs it (and the store settles
//!    the adoption); on failure the pin is taken back and the observer's `failed` runs (the
//!    file lives on under its name, so the store gives its pre-image a copy of its own).
//! 5. The inode table drops the name, and a node left with none is marked unlinked.
//!
//! Adoption (`adopt → settle | unshare → resolve → finish`) is a lifecycle held by capture and
//! the store. The fs side of it is: decide whether a removal may adopt (`last_name`); keep
//! changes that found the file by its name off the inode while it does (`removing`); and keep
//! an adopted inode unchanged for the rest of its node's life (the `adopted` mark: the first
//! change goes to a private copy, and getattr reports no links, as they are the store's).
//! A rewind changes the tree through the mount, by these same operations.
//!
//! Methods of `Core` (the passthrough core; its state is in `core.rs`).

use std::ffi::OsStr;
use std::io;

use rustix::fs::Stat;

use super::core::{Core, Ctx, err};
use crate::capture::{Change, Op};
use crate::locks::RwLocked;
use crate::sys;
use crate::wspath::{Node, WsPath};

fn is_regular(st: &Stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

impl Core {
    /// Whether `st` is a regular file with one name: a change taking that name away may keep
    /// its content by hard-linking it into the store. (The file may still be open: a change to
    /// it once its name is gone goes to a copy, see [`Core::for_change`].)
    fn is_last_name(st: &Stat) -> bool {
        st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink == 1
    }

    /// Whether the file of `st` is open for writing through passthrough (`opens.rs`), or about
    /// to be: its inode must not become the store's pre-image, as that writer would change it
    /// without the daemon seeing. Asked holding `removing` exclusive, so no writer can begin
    /// after the answer (its pre-image is saved under `removing` shared, and one that finds the
    /// file nameless is refused).
    fn written_past_daemon(&self, st: &Stat) -> bool {
        self.inodes
            .ino_of(st)
            .is_some_and(|ino| self.opens.has_writers(ino))
    }

    /// The node of `st`, a file about to lose a name, if the kernel holds one and the file may
    /// be left with no name it knows: a regular file with one name, or whose other names were
    /// never looked up. Its fd is pinned before the name goes (see [`Core::pin`]), as the
    /// kernel may have it open. (A file that keeps a known name is reached by that name: git
    /// links each object to its final name and unlinks the temporary one.)
    fn victim(&self, st: &Stat) -> Option<u64> {
        let ino = self.inodes.ino_of(st)?;
        (is_regular(st) && (st.st_nlink == 1 || self.inodes.aliases(ino).is_empty())).then_some(ino)
    }

    /// Runs `apply` between the observer's `before` and `after` (or `failed`) for a change that
    /// may take away a name of a file; `victim` is its node to pin first (see `victim`).
    fn removal<T>(
        &self,
        ctx: &Ctx,
        change: Change<'_>,
        victim: Option<u64>,
        apply: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let _permit = self.observer.before(ctx.pid, &change)?;
        let pinned = match victim {
            Some(v) => {
                let p = change.path2.map_or(change.path.as_path(), WsPath::as_path);
                self.pin(v, p, change.last_name)
            }
            None => false,
        };
        match apply() {
            Ok(v) => {
                self.observer.after(ctx.pid, &change);
                Ok(v)
            }
            Err(e) => {
                if pinned {
                    self.unpin(victim.unwrap());
                }
                self.observer.failed(&change);
                Err(e)
            }
        }
    }

    pub fn unlink(&self, ctx: &Ctx, parent: u64, name: &OsStr) -> io::Result<()> {
        self.remove(ctx, parent, name, false)
    }

    pub fn rmdir(&self, ctx: &Ctx, parent: u64, name: &OsStr) -> io::Result<()> {
        self.remove(ctx, parent, name, true)
    }

    fn remove(&self, ctx: &Ctx, parent: u64, name: &OsStr, is_dir: bool) -> io::Result<()> {
        let p = Node::from(self.child_path(parent, name)?);
        let st = sys::lstat_at(self.root(), p.as_path())?;
        let is_actually_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        if is_dir && !is_actually_dir {
            return Err(err(libc::ENOTDIR));
        }
        if !is_dir && is_actually_dir {
            return Err(err(libc::EISDIR));
        }
        let op = if is_dir { Op::Rmdir } else { Op::Unlink };
        let single = !is_dir && Self::is_last_name(&st);
        // Until the name is gone from the table (see `Core::removing`).
        let _exclusive = single.then(|| self.removing.exclusive());
        let change = Change {
            op,
            path: &p,
            path2: None,
            aliases: &[],
            last_name: single && !self.written_past_daemon(&st),
            range: None,
            file: None,
            gone: Some(&st),
        };
        let victim = self.victim(&st);
        self.removal(ctx, change, victim, || {
            sys::unlinkat(self.root(), p.as_path(), is_dir)
        })?;
        if let Some(ino) = self.inodes.ino_of(&st) {
            self.inodes.renamed(ino, (parent, name), None);
            if is_dir || st.st_nlink <= 1 {
                self.inodes.unlinked(ino);
            }
        }
        Ok(())
    }

    pub fn rename(
        &self,
        ctx: &Ctx,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> io::Result<()> {
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        let src = sys::lstat_at(self.root(), from.as_path())?;
        let dst = sys::lstat_opt(self.root(), to.as_path())?;
        let from = Node::from(from);
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let op = if exchange { Op::Exchange } else { Op::Rename };
        let same_file = dst
            .as_ref()
            .is_some_and(|d| (d.st_dev, d.st_ino) == (src.st_dev, src.st_ino));
        let single = !exchange && !same_file && dst.as_ref().is_some_and(Self::is_last_name);
        // Until the name is gone from the table (see `Core::removing`).
        let _exclusive = single.then(|| self.removing.exclusive());
        let change = Change {
            op,
            path: &from,
            path2: Some(&to),
            aliases: &[],
            last_name: single && !dst.as_ref().is_some_and(|d| self.written_past_daemon(d)),
            range: None,
            file: None,
            gone: dst.as_ref(),
        };
        let victim = dst
            .as_ref()
            .filter(|_| !exchange && !same_file)
            .and_then(|d| self.victim(d));
        self.removal(ctx, change, victim, || {
            sys::renameat2(self.root(), from.as_path(), to.as_path(), flags)
        })?;
        let src_ino = self.inodes.ino_of(&src);
        let dst_ino = dst.as_ref().and_then(|d| self.inodes.ino_of(d));
        let same = dst
            .as_ref()
            .is_some_and(|d| (d.st_dev, d.st_ino) == (src.st_dev, src.st_ino));
        if same {
            return Ok(()); // renaming a hard link onto another name of itself does nothing
        }
        if let Some(d) = dst_ino {
            if exchange {
                self.inodes
                    .renamed(d, (newparent, newname), Some((parent, name)));
            } else {
                self.inodes.renamed(d, (newparent, newname), None);
                let dst = dst.unwrap();
                if dst.st_mode & libc::S_IFMT == libc::S_IFDIR || dst.st_nlink <= 1 {
                    self.inodes.unlinked(d);
                }
            }
        }
        if let Some(s) = src_ino {
            self.inodes
                .renamed(s, (parent, name), Some((newparent, newname)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;
    use crate::capture::{Observer, Permit};
    use crate::fs::core::SetAttr;
    use crate::fs::inodes::ROOT;

    /// Keeps the content of a file losing its last name by a hard link into a "store"
    /// directory, as the store adopts files (see `store/blobs/adopt.rs`).
    struct Adopter {
        root: PathBuf,
        store: PathBuf,
    }

    impl Observer for Adopter {
        fn before(&self, _pid: u32, change: &Change<'_>) -> io::Result<Permit<'_>> {
            if change.last_name {
                let p = change.path2.map_or(change.path.as_path(), WsPath::as_path);
                std::fs::hard_link(self.root.join(p), self.store.join(p))?;
            }
            Ok(None)
        }
        fn after(&self, _pid: u32, _change: &Change<'_>) {}
    }

    const CTX: Ctx = Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
    };

    fn read_all(core: &Core, ino: u64) -> Vec<u8> {
        let mut buf = vec![0; 64];
        let n = core.read(ino, 0, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// A file someone holds open (the kernel holds its node) after its last name went: it can
    /// still be read and changed through the node, and a change goes to a copy, never to the
    /// inode the store kept as the removal's pre-image. Without the copy the last assertion
    /// fails; without the pinned fd the read fails.
    #[test]
    fn a_change_to_a_file_whose_last_name_went_never_reaches_its_adopted_pre_image() {
        for rename_over in [false, true] {
            let d = tempfile::tempdir().unwrap();
            let (root, store) = (d.path().join("w"), d.path().join("s"));
            std::fs::create_dir_all(&root).unwrap();
            std::fs::create_dir_all(&store).unwrap();
            std::fs::write(root.join("f"), b"old").unwrap();
            std::fs::write(root.join("g"), b"new file").unwrap();
            let obs = Arc::new(Adopter {
                root: root.clone(),
                store: store.clone(),
            });
            let core = Core::new(sys::open_dir_path(&root).unwrap(), obs).unwrap();
            let (l, _) = core.lookup(ROOT, OsStr::new("f")).unwrap();
            core.lookup(ROOT, OsStr::new("g")).unwrap();
            if rename_over {
                let (g, f) = (OsStr::new("g"), OsStr::new("f"));
                core.rename(&CTX, ROOT, g, ROOT, f, 0).unwrap();
            } else {
                core.unlink(&CTX, ROOT, OsStr::new("f")).unwrap();
            }
            assert!(core.path(l.ino).is_err(), "the node has no name left");
            assert_eq!(read_all(&core, l.ino), b"old");
            assert_eq!(core.write(&CTX, l.ino, 0, b"NEW!", false).unwrap(), 4);
            core.setattr(
                &CTX,
                l.ino,
                SetAttr {
                    size: Some(5),
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(read_all(&core, l.ino), b"NEW!\0");
            assert_eq!(core.getattr(l.ino).unwrap().st_size, 5);
            assert_eq!(std::fs::read(store.join("f")).unwrap(), b"old");
        }
    }

    /// Without adoption (the file had another name, which the kernel never looked up), a
    /// change through the node reaches the file itself: a hard link shares its content.
    #[test]
    fn a_change_to_a_file_still_named_elsewhere_reaches_that_name() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"old").unwrap();
        std::fs::hard_link(d.path().join("f"), d.path().join("other")).unwrap();
        let core = Core::new(
            sys::open_dir_path(d.path()).unwrap(),
            Arc::new(crate::capture::Passthrough),
        )
        .unwrap();
        let (l, _) = core.lookup(ROOT, OsStr::new("f")).unwrap();
        core.unlink(&CTX, ROOT, OsStr::new("f")).unwrap();
        core.write(&CTX, l.ino, 0, b"NEW", false).unwrap();
        assert_eq!(std::fs::read(d.path().join("other")).unwrap(), b"NEW");
    }
}
