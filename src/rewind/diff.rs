//! What a rewind would change, as text: the unified diff of `rewindfs diff` and the line
//! counts of a plan's outcome.
//!
//! Invariants: the diff is read-only — it plans as a dry run does (under the apply lock,
//! after the kernel's dirty data is flushed, so what the kernel holds counts as the present)
//! and discards what the plan put together; content that is not UTF-8, or holds a NUL, is
//! binary: it is reported as "Binary files … differ" and counts no lines, so a diff never
//! prints raw bytes.

use super::plan::now_state;
use super::{Engine, Request, RewindError, Scope, Target};
use crate::store::Kind;

impl Engine {
    /// Unified diff, current → checkpoint, of the paths a rewind of `scope` would change
    /// (`path`: only that path or glob), with the list of those paths.
    ///
    /// # Errors
    /// As [`Engine::rewind`]'s.
    pub fn diff(
        &self,
        user_message_id: &str,
        path: Option<&str>,
        scope: Scope,
    ) -> Result<(String, Vec<String>), RewindError> {
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
            .and_then(|out| Ok((self.diff_text(&out.targets)?, out.files_changed)));
        self.discard();
        text
    }

    /// The unified diff, current → target, of each target.
    fn diff_text(&self, targets: &[Target]) -> Result<String, RewindError> {
        let mut text = String::new();
        for t in targets {
            let rel = t.rel();
            let now = now_state(self.root(), rel)?;
            let old = now.content.unwrap_or_default();
            let new = match (&t.blob, t.kind()) {
                (Some(b), Kind::File) => self
                    .store
                    .blobs
                    .read_verified(b)
                    .map_err(|e| crate::sys::ctx(e, rel.display()))?,
                _ => Vec::new(),
            };
            let name = rel.display().to_string();
            if !is_text(&old) || !is_text(&new) {
                if old != new {
                    text.push_str(&format!("Binary files a/{name} and b/{name} differ\n"));
                }
                continue;
            }
            let (a, b) = (String::from_utf8_lossy(&old), String::from_utf8_lossy(&new));
            let d = similar::TextDiff::from_lines(a.as_ref(), b.as_ref());
            let from = if now.kind == Kind::Absent {
                "/dev/null".to_string()
            } else {
                format!("a/{name}")
            };
            let to = if t.kind() == Kind::Absent {
                "/dev/null".to_string()
            } else {
                format!("b/{name}")
            };
            let u = d.unified_diff().header(&from, &to).to_string();
            if !u.is_empty() {
                text.push_str(&u);
            } else if now.mode & 0o7777 != t.mode & 0o7777 && t.kind() != Kind::Absent {
                text.push_str(&format!(
                    "mode {name}: {:o} -> {:o}\n",
                    now.mode & 0o7777,
                    t.mode & 0o7777
                ));
            }
        }
        Ok(text)
    }
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
