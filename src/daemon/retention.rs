//! Retention as the daemon runs it: a full pass at mount, a pass every [`GC_EVERY`], and
//! `rewindfs gc --store` on a store no daemon serves.
//!
//! The limits, and where the rest of retention lives: `crate::retention`.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

use super::lock::StoreLock;
use crate::retention::Retention;
use crate::rewind::Rewinder;
use crate::store::Store;
use crate::store::gc::Report;

/// How often the daemon checks the store against its retention limits.
pub(super) const GC_EVERY: Duration = Duration::from_secs(60);

/// One automatic retention pass; what it freed (or why it failed) goes to the log.
pub(super) fn gc_pass(rewinder: &Rewinder, policy: &Retention, full: bool) {
    use crate::units::human_bytes;
    match rewinder.gc(policy, full) {
        Ok(r) if r.checkpoints_dropped > 0 || r.blobs_deleted > 0 => tracing::info!(
            "gc: dropped {} checkpoint(s), {} capture(s), {} blob(s); freed {}: the store went from {} to {}",
            r.checkpoints_dropped,
            r.captures_deleted,
            r.blobs_deleted,
            human_bytes(r.bytes_freed),
            human_bytes(r.bytes_before),
            human_bytes(r.bytes_after)
        ),
        Ok(r) if r.over_budget && full => tracing::warn!(
            "gc: the store holds {} (over its budget) but nothing more may be dropped: the current checkpoint and live sessions' first captures stay",
            human_bytes(r.bytes_after)
        ),
        Ok(_) => {}
        Err(e) => tracing::error!("gc: {e}"),
    }
}

/// `rewindfs gc --store` with no daemon on the store: one full retention pass under the store's
/// lock, keeping the last checkpoint (and its session) as the current one. `Ok(None)` when a
/// daemon holds the store (ask it over its socket instead).
///
/// # Errors
/// The store cannot be locked or opened; store errors.
pub fn gc_offline(store_dir: &Path, policy: &Retention) -> anyhow::Result<Option<Report>> {
    if !store_dir.join(crate::store::layout::DB).exists() {
        bail!("{}: no store database", store_dir.display());
    }
    // Refused like a mount when the store is someone else's; made private all the same.
    super::make_private(store_dir)?;
    let Some(_lock) = StoreLock::try_acquire(store_dir)? else {
        return Ok(None);
    };
    let store = Store::open(store_dir, false)?;
    let (keep_from, session) = match store.last_checkpoint()? {
        Some(c) => (c.seq, c.session_id),
        None => return Ok(Some(Report::default())),
    };
    // No daemon knows which sessions are at work: the last one is taken to be.
    Ok(Some(store.gc(
        policy,
        keep_from,
        session.as_deref(),
        &[],
        true,
        None,
    )?))
}
