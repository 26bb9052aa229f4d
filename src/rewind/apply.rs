//! Applying a plan behind the mount: every target path set to its state, on the workspace's
//! underlying directory (recovery at mount, before the mount serves; a live rewind applies
//! through the mount instead, see `live.rs`). The tool scope's in-place steps
//! ([`apply_in_place`]) are shared by both: they work on a [`Tree`], which says where the paths
//! resolve and who captures what they overwrite.
//!
//! Targets of [`Apply::Replace`] (scopes `agent` and `all`, undo) are applied by
//! [`apply_plan`] in the four passes of `passes.rs` (removals deepest first, directories
//! shallowest first, then files, symlinks and special files, then directory modes deepest
//! first), with the steps of [`Behind`]. Targets of [`Apply::InPlace`] (scope `tool`) come
//! after, one after the other in plan order, as the SDK's own rewind does them
//! ([`apply_in_place`]): a file rewritten in place or unlinked, or skipped when [`look`] says
//! it is no longer safe to touch.
//!
//! Invariants:
//! - What a pass is about to overwrite, remove or create, and a directory whose mode or owner
//!   it is about to set, is captured first, under the rewind's own checkpoint
//!   (`capture_for_rewind`, `capture_for_replace`), so the rewind can be undone exactly.
//! - A replaced file, symlink or special file is written under a temp name beside it and
//!   exchanged into place: a reader sees the old state or the new one, never a mix. An in-place
//!   file keeps its inode and is not atomic: it is truncated, then written.
//! - Applying can be repeated over a tree it left half done: a path already in its target
//!   state is set to it again (an in-place file is truncated and written again), and the temp
//!   name is the rewind's own, so finishing a rewind after a crash replaces a half-written temp
//!   (see `recovery.rs`).
//! - Every path is workspace-relative and resolved beneath the root fd, never as a string, and
//!   never through a symlink.
//! - Behind the mount, nothing else changes the tree (the mount does not serve yet). Through
//!   the mount ([`Tree::mount`]) a step the FUSE core refuses because someone else changed its
//!   path since the rewind began ([`MEANWHILE`]) leaves that path alone, reported in
//!   [`Applied::meanwhile`]; the other paths go on.
//! - Owners are restored only when the daemon runs as root; elsewhere a chown could only
//!   fail, and the rewind does not fail for it. An in-place file keeps its owner (the SDK's
//!   does); one it creates gets the target's. Extended attributes are given exactly as
//!   recorded (see `attrs.rs` for which), after the owner and before the mode.

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{OFlags, Stat};

use super::passes::{self, Step, Steps};
use super::{Target, attrs};
use crate::capture::{MEANWHILE, Recorder};
use crate::store::{Apply, Blobs, Kind, Store};
use crate::sys;
use crate::wspath::{Node, WsPath};

/// What applying left alone: the in-place paths it skipped as no longer safe to touch
/// (counted in `skippedLinks`, as the SDK counts them), those already as wanted (an absent
/// target with nothing there), and — through the mount — the paths someone else changed since
/// the rewind began. Replaced targets are otherwise always applied.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// Skipped by the safety check.
    pub(super) skipped: HashSet<WsPath>,
    /// Skipped, nothing to do, or changed meanwhile: not changed by this rewind.
    pub(super) untouched: HashSet<WsPath>,
    /// Changed by someone else since the rewind began, in the order met: left as they made
    /// them, or (those also in `partial`) as they made them over the rewind's first steps.
    pub(super) meanwhile: Met,
    /// Partly restored: the rewind changed them (some of the content written, the file cut or
    /// emptied, a directory made or emptied), then a later step was refused because someone
    /// else changed them meanwhile. Also in `meanwhile`, never in `untouched`.
    pub(super) partial: Met,
    /// Scope `tool`: targets whose restore or removal failed (a read-only or immutable file,
    /// say), which the SDK goes past ([`apply_in_place`]). In `untouched` unless the failure
    /// came after the file was changed.
    pub(super) failed: Vec<WsPath>,
    /// Scope `tool`: removals held because a restore failed: those files are kept. Also in
    /// `untouched`.
    pub(super) held: Vec<WsPath>,
}

impl Applied {
    /// `path` was changed by someone else since the rewind began: left alone.
    pub(super) fn changed_meanwhile(&mut self, path: &WsPath) {
        self.untouched.insert(path.clone());
        self.meanwhile.add(path);
    }

    /// `path` was changed by someone else after the rewind's first steps on it: partly
    /// restored.
    pub(super) fn partly_changed_meanwhile(&mut self, path: &WsPath) {
        self.meanwhile.add(path);
        self.partial.add(path);
    }

    /// Whether a later pass must leave `path` alone: untouched, or partly restored.
    pub(super) fn left(&self, path: &WsPath) -> bool {
        self.untouched.contains(path) || self.partial.contains(path)
    }

    /// Takes in what applying another part of the same plan left alone.
    pub(super) fn extend(&mut self, other: Applied) {
        self.skipped.extend(other.skipped);
        self.untouched.extend(other.untouched);
        for p in other.meanwhile.iter() {
            self.meanwhile.add(p);
        }
        for p in other.partial.iter() {
            self.partial.add(p);
        }
        self.failed.extend(other.failed);
        self.held.extend(other.held);
    }

    /// The SDK's error when restores failed and nothing changed (`None`: the rewind stands):
    /// `changed` is how many targets the apply changed.
    pub(super) fn nothing_restored(&self, changed: usize) -> Option<String> {
        if self.failed.is_empty() || changed > 0 {
            return None;
        }
        let n = self.failed.len();
        let mut e = format!(
            "No files were restored: {n} {} (backup missing, or the file could not be updated)",
            if n == 1 {
                "file failed"
            } else {
                "files failed"
            }
        );
        let k = self.skipped.len();
        if k > 0 {
            e.push_str(&format!(
                ", and {k} {} skipped for link safety",
                if k == 1 { "path was" } else { "paths were" }
            ));
        }
        Some(e)
    }
}

/// Paths in the order first met, each once. A set beside the list: a rewind may meet
/// thousands of paths someone else changed (a formatter run over the tree while it applies),
/// and a scan of the list for each would take quadratic time.
#[derive(Debug, Default)]
pub(super) struct Met {
    order: Vec<WsPath>,
    seen: HashSet<WsPath>,
}

impl Met {
    /// Adds `p` unless it was met already.
    pub(super) fn add(&mut self, p: &WsPath) {
        if self.seen.insert(p.clone()) {
            self.order.push(p.clone());
        }
    }

    pub(super) fn contains(&self, p: &WsPath) -> bool {
        self.seen.contains(p)
    }

    /// In the order first met.
    pub(super) fn iter(&self) -> impl Iterator<Item = &WsPath> {
        self.order.iter()
    }

    pub(super) fn into_vec(self) -> Vec<WsPath> {
        self.order
    }
}

impl FromIterator<WsPath> for Met {
    fn from_iter<I: IntoIterator<Item = WsPath>>(it: I) -> Met {
        let mut m = Met::default();
        for p in it {
            m.add(&p);
        }
        m
    }
}

/// Whether someone else changed a path (or, with `beneath`, something below it) since the
/// rewind began: what the daemon's FUSE core saw, asked by whoever applies through the mount.
pub(super) trait Meanwhile {
    fn changed(&self, path: &[u8], beneath: bool) -> bool;
    /// One more target is done (or left): the helper tells the daemon it is getting on.
    fn step(&self) {}
}

impl Meanwhile for crate::capture::Watch<'_> {
    fn changed(&self, path: &[u8], beneath: bool) -> bool {
        crate::capture::Watch::changed(self, path, beneath)
    }
}

/// Where a plan is applied, and who captures what each step overwrites.
#[derive(Clone, Copy)]
pub(super) struct Tree<'a> {
    /// The directory workspace paths are resolved beneath: the workspace's underlying
    /// directory, or the mount's root.
    pub(super) fd: BorrowedFd<'a>,
    /// Behind the mount: the recorder, which each step asks to capture first. Through the
    /// mount the FUSE core captures, as for any process.
    behind: Option<&'a Recorder>,
    /// Through the mount: who knows what others changed since the rewind began.
    meanwhile: Option<&'a dyn Meanwhile>,
}

impl<'a> Tree<'a> {
    /// The workspace's underlying directory (the mount does not serve yet).
    pub(super) fn behind(rec: &'a Recorder) -> Tree<'a> {
        Tree {
            fd: rec.root(),
            behind: Some(rec),
            meanwhile: None,
        }
    }

    /// The mount's root, opened by the process the daemon names as the rewind's;
    /// `meanwhile` knows what others changed since the rewind began.
    pub(super) fn mount(fd: BorrowedFd<'a>, meanwhile: &'a dyn Meanwhile) -> Tree<'a> {
        Tree {
            fd,
            behind: None,
            meanwhile: Some(meanwhile),
        }
    }

    /// Captures `rel` before a step changes it (behind the mount; through it, the FUSE core
    /// does).
    fn capture(&self, rel: &Path) -> io::Result<()> {
        match self.behind {
            Some(rec) => rec.capture_for_rewind(&node(rel)?),
            None => Ok(()),
        }
    }

    /// One more target is done (or left).
    pub(super) fn step(&self) {
        if let Some(w) = self.meanwhile {
            w.step();
        }
    }

    /// Whether a step's failure `e` at `path` means someone else changed the path since the
    /// rewind began (through the mount only): the FUSE core refused the step, or the path —
    /// or, with `beneath`, something below it — was changed meanwhile (a parent renamed away).
    pub(super) fn meanwhile(&self, e: &io::Error, path: &[u8], beneath: bool) -> bool {
        self.meanwhile
            .is_some_and(|w| e.raw_os_error() == Some(MEANWHILE) || w.changed(path, beneath))
    }
}

/// Sets every target path to its state (see the module doc for the passes and their order).
///
/// # Errors
/// The first failure of a pass; the paths before it are already set. The rewind stays
/// 'applying', to be finished by [`super::Rewinder::recover`].
pub(super) fn apply_plan(
    rec: &Recorder,
    store: &Store,
    targets: &[Target],
    id: &str,
) -> io::Result<Applied> {
    let (in_place, order): (Vec<&Target>, Vec<&Target>) =
        targets.iter().partition(|t| t.apply == Apply::InPlace);
    // Recovery sets every part of every target (what differed is not journalled), from the
    // blobs.
    let order = order
        .into_iter()
        .map(|t| (t, super::Differs::default(), None))
        .collect();
    let mut behind = Behind {
        rec,
        store,
        id,
        dirs: HashSet::new(),
    };
    passes::run(order, &mut behind)?;
    apply_in_place(Tree::behind(rec), &store.blobs, &in_place)
}

/// What is at a path a rewind would touch in place, by the SDK's safety check (`lstat` of the
/// path, then its parent's real path against the one recorded with the backup).
pub(super) enum There {
    /// Not to be touched: a symlink, not a regular file, several links, or beneath a symlink
    /// or a non-directory (the parent was replaced by a link: "parent directory moved").
    Refused,
    /// Nothing, beneath real directories or where they are missing (a parent renamed away:
    /// the rewind makes them again).
    Absent,
    /// A regular file with one link, beneath real directories.
    File(Stat),
}

/// The safety check of a path before a tool-scope rewind touches it (see [`There`]).
///
/// # Errors
/// File-system errors other than a missing or unresolvable path.
pub(super) fn look(root: BorrowedFd<'_>, rel: &Path) -> io::Result<There> {
    let refused = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP));
    let comps: Vec<_> = rel.components().collect();
    let mut acc = PathBuf::new();
    for c in &comps[..comps.len().saturating_sub(1)] {
        acc.push(c);
        match sys::lstat_beneath(root, &acc) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            Ok(_) => return Ok(There::Refused),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(There::Absent),
            Err(e) if refused(&e) => return Ok(There::Refused),
            Err(e) => return Err(e),
        }
    }
    match sys::lstat_beneath(root, rel) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink <= 1 => {
            Ok(There::File(st))
        }
        Ok(_) => Ok(There::Refused),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(There::Absent),
        Err(e) if refused(&e) => Ok(There::Refused),
        Err(e) => Err(e),
    }
}

/// The in-place targets (scope `tool`), as the SDK's own rewind applies them since Claude Code
/// 2.1.331 (measured on 2.1.332 with restores that really fail:
/// `tests/clients/findings_2_1_332/NOTES.md`):
/// - restores first, then removals, each group in plan order;
/// - each path checked again ([`look`]) and skipped if it must not be touched; a file target
///   rewritten in place ([`restore_in_place`]), an absent one unlinked;
/// - a restore that fails (a read-only or immutable file, say) is counted and the others go on;
///   once one has, every removal is held: those files are kept;
/// - a removal refused with `ENOTDIR`, `ELOOP` or `EISDIR` is a skip (`skippedLinks`); any
///   other failure of one is counted, and the other removals go on.
///
/// Through the mount, a path someone else changed since the rewind began is left as they made
/// it. Whether anything changed at all is the caller's to judge ([`Applied::nothing_restored`]).
///
/// # Errors
/// A failure that is not one path's own — the mount or the store gone or full
/// ([`stops_the_rewind`]): the paths before it are done. The rewind stays 'applying', and the
/// next mount applies the plan again (a file it left half written is written again).
pub(super) fn apply_in_place(
    tree: Tree<'_>,
    blobs: &Blobs,
    targets: &[&Target],
) -> io::Result<Applied> {
    let mut applied = Applied::default();
    let removal = |t: &Target| t.kind() == Kind::Absent;
    let restores = targets.iter().enumerate().filter(|(_, t)| !removal(t));
    let removals = targets.iter().enumerate().filter(|(_, t)| removal(t));
    // Fixed at the first removal: whether a restore failed before it.
    let mut held: Option<bool> = None;
    for (i, t) in restores.chain(removals) {
        tree.step();
        if removal(t) && *held.get_or_insert(!applied.failed.is_empty()) {
            tracing::warn!("rewind: kept {}: a restore failed", t.rel().display());
            applied.untouched.insert(t.path.clone());
            applied.held.push(t.path.clone());
            continue;
        }
        let stepped = Cell::new(false);
        match in_place_one(tree, blobs, t, i, &mut applied, &stepped) {
            Ok(true) => {}
            Ok(false) => {
                applied.untouched.insert(t.path.clone());
            }
            Err(e) if tree.meanwhile(&e, t.path.as_bytes(), false) => {
                if stepped.get() {
                    applied.partly_changed_meanwhile(&t.path);
                } else {
                    applied.changed_meanwhile(&t.path);
                }
            }
            Err(e) if stops_the_rewind(&e) => return Err(e),
            Err(e)
                if removal(t)
                    && matches!(
                        sys::known_errno(&e),
                        Some(libc::ENOTDIR | libc::ELOOP | libc::EISDIR)
                    ) =>
            {
                applied.skipped.insert(t.path.clone());
                applied.untouched.insert(t.path.clone());
            }
            Err(e) => {
                tracing::warn!("rewind: {e}: left, as the SDK leaves it");
                if !stepped.get() {
                    applied.untouched.insert(t.path.clone());
                }
                applied.failed.push(t.path.clone());
            }
        }
    }
    Ok(applied)
}

/// Whether a failure is not one path's own but the rewind's: the mount gone, the store full,
/// the device failing. Such a one stops the apply, to be finished at the next mount, rather than
/// being gone past as one file that could not be updated.
fn stops_the_rewind(e: &io::Error) -> bool {
    matches!(
        sys::known_errno(e),
        Some(
            libc::ENOTCONN
                | libc::ECONNABORTED
                | libc::ENOSPC
                | libc::EDQUOT
                | libc::EIO
                | libc::ENODEV
                | libc::ENOMEM
        )
    ) || sys::known_errno(e).is_none()
}

/// One in-place target (the `i`th): whether it changed the path.
fn in_place_one(
    tree: Tree<'_>,
    blobs: &Blobs,
    t: &Target,
    i: usize,
    applied: &mut Applied,
    stepped: &Cell<bool>,
) -> io::Result<bool> {
    let rel = t.rel();
    let there =
        look(tree.fd, rel).map_err(|e| sys::ctx(e, format!("looking at {}", rel.display())))?;
    Ok(match (there, t.kind()) {
        (There::Refused, _) => {
            applied.skipped.insert(t.path.clone());
            false
        }
        (There::Absent, Kind::Absent) => false,
        (There::File(_), Kind::Absent) => {
            let Some(rec) = tree.behind else {
                let (dir, name) = parent_of(tree.fd, rel)?;
                sys::unlinkat(dir.as_fd(), Path::new(name), false)
                    .map_err(|e| sys::ctx(e, format!("removing {}", rel.display())))?;
                return Ok(true);
            };
            let p = ws(rel)?;
            rec.capture_for_replace(&p)?;
            match sys::unlinkat(tree.fd, rel, false) {
                Ok(()) => {
                    rec.replaced(&p);
                    true
                }
                Err(e) => {
                    rec.not_replaced(&p);
                    return Err(sys::ctx(e, format!("removing {}", rel.display())));
                }
            }
        }
        (_, Kind::File) => {
            let done = restore_in_place(tree, blobs, rel, t, i, stepped)
                .map_err(|e| sys::ctx(e, format!("restoring {}", rel.display())))?;
            if !done {
                applied.skipped.insert(t.path.clone());
            }
            done
        }
        (_, kind) => {
            return Err(io::Error::other(format!(
                "{}: an in-place target must be a file or absent, not {}",
                rel.display(),
                kind.as_str()
            )));
        }
    })
}

/// Rewrites the file at `rel` in place with target `t` (the `i`th in-place target), as the
/// SDK does: opened `O_WRONLY|O_CREAT|O_NOFOLLOW|O_NONBLOCK` (its missing parents made first if
/// needed), checked to be a regular file with one link, truncated, written, given the target's
/// mode. Returns false (nothing changed) when what it opened is not such a file. The blob is
/// verified before the file is truncated (`Blobs::write_verified`). `stepped` is set once the
/// file is changed (made, emptied or written), whatever happens next.
fn restore_in_place(
    tree: Tree<'_>,
    blobs: &Blobs,
    rel: &Path,
    t: &Target,
    i: usize,
    stepped: &Cell<bool>,
) -> io::Result<bool> {
    let root = tree.fd;
    tree.capture(rel)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK;
    let open = || sys::open_beneath(root, rel, flags, t.mode & 0o777);
    let created = sys::lstat_beneath_opt(root, rel)?.is_none();
    let fd = match open() {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            ensure_parents(tree, rel)?;
            open()?
        }
        // Became a symlink, a FIFO or a directory: the SDK refuses it too.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ELOOP | libc::ENXIO | libc::EISDIR | libc::ENOTDIR)
            ) =>
        {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let st = sys::fstat(fd.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink > 1 {
        return Ok(false);
    }
    if created && sys::geteuid() == 0 {
        let _ = sys::fchown(fd.as_fd(), t.uid, t.gid);
    }
    let empty = crate::store::blobs::empty_hash();
    let hash = t.blob.as_ref().map_or(empty.as_str(), |b| b.as_str());
    stepped.set(created);
    blobs.write_verified(hash, fd.as_fd(), || {
        sys::ftruncate(fd.as_fd(), 0)?;
        stepped.set(true);
        if crate::faults::fail_rewind_after() == Some(i) {
            return Err(crate::sys::coded(
                libc::EIO,
                "injected failure (REWINDFS_TEST_FAIL_REWIND_AFTER), the file left truncated"
                    .into(),
            ));
        }
        Ok(())
    })?;
    sys::fchmod(fd.as_fd(), t.mode & 0o7777)?;
    Ok(true)
}

/// The steps behind the mount: each path captured before it changes (the FUSE core does not
/// see these), nothing else changing the tree meanwhile.
struct Behind<'a> {
    rec: &'a Recorder,
    store: &'a Store,
    /// The rewind's id, which its temp names carry.
    id: &'a str,
    /// Directories whose parents are made already (once per directory).
    dirs: HashSet<PathBuf>,
}

impl Steps for Behind<'_> {
    fn remove(&mut self, (t, _, _): &Step<'_>) -> io::Result<()> {
        let rel = t.rel();
        let Some(cur) = sys::lstat_beneath_opt(self.rec.root(), rel)? else {
            return Ok(());
        };
        let cur_kind = kind_of(&cur);
        if t.kind() == Kind::Absent
            || (cur_kind != t.kind() && (cur_kind == Kind::Dir || t.kind() == Kind::Dir))
        {
            self.rec.capture_for_rewind(&node(rel)?)?;
            remove_tree(self.rec, rel, cur_kind == Kind::Dir)?;
        }
        Ok(())
    }

    fn make_dir(&mut self, (t, _, _): &Step<'_>) -> io::Result<()> {
        let rel = t.rel();
        ensure_parents(Tree::behind(self.rec), rel)?;
        match sys::lstat_beneath_opt(self.rec.root(), rel)? {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            _ => {
                self.rec.capture_for_rewind(&node(rel)?)?;
                sys::mkdirat(self.rec.root(), rel, 0o700)?;
            }
        }
        Ok(())
    }

    /// Written beside its path and put in place, missing parents made first.
    fn write(&mut self, (t, _, _): &Step<'_>) -> io::Result<()> {
        let rel = t.rel();
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            if self.dirs.insert(parent.to_path_buf()) {
                ensure_parents(Tree::behind(self.rec), rel)?;
            }
        }
        let p = ws(rel)?;
        self.rec.capture_for_replace(&p)?;
        match write_beside(self.rec.root(), self.store, rel, t, self.id) {
            Ok(()) => {
                self.rec.replaced(&p);
                Ok(())
            }
            Err(e) => {
                self.rec.not_replaced(&p);
                Err(e)
            }
        }
    }

    /// A directory that was already there is captured first (one made in pass 2 was captured
    /// as absent then): without it, an undo would not know the mode and owner it had.
    fn dir_attrs(&mut self, (t, _, _): &Step<'_>) -> io::Result<()> {
        let (root, rel) = (self.rec.root(), t.rel());
        self.rec.capture_for_rewind(&node(rel)?)?;
        if sys::geteuid() == 0 {
            let _ = sys::lchownat(root, rel, Some(t.uid), Some(t.gid));
        }
        // After the owner (a chown drops some), before the mode (an ACL sets group bits).
        attrs::restore_at(root, rel, t.xattrs.as_ref());
        sys::chmodat(root, rel, t.mode & 0o7777)
    }
}

/// The kind of what a stat describes.
pub(super) fn kind_of(st: &Stat) -> Kind {
    kind_of_mode(st.st_mode)
}

/// The kind an `st_mode` names.
pub(super) fn kind_of_mode(mode: u32) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// Creates missing parent directories of `rel` (capturing each as it is created), each one
/// beneath its parent opened without following a symlink.
pub(super) fn ensure_parents(tree: Tree<'_>, rel: &Path) -> io::Result<()> {
    let root = tree.fd;
    let mut acc = PathBuf::new();
    let comps: Vec<_> = rel.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        acc.push(c);
        match sys::lstat_beneath_opt(root, &acc)? {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            Some(_) => {
                return Err(io::Error::other(format!(
                    "{}: a parent of {} is not a directory",
                    acc.display(),
                    rel.display()
                )));
            }
            None => {
                tree.capture(&acc)?;
                let (dir, name) = parent_of(root, &acc)?;
                match sys::mkdirat(dir.as_fd(), Path::new(name), 0o755) {
                    Ok(()) => {}
                    // Made meanwhile (through the mount, by someone else: theirs then).
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(sys::ctx(e, format!("mkdir {}", acc.display()))),
                }
            }
        }
    }
    Ok(())
}

/// The directory holding `rel`, opened beneath `root` without following a symlink (an
/// `O_PATH` handle), and `rel`'s last name: a step on `rel` is made relative to it, so a
/// directory swapped for a symlink meanwhile can never lead the step out of the workspace.
pub(super) fn parent_of<'p>(
    root: BorrowedFd<'_>,
    rel: &'p Path,
) -> io::Result<(OwnedFd, &'p OsStr)> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let dir = sys::open_beneath(root, parent, OFlags::PATH | OFlags::DIRECTORY, 0)?;
    Ok((dir, name))
}

/// The temp name a rewind writes `name`'s new state to, beside it: named after the rewind, so
/// finishing it after a crash replaces a half-written temp.
pub(super) fn temp_name(name: &OsStr, id: &str) -> std::ffi::OsString {
    format!(
        ".{}.rewindfs-{}",
        name.to_string_lossy().chars().take(32).collect::<String>(),
        id
    )
    .into()
}

/// `rel` as the recorder names it (the root, or a path inside the workspace): a plan's targets
/// are checked when it is made, so this fails only on a bug (`EINVAL`).
fn node(rel: &Path) -> io::Result<Node> {
    Ok(Node::parse(rel.as_os_str().as_bytes())?)
}

/// `rel` as a path inside the workspace (`EINVAL` for the root or anything else).
fn ws(rel: &Path) -> io::Result<WsPath> {
    Ok(WsPath::parse(rel.as_os_str().as_bytes())?)
}

/// Removes a path; a directory with everything beneath it (each entry captured first).
fn remove_tree(rec: &Recorder, rel: &Path, is_dir: bool) -> io::Result<()> {
    let root = rec.root();
    if is_dir {
        let fd = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        for (name, _, dtype) in sys::read_dir_all(fd)? {
            let child = rel.join(&name);
            rec.capture_for_rewind(&node(&child)?)?;
            remove_tree(rec, &child, dtype == libc::DT_DIR)?;
        }
    }
    match sys::unlinkat(root, rel, is_dir) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(sys::ctx(e, format!("removing {}", rel.display()))),
    }
}

/// Writes a file, symlink or special file to a temp name in the same directory, then puts it
/// in place of `rel` (exchanged with what is there, or renamed if nothing is): readers see the
/// old or the new state, never a mix.
fn write_beside(
    root: BorrowedFd<'_>,
    store: &Store,
    rel: &Path,
    t: &Target,
    id: &str,
) -> io::Result<()> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // Named after the rewind, so finishing it after a crash replaces a half-written temp.
    let tmp = parent.join(temp_name(name, id));
    let res = write_temp(root, store, &tmp, t).and_then(|()| put_in_place(root, &tmp, rel));
    if res.is_err() {
        let _ = sys::unlinkat(root, &tmp, false);
    }
    res.map_err(|e| sys::ctx(e, format!("restoring {}", rel.display())))
}

/// Writes target `t` (a file, symlink or special file) at the temp name `tmp`, replacing
/// whatever an earlier attempt left there.
fn write_temp(root: BorrowedFd<'_>, store: &Store, tmp: &Path, t: &Target) -> io::Result<()> {
    match t.kind() {
        Kind::File => {
            let create = || {
                sys::openat(
                    root,
                    tmp,
                    OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
                    0o600,
                )
            };
            let fd = match create() {
                // Left by this rewind's interrupted first attempt.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    sys::unlinkat(root, tmp, false)?;
                    create()?
                }
                r => r?,
            };
            // Hashed while copied: a blob changed since the plan read it is never put in place.
            if let Some(hash) = &t.blob {
                store.blobs.copy_verified(hash.as_str(), fd.as_fd())?;
            }
            if sys::geteuid() == 0 {
                let _ = sys::fchown(fd.as_fd(), t.uid, t.gid);
            }
            // After the owner (a chown drops security.capability), before the mode.
            attrs::restore(fd.as_fd(), tmp, t.xattrs.as_ref());
            sys::fchmod(fd.as_fd(), t.mode & 0o7777)?;
        }
        Kind::Symlink => {
            let _ = sys::unlinkat(root, tmp, false);
            let target = t.target.clone().unwrap_or_default();
            sys::symlinkat(crate::wspath::key_path(&target), root, tmp)?;
            if sys::geteuid() == 0 {
                let _ = sys::lchownat(root, tmp, Some(t.uid), Some(t.gid));
            }
        }
        _ => {
            let _ = sys::unlinkat(root, tmp, false);
            sys::mknodat(root, tmp, t.mode, t.rdev)?;
            if sys::geteuid() == 0 {
                let _ = sys::lchownat(root, tmp, Some(t.uid), Some(t.gid));
            }
            attrs::restore_at(root, tmp, t.xattrs.as_ref());
            sys::chmodat(root, tmp, t.mode & 0o7777)?;
        }
    }
    Ok(())
}

/// Puts the temp `tmp` in place of `rel`: exchanged with what is there (the old one then
/// removed under the temp name), or renamed if nothing is there.
fn put_in_place(root: BorrowedFd<'_>, tmp: &Path, rel: &Path) -> io::Result<()> {
    // Exchanged rather than renamed over: ext4 starts writeback of a file renamed over
    // another (auto_da_alloc), a disk write per restored file on the rewind's path (a
    // third of a 10k-file rewind). The old file then goes with the temp name.
    match sys::renameat2(root, tmp, rel, libc::RENAME_EXCHANGE) {
        Ok(()) => sys::unlinkat(root, tmp, false),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => {
            sys::renameat2(root, tmp, rel, 0)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> WsPath {
        WsPath::parse(s.as_bytes().to_vec()).unwrap()
    }

    /// Each path once, in the order first met, through the calls a rewind makes and across
    /// parts of a plan put together; a partly restored path is also changed meanwhile, and
    /// left alone by later passes.
    #[test]
    fn paths_changed_meanwhile_are_kept_once_in_the_order_met() {
        let mut a = Applied::default();
        a.changed_meanwhile(&p("b"));
        a.partly_changed_meanwhile(&p("a"));
        a.changed_meanwhile(&p("b"));
        a.partly_changed_meanwhile(&p("a"));
        let mut other = Applied::default();
        other.changed_meanwhile(&p("c"));
        other.partly_changed_meanwhile(&p("a"));
        other.changed_meanwhile(&p("b"));
        a.extend(other);
        let names = |m: &Met| m.iter().map(|w| w.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(names(&a.meanwhile), [b"b", b"a", b"c"]);
        assert_eq!(names(&a.partial), [b"a"]);
        assert!(a.left(&p("a")) && a.left(&p("b")) && a.left(&p("c")));
        assert!(!a.left(&p("d")));
        assert!(
            !a.untouched.contains(&p("a")),
            "partly restored is not untouched"
        );
        // Through the helper's message and back.
        let back: Met = a
            .meanwhile
            .into_vec()
            .into_iter()
            .chain([p("c"), p("d")])
            .collect();
        assert_eq!(names(&back), [b"b", b"a", b"c", b"d"]);
    }
}
