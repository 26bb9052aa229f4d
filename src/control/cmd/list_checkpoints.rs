//! `list_checkpoints`: the checkpoints kept, oldest first.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Lists checkpoints, of one session if given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCheckpoints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// One checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointInfo {
    pub uuid: String,
    pub session_id: Option<String>,
    /// RFC 3339 UTC.
    pub began_at: String,
    /// `mount`, `message` or `rewind`.
    pub kind: String,
    pub paths_changed: i64,
    pub bytes_captured: i64,
}

/// The checkpoints, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointList {
    pub checkpoints: Vec<CheckpointInfo>,
}

impl Command for ListCheckpoints {
    const SUBTYPE: &'static str = "list_checkpoints";
    type Reply = CheckpointList;
}

impl ListCheckpoints {
    pub(super) fn apply(self, d: &Daemon) -> Result<CheckpointList, ControlError> {
        let list = d.engine.checkpoints(self.session_id.as_deref())?;
        let checkpoints = list
            .into_iter()
            .map(|c| CheckpointInfo {
                began_at: crate::store::rfc3339(c.checkpoint.began_at),
                uuid: c.checkpoint.uuid,
                session_id: c.checkpoint.session_id,
                kind: c.checkpoint.kind.as_str().to_string(),
                paths_changed: c.paths_changed,
                bytes_captured: c.bytes_captured,
            })
            .collect();
        Ok(CheckpointList { checkpoints })
    }
}
