//! The change log: one entry per change that happened (who, what, which path), buffered in
//! memory and written to SQLite by a flusher thread, off the FUSE request path.
//!
//! Unlike a pre-image, a log entry is made *after* the change and no rewind reads it: it is
//! what the control socket's `log` request (`rewindfs log`) shows. So it is buffered rather
//! than written ahead, and a failure to write it loses entries (and says so in the daemon's
//! log) but never refuses a change.
//!
//! Invariants:
//! - batches land in the order their changes happened: a batch is taken from the buffer and
//!   written under `flushing`, so two flushes cannot interleave;
//! - the buffer is bounded: past [`LOG_FLUSH_AT`] entries the flusher is woken, past
//!   [`LOG_FLUSH_INLINE_AT`] (the flusher is behind) the change writes the batch itself;
//! - consecutive writes by one process to one file in one checkpoint are one entry;
//! - each flush also applies the capture journal to SQLite (the pre-images themselves are
//!   already durable in the journal: this only moves them into the database).
//!
//! Lock order: `flushing` → `entries`; `flush_wanted` is taken alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Change, Op, Recorder, path_key};
use crate::store::{LogEntry, now_ms};
use crate::sys;

/// Change-log entries buffered before the flusher is woken.
const LOG_FLUSH_AT: usize = 512;
/// Change-log entries buffered before a change writes them itself (the flusher is behind).
const LOG_FLUSH_INLINE_AT: usize = 64 * 1024;

/// The change-log entries not yet written, and what the flusher is asked to do.
#[derive(Debug, Default)]
pub(super) struct ChangeLog {
    /// Change-log entries not yet written (flushed with the next capture, at boundaries,
    /// and by the daemon's timer).
    entries: Mutex<Vec<LogEntry>>,
    /// Set (and the flusher woken) when the change log has grown enough to be written.
    flush_wanted: Mutex<bool>,
    /// Wakes the flusher when `flush_wanted` is set.
    flush_wake: Condvar,
    /// Held while a batch of the change log is written, so batches land in order.
    flushing: Mutex<()>,
    /// A checkpoint dropped a large set of paths: the flusher returns the memory.
    trim_wanted: AtomicBool,
}

impl ChangeLog {
    /// Asks the flusher to hand freed heap memory back to the system at its next wake-up.
    pub(super) fn want_trim(&self) {
        self.trim_wanted.store(true, Ordering::Relaxed);
    }
}

impl Recorder {
    /// Writes the change log and applies the capture journal every `every`, and at once when
    /// changes ask for it, until `stop` is set (checked at each wake-up). Runs on its own
    /// thread, so SQLite stays off the FUSE request path.
    pub fn run_flusher(&self, every: Duration, stop: &AtomicBool) {
        loop {
            {
                let wanted = self.log.flush_wanted.lock().unwrap();
                let (mut wanted, _) = self
                    .log
                    .flush_wake
                    .wait_timeout_while(wanted, every, |w| !*w)
                    .unwrap();
                *wanted = false;
            }
            self.flush_log();
            if self.log.trim_wanted.swap(false, Ordering::Relaxed) {
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
        *self.log.flush_wanted.lock().unwrap() = true;
        self.log.flush_wake.notify_one();
    }

    /// Writes buffered change-log entries.
    pub fn flush_log(&self) {
        let _order = self.log.flushing.lock().unwrap_or_else(|p| p.into_inner());
        let entries = std::mem::take(&mut *self.log.entries.lock().unwrap());
        if let Err(e) = self.store.append_log(&entries) {
            tracing::error!("change log: {e}; {} entries lost", entries.len());
        }
        if let Err(e) = self.store.flush_journal() {
            tracing::error!("capture journal: {e}; its records stay pending");
        }
    }

    /// Buffers the log entry of a change that has happened.
    pub(super) fn log_change(&self, pid: u32, change: &Change<'_>) {
        let who = self.classify(
            pid,
            Some(
                change
                    .path2
                    .filter(|_| change.op == Op::Rename)
                    .unwrap_or(change.path),
            ),
        );
        let seq = self.state.lock().unwrap().seq;
        let e = LogEntry {
            seq: 0,
            at: now_ms(),
            checkpoint: seq,
            op: change.op,
            path: path_key(change.path),
            path2: change.path2.map(path_key),
            actor: who.actor,
            pid,
            process: who.comm,
            tool_use_id: who.span,
            session: who.session,
        };
        let n = {
            let mut l = self.log.entries.lock().unwrap();
            // Consecutive writes to one file are one entry.
            if let Some(last) = l.last() {
                if last.op == e.op
                    && e.op == crate::store::Op::Write
                    && last.path == e.path
                    && last.pid == e.pid
                    && last.checkpoint == e.checkpoint
                {
                    return;
                }
            }
            l.push(e);
            l.len()
        };
        if n >= LOG_FLUSH_INLINE_AT {
            self.flush_log();
        } else if n == LOG_FLUSH_AT {
            self.wake_flusher();
        }
    }
}
