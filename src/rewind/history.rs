//! The history of a path since a checkpoint, through captures and directory renames.
//!
//! Owns [`History`] (the events recorded since a checkpoint, indexed by path) and
//! [`Lineage`] (what one of those paths was when the checkpoint began). Pure: it reads the
//! store once, in [`History::load`], and never the tree.
//!
//! Invariants it relies on and keeps:
//! - Events are ordered by *event position* `(capture id, 0)` for a capture and
//!   `(after_capture, 1)` for a rename: a rename recorded after capture `n` happened after
//!   it and before capture `n + 1`. Captures are kept per path in id order and renames in
//!   `seq` order (the order the store hands them out), so the first match in either list is
//!   the earliest event after a position.
//! - A path is followed *forward* from the checkpoint: the first capture of the name it is
//!   known by at that point is its state then; an ancestor's rename changes the name it is
//!   known by; a rename onto an ancestor means it did not exist yet (see
//!   [`History::lineage_from`]). Following renames forward in the order they happened bounds
//!   the work by the number of renames, however they chain.
//! - Names are workspace-relative byte strings without a leading `/`; `a` is beneath `d`
//!   only if it starts with `d/` (see [`under`]).

use std::collections::HashMap;

use crate::store::{Capture, PreImage, Store};

/// `p` without the leading `dir` if `p` lies strictly beneath `dir`, keeping the `/` that
/// follows it, so that [`rebase`] onto another directory gives the name there.
pub(super) fn under(p: &[u8], dir: &[u8]) -> Option<Vec<u8>> {
    if p.len() > dir.len() && p.starts_with(dir) && p[dir.len()] == b'/' {
        Some(p[dir.len()..].to_vec())
    } else {
        None
    }
}

/// `rest` (from [`under`]) put beneath `onto`.
pub(super) fn rebase(rest: &[u8], onto: &[u8]) -> Vec<u8> {
    let mut v = onto.to_vec();
    v.extend_from_slice(rest);
    v
}

/// What the rewind should make of a path.
pub(super) enum Lineage {
    /// A complete saved state (or absent: the path did not exist yet).
    Pre(PreImage),
    /// A range pre-image of the file then known by this name: its content is completed from
    /// the path's next recorded state (see `patched.rs`).
    Partial(Capture, Vec<u8>),
    /// Unchanged since the checkpoint, now found at this path.
    Current(Vec<u8>),
}

impl Lineage {
    /// What capture `c`, of the name `at`, says the path was: complete, or to be completed.
    fn of(c: &Capture, at: Vec<u8>) -> Lineage {
        if c.pre.partial {
            Lineage::Partial(c.clone(), at)
        } else {
            Lineage::Pre(c.pre.clone())
        }
    }
}

/// The events recorded since a checkpoint, indexed for lineage queries.
pub(super) struct History {
    /// Captures of each name, in id order.
    pub(super) by_path: HashMap<Vec<u8>, Vec<Capture>>,
    /// Directory renames, in the order they happened.
    pub(super) moves: Vec<crate::store::Move>,
}

impl History {
    pub(super) fn load(store: &Store, from: i64) -> crate::store::Result<History> {
        let mut by_path: HashMap<Vec<u8>, Vec<Capture>> = HashMap::new();
        let mut caps = store.captures_from(from)?;
        caps.sort_by_key(|c| c.id);
        for c in caps {
            by_path.entry(c.path.clone()).or_default().push(c);
        }
        Ok(History {
            by_path,
            moves: store.moves_from(from)?,
        })
    }

    /// The state `q` had when the checkpoint began (see the module doc).
    pub(super) fn lineage(&self, q: &[u8]) -> Lineage {
        self.lineage_from(q, (0, 0))
    }

    /// What `q` was at event position `pos` (capture id, 0 = capture / 1 = move), found by
    /// following it forward through the events after `pos`.
    pub(super) fn lineage_from(&self, q: &[u8], mut pos: (i64, u8)) -> Lineage {
        let mut cur = q.to_vec();
        loop {
            let cap = self
                .by_path
                .get(&cur)
                .and_then(|v| v.iter().find(|c| (c.id, 0) > pos));
            let mv = self.moves.iter().find(|m| {
                (m.after_capture, 1) > pos
                    && (under(&cur, &m.src).is_some()
                        || under(&cur, &m.dst).is_some()
                        || (m.exchange && (cur == m.src || cur == m.dst)))
            });
            match (cap, mv) {
                (Some(c), Some(m)) if (c.id, 0) < (m.after_capture, 1) => {
                    return Lineage::of(c, cur);
                }
                (Some(c), None) => return Lineage::of(c, cur),
                (_, Some(m)) => {
                    pos = (m.after_capture, 1);
                    if m.exchange {
                        if cur == m.src {
                            cur = m.dst.clone();
                        } else if cur == m.dst {
                            cur = m.src.clone();
                        } else if let Some(rest) = under(&cur, &m.src) {
                            cur = rebase(&rest, &m.dst);
                        } else if let Some(rest) = under(&cur, &m.dst) {
                            cur = rebase(&rest, &m.src);
                        }
                    } else if let Some(rest) = under(&cur, &m.src) {
                        cur = rebase(&rest, &m.dst);
                    } else {
                        // Beneath the rename's target: that directory was absent or empty before.
                        return Lineage::Pre(PreImage::absent());
                    }
                }
                (None, None) => return Lineage::Current(cur),
            }
        }
    }

    /// The name that `p` (a name valid at event position `at`) had when the checkpoint began:
    /// the renames before `at` undone, newest first. A name beneath a rename's source after
    /// the rename is a new path; it keeps its name.
    pub(super) fn name_at_start(&self, p: &[u8], at: (i64, u8)) -> Vec<u8> {
        let mut cur = p.to_vec();
        for m in self.moves.iter().rev() {
            if (m.after_capture, 1) >= at {
                continue;
            }
            cur = Self::through(m, &cur, true);
        }
        cur
    }

    /// The name that `p` (valid at event position `at`) has now: the renames after `at`
    /// applied, oldest first.
    pub(super) fn name_now(&self, p: &[u8], at: (i64, u8)) -> Vec<u8> {
        let mut cur = p.to_vec();
        for m in &self.moves {
            if (m.after_capture, 1) <= at {
                continue;
            }
            cur = Self::through(m, &cur, false);
        }
        cur
    }

    /// A name through one rename, forwards (`src` → `dst`) or backwards.
    fn through(m: &crate::store::Move, p: &[u8], backwards: bool) -> Vec<u8> {
        let (from, to) = if backwards {
            (&m.dst, &m.src)
        } else {
            (&m.src, &m.dst)
        };
        if let Some(rest) = under(p, from) {
            return rebase(&rest, to);
        }
        if m.exchange {
            if let Some(rest) = under(p, to) {
                return rebase(&rest, from);
            }
        }
        p.to_vec()
    }

    /// Bit set of the actors that changed a path (by name) since the checkpoint.
    pub(super) fn actors(&self, p: &[u8]) -> u8 {
        self.by_path
            .get(p)
            .map(|v| v.iter().fold(0, |a, c| a | c.actors))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Actor, Kind, Op, Purpose};

    fn cap(id: i64, path: &str, kind: Kind) -> Capture {
        Capture {
            id,
            checkpoint: 1,
            path: path.as_bytes().to_vec(),
            purpose: Purpose::Checkpoint,
            pre: PreImage {
                kind,
                size: id as u64,
                ..PreImage::absent()
            },
            actor: Actor::Shell,
            actors: Actor::Shell.bit(),
            op: Op::Write,
        }
    }

    fn mv(seq: i64, src: &str, dst: &str, after: i64, exchange: bool) -> crate::store::Move {
        crate::store::Move {
            seq,
            checkpoint: 1,
            src: src.as_bytes().to_vec(),
            dst: dst.as_bytes().to_vec(),
            exchange,
            after_capture: after,
            actor: Actor::Shell,
        }
    }

    fn history(caps: Vec<Capture>, moves: Vec<crate::store::Move>) -> History {
        let mut by_path: HashMap<Vec<u8>, Vec<Capture>> = HashMap::new();
        for c in caps {
            by_path.entry(c.path.clone()).or_default().push(c);
        }
        History { by_path, moves }
    }

    /// What a lineage says, in words: `pre <kind> <capture id>`, `partial`, `now <path>`.
    fn said(l: Lineage) -> String {
        match l {
            Lineage::Pre(p) => format!("pre {} {}", p.kind.as_str(), p.size),
            Lineage::Partial(c, at) => format!("partial {} {}", c.id, String::from_utf8_lossy(&at)),
            Lineage::Current(at) => format!("now {}", String::from_utf8_lossy(&at)),
        }
    }

    /// The state of a path when the checkpoint began, followed forward through captures and
    /// renames (docs/design.md §2): table-driven, without a mount.
    #[test]
    fn a_path_is_followed_forward_through_captures_and_renames() {
        // 1: d/f captured; 2: the rename d -> e (after capture 1); 3: e/f captured again;
        // 4: x captured; then the exchange x <-> y (after capture 4); 5: y captured.
        let h = history(
            vec![
                cap(1, "d/f", Kind::File),
                cap(3, "e/f", Kind::File),
                cap(4, "x", Kind::File),
                cap(5, "y", Kind::Dir),
            ],
            vec![mv(1, "d", "e", 1, false), mv(2, "x", "y", 4, true)],
        );
        let cases = [
            // Captured before anything moved: its own capture.
            ("d/f", "pre file 1"),
            // Beneath the rename's source, never captured: where the rename took it, now.
            ("d/g", "now e/g"),
            // Beneath the rename's target: not there when the checkpoint began.
            ("e/g", "pre absent 0"),
            // Captured before the exchange: its own capture. The other side was captured only
            // after it (capture 5 is of what the exchange put there): what was at `y` when the
            // checkpoint began is what the exchange took to `x`, as it is now.
            ("x", "pre file 4"),
            ("y", "now x"),
            // Untouched: as it is now.
            ("z/w", "now z/w"),
        ];
        for (q, want) in cases {
            assert_eq!(said(h.lineage(q.as_bytes())), want, "{q}");
        }
        // Names at the start and now, through the rename.
        assert_eq!(h.name_now(b"d/f", (1, 0)), b"e/f");
        assert_eq!(h.name_at_start(b"e/f", (3, 0)), b"d/f");
        assert_eq!(h.name_at_start(b"e/f", (0, 0)), b"e/f");
        assert_eq!(h.actors(b"d/f"), Actor::Shell.bit());
        assert_eq!(h.actors(b"nowhere"), 0);
    }

    /// A range capture is completed from what follows it: its lineage says so, with the name it
    /// was taken under.
    #[test]
    fn a_range_capture_is_completed_from_its_next_state() {
        let mut c = cap(1, "big", Kind::File);
        c.pre.partial = true;
        let h = history(vec![c], vec![mv(1, "big", "moved", 1, false)]);
        assert_eq!(said(h.lineage(b"big")), "partial 1 big");
    }

    #[test]
    fn under_and_rebase_keep_to_whole_components() {
        assert_eq!(under(b"a/b", b"a"), Some(b"/b".to_vec()));
        assert_eq!(under(b"ab/c", b"a"), None);
        assert_eq!(under(b"a", b"a"), None);
        assert_eq!(rebase(b"/b", b"x/y"), b"x/y/b");
    }
}
