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
    /// Where the history this checkpoint begins came from (a fork's first checkpoint, an
    /// import's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<OriginInfo>,
}

/// Where a history came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginInfo {
    /// `fork` or `import`.
    pub kind: String,
    /// The parent workspace.
    pub workspace: String,
    /// Its store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The parent's checkpoint (a fork: the state its tree was written from).
    pub checkpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
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
        let list = d.engine.store.checkpoints(self.session_id.as_deref())?;
        let mut origins = d.engine.store.origins()?;
        let checkpoints = list
            .into_iter()
            .map(|c| CheckpointInfo {
                origin: origins.remove(&c.checkpoint.seq).map(|o| OriginInfo {
                    kind: o.kind.as_str().to_string(),
                    workspace: o.workspace,
                    store: o.store,
                    checkpoint: o.uuid,
                    session_id: o.session_id,
                }),
                began_at: crate::control::rfc3339(c.checkpoint.began_at),
                uuid: c.checkpoint.uuid,
                session_id: c.checkpoint.session_id,
                kind: c.checkpoint.kind,
                paths_changed: c.paths_changed,
                bytes_captured: c.bytes_captured,
            })
            .collect();
        Ok(CheckpointList { checkpoints })
    }
}
