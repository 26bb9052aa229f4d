//! What a rewind would change, as text: the unified diff of `rewindfs diff` and the line
//! counts of a plan's outcome.
//!
//! Invariants: the diff is read-only — it plans as a dry run does (under the apply lock,
//! after the kernel's dirty data is flushed, so what the kernel holds counts as the present)
//! and discards what the plan put together. The diff *text* treats content that is not UTF-8,
//! or holds a NUL, as binary ("Binary files … differ"), so it never prints raw bytes; the line
//! *counts* are the SDK's, which count binary content as text too ([`line_counts`]).

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

/// Lines added and removed going from `old` to `new`, counted as the SDK's dry run counts them
/// (`diffLines(current, target)`, tests/clients/FINDINGS.md §4): each side decoded as UTF-8,
/// invalid bytes replaced (so binary content counts too: a 12-byte blob without a newline is
/// one line); cut into lines that keep their `\n` (a last line without one is a line, and a
/// lone `\r` ends none); compared by a minimal line diff (Myers), so the counts are the lines
/// outside a longest common subsequence.
pub(super) fn line_counts(old: &[u8], new: &[u8]) -> (u64, u64) {
    let (o, n) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
    let a: Vec<&str> = o.split_inclusive('\n').collect();
    let b: Vec<&str> = n.split_inclusive('\n').collect();
    // No line in common (new content, binary against text): nothing to search for.
    let common: std::collections::HashSet<&str> = a.iter().copied().collect();
    if !b.iter().any(|l| common.contains(l)) {
        return (b.len() as u64, a.len() as u64);
    }
    // A minimal diff costs O((N+M)·D): give up minimality (counting a little more) only for
    // pairs of files so large and so different that it would take longer than this.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ops =
        similar::capture_diff_slices_deadline(similar::Algorithm::Myers, &a, &b, Some(deadline));
    let (mut ins, mut del) = (0, 0);
    for op in ops {
        match op {
            similar::DiffOp::Equal { .. } => {}
            similar::DiffOp::Delete { old_len, .. } => del += old_len as u64,
            similar::DiffOp::Insert { new_len, .. } => ins += new_len as u64,
            similar::DiffOp::Replace {
                old_len, new_len, ..
            } => {
                del += old_len as u64;
                ins += new_len as u64;
            }
        }
    }
    (ins, del)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::line_counts;

    /// The SDK's answers, measured (tests/clients/FINDINGS.md §4, scenarios/count_*): current →
    /// target, insertions/deletions.
    /// Current content, target content, (insertions, deletions).
    type Case = (&'static [u8], &'static [u8], (u64, u64));

    #[test]
    fn lines_count_as_the_sdk_counts_them() {
        let cases: &[Case] = &[
            (b"a\nb\nc\n", b"", (0, 3)),
            (b"a\nb", b"", (0, 2)),
            (b"abc", b"", (0, 1)),
            (b"\n", b"", (0, 1)),
            (b"", b"", (0, 0)),
            (b"x\nY\n", b"x\ny\n", (1, 1)),
            (b"a\nb\n", b"a\nb", (1, 1)),
            (b"a\nb", b"a\nb\n", (1, 1)),
            (b"a\n", b"", (0, 1)),
            (b"", b"a\n", (1, 0)),
            (b"a\nb\n", b"a\r\nb\r\n", (2, 2)),
            (b"c\nb\na\n", b"a\nb\nc\n", (2, 2)),
            (b"b\na\nb\na\n", b"a\nb\na\nb\n", (1, 1)),
            (
                b"text\n",
                b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0b\x0c",
                (1, 1),
            ),
            (
                b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0b\x0c",
                b"text\n",
                (1, 1),
            ),
            (b"\xfe", b"\xff", (0, 0)),
            (b"a\rb\n", b"a\n", (1, 1)),
        ];
        for (cur, target, want) in cases {
            assert_eq!(
                line_counts(cur, target),
                *want,
                "{:?} -> {:?}",
                String::from_utf8_lossy(cur),
                String::from_utf8_lossy(target)
            );
        }
    }

    /// Lines outside a longest common subsequence, by dynamic programming.
    fn by_lcs(a: &[&str], b: &[&str]) -> (u64, u64) {
        let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                t[i][j] = if a[i] == b[j] {
                    t[i + 1][j + 1] + 1
                } else {
                    t[i + 1][j].max(t[i][j + 1])
                };
            }
        }
        ((b.len() - t[0][0]) as u64, (a.len() - t[0][0]) as u64)
    }

    proptest! {
        /// The counts are minimal: those of a longest common subsequence of lines.
        #[test]
        fn counts_are_those_of_a_longest_common_subsequence(
            a in prop::collection::vec(prop::sample::select(vec!["a\n", "b\n", "c\n", "a", "\n"]), 0..30),
            b in prop::collection::vec(prop::sample::select(vec!["a\n", "b\n", "c\n", "a", "\n"]), 0..30),
        ) {
            let (x, y) = (a.concat(), b.concat());
            let lines = |s: &str| s.split_inclusive('\n').map(str::to_string).collect::<Vec<_>>();
            let (la, lb) = (lines(&x), lines(&y));
            let want = by_lcs(
                &la.iter().map(String::as_str).collect::<Vec<_>>(),
                &lb.iter().map(String::as_str).collect::<Vec<_>>(),
            );
            prop_assert_eq!(line_counts(x.as_bytes(), y.as_bytes()), want);
        }
    }
}
