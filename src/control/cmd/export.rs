//! `export`: a run of checkpoints and every blob they need, as one bundle file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::Selection;

/// Writes the bundle of every checkpoint from the first of `session_id` at or after `since`
/// (default: the first one kept) to the newest, to `path` (absolute; outside the workspace and
/// the store; replaced if it exists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Export {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::store::optional_message_id"
    )]
    pub since: Option<String>,
}

/// What the bundle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportReply {
    pub path: PathBuf,
    /// The export's id: also the uuid of the bundle's last checkpoint, the tree at export.
    pub export_id: String,
    /// Every checkpoint in the bundle, oldest first (the export's own last).
    pub checkpoints: Vec<String>,
    pub blobs: u64,
    pub blob_bytes: u64,
    pub rows: u64,
    /// The bundle's size.
    pub bytes: u64,
}

impl Command for Export {
    const SUBTYPE: &'static str = "export";
    type Reply = ExportReply;
}

/// A bundle's path: absolute, and (for writing) not in the workspace or the store.
pub(super) fn bundle_path(d: &Daemon, p: &str, writing: bool) -> Result<PathBuf, ControlError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(ControlError::Invalid(format!(
            "{p:?}: the bundle's path must be absolute"
        )));
    }
    // A bundle written replaces whatever is at its name, a planted symlink included, rather
    // than following it; one read may be reached through links.
    let resolved = if writing {
        crate::sys::resolve_parent(path)
    } else {
        crate::sys::resolve_uncreated(path)
    }
    .map_err(|e| ControlError::Invalid(format!("{p}: {e}")))?;
    if writing {
        for (what, place) in [("workspace", &d.workspace), ("store", &d.store_dir)] {
            if resolved.starts_with(place) {
                return Err(ControlError::Invalid(format!(
                    "{}: a bundle is written outside the {what} {}",
                    resolved.display(),
                    place.display()
                )));
            }
        }
    }
    Ok(resolved)
}

impl Export {
    pub(super) fn apply(self, d: &Daemon) -> Result<ExportReply, ControlError> {
        let path = bundle_path(d, &self.path, true)?;
        let m = d.views.export(
            &Selection {
                session: self.session_id,
                since: self.since,
            },
            &path,
            &d.workspace,
            &d.store_dir,
        )?;
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Ok(ExportReply {
            path,
            export_id: m.export_id,
            checkpoints: m.checkpoints,
            blobs: m.blobs,
            blob_bytes: m.blob_bytes,
            rows: m.rows,
            bytes,
        })
    }
}
