//! `rewindfs diff UUID`: the unified diff, current → checkpoint, of what a rewind would change.
//!
//! Invariants: read-only — it plans as a dry run does (holding [`One`], after the kernel's
//! dirty data is flushed, so what the kernel holds counts as the present) and discards what
//! the plan put together. The text itself is made by `diff.rs`.

use super::diff::{DiffOut, FileStat, Side, file_diff};
use super::one::One;
use super::plan::now_state;
use super::{Request, RewindError, Rewinder, Scope, Target};
use crate::store::Kind;

impl Rewinder {
    /// Unified diff, current → checkpoint, of the paths a rewind of `scope` would change
    /// (`path`: only that path or glob), with the list of those paths and their line counts.
    /// `session`: the checkpoint must be that session's.
    ///
    /// # Errors
    /// As [`Rewinder::rewind`]'s.
    pub fn diff(
        &self,
        user_message_id: &str,
        path: Option<&str>,
        scope: Scope,
        session: Option<&str>,
    ) -> Result<DiffOut, RewindError> {
        let req = Request {
            user_message_id: user_message_id.to_string(),
            dry_run: true,
            scope,
            force: true,
            paths: path.map(|p| vec![p.to_string()]).unwrap_or_default(),
            session_id: session.map(str::to_string),
            trust_imported: false,
        };
        let mut one = self.g.one();
        let (_, cp, filter) = self.g.checked(&req)?;
        self.g.kernel.flush();
        let text = self
            .plan(&mut one, cp.seq, cp.session_id.as_deref(), &req, &filter)
            .and_then(|out| {
                let (text, stats) = self.diff_text(&one, out.targets())?;
                Ok(DiffOut {
                    text,
                    files_changed: out.files_changed,
                    stats,
                })
            });
        one.discard();
        text
    }

    /// The unified diff, current → target, of each target, and each one's line counts.
    fn diff_text<'a>(
        &self,
        one: &One<'_>,
        targets: impl IntoIterator<Item = &'a Target>,
    ) -> Result<(String, Vec<FileStat>), RewindError> {
        let mut text = String::new();
        let mut stats = Vec::new();
        for t in targets {
            let rel = t.rel();
            let now = now_state(self.g.root(), rel)?;
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
                    (Some(b), Kind::File) => self
                        .target_content(one, b)
                        .map_err(|e| crate::sys::ctx(e, rel.display()))?,
                    _ => Vec::new(),
                },
                target: t.target.clone(),
            };
            let (d, stat) = file_diff(&crate::wire_path::encode(&t.path), &old, &new);
            text.push_str(&d);
            stats.push(stat);
        }
        Ok((text, stats))
    }
}
