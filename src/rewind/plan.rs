//! Planning a rewind: which paths it changes, and to what.
//!
//! [`Rewinder::plan`] runs in named steps. Scope `tool` is the SDK's own rewind, path by path
//! ([`Rewinder::plan_tool`], in `tool.rs`). Scopes `agent` and `all` (docs/design.md §2): the state
//! wanted for each path the scope covers ([`Rewinder::wanted_by_actors`]), then only the paths
//! whose wanted state differs from the present become targets, with their line counts
//! ([`Rewinder::keep_differing`]), then an `agent` rewind over someone else's changes is refused
//! unless forced ([`refuse_on_conflicts`]).
//!
//! Invariants:
//! - Planning never changes the tree; it only writes blobs. It reads the present behind the
//!   mount while others may change it: a real rewind watches from before it plans, and what
//!   changes meanwhile is not overwritten (see `capture/meanwhile.rs`).
//! - Every target is self-contained: content found elsewhere in the tree (a moved file) or
//!   completed from range pre-images is stored as a blob, and a file target always names a
//!   blob (the empty one for an empty file), so applying a plan never reads the tree it
//!   rewrites. Blobs put together for a plan go on the guard's scratch list (`one.rs`), for `discard`.
//! - Scopes `agent` and `all`: every target differs from the present; targets are in path
//!   order, and the outcome's `files_changed` and `conflicts` are sorted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;

use super::attrs;
use super::diff::line_counts;
use super::filter::Filter;
use super::history::{History, Lineage};
use super::one::One;
use super::privileges::{AttrChange, Policy, Present, Withheld};
use super::{Differs, Ground, Outcome, Planned, Request, RewindError, Rewinder, Scope, Target};
use crate::capture::snapshot;
use crate::store::BlobRef;
use crate::store::{Actor, Kind, PreImage, Xattrs};
use crate::sys;
use crate::wspath::{WsPath, rebase};

/// Path → the state the rewind should give it, in path order.
type Wanted = BTreeMap<Vec<u8>, PreImage>;

impl Rewinder {
    /// Computes what a rewind to checkpoint `c` would do; every target is self-contained
    /// (content in blobs). `session` is the checkpoint's, whose tracked files the `tool`
    /// scope restores (none: the current session's).
    ///
    /// # Errors
    /// Store and file-system errors; a conflict is not an error but `can_rewind: false`.
    pub(super) fn plan(
        &self,
        one: &mut One<'_>,
        c: i64,
        session: Option<&str>,
        req: &Request,
        filter: &Filter,
    ) -> Result<Outcome, RewindError> {
        let hist = History::load(&self.g.store, c)?;
        if req.dry_run {
            // A look writes nothing to the store: what it puts together stays in memory until
            // `discard`.
            one.look();
        }
        let mut out = Outcome {
            can_rewind: true,
            ..Default::default()
        };
        // Who changed what since, when several sessions did (scope `all` restores everyone's).
        let sessions = match (req.scope, session) {
            (Scope::Tool | Scope::Agent, Some(s)) => {
                // Who changed what is in the change log: all of it, up to now.
                self.g.recorder.flush_log();
                Sessions::since(&self.g.store, c, s)?
            }
            _ => Sessions::default(),
        };
        match req.scope {
            Scope::Tool => {
                let policy = self.g.policy(req.trust_imported);
                self.plan_tool(
                    one,
                    c,
                    session,
                    &hist,
                    &sessions,
                    filter,
                    req.dry_run,
                    &policy,
                    &mut out,
                )?
            }
            Scope::Agent | Scope::All => {
                let wanted =
                    self.wanted_by_actors(one, req.scope, &hist, &sessions, filter, &mut out)?;
                let policy = self.g.policy(req.trust_imported);
                self.keep_differing(one, wanted, &req.user_message_id, &policy, &mut out)?;
                out.files_changed.sort();
            }
        }
        out.conflicts.sort();
        refuse_on_conflicts(req, &mut out);
        Ok(out)
    }

    /// Notes `p` as a conflict of this rewind: `external` (an external actor changed it, by
    /// `bits`) and the other sessions that changed it since the checkpoint.
    pub(super) fn conflict(out: &mut Outcome, p: &[u8], bits: u8, sessions: &Sessions) {
        let name = crate::wire_path::encode(p);
        let mut who: Vec<String> = sessions
            .others(p)
            .into_iter()
            .map(|s| format!("session {s}"))
            .collect();
        if !who.is_empty() {
            out.other_sessions = true;
        }
        if bits & Actor::External.bit() != 0 {
            who.push("external".to_string());
        }
        out.conflicts.push(name.clone());
        out.conflicts_by.insert(name, who);
    }

    /// Scopes `agent` and `all`: every path an actor inside the scope changed since the
    /// checkpoint, by each of its names, to its state at the checkpoint's start. For `agent`,
    /// a path changed both inside the scope and by someone outside it is a conflict.
    fn wanted_by_actors(
        &self,
        one: &mut One<'_>,
        scope: Scope,
        hist: &History,
        sessions: &Sessions,
        filter: &Filter,
        out: &mut Outcome,
    ) -> Result<Wanted, RewindError> {
        let inside = super::inside(scope);
        let candidates = self.g.candidates(hist, inside);
        let mut wanted = Wanted::new();
        for p in candidates {
            if p.is_empty() || !filter.matches(&p) || !sessions.includes(&p) {
                continue;
            }
            let Some(target) = self.state_of(one, hist, hist.lineage(&p), &p)? else {
                continue;
            };
            let bits = hist.actors(&p);
            let someone_else = bits & Actor::External.bit() != 0 || sessions.others_changed(&p);
            if scope == Scope::Agent && bits & inside != 0 && someone_else {
                Self::conflict(out, &p, bits, sessions);
            }
            wanted.insert(p, target);
        }
        Ok(wanted)
    }

    /// The complete state a lineage names for path `q` (`None`: unchanged, as it is now). The
    /// state is self-contained: content found elsewhere in the tree, or completed from a range
    /// pre-image, is stored as a blob, so the plan does not depend on the tree it rewrites.
    pub(super) fn state_of(
        &self,
        one: &mut One<'_>,
        hist: &History,
        lin: Lineage,
        q: &[u8],
    ) -> Result<Option<PreImage>, RewindError> {
        Ok(match lin {
            Lineage::Pre(p) => Some(p),
            Lineage::Partial(c, at) => Some(self.materialize(one, hist, &c, &at)?),
            Lineage::Current(at) if at == q => None,
            // Moved elsewhere and unchanged since: its content is there.
            Lineage::Current(at) => {
                let rel = crate::wspath::key_path(&at);
                if one.looking() {
                    return Ok(Some(self.look_now(one, rel)?));
                }
                let pre = snapshot(self.g.root(), rel, &self.g.store)?;
                one.scratch(pre.blob.clone());
                Some(pre)
            }
        })
    }

    /// A look's pre-image of `rel` as it is now, its content kept in memory (see `looked`).
    fn look_now(&self, one: &mut One<'_>, rel: &Path) -> Result<PreImage, RewindError> {
        let now = now_state(self.g.root(), rel)?;
        let size = now.content.as_ref().map_or(0, |c| c.len() as u64);
        let blob = match now.content {
            Some(c) => one.keep_looked(c),
            None => None,
        };
        Ok(PreImage {
            kind: now.kind,
            blob,
            mode: now.mode,
            uid: now.uid,
            gid: now.gid,
            size,
            target: now.target,
            partial: false,
            xattrs: now.xattrs,
            imported: false,
        })
    }

    /// Keeps, of the wanted states, those that differ from the present, as the outcome's
    /// targets, and counts the lines they add and remove.
    ///
    /// Each path is looked at on its own ([`Rewinder::probe`]: the present read behind the
    /// mount, the target's content read and verified, the lines counted), on several threads
    /// a batch at a time; the outcome is put together in path order, so it is the same as one
    /// thread's. On 2 cores this cut the planning of a 10k-file rewind by a fifth to a third
    /// (docs/benchmarks.md).
    fn keep_differing(
        &self,
        one: &One<'_>,
        wanted: Wanted,
        req_uuid: &str,
        policy: &Policy,
        out: &mut Outcome,
    ) -> Result<(), RewindError> {
        let mut inline_budget = INLINE_TOTAL;
        let wanted: Vec<(Vec<u8>, PreImage)> = wanted.into_iter().collect();
        for batch in probe_batches(&wanted) {
            let probe = |(p, target): &(Vec<u8>, PreImage)| {
                self.probe(one, p, target.clone(), req_uuid, policy)
            };
            let probed = if batch.len() == 1 {
                vec![probe(&batch[0])]
            } else {
                super::parallel::map(batch, probe)
            };
            for probe in probed {
                let Probe {
                    withheld,
                    differing,
                } = probe?;
                if let Some(w) = withheld {
                    out.withheld.push(w);
                }
                let Some(d) = differing else { continue };
                out.attr_changes.extend(d.attr_change);
                out.insertions += d.planned.lines.0;
                out.deletions += d.planned.lines.1;
                out.files_changed.push(d.name);
                let mut planned = d.planned;
                // Verified just now: what a live rewind's helper writes, instead of reading
                // the blob again (within bounds: the plan travels to the helper whole).
                planned.content = planned.content.filter(|c| {
                    let fits = c.len() <= inline_budget;
                    if fits {
                        inline_budget -= c.len();
                    }
                    fits
                });
                out.planned.push(planned);
            }
        }
        Ok(())
    }

    /// Compares path `p`'s present with `target`, the state a rewind wants for it: what history
    /// from elsewhere may not grant is taken out first ([`Policy::limit`]), then, if the rest
    /// differs, the target as planned.
    fn probe(
        &self,
        one: &One<'_>,
        p: &[u8],
        mut target: PreImage,
        req_uuid: &str,
        policy: &Policy,
    ) -> Result<Probe, RewindError> {
        // Where a plan's target gets its type: every name history gives is a path inside the
        // workspace (the store checks each row it reads), the root left out before.
        let path = WsPath::parse(p.to_vec()).map_err(|_| super::bad_path(p))?;
        let now = now_state(self.g.root(), path.as_path())?;
        // What history from elsewhere may not grant is taken out before anything is compared:
        // the rewind neither applies nor counts it, and says so.
        let owner = (now.kind != Kind::Absent).then_some((now.uid, now.gid));
        let (withheld, leave) = policy.limit(&mut target, owner);
        let withheld = (!withheld.is_empty()).then(|| Withheld {
            path: crate::wire_path::encode(p),
            what: withheld,
        });
        if leave {
            return Ok(Probe {
                withheld,
                differing: None,
            });
        }
        let new_content = match (&target.kind, &target.blob) {
            (Kind::File, Some(b)) => Some(
                self.target_content(one, b)
                    .map_err(|e| super::unusable(p, req_uuid, e))?,
            ),
            (Kind::File, None) => Some(Vec::new()),
            _ => None,
        };
        if !now.differs_from(&target, &new_content) {
            return Ok(Probe {
                withheld,
                differing: None,
            });
        }
        let attr_change = now.attr_change(p, &target, policy.as_root);
        let lines = line_counts(
            now.content.as_deref().unwrap_or_default(),
            new_content.as_deref().unwrap_or_default(),
        );
        let differs = now.differs_in(&target, &new_content);
        let mut t = Target::new(&path, &target);
        if target.kind == Kind::File && t.blob.is_none() {
            t.blob = Some(BlobRef::hash(crate::store::blobs::empty_hash()));
        }
        Ok(Probe {
            withheld,
            differing: Some(Differing {
                attr_change,
                name: crate::wire_path::encode(p),
                planned: Planned {
                    target: t,
                    lines,
                    differs,
                    content: new_content.filter(|c| c.len() <= INLINE_MAX),
                },
            }),
        })
    }
}

/// What [`Rewinder::probe`] found at one path.
struct Probe {
    /// What history from elsewhere asked for and may not have there.
    withheld: Option<Withheld>,
    /// The path as a target (`None`: it is as wanted already, or left alone).
    differing: Option<Differing>,
}

/// A path whose present differs from what the rewind wants.
struct Differing {
    attr_change: Option<AttrChange>,
    /// Its name on the wire.
    name: String,
    /// Its target, with content no larger than [`INLINE_MAX`] kept (the budget for all of it
    /// is applied in path order).
    planned: Planned,
}

/// Paths probed at once: what their results hold is bounded by this many times
/// [`INLINE_MAX`]. While a path is probed, its present and target contents are in memory whole
/// (as when one thread planned), so at most as many of those as there are threads.
const PROBE_BATCH: usize = 256;

/// A target this large is probed on its own: several of them read at once would hold several
/// large files in memory.
const PROBE_ALONE: u64 = 8 << 20;

/// `wanted` in path order, cut into batches of at most [`PROBE_BATCH`] paths, each target of
/// [`PROBE_ALONE`] bytes or more in a batch of its own.
pub(super) fn probe_batches(wanted: &[(Vec<u8>, PreImage)]) -> Vec<&[(Vec<u8>, PreImage)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, (_, t)) in wanted.iter().enumerate() {
        if t.size >= PROBE_ALONE {
            if start < i {
                out.extend(wanted[start..i].chunks(PROBE_BATCH));
            }
            out.push(&wanted[i..=i]);
            start = i + 1;
        }
    }
    out.extend(wanted[start..].chunks(PROBE_BATCH));
    out
}

impl Ground {
    /// Every name a rewind of the actors in `inside` (actor bits) looks at: the paths they
    /// changed ([`Ground::changed_inside`]) by each name they had since the checkpoint
    /// ([`other_names`]). With every actor (`all`), a name outside this set is unchanged since
    /// the checkpoint: it is as it is now (what `show`, `ls` and `fork` rely on).
    pub(super) fn candidates(&self, hist: &History, inside: u8) -> HashSet<Vec<u8>> {
        let mut candidates = self.changed_inside(hist, inside);
        let named = other_names(hist, &candidates);
        candidates.extend(named);
        candidates
    }

    /// The paths actors in `inside` (actor bits) changed: each path they captured, and
    /// everything now beneath either side of a directory they renamed, by its name on both
    /// sides of that rename.
    fn changed_inside(&self, hist: &History, inside: u8) -> HashSet<Vec<u8>> {
        let root = self.root();
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
                walk(root, base.as_path(), &mut found);
                for f in found {
                    if let Some(n) = rebase(&f, &m.dst, &m.src) {
                        candidates.insert(n);
                    }
                    if let Some(n) = rebase(&f, &m.src, &m.dst) {
                        candidates.insert(n);
                    }
                    candidates.insert(f);
                }
            }
        }
        candidates
    }
}

/// The largest target content a plan hands its helper with the plan (see `helper.rs`), and
/// the most it hands in all; the helper reads the rest from the store.
const INLINE_MAX: usize = 64 * 1024;
const INLINE_TOTAL: usize = 16 * 1024 * 1024;

/// Names the candidates are also known by, before and after each rename: for every path
/// seen, its name when the checkpoint began and its name now, found by following the renames
/// in the order they happened (bounded: two names per path; chaining renames regardless of
/// their order would grow without end, e.g. `mv x d/e` then `mv d x`).
fn other_names(hist: &History, candidates: &HashSet<Vec<u8>>) -> HashSet<Vec<u8>> {
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
    for p in candidates {
        if !hist.by_path.contains_key(p) {
            // Found beneath a moved directory as it is now.
            named.insert(hist.name_at_start(p, (i64::MAX, 2)));
        }
    }
    named
}

/// Scope `agent` refuses to rewind over changes someone else also made (docs/design.md §2) unless
/// `force` is given; scope `tool` over another session's changes (docs/design.md §3), though not over
/// an external edit alone (the SDK's behaviour). The outcome says so, naming who, and a real
/// rewind fails with its words.
fn refuse_on_conflicts(req: &Request, out: &mut Outcome) {
    let refuses = match req.scope {
        Scope::Agent => !out.conflicts.is_empty(),
        Scope::Tool => out.other_sessions,
        Scope::All => false,
    };
    if refuses && !req.force {
        out.can_rewind = false;
        const SHOWN: usize = 10;
        let more = match out.conflicts.len().saturating_sub(SHOWN) {
            0 => String::new(),
            n => format!(" and {n} more (`conflicts` lists them)"),
        };
        let named: Vec<String> = out.conflicts[..out.conflicts.len().min(SHOWN)]
            .iter()
            .map(
                |p| match out.conflicts_by.get(p).filter(|w| !w.is_empty()) {
                    Some(who) => format!("{p} (by {})", who.join(", ")),
                    None => p.clone(),
                },
            )
            .collect();
        let whose = match (req.scope, &req.session_id) {
            (Scope::Tool, _) => "this session's tools",
            (_, Some(_)) => "this session's agent",
            _ => "the agent",
        };
        out.error = Some(format!(
            "{} path(s) were also changed by someone other than {whose} since message {}: \
             {}{more}; nothing was rewound. To rewind them anyway, losing those changes, \
             repeat with --force (on the socket, \"force\": true); to keep them, rewind only \
             the other paths",
            out.conflicts.len(),
            req.user_message_id,
            named.join(", ")
        ));
    }
}

/// The current state of a path, for comparison with a target.
pub(super) struct Now {
    pub(super) kind: Kind,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// Extended attributes (`None`: a symlink or absent, or they could not be read).
    pub(super) xattrs: Option<Xattrs>,
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
                uid: 0,
                gid: 0,
                xattrs: None,
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
                uid: st.st_uid,
                gid: st.st_gid,
                xattrs: attrs::read(fd.as_fd()),
                content: Some(buf),
                target: None,
            }
        }
        libc::S_IFDIR => Now {
            kind: Kind::Dir,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            xattrs: attrs::read_at(root, rel),
            content: None,
            target: None,
        },
        libc::S_IFLNK => Now {
            kind: Kind::Symlink,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            xattrs: None,
            content: None,
            target: Some(sys::readlinkat(root, rel)?.as_bytes().to_vec()),
        },
        _ => Now {
            kind: Kind::Other,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            xattrs: attrs::read_at(root, rel),
            content: None,
            target: None,
        },
    })
}

impl Now {
    /// What a rewind to `target` changes here besides content (see [`AttrChange`]).
    pub(super) fn attr_change(
        &self,
        p: &[u8],
        target: &PreImage,
        as_root: bool,
    ) -> Option<AttrChange> {
        let now = (self.kind != Kind::Absent).then_some(Present {
            kind: self.kind,
            mode: self.mode,
            owner: (self.uid, self.gid),
            xattrs: self.xattrs.as_ref(),
        });
        super::privileges::attr_change(p, now, target, as_root, attrs::restorable)
    }

    /// What of a file's or directory's content and attributes differs from `target`: what
    /// applying through the mount needs to write (see [`Differs`]).
    fn differs_in(&self, target: &PreImage, new_content: &Option<Vec<u8>>) -> Differs {
        Differs {
            content: self.kind != target.kind || self.content != *new_content,
            xattrs: self.kind != target.kind
                || target
                    .xattrs
                    .as_ref()
                    .is_some_and(|want| attrs::differ(self.xattrs.as_ref(), want)),
        }
    }

    /// Whether a rewind to `target` (a file's bytes in `new_content`) would change this: the
    /// kind, the permission bits (not a symlink's, which mean nothing), the owner (only when
    /// the daemon runs as root, the only case in which a rewind restores it), the extended
    /// attributes a rewind restores (when the target recorded them), a file's bytes or a
    /// symlink's target.
    fn differs_from(&self, target: &PreImage, new_content: &Option<Vec<u8>>) -> bool {
        self.kind != target.kind
            || (target.kind != Kind::Absent
                && self.mode & 0o7777 != target.mode & 0o7777
                && target.kind != Kind::Symlink)
            || (target.kind != Kind::Absent
                && sys::geteuid() == 0
                && (self.uid, self.gid) != (target.uid, target.gid))
            || (matches!(target.kind, Kind::File | Kind::Dir | Kind::Other)
                && target
                    .xattrs
                    .as_ref()
                    .is_some_and(|want| attrs::differ(self.xattrs.as_ref(), want)))
            || (target.kind == Kind::File && self.content != *new_content)
            || (target.kind == Kind::Symlink && self.target != target.target)
    }
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

/// Which session changed what since a checkpoint, when several did (docs/design.md §3, "Many
/// sessions, one tree"): a rewind of a session restores only what its own actors changed, and
/// a path another session also changed is a conflict. With one session at work (the common
/// case) this changes nothing.
///
/// A path beneath a directory someone renamed was changed by that rename as well: the change
/// log names the directory, not what is beneath it, so the sessions of a rename count for every
/// path beneath either of its names.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    /// The session rewinding.
    me: Option<String>,
    /// Each path changed since the checkpoint, with the sessions that changed it; empty when
    /// no other session changed anything.
    by_path: HashMap<Vec<u8>, HashSet<Option<String>>>,
    /// Both names of each rename since the checkpoint, with the sessions that made it; empty
    /// when no other session changed anything.
    renamed: HashMap<Vec<u8>, HashSet<Option<String>>>,
}

impl Sessions {
    fn since(store: &crate::store::Store, c: i64, me: &str) -> Result<Sessions, RewindError> {
        let (by_path, renamed) = store.sessions_since(c)?;
        let others = by_path
            .values()
            .any(|s| s.iter().any(|x| x.as_deref().is_some_and(|x| x != me)));
        if !others {
            return Ok(Sessions {
                me: Some(me.to_string()),
                ..Sessions::default()
            });
        }
        Ok(Sessions {
            me: Some(me.to_string()),
            by_path,
            renamed,
        })
    }

    /// The sessions that changed `p` since the checkpoint: by its own name, or by renaming a
    /// directory above it (empty: the change log does not say, or one session was at work).
    fn changers(&self, p: &[u8]) -> HashSet<Option<String>> {
        let mut out = self.by_path.get(p).cloned().unwrap_or_default();
        if !self.renamed.is_empty() {
            for a in crate::wspath::ancestors(p) {
                if let Some(s) = self.renamed.get(a) {
                    out.extend(s.iter().cloned());
                }
            }
        }
        out
    }

    /// Whether the rewinding session restores `p`: it changed it, by its name or by renaming a
    /// directory above it (a path the change log does not name at all is restored, as with one
    /// session).
    pub(super) fn includes(&self, p: &[u8]) -> bool {
        let by = self.changers(p);
        by.is_empty() || by.contains(&self.me)
    }

    /// Whether another session changed `p` too.
    pub(super) fn others_changed(&self, p: &[u8]) -> bool {
        !self.others(p).is_empty()
    }

    /// The other sessions that changed `p` since the checkpoint, sorted.
    fn others(&self, p: &[u8]) -> Vec<String> {
        let mut v: Vec<String> = self
            .changers(p)
            .into_iter()
            .flatten()
            .filter(|s| Some(s) != self.me.as_ref())
            .collect();
        v.sort();
        v
    }
}
