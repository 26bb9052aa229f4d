//! `undo_rewind`: undoes the last rewind.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Undoes the last rewind not yet undone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoRewind {}

/// What the undo changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UndoReply {
    pub can_rewind: bool,
    pub files_changed: Vec<String>,
    pub insertions: u64,
    pub deletions: u64,
    /// The rewind that was undone.
    pub undone: Option<String>,
}

impl Command for UndoRewind {
    const SUBTYPE: &'static str = "undo_rewind";
    type Reply = UndoReply;
}

impl UndoRewind {
    pub(super) fn apply(self, d: &Daemon) -> Result<UndoReply, ControlError> {
        let o = d.engine.undo()?;
        Ok(UndoReply {
            can_rewind: true,
            files_changed: super::rewind_files::absolute(&d.workspace, o.files_changed),
            insertions: o.insertions,
            deletions: o.deletions,
            undone: o.rewind_id,
        })
    }
}
