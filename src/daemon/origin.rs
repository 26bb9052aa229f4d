//! Stores written to with no daemon on them: a fork's own store, begun before its first mount
//! (its history starts with a checkpoint that records the workspace and checkpoint the fork's
//! tree was written from), and `import --store`. Each holds the store's lock while it works.

use std::path::{Path, PathBuf};

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

/// The store of the workspace `dir` (a fork, say): the store of the rewindfs mount at `dir`
/// itself when it is mounted, else its default store.
///
/// # Errors
/// The mount table cannot be read; no default store can be named.
pub fn store_of_workspace(dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(match crate::host::mounts::mount_at(dir)? {
        Some(m) if m.fstype == crate::host::mounts::FSTYPE => m.source,
        _ => crate::config::default_store(dir)?,
    })
}

/// `rewindfs import --store` with no daemon on the store: the bundle's checkpoints go into the
/// store directly (created if missing). `Ok(None)` when a daemon holds the store (ask it over
/// its socket instead).
///
/// # Errors
/// A damaged bundle, one that overlaps the store's history; store errors.
pub fn import_offline(
    store_dir: &Path,
    bundle: &Path,
    trust: &crate::store::bundle::Trust,
) -> anyhow::Result<Option<crate::store::bundle::ImportReport>> {
    std::fs::create_dir_all(store_dir)?;
    let Some(_lock) = StoreLock::try_acquire(store_dir)? else {
        return Ok(None);
    };
    let file =
        std::fs::File::open(bundle).map_err(|e| anyhow::anyhow!("{}: {e}", bundle.display()))?;
    let store = Store::open(store_dir, false)?;
    let staged = store.stage_bundle(
        std::io::BufReader::with_capacity(1 << 20, file),
        None,
        trust,
    )?;
    let origin = crate::rewind::import_origin(&staged.manifest);
    let res = store.import_staged(&staged, Some(origin));
    if !matches!(&res, Ok(r) if !r.already) {
        let _ = staged.discard(&store, None);
    }
    Ok(Some(res?))
}
