//! `import`: a bundle's checkpoints into this store.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::bundle::{ImportReport, Trust};

/// Imports the bundle at `path` (absolute).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Import {
    pub path: String,
}

/// What the import added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReply {
    /// The bundle's checkpoints, oldest first.
    pub checkpoint_ids: Vec<String>,
    /// Checkpoints added (0 when all were here already).
    pub checkpoints: u64,
    pub rows: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Every checkpoint was here already: nothing was done.
    pub already_imported: bool,
    /// The workspace the bundle came from.
    pub workspace: String,
    /// Who signed it: the comment of a trusted key, or an untrusted key (absent: unsigned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

impl ImportReply {
    /// The reply for an import's report.
    pub fn of(r: ImportReport) -> ImportReply {
        ImportReply {
            checkpoint_ids: r.manifest_checkpoints,
            checkpoints: r.checkpoints,
            rows: r.rows,
            blobs: r.blobs,
            blob_bytes: r.blob_bytes,
            already_imported: r.already,
            workspace: r.workspace,
            signed_by: None,
        }
    }
}

impl Command for Import {
    const SUBTYPE: &'static str = "import";
    type Reply = ImportReply;
}

impl Import {
    pub(super) fn apply(self, d: &Daemon) -> Result<ImportReply, ControlError> {
        let path = super::export::bundle_path(d, &self.path, false)?;
        // A bundle inside the workspace is read from beneath the mount, not through it.
        let file = match path.strip_prefix(&d.workspace) {
            Ok(rel) => d.views.open_in_workspace(rel),
            Err(_) => std::fs::File::open(&path),
        }
        .map_err(|e| {
            ControlError::Invalid(format!(
                "{}: {e}",
                String::from_utf8_lossy(OsStr::as_bytes(path.as_os_str()))
            ))
        })?;
        let trust = match &d.trust_file {
            Some(f) => Trust::load(f).map_err(ControlError::Invalid)?,
            None => Trust::default(),
        };
        let (r, signed_by) = d
            .views
            .import(std::io::BufReader::with_capacity(1 << 20, file), &trust)?;
        Ok(ImportReply {
            signed_by,
            ..ImportReply::of(r)
        })
    }
}
