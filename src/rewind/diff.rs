//! What a rewind would change, as text: the unified diff of `rewindfs diff` and the line
//! counts of a plan's outcome.
//!
//! Invariants: the diff is read-only — it plans as a dry run does (under the apply lock,
//! after the kernel's dirty data is flushed, so what the kernel holds counts as the present)
//! and discards what the plan put together; content that is not UTF-8, or holds a NUL, is
//! binary: it is reported as "Binary files … differ" and counts no lines, so a diff never
//! prints raw bytes.

use super::past::DiffOut;
use super::plan::now_state;
use super::{Engine, Request, RewindError, Scope, Target};
use crate::store::Kind;

impl Engine {
    /// Unified diff, current → checkpoint, of the paths a rewind of `scope` would change
    /// (`path`: only that path or glob), with the list of those paths and their line counts.
    ///
    /// # Errors
    /// As [`Engine::rewind`]'s.
    pub fn diff(
        &self,
        user_message_id: &str,
        path: Option<&str>,
        scope: Scope,
    ) -> Result<DiffOut, RewindError> {
        let req = Request {
            user_message_id: user_message_id.to_string(),
            dry_run: true,
            scope,
            force: true,
            paths: path.map(|p| vec![p.to_string()]).unwrap_or_default(),
            session_id: None,
        };
        let _one = self.apply.lock().unwrap_or_else(|p| p.into_inner());
        let (_, cp, filter) = self.checked(&req)?;
        self.kernel.flush();
        let text = self
            .plan(cp.seq, cp.session_id.as_deref(), &req, &filter)
            .and_then(|out| {
                let (text, stats) = self.diff_text(&out.targets)?;
                Ok(DiffOut {
                    text,
                    files_changed: out.files_changed,
                    stats,
                })
            });
        self.discard();
        text
    }

    /// The unified diff, current → target, of each target, and each one's line counts.
    fn diff_text(&self, targets: &[Target]) -> Result<(String, Vec<FileStat>), RewindError> {
        let mut text = String::new();
        let mut stats = Vec::new();
        for t in targets {
            let rel = t.rel();
            let now = now_state(self.root(), rel)?;
            let old = Side {
                kind: now.kind,
                mode: now.mode,
                content: now.content.unwrap_or_default(),
                target: now.target,
            };
            let new = Side {
                kind: t.kind(),
                mode: t.mode,
                content: match (&t.blob, t.kind()) {
                    (Some(b), Kind::File) => self.store.blobs.read(b)?,
                    _ => Vec::new(),
                },
                target: t.target.clone(),
            };
            let (d, stat) = file_diff(&rel.display().to_string(), &old, &new);
            text.push_str(&d);
            stats.push(stat);
        }
        Ok((text, stats))
    }
}

/// One side of a path's diff: what it is, and a file's bytes (empty for anything else).
#[derive(Debug, Clone)]
pub(super) struct Side {
    pub(super) kind: Kind,
    pub(super) mode: u32,
    pub(super) content: Vec<u8>,
    pub(super) target: Option<Vec<u8>>,
}

impl Side {
    pub(super) fn absent() -> Side {
        Side {
            kind: Kind::Absent,
            mode: 0,
            content: Vec::new(),
            target: None,
        }
    }

    /// Whether going from `self` to `other` changes anything a rewind restores: the kind,
    /// the permission bits (not a symlink's), a file's bytes or a symlink's target.
    pub(super) fn differs(&self, other: &Side) -> bool {
        self.kind != other.kind
            || (other.kind != Kind::Absent
                && other.kind != Kind::Symlink
                && self.mode & 0o7777 != other.mode & 0o7777)
            || (other.kind == Kind::File && self.content != other.content)
            || (other.kind == Kind::Symlink && self.target != other.target)
    }
}

/// Lines one path's diff adds and removes (`binary`: content that is not text, counted as
/// none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileStat {
    pub path: String,
    pub insertions: u64,
    pub deletions: u64,
    pub binary: bool,
}

/// The diff text of one path, `old` → `new`, in the format of `rewindfs diff`: a unified diff
/// of text (from or to `/dev/null` for an absent side), `Binary files … differ`, or a mode line
/// when only the permission bits change; and its line counts.
pub(super) fn file_diff(name: &str, old: &Side, new: &Side) -> (String, FileStat) {
    let mut stat = FileStat {
        path: name.to_string(),
        ..FileStat::default()
    };
    if !is_text(&old.content) || !is_text(&new.content) {
        stat.binary = true;
        if old.content != new.content {
            return (format!("Binary files a/{name} and b/{name} differ\n"), stat);
        }
        return (String::new(), stat);
    }
    (stat.insertions, stat.deletions) = line_counts(&old.content, &new.content);
    let (a, b) = (
        String::from_utf8_lossy(&old.content),
        String::from_utf8_lossy(&new.content),
    );
    let d = similar::TextDiff::from_lines(a.as_ref(), b.as_ref());
    let from = if old.kind == Kind::Absent {
        "/dev/null".to_string()
    } else {
        format!("a/{name}")
    };
    let to = if new.kind == Kind::Absent {
        "/dev/null".to_string()
    } else {
        format!("b/{name}")
    };
    let u = d.unified_diff().header(&from, &to).to_string();
    if !u.is_empty() {
        return (u, stat);
    }
    if old.mode & 0o7777 != new.mode & 0o7777 && new.kind != Kind::Absent {
        return (
            format!(
                "mode {name}: {:o} -> {:o}\n",
                old.mode & 0o7777,
                new.mode & 0o7777
            ),
            stat,
        );
    }
    if new.kind == Kind::Symlink && old.target != new.target {
        let t = |s: &Side| {
            s.target
                .as_deref()
                .map(|t| String::from_utf8_lossy(t).into_owned())
                .unwrap_or_else(|| "(none)".into())
        };
        return (format!("symlink {name}: {} -> {}\n", t(old), t(new)), stat);
    }
    (String::new(), stat)
}

/// Text is UTF-8 without a NUL; anything else is binary.
fn is_text(b: &[u8]) -> bool {
    !b.contains(&0) && std::str::from_utf8(b).is_ok()
}

/// Lines added and removed going from `old` to `new` (0 for binary content).
pub(super) fn line_counts(old: &[u8], new: &[u8]) -> (u64, u64) {
    if !is_text(old) || !is_text(new) {
        return (0, 0);
    }
    let (o, n) = (
        std::str::from_utf8(old).unwrap(),
        std::str::from_utf8(new).unwrap(),
    );
    let diff = similar::TextDiff::from_lines(o, n);
    let (mut ins, mut del) = (0, 0);
    for c in diff.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => ins += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (ins, del)
}
