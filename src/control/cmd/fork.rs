//! `fork`: the whole tree as it was when a checkpoint began, written into a new directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Writes the tree as it was when `user_message_id` began into `dir` (absolute; new, or an
/// empty directory; outside the workspace and the store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fork {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
    pub dir: String,
    /// Write what history from elsewhere would grant (see `rewind_files`'s `trust_imported`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_imported: bool,
}

/// What the fork wrote, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkReply {
    /// The fork (absolute, symlinks resolved).
    pub dir: PathBuf,
    /// The checkpoint it was written from.
    pub checkpoint: String,
    pub session_id: Option<String>,
    /// The workspace it was written from, and its store.
    pub workspace: PathBuf,
    pub store: PathBuf,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Files whose content came from the store (changed since the checkpoint), and their bytes.
    pub files_from_store: u64,
    pub bytes_from_store: u64,
    /// What could not be made (special files, when not root), with why.
    pub skipped: Vec<String>,
    /// What history from elsewhere would have granted and was not written (absent: nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<crate::rewind::Withheld>,
}

impl Command for Fork {
    const SUBTYPE: &'static str = "fork";
    type Reply = ForkReply;
}

/// `dir` as the fork's destination: absolute, symlinks resolved as far as it exists, and
/// neither inside the workspace or the store nor around them.
pub(super) fn destination(d: &Daemon, dir: &str) -> Result<PathBuf, ControlError> {
    let p = Path::new(dir);
    if !p.is_absolute() {
        return Err(ControlError::Invalid(format!(
            "fork: {dir:?} must be an absolute path"
        )));
    }
    // Not through a symlink at its own name: the fork refuses one there (`outside.rs`).
    let resolved = crate::sys::resolve_parent(p)
        .map_err(|e| ControlError::Invalid(format!("fork: {dir}: {e}")))?;
    for (what, place) in [("workspace", &d.workspace), ("store", &d.store_dir)] {
        if resolved.starts_with(place) {
            return Err(ControlError::Invalid(format!(
                "fork: {} is inside the {what} {}; a fork goes elsewhere",
                resolved.display(),
                place.display()
            )));
        }
        if place.starts_with(&resolved) {
            return Err(ControlError::Invalid(format!(
                "fork: {} holds the {what} {}; a fork goes into a new or empty directory elsewhere",
                resolved.display(),
                place.display()
            )));
        }
    }
    Ok(resolved)
}

impl Fork {
    pub(super) fn apply(self, d: &Daemon) -> Result<ForkReply, ControlError> {
        let dir = destination(d, &self.dir)?;
        let r = d
            .views
            .fork(&self.user_message_id, &dir, self.trust_imported)?;
        crate::locks::Locked::locked(&d.forks).insert(dir.clone());
        Ok(ForkReply {
            dir,
            checkpoint: r.checkpoint,
            session_id: r.session_id,
            workspace: d.workspace.clone(),
            store: d.store_dir.clone(),
            files: r.files,
            dirs: r.dirs,
            symlinks: r.symlinks,
            bytes: r.bytes,
            files_from_store: r.files_from_store,
            bytes_from_store: r.bytes_from_store,
            skipped: r.skipped,
            withheld: r.withheld,
        })
    }
}
