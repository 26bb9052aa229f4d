//! Scope `tool`: the Claude Agent SDK's own `rewind_files`, answer for answer and tree for tree.
//!
//! What the SDK does (Claude Code CLI 2.1.330, read in its source and measured: see
//! `tests/clients/FINDINGS.md` §4), and this module does the same way, for each *tracked* path
//! (a file Write/Edit/NotebookEdit changed in the session), in the order a tool first changed
//! each (the SDK's `trackedFiles` order, which its answers keep):
//! - **target**: the path's state when the checkpoint began if a tool had changed it by then,
//!   otherwise its state just before that first tool change ([`Rewinder::tool_target`]);
//! - **dry run**: `diffLines(current text, target text)` ([`line_counts`]), where a text is the
//!   file read as UTF-8 (invalid bytes replaced, so binary content counts lines too) following
//!   symlinks, and `""` when nothing is there or it is not a regular file. The path is listed if
//!   a line differs, or if the target is absent and something is there. Modes, hard links and
//!   file kinds play no part: a mode-only change is not listed; a symlink, FIFO or directory in
//!   the file's place is listed as its text says;
//! - **real rewind**, restores first and removals last (Claude Code 2.1.331 and later, whose
//!   rule for a restore that fails `apply.rs`'s `apply_in_place` keeps), one path after the
//!   other: a path that is a symlink, not a regular file,
//!   has several links, or lies beneath a symlink or a non-directory (the SDK's "parent
//!   directory moved") is skipped and counted in `skippedLinks` ([`look`]); an absent target
//!   unlinks the file; otherwise the file is rewritten in place (same inode), its missing parents
//!   created, if it [`differs`](Rewinder::differs) from the target — by the SDK's own test,
//!   quirks included.
//!
//! Around that, rewindfs keeps its own guarantees (see `recovery.rs` and `apply.rs`): the plan
//! is journalled before anything changes and finished at the next mount after a crash, what the
//! rewind overwrites is captured under its own checkpoint (so it can be undone), writers are
//! held off meanwhile, and the kernel's caches of the changed paths are dropped. A real
//! rewind's answer lists the paths it changed, which the SDK's does not.
//!
//! Invariants:
//! - planning never changes the tree; every file target names a blob (the empty one for an
//!   empty file) that was read while planning, so a missing blob refuses the whole rewind before
//!   anything changes;
//! - targets are in tracked order, each with its line counts in `Outcome::lines`;
//! - a target is `Apply::InPlace`: applying it checks [`look`] again, so a path the rewind's
//!   own earlier steps (or the time since a crash) made unsafe is skipped, as the SDK would.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{OFlags, Stat};

use super::apply::{There, look};
use super::diff::line_counts;
use super::filter::Filter;
use super::history::History;
use super::one::One;
use super::plan::Sessions;
use super::privileges::{Policy, Withheld};
use super::{Outcome, Planned, RewindError, Rewinder, Target};
use crate::store::{Actor, Apply, BlobRef, Kind, PreImage, Tracked};
use crate::sys;

/// How long before its backup a file's mtime must be for the SDK's mtime shortcut to apply here
/// (see [`Rewinder::differs`]): the kernel stamps files with a coarse clock that can lag the
/// daemon's by a tick (up to 10 ms), so a file written just after a checkpoint began must not
/// read as older than it.
const MTIME_SLACK_MS: i64 = 1000;

/// Symlinks followed at most while reading a path's text (the kernel's own limit).
const MAX_LINKS: usize = 40;

impl Rewinder {
    /// Plans a tool-scope rewind to checkpoint `c` (see the module doc): the outcome's targets,
    /// `skipped_links` and `conflicts`, and its `files_changed` with their line counts — the
    /// dry run's list (`dry_run`), or the targets (a real rewind, settled once applied).
    /// `session` is the checkpoint's, whose tracked files are restored (none: the current
    /// session's). A tracked file another session also changed since is a conflict that
    /// refuses the rewind unless forced (`sessions`); one an external actor changed is only
    /// reported, as the SDK would restore it.
    ///
    /// # Errors
    /// Store and file-system errors, and a target's blob that cannot be read.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_tool(
        &self,
        one: &mut One<'_>,
        c: i64,
        session: Option<&str>,
        hist: &History,
        sessions: &Sessions,
        filter: &Filter,
        dry_run: bool,
        policy: &Policy,
        out: &mut Outcome,
    ) -> Result<(), RewindError> {
        let Some(session) = session
            .map(str::to_string)
            .or_else(|| self.g.recorder.current().2)
        else {
            return Ok(());
        };
        let root = self.g.root();
        for t in self.g.store.tracked(&session)? {
            if !filter.matches(t.path.as_bytes()) {
                continue;
            }
            let rel = t.path.as_path().to_path_buf();
            let name = crate::wire_path::encode(t.path.as_bytes());
            // Only a file or its absence is a state the SDK restores. A path that was a
            // symlink, directory or special file at the checkpoint is left as it is (the SDK
            // would restore what the link led to, or an earlier backup; not measured).
            let mut target = self
                .tool_target(one, c, hist, &t)?
                .filter(|p| matches!(p.kind, Kind::File | Kind::Absent));
            // What history from elsewhere may not grant is taken out first (`privileges.rs`).
            if let Some(p) = &mut target {
                let owner = sys::lstat_beneath_opt(root, &rel)?.map(|st| (st.st_uid, st.st_gid));
                let (withheld, _) = policy.limit(p, owner);
                if !withheld.is_empty() {
                    out.withheld.push(Withheld {
                        path: name.clone(),
                        what: withheld,
                    });
                }
            }
            let bits = hist.actors(t.path.as_bytes());
            if target.is_some()
                && (bits & Actor::External.bit() != 0 || sessions.others_changed(t.path.as_bytes()))
            {
                Self::conflict(out, t.path.as_bytes(), bits, sessions);
            }
            let content = match &target {
                Some(p) if p.kind == Kind::File => Some(self.content_of(one, p).map_err(|e| {
                    // Which path, which checkpoint and (in `e`) which blob: nothing changed.
                    let cp = self.g.store.checkpoint_by_seq(c).ok().flatten();
                    let cp = cp.map_or_else(|| format!("#{c}"), |k| k.uuid);
                    super::unusable(t.path.as_bytes(), &cp, e)
                })?),
                _ => None,
            };
            // The dry run's view: text against text, nothing else.
            let lines = match &target {
                Some(p) => {
                    let now = follow(root, Some(self.g.workspace.as_path()), &rel)?;
                    let text = match &now {
                        Some((at, st)) if is_regular(st) => {
                            read_file(root, at)?.unwrap_or_default()
                        }
                        _ => Vec::new(),
                    };
                    let (i, d) = line_counts(&text, content.as_deref().unwrap_or_default());
                    let listed = i + d > 0 || (p.kind == Kind::Absent && now.is_some());
                    if dry_run && listed {
                        out.files_changed.push(name.clone());
                        out.insertions += i;
                        out.deletions += d;
                    }
                    (i, d)
                }
                None => (0, 0),
            };
            // The real rewind's view: the safety check first, for every tracked path.
            let st = match look(root, &rel)? {
                There::Refused => {
                    out.skipped_links += 1;
                    continue;
                }
                There::Absent => None,
                There::File(st) => Some(st),
            };
            let Some(p) = target else { continue };
            let act = match &content {
                None => st.is_some(),
                Some(content) => self.differs(root, &rel, st.as_ref(), &p, content, || {
                    self.backup_time(c, &session, &t)
                })?,
            };
            if !act {
                continue;
            }
            if let Ok(now) = super::plan::now_state(root, &rel) {
                out.attr_changes
                    .extend(now.attr_change(t.path.as_bytes(), &p, policy.as_root));
            }
            let mut target = Target::new(&t.path, &p);
            target.apply = Apply::InPlace;
            if target.kind == Kind::File && target.blob.is_none() {
                target.blob = Some(BlobRef::hash(crate::store::blobs::empty_hash()));
            }
            if !dry_run {
                out.files_changed.push(name);
            }
            out.planned.push(Planned::whole(target, lines));
        }
        Ok(())
    }

    /// The state a tracked file goes back to (`None`: it is as it was then, or its first tool
    /// change is not on record): first changed by a tool before checkpoint `c` began, its state
    /// at `c`'s start; otherwise its state just before that first tool change (docs/design.md §2),
    /// completed if only its ranges were saved.
    fn tool_target(
        &self,
        one: &mut One<'_>,
        c: i64,
        hist: &History,
        t: &Tracked,
    ) -> Result<Option<PreImage>, RewindError> {
        if t.checkpoint < c {
            return self.state_of(
                one,
                hist,
                hist.lineage(t.path.as_bytes()),
                t.path.as_bytes(),
            );
        }
        Ok(
            match t
                .capture
                .and_then(|id| self.g.store.capture_by_id(id).ok().flatten())
            {
                Some(cap) if cap.pre.partial => {
                    let path = cap.path.clone();
                    Some(self.materialize(one, hist, &cap, path.as_bytes())?)
                }
                Some(cap) => Some(cap.pre),
                None => None,
            },
        )
    }

    /// A file target's content, read from its blob (an empty file has none).
    fn content_of(&self, one: &One<'_>, p: &PreImage) -> io::Result<Vec<u8>> {
        Ok(match &p.blob {
            Some(b) => self.target_content(one, b)?,
            None => Vec::new(),
        })
    }

    /// Whether the SDK's rewind would rewrite the file at `rel` (`now`: its stat, `None` if it
    /// is absent; the safety check let only a regular file with one link through) with the
    /// target `p` (`content`). The SDK's own test, in its order: one exists and not the other
    /// → yes; mode or size differ → yes; the file's mtime older than its backup → **no**; else
    /// whether their texts, decoded as UTF-8, differ.
    ///
    /// Two quirks follow, kept because the SDK's answer is the contract for this scope (users
    /// move between the SDK's checkpointing and rewindfs): (a) a same-size change whose mtime
    /// was set back (`touch -d`, `cp -p`, `mv` of an older file) is not restored, though the dry
    /// run lists it; (b) a change between two byte strings that decode to the same text (`\xff`
    /// → `\xfe`, both U+FFFD) is neither listed nor restored. (`scope: agent` restores both.)
    ///
    /// The SDK's backup time is when its backup file was written; `backup` gives the time the
    /// same backup would have been taken here ([`Rewinder::backup_time`]), and the comparison
    /// allows [`MTIME_SLACK_MS`] for the kernel's coarse clock.
    fn differs(
        &self,
        root: BorrowedFd<'_>,
        rel: &Path,
        now: Option<&Stat>,
        p: &PreImage,
        content: &[u8],
        backup: impl FnOnce() -> Result<i64, RewindError>,
    ) -> Result<bool, RewindError> {
        let Some(st) = now else { return Ok(true) };
        if st.st_mode & 0o7777 != p.mode & 0o7777 || st.st_size as u64 != content.len() as u64 {
            return Ok(true);
        }
        let mtime_ms = st.st_mtime * 1000 + (st.st_mtime_nsec / 1_000_000) as i64;
        if mtime_ms + MTIME_SLACK_MS < backup()? {
            return Ok(false);
        }
        let Some(cur) = read_file(root, rel)? else {
            return Ok(true);
        };
        Ok(cur != content && String::from_utf8_lossy(&cur) != String::from_utf8_lossy(content))
    }

    /// When the SDK would have taken the backup that tracked path `t`'s target (for checkpoint
    /// `c`) stands for, as unix ms. Not a capture's own time: a capture is taken at the change
    /// (a tool's write-then-rename is captured at the rename, after its temp file got its
    /// mtime), while the SDK backs a file up before the change —
    /// - its first tool change in or after `c`: the SDK backs the file up as the tool starts,
    ///   after its message began; here, when that message began;
    /// - changed by a tool before `c`: the SDK backs each tracked file up when a message begins,
    ///   keeping the previous backup while the file is unchanged; so the backup is from the
    ///   first message after the file's last change before `c` (or `c` itself).
    ///
    /// # Errors
    /// Store errors.
    fn backup_time(&self, c: i64, session: &str, t: &Tracked) -> Result<i64, RewindError> {
        let at = if t.checkpoint >= c {
            t.checkpoint
        } else {
            let changed = self
                .g
                .store
                .last_captured_before(&t.path, c)?
                .map_or(t.checkpoint, |k| k.max(t.checkpoint));
            match self.g.store.next_message_checkpoint(session, changed, c)? {
                Some(cp) => return Ok(cp.began_at),
                None => c,
            }
        };
        Ok(self
            .g
            .store
            .checkpoint_by_seq(at)?
            .map_or(0, |cp| cp.began_at))
    }
}

fn is_regular(st: &Stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// Where `rel` leads, following symlinks as the SDK's reads do but only while they stay in the
/// workspace: a relative link, or an absolute one into the workspace's own path `ws` (the mount
/// is in place, so that path is the workspace). Returns the link-free workspace-relative path
/// and its `lstat`; `None` when nothing is there, a link leads out of the workspace, or links
/// loop.
///
/// # Errors
/// File-system errors other than a missing path.
fn follow(
    root: BorrowedFd<'_>,
    ws: Option<&Path>,
    rel: &Path,
) -> io::Result<Option<(PathBuf, Stat)>> {
    fn push_rev(todo: &mut Vec<OsString>, p: &Path) {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_owned()),
                Component::ParentDir => todo.push("..".into()),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
    }
    let mut todo = Vec::new();
    push_rev(&mut todo, rel);
    let mut at = PathBuf::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            if !at.pop() {
                return Ok(None); // above the workspace
            }
            continue;
        }
        let next = at.join(&name);
        let st = match sys::lstat_beneath(root, &next) {
            Ok(st) => st,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Ok(None);
            }
            let target = PathBuf::from(sys::readlinkat(root, &next)?);
            if target.is_absolute() {
                let Some(inside) = ws.and_then(|w| target.strip_prefix(w).ok()) else {
                    return Ok(None);
                };
                at = PathBuf::new();
                push_rev(&mut todo, inside);
            } else {
                push_rev(&mut todo, &target);
            }
            continue;
        }
        at = next;
    }
    match sys::lstat_beneath(root, &at) {
        Ok(st) => Ok(Some((at, st))),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The content of the regular file at the link-free path `rel`; `None` if it is not one (or
/// is gone: a dry run does not hold changes off).
///
/// # Errors
/// File-system errors other than a missing path.
fn read_file(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Option<Vec<u8>>> {
    let fd = match sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK, 0) {
        Ok(fd) => fd,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(sys::ctx(e, format!("reading {}", rel.display()))),
    };
    let st = sys::fstat(fd.as_fd())?;
    if !is_regular(&st) {
        return Ok(None);
    }
    let mut buf = Vec::with_capacity(st.st_size as usize);
    let mut chunk = vec![0u8; 1 << 16];
    let mut off = 0u64;
    loop {
        let n = sys::pread(fd.as_fd(), &mut chunk, off)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        off += n as u64;
    }
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    fn dir() -> (tempfile::TempDir, std::os::fd::OwnedFd) {
        let d = tempfile::tempdir().unwrap();
        let fd = sys::open_dir_path(d.path()).unwrap();
        (d, fd)
    }

    #[test]
    fn following_stays_in_the_workspace() {
        let (d, fd) = dir();
        let p = d.path();
        std::fs::create_dir_all(p.join("d2")).unwrap();
        std::fs::write(p.join("d2/f"), "y\n").unwrap();
        std::os::unix::fs::symlink("d2", p.join("d")).unwrap();
        std::os::unix::fs::symlink(p.join("d2/f"), p.join("abs")).unwrap();
        std::os::unix::fs::symlink("../outside", p.join("up")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", p.join("out")).unwrap();
        std::os::unix::fs::symlink("loop", p.join("loop")).unwrap();
        let root = fd.as_fd();
        let at = |r: &str| {
            follow(root, Some(p), Path::new(r))
                .unwrap()
                .map(|(a, _)| a.to_string_lossy().into_owned())
        };
        assert_eq!(
            at("d/f").as_deref(),
            Some("d2/f"),
            "through a relative link"
        );
        assert_eq!(
            at("abs").as_deref(),
            Some("d2/f"),
            "an absolute link into the workspace"
        );
        assert_eq!(at("d/../d2/f").as_deref(), Some("d2/f"));
        assert_eq!(at("up"), None, "out through ..");
        assert_eq!(at("out"), None, "out through an absolute link");
        assert_eq!(at("loop"), None, "a loop");
        assert_eq!(at("d/missing"), None);
        assert_eq!(
            read_file(root, Path::new("d2/f")).unwrap().as_deref(),
            Some(&b"y\n"[..])
        );
        assert_eq!(read_file(root, Path::new("d2")).unwrap(), None);
    }
}
