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
