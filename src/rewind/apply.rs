//! Applying a plan to the tree: every target path set to its state.

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

/// Fault injection for tests only (`REWINDFS_TEST_FAIL_REWIND_AFTER=N`): a rewind fails after
/// writing N files, as one that runs out of space would, and stays 'applying'.
fn fail_rewind_after() -> Option<usize> {
    static N: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("REWINDFS_TEST_FAIL_REWIND_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

fn depth(p: &[u8]) -> usize {
    p.iter().filter(|b| **b == b'/').count()
}

/// Sets every target path to its state: removals deepest first, then directories top-down,
/// then files, links and special files (each written beside and put in place), then directory
/// modes deepest first (so a read-only directory is filled before it is closed).
pub(super) fn apply_plan(
    rec: &Recorder,
    store: &Store,
    targets: &[Target],
    id: &str,
) -> io::Result<()> {
    let root = rec.root();
    let mut order: Vec<&Target> = targets.iter().collect();
    // 1. Remove what must go (absent targets, and type changes).
    order.sort_by_key(|t| std::cmp::Reverse(depth(&t.path)));
    for t in &order {
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
    // 2. Directories, shallowest first.
    order.sort_by_key(|t| depth(&t.path));
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
    // 3. Files, symlinks, special files.
    let mut dirs = HashSet::new();
    for (i, t) in order
        .iter()
        .filter(|t| matches!(t.kind(), Kind::File | Kind::Symlink | Kind::Other))
        .enumerate()
    {
        if fail_rewind_after() == Some(i) {
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
    // 4. Directory modes and owners, deepest first.
    order.sort_by_key(|t| std::cmp::Reverse(depth(&t.path)));
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
    let res = (|| -> io::Result<()> {
        match t.kind() {
            Kind::File => {
                let create = || {
                    sys::openat(
                        root,
                        &tmp,
                        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
                        0o600,
                    )
                };
                let fd = match create() {
                    // Left by this rewind's interrupted first attempt.
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                        sys::unlinkat(root, &tmp, false)?;
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
                let _ = sys::unlinkat(root, &tmp, false);
                let target = t.target.clone().unwrap_or_default();
                sys::symlinkat(Path::new(OsStr::from_bytes(&target)), root, &tmp)?;
                if sys::geteuid() == 0 {
                    let _ = sys::lchownat(root, &tmp, Some(t.uid), Some(t.gid));
                }
            }
            _ => {
                let _ = sys::unlinkat(root, &tmp, false);
                sys::mknodat(root, &tmp, t.mode, t.rdev)?;
                if sys::geteuid() == 0 {
                    let _ = sys::lchownat(root, &tmp, Some(t.uid), Some(t.gid));
                }
                sys::chmodat(root, &tmp, t.mode & 0o7777)?;
            }
        }
        // Exchanged rather than renamed over: ext4 starts writeback of a file renamed over
        // another (auto_da_alloc), a disk write per restored file on the rewind's path (a
        // third of a 10k-file rewind). The old file then goes with the temp name.
        match sys::renameat2(root, &tmp, rel, libc::RENAME_EXCHANGE) {
            Ok(()) => sys::unlinkat(root, &tmp, false),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => {
                sys::renameat2(root, &tmp, rel, 0)
            }
            Err(e) => Err(e),
        }
    })();
    if res.is_err() {
        let _ = sys::unlinkat(root, &tmp, false);
    }
    res.map_err(|e| sys::ctx(e, format!("restoring {}", rel.display())))
}
