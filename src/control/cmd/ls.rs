//! `ls`: a directory's entries as they were when a checkpoint began.

use serde::{Deserialize, Serialize};

use super::Command;
use super::show::{ShowReply, shown};
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::Kind;

/// Lists directory `path` (default: the workspace) as it was when `user_message_id` began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ls {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
    /// Absolute, or relative to the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LsEntry {
    /// The entry's name in the directory.
    pub name: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// A file's size.
    pub size: u64,
    /// A file's BLAKE3 hash, when the store has it (a file changed since the checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// As it is now, at the same name.
    pub unchanged: bool,
}

/// The directory and its entries, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LsReply {
    /// Workspace-relative (`.` for the workspace itself).
    pub path: String,
    pub entries: Vec<LsEntry>,
}

impl Command for Ls {
    const SUBTYPE: &'static str = "ls";
    type Reply = LsReply;
}

impl Ls {
    pub(super) fn apply(self, d: &Daemon) -> Result<LsReply, ControlError> {
        let p = self.path.unwrap_or_default();
        let rel = d
            .rel_to_workspace(&p)
            .ok_or_else(|| ControlError::OutsideWorkspace {
                path: p.clone(),
                workspace: d.workspace.clone(),
            })?;
        let (dir, entries) = d.views.list_at(&self.user_message_id, &rel)?;
        let entries = entries
            .iter()
            .map(|e| {
                let r = ShowReply::of(e);
                let name = e.path.rsplit(|b| *b == b'/').next().unwrap_or(&e.path);
                LsEntry {
                    name: crate::wire_path::encode(name),
                    kind: r.kind,
                    mode: r.mode,
                    size: r.size,
                    hash: r.hash,
                    target: r.target,
                    unchanged: r.unchanged,
                }
            })
            .collect();
        Ok(LsReply {
            path: shown(&dir.path),
            entries,
        })
    }
}
