//! A fork's own store, begun before its first mount: its history starts with a checkpoint
//! that records the workspace and checkpoint the fork's tree was written from.

use std::path::Path;

use anyhow::bail;

use super::lock::StoreLock;
use crate::store::{Origin, Store};

/// Begins the store in `store_dir` (created if missing) with a checkpoint recording `origin`.
/// A store that already has a history is refused (it belongs to something else).
///
/// # Errors
/// A daemon serves the store; it has a history; store errors.
pub fn begin_fork_store(store_dir: &Path, origin: &Origin) -> anyhow::Result<String> {
    let Some(_lock) = StoreLock::try_acquire(store_dir)? else {
        bail!(
            "store {} is in use by a rewindfs daemon; give the fork its own --store",
            store_dir.display()
        );
    };
    let store = Store::open(store_dir, false)?;
    if let Some(c) = store.last_checkpoint()? {
        bail!(
            "store {} already holds a history (checkpoint {}); give the fork its own --store, or remove that store",
            store_dir.display(),
            c.uuid
        );
    }
    let uuid = uuid::Uuid::new_v4().to_string();
    store.begin_with_origin(&uuid, origin)?;
    Ok(uuid)
}
