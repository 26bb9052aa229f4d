//! Applying a plan through the mount: a live rewind, undo or redo changes the tree as a process
//! would, so that editors, dev servers and watchers of the mount see it (the same inotify
//! events a process making those changes through the mount causes), and a file that is still
//! there keeps its inode (an editor holding it open reads the restored content).
//!
//! Targets of [`Apply::Replace`] are applied in the four passes of `apply.rs` (removals deepest
//! first, directories shallowest first, then files, symlinks and special files, then directory
//! modes deepest first), each step through the mount:
//! - a file that is there, a regular file with one name, is rewritten in place: opened
//!   `O_WRONLY|O_NOFOLLOW` and written over, then cut to length, if its content differs (the
//!   content verified first: as planning read it from its blob, hashed again, or the blob
//!   itself), then given its owner, extended attributes and mode where they
//!   differ — a mode restored is a chmod and nothing more;
//! - a file that is not there, or that the rewind may not open for writing, or that has other
//!   names, a symlink and a special file are written under a temp name beside the path and
//!   renamed into place (`RENAME_NOREPLACE` where nothing was there: a watcher sees the path
//!   arrive complete);
//! - removals are unlinks and rmdirs, directories are made with mkdir, modes, owners and
//!   attributes set with chmod, chown and setxattr.
//!
//! Tool-scope ([`Apply::InPlace`]) targets then follow, as the SDK applies them
//! (`apply::apply_in_place`, on the same [`Tree`]).
//!
//! Invariants:
//! - the FUSE core captures what each step overwrites, as for any process, under the rewind's
//!   own checkpoint (the rewind's helper process is `Actor::Rewind`, see
//!   `capture/meanwhile.rs`);
//! - every step is made relative to its parent directory opened without following a symlink
//!   (`apply::parent_of`, `sys::open_beneath`), never through a path that could leave the
//!   workspace;
//! - a step refused because someone else changed its path since the rewind began
//!   ([`MEANWHILE`](crate::capture::MEANWHILE)), or that fails on a path changed meanwhile,
//!   leaves that target alone (`Applied::meanwhile`, and the later passes skip it); any other
//!   failure stops the apply, and the journalled plan is finished at the next mount;
//! - it runs in a helper process of the daemon's (`helper.rs`), never in the daemon, and
//!   takes nothing from the daemon but the plan and the answers to "changed meanwhile?".

use std::cell::Cell;
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::apply::{
    Applied, Tree, apply_in_place, ensure_parents, kind_of_mode, parent_of, temp_name,
};
use super::passes::{self, Step, Steps};
use super::{Differs, Planned, Target, attrs};
use crate::capture::MEANWHILE;
use crate::store::{Apply, Blobs, Kind};
use crate::sys::{self, ModeOwner};
use crate::wspath::WsPath;

/// Applies the `planned` targets through the mount (`tree`), each as far as planning saw it
/// differ, from the content planning handed over or else from its blob. `id` names the
/// rewind (its temp names).
///
/// # Errors
/// The first failure that is not a path changed meanwhile; the paths before it are done.
pub(super) fn apply(
    tree: Tree<'_>,
    blobs: &Blobs,
    planned: &[&Planned],
    id: &str,
) -> io::Result<Applied> {
    let mut in_place = Vec::new();
    let mut order = Vec::new();
    for p in planned {
        let t = &p.target;
        match t.apply {
            Apply::InPlace => in_place.push(t),
            Apply::Replace => order.push((t, p.differs, p.content.as_deref())),
        }
    }
    let mut live = Live {
        tree,
        blobs,
        id,
        applied: Applied::default(),
        dirs: HashSet::new(),
        made: HashSet::new(),
        stepped: Cell::new(false),
    };
    passes::run(order, &mut live)?;
    let mut applied = live.applied;
    applied.extend(apply_in_place(tree, blobs, &in_place)?);
    Ok(applied)
}

/// One apply through the mount.
struct Live<'a> {
    tree: Tree<'a>,
    /// Where the targets' contents are read from.
    blobs: &'a Blobs,
    /// The rewind's id, which its temp names carry.
    id: &'a str,
    /// What it left alone.
    applied: Applied,
    /// Directories known to be there (parents made or checked).
    dirs: HashSet<PathBuf>,
    /// Directories this apply made (their attributes are set whatever planning saw).
    made: HashSet<WsPath>,
    /// The current target's step has changed the tree (a byte written, the file cut, a
    /// child removed): a refusal after that leaves the target partly restored.
    stepped: Cell<bool>,
}

impl Live<'_> {
    fn root(&self) -> BorrowedFd<'_> {
        self.tree.fd
    }

    /// Whether an earlier pass left target `t` alone (or partly restored).
    fn skipped(&self, t: &Target) -> bool {
        self.applied.left(&t.path)
    }

    /// The outcome of one target's step: a failure because its path (or, with `beneath`, what
    /// lies below it) changed meanwhile leaves it alone — partly restored if the step, or an
    /// earlier pass (a directory it made), had changed it already; any other stops the apply.
    fn settle(&mut self, t: &Target, beneath: bool, r: io::Result<()>) -> io::Result<()> {
        let stepped = self.stepped.replace(false);
        self.tree.step();
        match r {
            Ok(()) => Ok(()),
            Err(e) if self.tree.meanwhile(&e, t.path.as_bytes(), beneath) => {
                if stepped || self.made.contains(&t.path) {
                    self.applied.partly_changed_meanwhile(&t.path);
                } else {
                    self.applied.changed_meanwhile(&t.path);
                }
                Ok(())
            }
            Err(e) => Err(sys::ctx(e, format!("restoring {}", t.rel().display()))),
        }
    }

    fn remove_one(&mut self, t: &Target) -> io::Result<()> {
        let rel = t.rel();
        let Some(cur) = sys::lstat_beneath_mode_owner(self.root(), rel)? else {
            return Ok(());
        };
        let cur_kind = kind_of_mode(cur.mode);
        if t.kind == Kind::Absent
            || (cur_kind != t.kind && (cur_kind == Kind::Dir || t.kind == Kind::Dir))
        {
            self.remove_tree(rel, cur_kind == Kind::Dir)?;
        }
        Ok(())
    }

    /// Removes a path; a directory with everything beneath it. An entry someone else made or
    /// changed meanwhile stays (and is reported), and so does every directory above it.
    fn remove_tree(&mut self, rel: &Path, is_dir: bool) -> io::Result<()> {
        if is_dir {
            let fd = sys::open_beneath(self.root(), rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
            let mut kept = false;
            for (name, _, dtype) in sys::read_dir_all(fd)? {
                let child = rel.join(&name);
                self.tree.step();
                match self.remove_tree(&child, dtype == libc::DT_DIR) {
                    Ok(()) => self.stepped.set(true),
                    Err(e) if self.tree.meanwhile(&e, child.as_os_str().as_bytes(), true) => {
                        self.applied
                            .changed_meanwhile(&WsPath::parse(child.as_os_str().as_bytes())?);
                        kept = true;
                    }
                    Err(e) => return Err(e),
                }
            }
            if kept {
                return Err(io::Error::from_raw_os_error(MEANWHILE));
            }
        }
        let (dir, name) = parent_of(self.root(), rel)?;
        match sys::unlinkat(dir.as_fd(), Path::new(name), is_dir) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            // Something was made in it since it was listed: someone else's.
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                Err(io::Error::from_raw_os_error(MEANWHILE))
            }
            Err(e) => Err(sys::ctx(e, format!("removing {}", rel.display()))),
        }
    }

    fn make_one_dir(&mut self, t: &Target) -> io::Result<()> {
        let rel = t.rel();
        self.parents(rel)?;
        match sys::lstat_beneath_mode_owner(self.root(), rel)? {
            Some(st) if st.mode & libc::S_IFMT == libc::S_IFDIR => {}
            _ => {
                let (dir, name) = parent_of(self.root(), rel)?;
                sys::mkdirat(dir.as_fd(), Path::new(name), 0o700)?;
                self.made.insert(t.path.clone());
            }
        }
        self.dirs.insert(rel.to_path_buf());
        Ok(())
    }

    /// Makes the missing parents of `rel`, once per directory.
    fn parents(&mut self, rel: &Path) -> io::Result<()> {
        let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(());
        };
        if self.dirs.contains(parent) {
            return Ok(());
        }
        ensure_parents(self.tree, rel)?;
        self.dirs.insert(parent.to_path_buf());
        Ok(())
    }

    /// Gives `t`'s path its state: in place if it is a regular file with one name that can be
    /// opened for writing, else written beside and renamed over it.
    fn put(&mut self, t: &Target, d: Differs, content: Option<&[u8]>) -> io::Result<()> {
        let rel = t.rel();
        // Only what the kernel holds valid is asked for (`sys::ModeOwner`): a stat of the times
        // would cost this file two more requests.
        let cur = sys::lstat_beneath_mode_owner(self.root(), rel)?;
        if t.kind == Kind::File {
            if let Some(st) = cur.filter(|st| kind_of_mode(st.mode) == Kind::File && st.nlink == 1)
            {
                // Opened for writing only to write: closing it is a write to watchers.
                let flags = if d.content {
                    OFlags::WRONLY | OFlags::NONBLOCK
                } else {
                    OFlags::PATH
                };
                match sys::open_beneath(self.root(), rel, flags, 0) {
                    Ok(fd) => return self.rewrite(fd.as_fd(), &st, t, d, content),
                    // Read-only to the daemon (not root), being executed, or leased to
                    // someone (`O_NONBLOCK`: EAGAIN instead of waiting for the lease to be
                    // broken): as an editor saving by rename would.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EACCES | libc::EPERM | libc::ETXTBSY | libc::EAGAIN)
                        ) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.beside(t, cur.is_some(), content)
    }

    /// Rewrites the regular file open at `fd` (`st`: its state) in place: its content if it
    /// differs (`fd` is then open for writing; otherwise an `O_PATH` handle), then its owner
    /// (as root), extended attributes and mode where they differ.
    fn rewrite(
        &self,
        fd: BorrowedFd<'_>,
        st: &ModeOwner,
        t: &Target,
        d: Differs,
        content: Option<&[u8]>,
    ) -> io::Result<()> {
        if d.content {
            // Written over from the start, then cut to length: emptying the file first would
            // free its blocks only to allocate them again (on a filesystem mounted with
            // `discard`, 1.6 ms a file here), and ext4 writes a file emptied and rewritten out
            // to disk when it is closed. Cut whatever its size: the size the kernel holds after
            // a write is one it would ask the daemon for again (`sys::ModeOwner`), and the cut
            // costs the one request that asking would.
            let empty = crate::store::blobs::empty_hash();
            let hash = t.blob.as_ref().map_or(empty.as_str(), |b| b.as_str());
            let written = Cell::new(0);
            let len = match content {
                Some(data) => Blobs::write_checked_counted(hash, data, fd, &written),
                None => self
                    .blobs
                    .write_verified_counted(hash, fd, || Ok(()), &written),
            };
            self.stepped.set(written.get() > 0);
            let len = len?;
            pause_once();
            sys::ftruncate(fd, len)?;
            self.stepped.set(true);
            // A write takes away the set-user/group-ID bits (the kernel asks the daemon to, for
            // a writer without CAP_FSETID) and `security.capability`: what planning saw of the
            // mode and attributes is no longer what is there.
            let privileged = st.mode & 0o6000 != 0 || t.mode & 0o6000 != 0;
            let capability = t
                .xattrs
                .as_ref()
                .is_some_and(|x| x.get(b"security.capability").is_some());
            if privileged || capability {
                // All of it, asked of the daemon: what the write took away.
                let now = ModeOwner::from(&sys::fstat(fd)?);
                return self.set_meta(fd, &now, t, d.xattrs || capability);
            }
        }
        self.set_meta(fd, st, t, d.xattrs)
    }

    /// The owner (as root), extended attributes (if `xattrs` differ) and mode of the file or
    /// directory `fd` stands for (`st`: its state), where they differ from `t`'s, in that
    /// order: a chown drops some attributes and set-user/group-ID bits, an ACL sets group bits.
    fn set_meta(
        &self,
        fd: BorrowedFd<'_>,
        st: &ModeOwner,
        t: &Target,
        xattrs: bool,
    ) -> io::Result<()> {
        let chowned = sys::geteuid() == 0
            && (st.uid, st.gid) != (t.uid, t.gid)
            && sys::chown_fd(fd, t.uid, t.gid).is_ok();
        if chowned {
            self.stepped.set(true);
        }
        if xattrs {
            attrs::restore(fd, t.rel(), t.xattrs.as_ref());
            self.stepped.set(true);
        }
        if chowned || xattrs || st.mode & 0o7777 != t.mode & 0o7777 {
            sys::chmod_fd(fd, t.mode & 0o7777)?;
        }
        Ok(())
    }

    /// Writes `t`'s state under a temp name beside its path and renames it into place: over
    /// what is there (`over`), or only if nothing is (someone who made the path meanwhile
    /// keeps it).
    fn beside(&self, t: &Target, over: bool, content: Option<&[u8]>) -> io::Result<()> {
        let rel = t.rel();
        let (dir, name) = parent_of(self.root(), rel)?;
        let tmp = temp_name(name, self.id);
        let tmp = Path::new(&tmp);
        let res = self
            .write_temp(dir.as_fd(), tmp, t, content)
            .and_then(|()| {
                let flags = if over { 0 } else { libc::RENAME_NOREPLACE };
                sys::renameat2(dir.as_fd(), tmp, Path::new(name), flags)
            })
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EEXIST) if !over => io::Error::from_raw_os_error(MEANWHILE),
                _ => e,
            });
        if res.is_err() {
            let _ = sys::unlinkat(dir.as_fd(), tmp, false);
        }
        res
    }

    /// Writes target `t` (a file, symlink or special file) at `tmp` in `dir`, replacing
    /// whatever an earlier attempt left there.
    fn write_temp(
        &self,
        dir: BorrowedFd<'_>,
        tmp: &Path,
        t: &Target,
        content: Option<&[u8]>,
    ) -> io::Result<()> {
        let root = sys::geteuid() == 0;
        match t.kind {
            Kind::File => {
                let create = || {
                    sys::openat(
                        dir,
                        tmp,
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
                        0o600,
                    )
                };
                let fd = match create() {
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        sys::unlinkat(dir, tmp, false)?;
                        create()?
                    }
                    r => r?,
                };
                let empty = crate::store::blobs::empty_hash();
                let hash = t.blob.as_ref().map_or(empty.as_str(), |b| b.as_str());
                match content {
                    Some(data) => {
                        Blobs::write_checked_counted(hash, data, fd.as_fd(), &Cell::new(0))?;
                    }
                    None => {
                        self.blobs.write_verified(hash, fd.as_fd(), || Ok(()))?;
                    }
                }
                if root {
                    let _ = sys::fchown(fd.as_fd(), t.uid, t.gid);
                }
                // After the owner (a chown drops security.capability), before the mode.
                attrs::restore(fd.as_fd(), tmp, t.xattrs.as_ref());
                sys::fchmod(fd.as_fd(), t.mode & 0o7777)?;
            }
            Kind::Symlink => {
                let _ = sys::unlinkat(dir, tmp, false);
                let target = t.target.clone().unwrap_or_default();
                sys::symlinkat(crate::wspath::key_path(&target), dir, tmp)?;
                if root {
                    let _ = sys::lchownat(dir, tmp, Some(t.uid), Some(t.gid));
                }
            }
            _ => {
                let _ = sys::unlinkat(dir, tmp, false);
                sys::mknodat(dir, tmp, t.mode, t.rdev)?;
                if root {
                    let _ = sys::lchownat(dir, tmp, Some(t.uid), Some(t.gid));
                }
                attrs::restore_at(dir, tmp, t.xattrs.as_ref());
                sys::chmodat(dir, tmp, t.mode & 0o7777)?;
            }
        }
        Ok(())
    }

    fn one_dir_attrs(&self, t: &Target, d: Differs) -> io::Result<()> {
        let rel = t.rel();
        let fd: OwnedFd = sys::open_beneath(self.root(), rel, OFlags::PATH | OFlags::DIRECTORY, 0)?;
        let st = sys::fstat_mode_owner(fd.as_fd())?;
        let made = self.made.contains(&t.path);
        self.set_meta(fd.as_fd(), &st, t, d.xattrs || made)
    }
}

/// Through the mount every step is a process's change (the FUSE core captures it): a step
/// refused because someone else changed its path meanwhile leaves that target alone, and later
/// passes skip it.
impl Steps for Live<'_> {
    fn remove(&mut self, (t, _, _): &Step<'_>) -> io::Result<()> {
        let r = self.remove_one(t);
        self.settle(t, true, r)
    }

    fn make_dir(&mut self, (t, _, _): &Step<'_>) -> io::Result<()> {
        if self.skipped(t) {
            return Ok(());
        }
        let r = self.make_one_dir(t);
        self.settle(t, false, r)
    }

    /// In place or beside and renamed into place, missing parents made first.
    fn write(&mut self, (t, d, content): &Step<'_>) -> io::Result<()> {
        if self.skipped(t) {
            return Ok(());
        }
        let r = self
            .parents(t.rel())
            .and_then(|()| self.put(t, *d, *content));
        self.settle(t, false, r)
    }

    /// Only what differs, or everything of a directory this apply made.
    fn dir_attrs(&mut self, (t, d, _): &Step<'_>) -> io::Result<()> {
        if self.skipped(t) {
            return Ok(());
        }
        let r = self.one_dir_attrs(t, *d);
        self.settle(t, false, r)
    }
}

/// The fault-injection build's pause, in the first file rewritten in place, between its
/// content and its length (`faults::pause_applying`); once per helper (one per rewind).
fn pause_once() {
    static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Some(d) = crate::faults::pause_applying() {
        if !PAUSED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(d);
        }
    }
}
