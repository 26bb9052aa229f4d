//! What a rewind would change, as text: the unified diff of `rewindfs diff` and the line
//! counts of a plan's outcome.
//!
//! Invariants: nothing here reads the store or the tree (a leaf: `preview.rs`, `past.rs` and
//! `plan.rs` bring the two sides). The diff *text* treats content that is not UTF-8,
//! or holds a NUL, as binary ("Binary files … differ"), so it never prints raw bytes; the line
//! *counts* of a plan's outcome are the SDK's, which count binary content as text too
//! ([`line_counts`]), while a diff's per-file counts ([`FileStat`], `diff --stat`) are git's:
//! a binary file is marked binary and counts no lines.

use crate::store::Kind;

/// What `diff` answers.
#[derive(Debug, Clone, Default)]
pub struct DiffOut {
    /// The unified diff.
    pub text: String,
    /// The paths that differ, sorted.
    pub files_changed: Vec<String>,
    /// Lines added and removed per path, in path order.
    pub stats: Vec<FileStat>,
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
                .map(crate::wire_path::encode)
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
