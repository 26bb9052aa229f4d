//! The change log: one entry per change that happened (who, which session, what, which
//! path), journalled like a pre-image (one `write` to the capture journal once the change is
//! done, no transaction, no fsync) and applied to SQLite by a flusher thread, off the FUSE
//! request path.
//!
//! A log entry is made *after* the change; it is what `rewindfs log` shows, and what tells an
//! agent-scope rewind which session changed a path. A kill -9 of the daemon loses no entry of
//! a change that was done (the journal is replayed at the next open); a failure to write one
//! is logged and never refuses a change.
//!
//! Invariants:
//! - entries land in the order their changes happened (the journal's order);
//! - the journal is bounded: past [`LOG_FLUSH_AT`] pending records the flusher is woken, past
//!   [`LOG_FLUSH_INLINE_AT`] (the flusher is behind) the change applies it itself — while a
//!   rewind runs, only the rewind's own changes do, past [`REWIND_FLUSH_INLINE_AT`]: it is
//!   what fills the journal then, and a writer must not wait for a transaction of its records —
//!   unless the journal reaches [`LOG_FLUSH_HARD_AT`] (the flusher stuck while a rewind plans,
//!   when it makes no changes of its own): then any change applies it;
//! - consecutive writes by one process to one file in one checkpoint are one entry (with a cut
//!   to length right after them), and so is what a process does to a file right after it made
//!   it, with the create (`store/changes.rs`).
//!
//! `flush_wanted` is taken alone.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use std::time::{Duration, Instant};

use super::{Change, Op, Recorder};
use crate::locks::Locked;
use crate::store::{LogEntry, now_ms};
use crate::sys;

/// Journal records pending (change-log entries and captures) past which a change wakes the
/// flusher (once per batch it applies: [`wake_for`]).
const LOG_FLUSH_AT: usize = 512;
/// Journal records pending at which a change applies them itself (the flusher is behind).
const LOG_FLUSH_INLINE_AT: usize = 64 * 1024;
/// The same for a rewind's own changes, while it runs: smaller transactions, each one paid
/// by the rewind (measured on a 100k-file rewind with a writer at work: writers' rounds took up
/// to 0.7 s when one of their changes applied 64k records).
const REWIND_FLUSH_INLINE_AT: usize = 8 * 1024;
/// Journal records pending at which every change applies them itself, a rewind running or
/// not: the journal's hard bound (while a rewind plans, nothing else flushes inline).
const LOG_FLUSH_HARD_AT: usize = 4 * LOG_FLUSH_INLINE_AT;

/// How often the flusher checkpoints the store's WAL ([`crate::store::Store::checkpoint_wal_aside`]).
const WAL_CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Whether a change that leaves `pending` journal records wakes the flusher: past
/// [`LOG_FLUSH_AT`], once until the flusher clears `woken`. Past the mark rather than at its
/// multiples: captures are journalled between log entries, so the counts changes see can step
/// over every multiple (a rewind's two records a file, from an odd count), and the flusher then
/// woke only on its timer while a rewind's own change applied 8k records inline (80 ms).
fn wake_for(pending: usize, woken: &AtomicBool) -> bool {
    pending >= LOG_FLUSH_AT && !woken.swap(true, Ordering::AcqRel)
}

/// Whether a change that leaves `pending` journal records applies them itself: `rewinder`,
/// it is a rewind's own; `watching`, a rewind runs (plans or applies).
fn flush_inline(pending: usize, rewinder: bool, watching: bool) -> bool {
    if rewinder {
        pending >= REWIND_FLUSH_INLINE_AT
    } else {
        pending >= LOG_FLUSH_HARD_AT || (pending >= LOG_FLUSH_INLINE_AT && !watching)
    }
}

/// What the flusher is asked to do.
#[derive(Debug, Default)]
pub(super) struct ChangeLog {
    /// Set (and the flusher woken) when the journal has grown enough to be applied.
    flush_wanted: Mutex<bool>,
    /// Wakes the flusher when `flush_wanted` is set.
    flush_wake: Condvar,
    /// A wake-up for the journal's size is on its way: set by the change that sends it,
    /// cleared by the flusher as it starts applying, so a busy journal wakes it once per
    /// batch rather than once per change (a wake-up is a system call).
    woken: AtomicBool,
    /// A checkpoint dropped a large set of paths: the flusher returns the memory.
    trim_wanted: AtomicBool,
    /// Nodes the kernel's forgets removed from the FUSE core's table, ever (see
    /// [`Burst`]).
    nodes_removed: AtomicUsize,
}

impl ChangeLog {
    /// Asks the flusher to hand freed heap memory back to the system at its next wake-up.
    pub(super) fn want_trim(&self) {
        self.trim_wanted.store(true, Ordering::Relaxed);
    }

    /// Counts nodes the kernel's forgets removed.
    pub(super) fn nodes_removed(&self, n: usize) {
        self.nodes_removed.fetch_add(n, Ordering::Relaxed);
    }
}

/// Nodes whose removal frees enough heap (their names, links and index slots: a few hundred
/// bytes each) that handing it back to the system is worth a `malloc_trim`. The allocator
/// keeps freed memory otherwise: after an extract of 20k files and its `rm -rf`, the bench's
/// look-up of 100k inodes found the daemon at 47.7 MiB instead of 38.4 (docs/benchmarks.md).
const TRIM_AFTER_NODES: usize = 10_000;

/// Journal records applied to the database after which the flusher trims too: what made
/// them (a rewind's plan and pre-images, a burst of changes and their batches) is freed by
/// then. After three rewinds of 10k files the daemon held 42.8 MiB, and 28.3 MiB once
/// trimmed.
const TRIM_AFTER_RECORDS: usize = 10_000;

/// How long a burst (of forgets, of records) must have stopped before the flusher trims: they
/// come in bursts (a directory's worth, or all at once when the kernel reclaims its caches),
/// and a trim in the middle of one would leave the rest of it with the allocator.
const BURST_SETTLED: Duration = Duration::from_millis(200);

/// A count that grows in bursts (nodes forgotten, records applied): the flusher trims once
/// `after` more went since its last trim and none for [`BURST_SETTLED`].
struct Burst {
    after: usize,
    seen: usize,
    seen_at: Instant,
    trimmed: usize,
}

impl Burst {
    fn new(after: usize) -> Self {
        Burst {
            after,
            seen: 0,
            seen_at: Instant::now(),
            trimmed: 0,
        }
    }

    /// Whether to trim at `now`, the count being `total`.
    fn trim_now(&mut self, total: usize, now: Instant) -> bool {
        if total != self.seen {
            self.seen = total;
            self.seen_at = now;
            return false;
        }
        if total - self.trimmed < self.after
            || now.saturating_duration_since(self.seen_at) < BURST_SETTLED
        {
            return false;
        }
        self.trimmed = total;
        true
    }
}

impl Recorder {
    /// Applies the journal (pre-images and change-log entries) every `every`, and at once when
    /// changes ask for it, until `stop` is set (checked at each wake-up). Runs on its own
    /// thread, so SQLite stays off the FUSE request path.
    pub fn run_flusher(&self, every: Duration, stop: &AtomicBool) {
        let mut checkpointed = Instant::now();
        let mut forgotten = Burst::new(TRIM_AFTER_NODES);
        let mut applied = Burst::new(TRIM_AFTER_RECORDS);
        loop {
            {
                let wanted = self.log.flush_wanted.locked();
                let (mut wanted, _) = crate::locks::held(self.log.flush_wake.wait_timeout_while(
                    wanted,
                    every,
                    |w| !*w,
                ));
                *wanted = false;
            }
            self.log.woken.store(false, Ordering::Release);
            self.flush_log();
            // The WAL is checkpointed here, aside, rather than by whichever commit fills it: a
            // message boundary's commit used to pay for the checkpoint's fsync now and then.
            if checkpointed.elapsed() >= WAL_CHECKPOINT_EVERY {
                checkpointed = Instant::now();
                match self.store.checkpoint_wal_aside() {
                    Ok(Some((pages, done))) => tracing::trace!(
                        "WAL checkpointed: {done} of {pages} pages in {:?}",
                        checkpointed.elapsed()
                    ),
                    Ok(None) => {}
                    Err(e) => tracing::warn!("checkpointing the store's WAL: {e}"),
                }
            }
            let removed = self.log.nodes_removed.load(Ordering::Relaxed);
            let now = Instant::now();
            // Both are asked, so that each sees its count at every wake-up.
            let forgets = forgotten.trim_now(removed, now);
            let records = applied.trim_now(self.store.applied_records(), now);
            if self.log.trim_wanted.swap(false, Ordering::Relaxed) || forgets || records {
                let t = Instant::now();
                sys::trim_heap();
                tracing::debug!("heap trimmed in {:?}", t.elapsed());
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// Wakes the flusher (see [`Recorder::run_flusher`]).
    pub fn wake_flusher(&self) {
        *self.log.flush_wanted.locked() = true;
        self.log.flush_wake.notify_one();
    }

    /// Applies the journal — captures and change-log entries — to the database now.
    pub fn flush_log(&self) {
        if let Err(e) = self.store.flush_journal() {
            tracing::error!("capture journal: {e}; its records stay pending");
        }
    }

    /// Journals the log entry of a change that has happened.
    pub(super) fn log_change(&self, pid: u32, change: &Change<'_>) {
        let who = self.classify(
            pid,
            Some(match change.path2 {
                Some(p2) if change.op == Op::Rename => p2.as_bytes(),
                _ => change.path.as_bytes(),
            }),
        );
        let seq = self.state.locked().seq;
        let e = LogEntry {
            seq: 0,
            at: now_ms(),
            checkpoint: seq,
            op: change.op,
            path: change.path.clone(),
            path2: change.path2.cloned(),
            actor: who.actor,
            pid,
            process: who.comm,
            tool_use_id: who.span,
            session: who.session,
        };
        // Journalled, as pre-images are: a crash of the daemon loses no entry of a change that
        // was done (consecutive changes that one entry stands for are not logged again: see
        // `Store::log_change`).
        let n = match self.store.log_change(e) {
            Ok(n) => n,
            Err(err) => {
                tracing::error!(
                    "change log: {err}; an entry for {} is lost",
                    change.path.as_path().display()
                );
                return;
            }
        };
        let inline = flush_inline(n, self.is_rewinder(pid), self.live.watching());
        if inline {
            self.flush_log();
        } else if wake_for(n, &self.log.woken) {
            self.wake_flusher();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While a rewind runs, other writers leave the journal to the flusher and the rewind — up
    /// to a hard bound, which holds for everyone (before, a rewind that planned for long, with
    /// the flusher behind, let the journal grow without end).
    #[test]
    fn the_journal_is_bounded_for_every_writer_even_while_a_rewind_runs() {
        assert!(!flush_inline(LOG_FLUSH_INLINE_AT, false, true));
        assert!(flush_inline(LOG_FLUSH_INLINE_AT, false, false));
        assert!(flush_inline(REWIND_FLUSH_INLINE_AT, true, true));
        assert!(!flush_inline(REWIND_FLUSH_INLINE_AT - 1, true, true));
        assert!(flush_inline(LOG_FLUSH_HARD_AT, false, true));
        assert!(flush_inline(LOG_FLUSH_HARD_AT + 1, true, true));
    }

    /// Counts that step over every multiple of the mark still wake the flusher, once, until it
    /// starts applying.
    #[test]
    fn the_flusher_is_woken_once_past_the_mark_whatever_the_step() {
        let woken = AtomicBool::new(false);
        let wakes: Vec<usize> = (0..2000)
            .map(|i| 1 + 2 * i)
            .filter(|n| wake_for(*n, &woken))
            .collect();
        assert_eq!(
            wakes,
            vec![LOG_FLUSH_AT + 1],
            "odd counts, two records a change"
        );
        woken.store(false, Ordering::Release);
        assert!(
            wake_for(LOG_FLUSH_AT + 3, &woken),
            "again once the flusher ran"
        );
        assert!(!wake_for(LOG_FLUSH_AT - 1, &AtomicBool::new(false)));
    }

    /// The flusher trims once enough nodes went and the forgets have stopped: not in the
    /// middle of a burst, and not twice for the same nodes.
    #[test]
    fn a_trim_waits_for_enough_forgets_to_settle() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let settle = BURST_SETTLED.as_millis() as u64;
        let mut f = Burst::new(TRIM_AFTER_NODES);
        assert!(!f.trim_now(TRIM_AFTER_NODES / 2, at(0)));
        assert!(
            !f.trim_now(TRIM_AFTER_NODES / 2, at(settle)),
            "too few nodes"
        );
        assert!(
            !f.trim_now(TRIM_AFTER_NODES + 5, at(settle)),
            "still forgetting"
        );
        assert!(
            !f.trim_now(TRIM_AFTER_NODES + 5, at(settle * 2 - 1)),
            "not settled yet"
        );
        assert!(f.trim_now(TRIM_AFTER_NODES + 5, at(settle * 2)));
        assert!(
            !f.trim_now(TRIM_AFTER_NODES + 5, at(settle * 4)),
            "trimmed already"
        );
        assert!(
            !f.trim_now(TRIM_AFTER_NODES * 2, at(settle * 4)),
            "the next burst has begun"
        );
        assert!(
            !f.trim_now(TRIM_AFTER_NODES * 2, at(settle * 6)),
            "too few since the trim"
        );
        assert!(
            !f.trim_now(TRIM_AFTER_NODES * 2 + 5, at(settle * 6)),
            "more came"
        );
        assert!(
            f.trim_now(TRIM_AFTER_NODES * 2 + 5, at(settle * 8)),
            "enough, settled"
        );
    }
}
