//! The history of a path since a checkpoint, through captures and directory renames.
//!
//! Owns [`History`] (the events recorded since a checkpoint, indexed by path) and
//! [`Lineage`] (what one of those paths was when the checkpoint began). Pure: it reads the
//! store once, in [`History::load`], and never the tree.
//!
//! Invariants it relies on and keeps:
//! - Events are ordered by *event position* `(capture id, 0)` for a capture and
//!   `(after_capture, 1)` for a rename: a rename recorded after capture `n` happened after
//!   it and before capture `n + 1`; renames with the same position happened in `seq` order
//!   (their order in `moves`). Captures are kept per path in id order and renames in
//!   `seq` order (the order the store hands them out), so the first match in either list is
//!   the earliest event after a position.
//! - A path is followed *forward* from the checkpoint: the first capture of the name it is
//!   known by at that point is its state then; an ancestor's rename changes the name it is
//!   known by; a rename onto an ancestor means it did not exist yet (see
//!   [`History::lineage_from`]). Following renames forward in the order they happened bounds
//!   the work by the number of renames, however they chain.
//! - Names are workspace-relative byte strings without a leading `/`; `a` is beneath `d`
//!   only if it starts with `d/` (`crate::wspath::beneath`).

use std::collections::HashMap;

use crate::store::{Capture, PreImage, Store};
use crate::wspath::{beneath, rebase};

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
            by_path
                .entry(c.path.as_bytes().to_vec())
                .or_default()
                .push(c);
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
        // Renames are followed by their place in `moves` (the order they happened), not by
        // position alone: two renames with no capture between them share a position (`mv d e;
        // mv e d` in one turn), and the second must still be followed after the first.
        let mut next_move = self.moves.partition_point(|m| (m.after_capture, 1) <= pos);
        loop {
            let cap = self
                .by_path
                .get(&cur)
                .and_then(|v| v.iter().find(|c| (c.id, 0) > pos));
            let mv = self.moves[next_move..]
                .iter()
                .enumerate()
                .find(|(_, m)| {
                    beneath(&cur, &m.src)
                        || beneath(&cur, &m.dst)
                        || (m.exchange && (cur == m.src || cur == m.dst))
                })
                .map(|(i, m)| (next_move + i, m));
            match (cap, mv) {
                (Some(c), Some((_, m))) if (c.id, 0) < (m.after_capture, 1) => {
                    return Lineage::of(c, cur);
                }
                (Some(c), None) => return Lineage::of(c, cur),
                (_, Some((i, m))) => {
                    pos = (m.after_capture, 1);
                    next_move = i + 1;
                    if m.exchange {
                        if cur == m.src {
                            cur = m.dst.as_bytes().to_vec();
                        } else if cur == m.dst {
                            cur = m.src.as_bytes().to_vec();
                        } else if let Some(n) = rebase(&cur, &m.src, &m.dst) {
                            cur = n;
                        } else if let Some(n) = rebase(&cur, &m.dst, &m.src) {
                            cur = n;
                        }
                    } else if let Some(n) = rebase(&cur, &m.src, &m.dst) {
                        cur = n;
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
        if let Some(n) = rebase(p, from, to) {
            return n;
        }
        if m.exchange {
            if let Some(n) = rebase(p, to, from) {
                return n;
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
            path: crate::wspath::Node::parse(path).unwrap(),
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
            src: crate::wspath::WsPath::parse(src).unwrap(),
            dst: crate::wspath::WsPath::parse(dst).unwrap(),
            exchange,
            after_capture: after,
            actor: Actor::Shell,
        }
    }

    fn history(caps: Vec<Capture>, moves: Vec<crate::store::Move>) -> History {
        let mut by_path: HashMap<Vec<u8>, Vec<Capture>> = HashMap::new();
        for c in caps {
            by_path
                .entry(c.path.as_bytes().to_vec())
                .or_default()
                .push(c);
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

    /// A model of the tree: directories `d0`..`d2` holding files `f0`..`f2`, each file's content
    /// a number.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum State {
        Absent,
        Dir,
        File(u64),
    }

    #[derive(Debug, Clone)]
    enum Change {
        Write(u8, u8),
        Delete(u8, u8),
        RenameDir(u8, u8),
        ExchangeDirs(u8, u8),
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0u8..3, 0u8..3).prop_map(|(d, f)| Change::Write(d, f)),
            1 => (0u8..3, 0u8..3).prop_map(|(d, f)| Change::Delete(d, f)),
            2 => (0u8..3, 0u8..3).prop_map(|(a, b)| Change::RenameDir(a, b)),
            1 => (0u8..3, 0u8..3).prop_map(|(a, b)| Change::ExchangeDirs(a, b)),
        ]
    }

    /// The tree, and what the capture layer records of its changes in one checkpoint: the
    /// first change of a name captures its state (and a directory rename captures both names,
    /// records the move, and makes every name beneath either side new again).
    struct Model {
        files: std::collections::BTreeMap<String, u64>,
        dirs: std::collections::BTreeSet<String>,
        seen: std::collections::HashSet<String>,
        caps: Vec<Capture>,
        moves: Vec<crate::store::Move>,
        next: u64,
    }

    impl Model {
        fn state(&self, p: &str) -> State {
            if let Some(id) = self.files.get(p) {
                State::File(*id)
            } else if self.dirs.contains(p) {
                State::Dir
            } else {
                State::Absent
            }
        }

        fn capture(&mut self, p: &str) {
            if !self.seen.insert(p.to_string()) {
                return;
            }
            let (kind, size) = match self.state(p) {
                State::Absent => (Kind::Absent, 0),
                State::Dir => (Kind::Dir, 0),
                State::File(id) => (Kind::File, id),
            };
            let mut c = cap(self.caps.len() as i64 + 1, p, kind);
            c.pre.size = size;
            self.caps.push(c);
        }

        /// A directory rename (or exchange) of `a` and `b`, as the capture layer records it:
        /// both names captured, the move noted after the last capture.
        fn record_move(&mut self, a: &str, b: &str, exchange: bool) {
            self.capture(a);
            self.capture(b);
            self.moves.push(crate::store::Move {
                seq: self.moves.len() as i64 + 1,
                checkpoint: 1,
                src: crate::wspath::WsPath::parse(a.as_bytes()).unwrap(),
                dst: crate::wspath::WsPath::parse(b.as_bytes()).unwrap(),
                exchange,
                after_capture: self.caps.len() as i64,
                actor: Actor::Shell,
            });
        }

        fn apply(&mut self, op: &Change) {
            match *op {
                Change::Write(d, f) | Change::Delete(d, f) => {
                    let (dir, p) = (format!("d{d}"), format!("d{d}/f{f}"));
                    if !self.dirs.contains(&dir) {
                        return;
                    }
                    self.capture(&p);
                    if matches!(op, Change::Write(..)) {
                        self.next += 1;
                        self.files.insert(p, self.next);
                    } else {
                        self.files.remove(&p);
                    }
                }
                Change::RenameDir(a, b) => {
                    let (a, b) = (format!("d{a}"), format!("d{b}"));
                    if a == b || !self.dirs.contains(&a) || self.dirs.contains(&b) {
                        return;
                    }
                    self.record_move(&a, &b, false);
                    let moved: Vec<(String, u64)> = self
                        .files
                        .iter()
                        .filter(|(p, _)| p.starts_with(&format!("{a}/")))
                        .map(|(p, id)| (p.clone(), *id))
                        .collect();
                    for (p, id) in moved {
                        self.files.remove(&p);
                        self.files.insert(format!("{b}{}", &p[a.len()..]), id);
                    }
                    self.dirs.remove(&a);
                    self.dirs.insert(b.clone());
                    let (sa, sb) = (format!("{a}/"), format!("{b}/"));
                    self.seen
                        .retain(|p| !p.starts_with(&sa) && !p.starts_with(&sb));
                }
                Change::ExchangeDirs(a, b) => {
                    let (a, b) = (format!("d{a}"), format!("d{b}"));
                    if a == b || !self.dirs.contains(&a) || !self.dirs.contains(&b) {
                        return;
                    }
                    self.record_move(&a, &b, true);
                    let (sa, sb) = (format!("{a}/"), format!("{b}/"));
                    let swapped: Vec<(String, u64)> = self
                        .files
                        .iter()
                        .filter_map(|(p, id)| {
                            if let Some(rest) = p.strip_prefix(&sa) {
                                Some((format!("{sb}{rest}"), *id))
                            } else {
                                p.strip_prefix(&sb).map(|rest| (format!("{sa}{rest}"), *id))
                            }
                        })
                        .collect();
                    self.files
                        .retain(|p, _| !p.starts_with(&sa) && !p.starts_with(&sb));
                    self.files.extend(swapped);
                    self.seen
                        .retain(|p| !p.starts_with(&sa) && !p.starts_with(&sb));
                }
            }
        }
    }

    proptest::proptest! {
        /// For any run of writes, deletions, directory renames and exchanges recorded as the capture
        /// layer records them, every name's lineage is what that name was when the checkpoint
        /// began: its own capture, or — never captured under the name it was known by — the
        /// same thing, found where it is now.
        #[test]
        fn every_name_is_followed_back_to_what_it_was_when_the_checkpoint_began(
            ops in proptest::collection::vec(change(), 0..24),
        ) {
            let mut m = Model {
                files: Default::default(),
                dirs: ["d0", "d1"].iter().map(|d| d.to_string()).collect(),
                seen: Default::default(),
                caps: Vec::new(),
                moves: Vec::new(),
                next: 0,
            };
            for p in ["d0/f0", "d0/f1", "d1/f0"] {
                m.next += 1;
                m.files.insert(p.to_string(), m.next);
            }
            let names: Vec<String> = (0..3)
                .flat_map(|d| {
                    std::iter::once(format!("d{d}")).chain((0..3).map(move |f| format!("d{d}/f{f}")))
                })
                .collect();
            let then: Vec<State> = names.iter().map(|n| m.state(n)).collect();
            for o in &ops {
                m.apply(o);
            }
            let h = history(m.caps.clone(), m.moves.clone());
            for (q, want) in names.iter().zip(&then) {
                let got = match h.lineage(q.as_bytes()) {
                    Lineage::Pre(p) => match p.kind {
                        Kind::Absent => State::Absent,
                        Kind::Dir => State::Dir,
                        _ => State::File(p.size),
                    },
                    Lineage::Current(at) => m.state(std::str::from_utf8(&at).unwrap()),
                    Lineage::Partial(..) => unreachable!("no range captures here"),
                };
                proptest::prop_assert_eq!(&got, want, "{} after {:?}", q, ops);
            }
        }
    }
}
