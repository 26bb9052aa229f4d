//! Applying a plan: every target path set to its state, in place.
//!
//! [`apply_plan`] makes four passes over the targets: removals deepest first, directories
//! shallowest first, then files, symlinks and special files, then directory modes deepest
//! first (so a read-only directory is filled before it is closed).
//!
//! Invariants:
//! - What a pass is about to overwrite, remove or create is captured first, under the
//!   rewind's own checkpoint (`capture_for_rewind`, `capture_for_replace`), so the rewind can
//!   be undone.
//! - A file, symlink or special file is written under a temp name beside it and exchanged
//!   into place: a reader sees the old state or the new one, never a mix.
//! - Applying can be repeated over a tree it left half done: a path already in its target
//!   state is set to it again, and the temp name is the rewind's own, so finishing a rewind
//!   after a crash replaces a half-written temp (see `recovery.rs`).
//! - Every path is workspace-relative and resolved beneath the root fd, never as a string.
//! - The caller holds the capture gate (or runs before the mount serves): nothing else
//!   changes the tree between the passes.
//! - Owners are restored only when the daemon runs as root; elsewhere a chown could only
//!   fail, and the rewind does not fail for it.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::Target;
use crate::capture::Recorder;
use crate::store::{Kind, Store};
use crate::sys;

/// Sets every target path to its state (see the module doc for the passes and their order).
///
/// # Errors
/// The first failure of a pass; the paths before it are already set. The rewind stays
/// 'applying', to be finished by [`super::Engine::recover`].
pub(super) fn apply_plan(
    rec: &Recorder,
    store: &Store,
    targets: &[Target],
    id: &str,
) -> io::Result<()> {
    // The sorts are stable and each starts from the previous order: keep their sequence.
    let mut order: Vec<&Target> = targets.iter().collect();
    order.sort_by_key(|t| Reverse(depth(&t.path)));
    remove_what_goes(rec, &order)?;
    order.sort_by_key(|t| depth(&t.path));
    make_dirs(rec, &order)?;
    write_entries(rec, store, &order, id)?;
    order.sort_by_key(|t| Reverse(depth(&t.path)));
    set_dir_modes(rec.root(), &order)
}

/// Pass 1, deepest first: removes what must go — paths whose target is absent, and those
/// changing to or from a directory (a directory with everything beneath it).
fn remove_what_goes(rec: &Recorder, order: &[&Target]) -> io::Result<()> {
    let root = rec.root();
    for t in order {
        let rel = t.rel();
        let cur = sys::lstat_beneath_opt(root, rel)?;
        let Some(cur) = cur else { continue };
        let cur_kind = match cur.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        };
        if t.kind() == Kind::Absent
            || (cur_kind != t.kind() && (cur_kind == Kind::Dir || t.kind() == Kind::Dir))
        {
            rec.capture_for_rewind(rel)?;
            remove_tree(rec, rel, cur_kind == Kind::Dir)?;
        }
    }
    Ok(())
}

/// Pass 2, shallowest first: creates the target directories that are missing, as 0700 so
/// that pass 3 can write into them; pass 4 gives them their modes.
fn make_dirs(rec: &Recorder, order: &[&Target]) -> io::Result<()> {
    let root = rec.root();
    for t in order.iter().filter(|t| t.kind() == Kind::Dir) {
        let rel = t.rel();
        ensure_parents(rec, rel)?;
        match sys::lstat_beneath_opt(root, rel)? {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            _ => {
                rec.capture_for_rewind(rel)?;
                sys::mkdirat(root, rel, 0o700)?;
            }
        }
    }
    Ok(())
}

/// Pass 3: writes each file, symlink and special file beside its path and puts it in place,
/// creating missing parents (once per directory).
fn write_entries(rec: &Recorder, store: &Store, order: &[&Target], id: &str) -> io::Result<()> {
    let root = rec.root();
    let mut dirs = HashSet::new();
    for (i, t) in order
        .iter()
        .filter(|t| matches!(t.kind(), Kind::File | Kind::Symlink | Kind::Other))
        .enumerate()
    {
        if crate::faults::fail_rewind_after() == Some(i) {
            return Err(io::Error::other(
                "injected failure (REWINDFS_TEST_FAIL_REWIND_AFTER)",
            ));
        }
        let rel = t.rel();
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            if dirs.insert(parent.to_path_buf()) {
                ensure_parents(rec, rel)?;
            }
        }
        rec.capture_for_replace(rel)?;
        match write_beside(root, store, rel, t, id) {
            Ok(()) => rec.replaced(rel),
            Err(e) => {
                rec.not_replaced(rel);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Pass 4, deepest first: directory modes and owners, once nothing more is written into them.
fn set_dir_modes(root: BorrowedFd<'_>, order: &[&Target]) -> io::Result<()> {
    for t in order.iter().filter(|t| t.kind() == Kind::Dir) {
        let rel = t.rel();
        if sys::geteuid() == 0 {
            let _ = sys::lchownat(root, rel, Some(t.uid), Some(t.gid));
        }
        sys::chmodat(root, rel, t.mode & 0o7777)?;
    }
    Ok(())
}

/// Creates missing parent directories of `rel` (capturing each as it is created).
fn ensure_parents(rec: &Recorder, rel: &Path) -> io::Result<()> {
    let root = rec.root();
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
                rec.capture_for_rewind(&acc)?;
                sys::mkdirat(root, &acc, 0o755)?;
            }
        }
    }
    Ok(())
}

/// Removes a path; a directory with everything beneath it (each entry captured first).
fn remove_tree(rec: &Recorder, rel: &Path, is_dir: bool) -> io::Result<()> {
    let root = rec.root();
    if is_dir {
        let fd = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
        for (name, _, dtype) in sys::read_dir_all(fd)? {
            let child = rel.join(&name);
            rec.capture_for_rewind(&child)?;
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
    let tmp = parent.join(format!(
        ".{}.rewindfs-{}",
        name.to_string_lossy().chars().take(32).collect::<String>(),
        id
    ));
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
            if let Some(hash) = &t.blob {
                if let Some(src) = store.blobs.open_blob(hash)? {
                    let len = src.metadata()?.len();
                    sys::copy_all(src.as_fd(), fd.as_fd(), len)?;
                }
            }
            if sys::geteuid() == 0 {
                let _ = rustix::fs::fchown(
                    &fd,
                    Some(rustix::fs::Uid::from_raw(t.uid)),
                    Some(rustix::fs::Gid::from_raw(t.gid)),
                );
            }
            sys::fchmod(fd.as_fd(), t.mode & 0o7777)?;
        }
        Kind::Symlink => {
            let _ = sys::unlinkat(root, tmp, false);
            let target = t.target.clone().unwrap_or_default();
            sys::symlinkat(Path::new(OsStr::from_bytes(&target)), root, tmp)?;
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

/// How deep a path lies: its number of separators (the root's entries are 0).
fn depth(p: &[u8]) -> usize {
    p.iter().filter(|b| **b == b'/').count()
}
