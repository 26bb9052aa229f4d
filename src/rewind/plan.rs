//! Planning a rewind: which paths it changes, and to what.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;

use super::diff::line_counts;
use super::filter::Filter;
use super::history::{History, Lineage, rebase, under};
use super::{Engine, Outcome, Request, RewindError, Scope, Target};
use crate::capture::snapshot;
use crate::store::{Actor, Kind, PreImage};
use crate::sys;

impl Engine {
    /// The complete state a lineage names for path `q` (`None`: unchanged, as it is now). The
    /// state is self-contained: content found elsewhere in the tree, or completed from a range
    /// pre-image, is stored as a blob, so the plan does not depend on the tree it rewrites.
    fn state_of(
        &self,
        hist: &History,
        lin: Lineage,
        q: &[u8],
    ) -> Result<Option<PreImage>, RewindError> {
        Ok(match lin {
            Lineage::Pre(p) => Some(p),
            Lineage::Partial(c, at) => Some(self.materialize(hist, &c, &at)?),
            Lineage::Current(at) if at == q => None,
            // Moved elsewhere and unchanged since: its content is there.
            Lineage::Current(at) => {
                let pre = snapshot(self.root(), Path::new(OsStr::from_bytes(&at)), &self.store)?;
                self.scratch.lock().unwrap().extend(pre.blob.clone());
                Some(pre)
            }
        })
    }

    /// Computes what a rewind would do; every target is self-contained (content in blobs).
    pub(super) fn plan(
        &self,
        c: i64,
        session: Option<&str>,
        req: &Request,
        filter: &Filter,
    ) -> Result<Outcome, RewindError> {
        let hist = History::load(&self.store, c)?;
        let mut out = Outcome {
            can_rewind: true,
            ..Default::default()
        };
        // path → the state to give it
        let mut wanted: BTreeMap<Vec<u8>, PreImage> = BTreeMap::new();
        let root = self.root();
        match req.scope {
            Scope::Tool => {
                let session = session
                    .map(str::to_string)
                    .or_else(|| self.recorder.current().2);
                let tracked = match &session {
                    Some(s) => self.store.tracked(s)?,
                    None => Vec::new(),
                };
                for t in tracked {
                    if !filter.matches(&t.path) {
                        continue;
                    }
                    let target = if t.checkpoint < c {
                        match self.state_of(&hist, hist.lineage(&t.path), &t.path)? {
                            Some(p) => p,
                            None => continue,
                        }
                    } else {
                        match t
                            .capture
                            .and_then(|id| self.store.capture_by_id(id).ok().flatten())
                        {
                            Some(cap) if cap.pre.partial => {
                                let path = cap.path.clone();
                                self.materialize(&hist, &cap, &path)?
                            }
                            Some(cap) => cap.pre,
                            None => continue,
                        }
                    };
                    let rel = Path::new(OsStr::from_bytes(&t.path));
                    let now = now_state(root, rel)?;
                    if target.kind == Kind::Symlink || now.kind == Kind::Symlink {
                        out.skipped_links += 1;
                        continue;
                    }
                    // Files only: directories and special files are left alone.
                    if !matches!(target.kind, Kind::File | Kind::Absent)
                        || !matches!(now.kind, Kind::File | Kind::Absent)
                    {
                        continue;
                    }
                    if hist.actors(&t.path) & Actor::External.bit() != 0 {
                        out.conflicts
                            .push(String::from_utf8_lossy(&t.path).into_owned());
                    }
                    wanted.insert(t.path.clone(), target);
                }
            }
            Scope::Agent | Scope::All => {
                let inside = req.scope.inside();
                let mut candidates: HashSet<Vec<u8>> = HashSet::new();
                for (p, caps) in &hist.by_path {
                    if caps.iter().any(|c| c.actors & inside != 0) {
                        candidates.insert(p.clone());
                    }
                }
                for m in &hist.moves {
                    if m.actor.bit() & inside == 0 {
                        continue;
                    }
                    for base in [&m.src, &m.dst] {
                        let mut found = Vec::new();
                        walk(root, Path::new(OsStr::from_bytes(base)), &mut found);
                        for f in found {
                            if let Some(rest) = under(&f, &m.dst) {
                                candidates.insert(rebase(&rest, &m.src));
                            }
                            if let Some(rest) = under(&f, &m.src) {
                                candidates.insert(rebase(&rest, &m.dst));
                            }
                            candidates.insert(f);
                        }
                    }
                }
                // A path is known by other names before and after each rename: add, for every
                // path seen, its name when the checkpoint began and its name now, by following
                // the renames in the order they happened (bounded: two names per path; chaining
                // renames regardless of their order would grow without end, e.g. `mv x d/e`
                // then `mv d x`).
                let mut named: HashSet<Vec<u8>> = HashSet::new();
                for (p, caps) in &hist.by_path {
                    if !candidates.contains(p) {
                        continue;
                    }
                    for c in caps {
                        named.insert(hist.name_at_start(p, (c.id, 0)));
                        named.insert(hist.name_now(p, (c.id, 0)));
                    }
                }
                for p in &candidates {
                    if !hist.by_path.contains_key(p) {
                        // Found beneath a moved directory as it is now.
                        named.insert(hist.name_at_start(p, (i64::MAX, 2)));
                    }
                }
                candidates.extend(named);
                for p in candidates {
                    if p.is_empty() || !filter.matches(&p) {
                        continue;
                    }
                    let target = match self.state_of(&hist, hist.lineage(&p), &p)? {
                        Some(pre) => pre,
                        None => continue,
                    };
                    let bits = hist.actors(&p);
                    if req.scope == Scope::Agent
                        && bits & inside != 0
                        && bits & Actor::External.bit() != 0
                    {
                        out.conflicts.push(String::from_utf8_lossy(&p).into_owned());
                    }
                    wanted.insert(p, target);
                }
            }
        }
        out.conflicts.sort();
        // Keep only what differs from the present; count lines.
        for (p, target) in wanted {
            let rel = Path::new(OsStr::from_bytes(&p));
            let now = now_state(root, rel)?;
            let new_content = match (&target.kind, &target.blob) {
                (Kind::File, Some(b)) => Some(self.store.blobs.read(b)?),
                (Kind::File, None) => Some(Vec::new()),
                _ => None,
            };
            let differs = now.kind != target.kind
                || (target.kind != Kind::Absent
                    && now.mode & 0o7777 != target.mode & 0o7777
                    && target.kind != Kind::Symlink)
                || (target.kind == Kind::File && now.content != new_content)
                || (target.kind == Kind::Symlink && now.target != target.target);
            if !differs {
                continue;
            }
            let old = now.content.clone().unwrap_or_default();
            let new = new_content.clone().unwrap_or_default();
            let (i, d) = line_counts(&old, &new);
            out.insertions += i;
            out.deletions += d;
            out.files_changed
                .push(String::from_utf8_lossy(&p).into_owned());
            let mut t = Target::new(rel, &target);
            if target.kind == Kind::File && t.blob.is_none() {
                t.blob = Some(crate::store::blobs::empty_hash());
            }
            out.targets.push(t);
        }
        out.files_changed.sort();
        if req.scope == Scope::Agent && !out.conflicts.is_empty() && !req.force {
            out.can_rewind = false;
            out.error = Some(format!(
                "{} path(s) were also changed by someone other than the agent since this message: {}; pass force to rewind anyway",
                out.conflicts.len(),
                out.conflicts.join(", ")
            ));
        }
        Ok(out)
    }
}

/// The current state of a path, for comparison with a target.
pub(super) struct Now {
    pub(super) kind: Kind,
    pub(super) mode: u32,
    pub(super) content: Option<Vec<u8>>,
    pub(super) target: Option<Vec<u8>>,
}

pub(super) fn now_state(root: BorrowedFd<'_>, rel: &Path) -> io::Result<Now> {
    let st = match sys::lstat_beneath(root, rel) {
        Ok(st) => st,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Ok(Now {
                kind: Kind::Absent,
                mode: 0,
                content: None,
                target: None,
            });
        }
        Err(e) => return Err(e),
    };
    Ok(match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {
            let fd = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)?;
            let mut buf = vec![0u8; st.st_size as usize];
            let n = sys::pread_full(fd.as_fd(), &mut buf, 0)?;
            buf.truncate(n);
            Now {
                kind: Kind::File,
                mode: st.st_mode,
                content: Some(buf),
                target: None,
            }
        }
        libc::S_IFDIR => Now {
            kind: Kind::Dir,
            mode: st.st_mode,
            content: None,
            target: None,
        },
        libc::S_IFLNK => Now {
            kind: Kind::Symlink,
            mode: st.st_mode,
            content: None,
            target: Some(sys::readlinkat(root, rel)?.as_bytes().to_vec()),
        },
        _ => Now {
            kind: Kind::Other,
            mode: st.st_mode,
            content: None,
            target: None,
        },
    })
}

fn key(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

/// Lists every path beneath `rel` (not following symlinks).
fn walk(root: BorrowedFd<'_>, rel: &Path, out: &mut Vec<Vec<u8>>) {
    let Ok(fd) = sys::open_beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, 0) else {
        return;
    };
    let Ok(ents) = sys::read_dir_all(fd) else {
        return;
    };
    for (name, _, dtype) in ents {
        let p = rel.join(&name);
        out.push(key(&p));
        if dtype == libc::DT_DIR {
            walk(root, &p, out);
        }
    }
}
