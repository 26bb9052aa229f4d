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
    let all = store.checkpoint_rows()?;
    let req = Log::whole();
    let (entries, total) = store.log(&LogQuery {
        path: None,
        since_checkpoint: None,
        after: None,
        limit: i64::MAX,
        session: None,
    })?;
    Ok(Some((list, LogReply::of(entries, total, &all, &req))))
}

/// Nothing to flush: no kernel holds the workspace's data.
struct NoKernel;

impl crate::turns::KernelCache for NoKernel {
    fn flush(&self) {}
}

/// The answer to `cmd` about a workspace no daemon serves, by the daemon's own handler over the
/// store and the directory as it is: only requests that change nothing (the checkpoints, the
/// log, `show`, `ls`, `diff`, a rewind's dry run). `Ok(None)` when a daemon holds the store.
///
/// A recorder that begins no checkpoint (`Recorder::reading`) stands where the mount's
/// would; the store is held under its lock for this one request.
///
/// # Errors
/// A request that would change something; no store; the request's own error.
pub fn ask_offline<C: crate::control::cmd::Command>(
    store_dir: &Path,
    workspace: &Path,
    cmd: &C,
) -> anyhow::Result<Option<C::Reply>> {
    use crate::control::cmd::Request;
    use std::os::fd::AsFd;
    use std::sync::Arc;
    let fields = match serde_json::to_value(cmd)? {
        serde_json::Value::Object(m) => m,
        _ => bail!("{}: not a request", C::SUBTYPE),
    };
    let req = Request::decode(C::SUBTYPE, fields).map_err(anyhow::Error::msg)?;
    let looks = match &req {
        Request::RewindFiles(r) => r.dry_run,
        Request::ListCheckpoints(_)
        | Request::Log(_)
        | Request::Diff(_)
        | Request::Show(_)
        | Request::Ls(_) => true,
        _ => false,
    };
    if !looks {
        bail!(
            "{} changes the workspace or its history, which only its daemon does: mount it (`rewindfs mount {}`)",
            C::SUBTYPE,
            workspace.display()
        );
    }
    if !store_dir.join(crate::store::layout::DB).exists() {
        bail!("{}: no rewindfs store here", store_dir.display());
    }
    super::make_private(store_dir)?;
    let Some(_lock) = StoreLock::try_acquire(store_dir)? else {
        return Ok(None);
    };
    let root = crate::sys::open_dir_path(workspace)?;
    let store = Arc::new(Store::open(store_dir, false)?);
    let recorder = Arc::new(crate::capture::Recorder::reading(
        root.as_fd(),
        store.clone(),
    )?);
    let kernel: Arc<dyn crate::turns::KernelCache> = Arc::new(NoKernel);
    let turns = Arc::new(crate::turns::Turns::new(
        recorder.clone(),
        store.clone(),
        kernel.clone(),
    ));
    let rewinder = Arc::new(crate::rewind::Rewinder::new(
        turns.clone(),
        recorder,
        store,
        kernel,
        workspace.to_path_buf(),
    ));
    let daemon = crate::control::Daemon {
        views: Arc::new(rewinder.views()),
        rewinder,
        turns,
        workspace: workspace.to_path_buf(),
        store_dir: store_dir.to_path_buf(),
        retention: crate::retention::Retention::default(),
        trust_file: None,
        passthrough: Default::default(),
        forks: Default::default(),
    };
    let v = req.apply(&daemon).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Some(serde_json::from_value(v)?))
}
