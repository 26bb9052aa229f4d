//! The current checkpoint and what has been captured in it: the rule "a path is captured at
//! most once per (checkpoint, path)", the boundary that starts a new checkpoint, and a
//! tool's session-wide first change (`tracked`).
//!
//! Invariants, kept under the recorder's `state` lock (taken after `gate` and `capture`):
//! - a checkpoint begins under the `boundary` lock, which a rewind holds from the beginning of
//!   its own checkpoint until it is applied: no other checkpoint begins while a rewind applies,
//!   so every capture of its changes is in its checkpoint;
//! - `seen` holds exactly the paths with a capture in checkpoint `seq`, each with the bit set
//!   of the actors that changed it (also recorded in the store); it is the "captured?" lookup,
//!   so a path's second change in a checkpoint costs no I/O;
//! - a capture is taken under the `capture` lock, which a boundary takes too, so it belongs
//!   wholly to one checkpoint; `seen` is looked at again under that lock, so two changes racing
//!   on one path capture it once (and a capture that finds the checkpoint changed under it is
//!   taken again for the new one);
//! - `partial` ⊆ `seen`: the range captures whose bytes are not all saved yet;
//! - `prepared` is disjoint from `seen`: pre-images read ahead of a live rewind's helper
//!   (`precapture.rs`), each the path's state at the start of checkpoint `seq`, not recorded
//!   yet; the first change of such a path records it as its own capture instead of reading
//!   the path again;
//! - a boundary empties `seen`, `partial` and `prepared`, under the `capture` lock;
//! - `tracked[session]` mirrors the store's `tracked` table for the sessions seen so far.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::MutexGuard;

use super::actors::is_tool_temp;
use super::adopt::Adopt;
use super::ranges::Partial;
use super::snapshot::{snapshot, stat_of};
use super::{Need, Op, Recorder};
use crate::locks::Locked;
use crate::store::Purpose;
use crate::store::{Actor, BlobRef, PreImage};
use crate::store::{CheckpointKind, Prompt};
use crate::wspath::{Node, WsPath};

/// Paths a checkpoint's set must have held for its end to trim the heap.
const TRIM_AFTER_PATHS: usize = 10_000;

/// The current checkpoint and what has been captured in it.
#[derive(Debug)]
pub(super) struct State {
    /// Sequence number of the current checkpoint.
    pub(super) seq: i64,
    /// Its uuid.
    pub(super) uuid: String,
    /// The session of the last `begin_message` (None until the first one).
    pub(super) session: Option<String>,
    /// Paths captured in the current checkpoint → bit set of the actors that changed them.
    pub(super) seen: HashMap<Node, u8>,
    /// Paths a tool has changed, per session (mirror of the `tracked` table).
    pub(super) tracked: HashMap<String, HashSet<WsPath>>,
    /// Paths captured partially in the current checkpoint whose bytes are not all saved yet.
    pub(super) partial: HashMap<Node, Partial>,
    /// Pre-images read ahead of a rewind's helper, not recorded yet (see the module doc).
    pub(super) prepared: HashMap<Node, PreImage>,
    /// Blobs of prepared pre-images that no longer stand for their path (a directory above it
    /// was renamed): removed with the rest once the rewind is done.
    pub(super) unprepared: Vec<BlobRef>,
    /// Each session's current checkpoint (the last message it began) and when it began.
    /// Captures go to the checkpoint that began last, whoever's it is (that is enough to
    /// reconstruct every checkpoint's start); this is what each session is working in.
    pub(super) sessions: HashMap<String, SessionNow>,
}

/// A session's current checkpoint.
#[derive(Debug, Clone)]
pub struct SessionNow {
    pub seq: i64,
    pub uuid: String,
    /// When its last message began.
    pub since: std::time::Instant,
}

impl State {
    /// The state at the start of checkpoint `seq`, before any session.
    pub(super) fn new(seq: i64, uuid: String) -> State {
        State {
            seq,
            uuid,
            session: None,
            seen: HashMap::new(),
            tracked: HashMap::new(),
            partial: HashMap::new(),
            prepared: HashMap::new(),
            unprepared: Vec::new(),
            sessions: HashMap::new(),
        }
    }
}

impl Recorder {
    /// The current checkpoint: (seq, uuid, session).
    pub fn current(&self) -> (i64, String, Option<String>) {
        let s = self.state.locked();
        (s.seq, s.uuid.clone(), s.session.clone())
    }

    /// Begins a checkpoint of kind `kind` (message or rewind). The caller has flushed the
    /// kernel's dirty data first, so it lands in the previous checkpoint.
    pub fn begin(
        &self,
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
    ) -> io::Result<i64> {
        self.begin_for(uuid, session, kind, None)
    }

    /// Begins the checkpoint of a message whose uuid is not known yet: a hook's `prompt`,
    /// under its prompt_id (see [`crate::store::Prompt`]).
    ///
    /// Waits while a rewind applies ([`Recorder::begin_rewind`]): what the rewind overwrites
    /// must be captured under the rewind's own checkpoint, the one undo reads.
    pub fn begin_for(
        &self,
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
        prompt: Option<&Prompt>,
    ) -> io::Result<i64> {
        let _applying = self.boundary.locked();
        self.begin_here(uuid, session, kind, prompt)
    }

    /// Begins a rewind's own checkpoint (`id`, the rewind's) and holds off every other
    /// boundary until the returned guard is dropped, once the rewind is applied: every capture
    /// of the rewind's changes then falls in its checkpoint. (A message begun meanwhile, by
    /// another session, used to take them, and undo, which reads only the rewind's
    /// checkpoint, left those paths as the rewind made them.) The rewind's own changes never
    /// take this lock, so it cannot wait on them.
    ///
    /// # Errors
    /// Store errors.
    pub fn begin_rewind(&self, id: &str) -> io::Result<(i64, MutexGuard<'_, ()>)> {
        let applying = self.boundary.locked();
        let seq = self.begin_here(id, None, CheckpointKind::Rewind, None)?;
        Ok((seq, applying))
    }

    /// [`begin_for`](Self::begin_for), the caller holding `boundary`.
    fn begin_here(
        &self,
        uuid: &str,
        session: Option<&str>,
        kind: CheckpointKind,
        prompt: Option<&Prompt>,
    ) -> io::Result<i64> {
        // The backlog goes to SQLite before changes are held up: under the capture lock only
        // the checkpoint's own row is written (a boundary used to stall every change for the
        // whole flush, 5-60 ms). Log entries carry their checkpoint, so order is kept anyway.
        self.flush_log();
        let _g = self.capture.locked();
        let seq = self
            .store
            .begin_checkpoint_for(uuid, session, kind, prompt)?;
        let mut s = self.state.locked();
        s.seq = seq;
        s.uuid = uuid.to_string();
        if let Some(sess) = session {
            s.sessions.insert(
                sess.to_string(),
                SessionNow {
                    seq,
                    uuid: uuid.to_string(),
                    since: std::time::Instant::now(),
                },
            );
            if s.session.as_deref() != Some(sess) {
                s.session = Some(sess.to_string());
                if !s.tracked.contains_key(sess) {
                    let paths = self
                        .store
                        .tracked(sess)?
                        .into_iter()
                        .map(|t| t.path)
                        .collect();
                    s.tracked.insert(sess.to_string(), paths);
                }
            }
        }
        if s.seen.len() >= TRIM_AFTER_PATHS {
            // Dropping that many paths frees megabytes the allocator would keep; the flusher
            // hands them back (off this thread: trimming a large heap takes milliseconds).
            self.log.want_trim();
        }
        s.seen = HashMap::new();
        s.partial = HashMap::new();
        let stale = std::mem::take(&mut s.prepared);
        s.unprepared
            .extend(stale.into_values().filter_map(|pre| pre.blob));
        Ok(seq)
    }

    /// Files the captures recovery takes (behind the mount, before it serves) under the
    /// checkpoint `seq` of the interrupted rewind it finishes, until the guard is dropped, so
    /// that undo, which reads only that checkpoint, finds them (they used to go to the mount's
    /// checkpoint). `captured` (path, actor bits): what the rewind captured before it was
    /// interrupted, which is not captured again.
    pub fn recovering(
        &self,
        seq: i64,
        captured: impl IntoIterator<Item = (Node, u8)>,
    ) -> Recovering<'_> {
        let _g = self.capture.locked();
        let mut s = self.state.locked();
        let seen = captured
            .into_iter()
            .fold(HashMap::new(), |mut m, (p, bits)| {
                *m.entry(p).or_insert(0) |= bits;
                m
            });
        let was = (
            std::mem::replace(&mut s.seq, seq),
            std::mem::replace(&mut s.seen, seen),
            std::mem::take(&mut s.partial),
        );
        Recovering {
            rec: self,
            was: Some(was),
        }
    }

    /// Checkpoint `seq` is now known as `uuid` (its message uuid, bound after it began).
    pub fn renamed(&self, seq: i64, uuid: &str) {
        let mut s = self.state.locked();
        if s.seq == seq {
            s.uuid = uuid.to_string();
        }
        for now in s.sessions.values_mut().filter(|n| n.seq == seq) {
            now.uuid = uuid.to_string();
        }
    }

    /// Each session's current checkpoint.
    pub fn sessions(&self) -> Vec<(String, SessionNow)> {
        let s = self.state.locked();
        let mut v: Vec<_> = s
            .sessions
            .iter()
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        v.sort_by_key(|(_, n)| n.seq);
        v
    }

    /// Captures `p` on behalf of rewindfs itself (a rewind about to write it).
    pub fn capture_for_rewind(&self, p: &Node) -> io::Result<()> {
        self.ensure_captured(p, Actor::Rewind, Op::Write, Adopt::No, Need::All, None)
            .map(|_| ())
    }

    /// Makes sure `p` has a pre-image in the current checkpoint. Returns the checkpoint seq
    /// and, if this call took the capture, its id.
    pub(super) fn ensure_captured(
        &self,
        p: &Node,
        actor: Actor,
        op: Op,
        adopt: Adopt<'_>,
        need: Need,
        file: Option<BorrowedFd<'_>>,
    ) -> io::Result<(i64, Option<i64>)> {
        loop {
            let (seq, bits, partial) = {
                let s = self.state.locked();
                (s.seq, s.seen.get(p).copied(), s.partial.contains_key(p))
            };
            if let Some(bits) = bits {
                if bits & actor.bit() == 0 {
                    self.store.add_actor(seq, p, actor.bit())?;
                    if let Some(b) = self.state.locked().seen.get_mut(p) {
                        *b |= actor.bit();
                    }
                }
                if partial && need != Need::Meta {
                    let _g = self.capture.locked();
                    self.save_ranges(p, need, op)?;
                }
                return Ok((seq, None));
            }
            let _g = self.capture.locked();
            {
                let s = self.state.locked();
                if s.seq != seq || s.seen.contains_key(p) {
                    continue;
                }
            }
            let prepared = self.state.locked().prepared.remove(p);
            if let Some(pre) = prepared {
                return self.record_prepared(p, seq, actor, op, pre);
            }
            let rel = p.as_path();
            // Stat'ed once for both kinds of capture (an adopted file is stat'ed by the store).
            let st = matches!(adopt, Adopt::No).then(|| stat_of(self.root(), rel, file));
            if need != Need::All {
                if let Some(Ok(st)) = &st {
                    if let Some(id) = self.capture_partial(p, seq, actor, op, need, st, file)? {
                        return Ok((seq, Some(id)));
                    }
                }
            }
            let id = self.capture_whole(p, seq, actor, op, adopt, file, st)?;
            let mut s = self.state.locked();
            if s.seq != seq {
                continue; // a boundary passed: capture again for the new checkpoint
            }
            s.seen.insert(p.clone(), actor.bit());
            return Ok((seq, Some(id)));
        }
    }

    /// Records `pre`, read ahead for `p` (see the module doc), as the capture of its first
    /// change in checkpoint `seq`. The caller holds the capture lock and found `p` not seen.
    fn record_prepared(
        &self,
        p: &Node,
        seq: i64,
        actor: Actor,
        op: Op,
        pre: PreImage,
    ) -> io::Result<(i64, Option<i64>)> {
        match self
            .store
            .insert_capture(seq, p, Purpose::Checkpoint, &pre, actor, op)
        {
            Ok(id) => {
                self.state.locked().seen.insert(p.clone(), actor.bit());
                Ok((seq, Some(id)))
            }
            Err(e) => {
                tracing::error!(
                    "refusing {} of {}: its pre-image could not be recorded: {e}",
                    op.as_str(),
                    p.as_path().display()
                );
                self.state.locked().prepared.insert(p.clone(), pre);
                Err(e.into())
            }
        }
    }

    /// A directory was renamed (or exchanged) from or to `a` and `b`: the paths beneath either
    /// name now hold other files, so they are captured afresh.
    pub(super) fn forget_beneath(&self, a: &WsPath, b: &WsPath) {
        let mut s = self.state.locked();
        let under = |k: &Node, d: &WsPath| crate::wspath::beneath(k.as_bytes(), d.as_bytes());
        s.seen.retain(|k, _| !under(k, a) && !under(k, b));
        s.partial.retain(|k, _| !under(k, a) && !under(k, b));
        let (gone, kept) = std::mem::take(&mut s.prepared)
            .into_iter()
            .partition::<HashMap<_, _>, _>(|(k, _)| under(k, a) || under(k, b));
        s.prepared = kept;
        s.unprepared
            .extend(gone.into_values().filter_map(|pre| pre.blob));
    }

    /// A tool changes `p`: remember the state just before its first tool change in the session.
    pub(super) fn track(
        &self,
        session: Option<&str>,
        p: &WsPath,
        seq: i64,
        fresh_capture: Option<i64>,
        op: Op,
    ) -> io::Result<()> {
        let session = {
            let s = self.state.locked();
            match session.map(str::to_string).or_else(|| s.session.clone()) {
                Some(sess) if !s.tracked.get(&sess).is_some_and(|t| t.contains(p)) => sess,
                _ => return Ok(()),
            }
        };
        if is_tool_temp(p.as_bytes()) {
            return Ok(());
        }
        let id = match fresh_capture {
            Some(id) => id,
            None => {
                // Already changed in this checkpoint by someone else: the state now is what the
                // tool is about to overwrite.
                let _g = self.capture.locked();
                let pre = snapshot(self.root(), p.as_path(), &self.store)?;
                self.store.insert_capture(
                    seq,
                    &p.clone().into(),
                    Purpose::Tool,
                    &pre,
                    Actor::Tool,
                    op,
                )?
            }
        };
        self.store.track(&session, p, seq, id)?;
        self.state
            .locked()
            .tracked
            .entry(session)
            .or_default()
            .insert(p.clone());
        Ok(())
    }
}

/// Recovery capturing under an interrupted rewind's checkpoint ([`Recorder::recovering`]);
/// dropped, captures go to the current checkpoint again.
pub struct Recovering<'a> {
    rec: &'a Recorder,
    /// The current checkpoint's, put back on drop.
    was: Option<Current>,
}

/// What `State` holds of the current checkpoint: its seq, `seen` and `partial`.
type Current = (i64, HashMap<Node, u8>, HashMap<Node, Partial>);

impl Drop for Recovering<'_> {
    fn drop(&mut self) {
        let Some((seq, seen, partial)) = self.was.take() else {
            return;
        };
        let _g = self.rec.capture.locked();
        let mut s = self.rec.state.locked();
        s.seq = seq;
        s.seen = seen;
        s.partial = partial;
    }
}
