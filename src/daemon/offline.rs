//! Reading the history of a store no daemon serves (`rewindfs ui` on a workspace that is not
//! mounted): the checkpoint list and the change log, exactly as a daemon would answer them.
//!
//! The store is opened under its lock, as a mount or `gc --store` opens it (what a crash left
//! in its journal is applied first, as the next mount would), read, and let go at once: a
//! mount started meanwhile waits a moment at most, and nothing else is changed.

use std::path::Path;

use anyhow::bail;

use super::lock::StoreLock;
use crate::control::cmd::{CheckpointList, Log, LogReply};
use crate::store::{LogQuery, Store};

/// The checkpoints and the whole change log of the store in `store_dir`; `Ok(None)` when a
/// daemon holds the store (ask it over its socket instead).
///
/// # Errors
/// No store there, someone else's store, store errors.
pub fn history_offline(store_dir: &Path) -> anyhow::Result<Option<(CheckpointList, LogReply)>> {
    if !store_dir.join(crate::store::layout::DB).exists() {
        bail!(
            "{}: no rewindfs store here (a workspace has one once it was mounted)",
            store_dir.display()
        );
    }
    // Refused like a mount when the store is someone else's.
    super::make_private(store_dir)?;
    let Some(_lock) = StoreLock::try_acquire(store_dir)? else {
        return Ok(None);
    };
    let store = Store::open(store_dir, false)?;
    let list = CheckpointList::read(&store, None)?;
    let all = store.checkpoints(None)?;
    let req = Log {
        path: None,
        since: None,
        session_id: None,
        limit: i64::MAX,
        after: None,
        newest_first: false,
        raw: false,
    };
    let (entries, total) = store.log(&LogQuery {
        path: None,
        since_checkpoint: None,
        after: None,
        limit: i64::MAX,
        session: None,
    })?;
    Ok(Some((list, LogReply::of(entries, total, &all, &req))))
}
