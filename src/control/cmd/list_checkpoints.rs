//! `list_checkpoints`: the checkpoints kept, oldest first.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::OriginKind;

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
    /// The first line of the prompt that began it (checkpoints begun by the CLI's hooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// False while `uuid` is still the hooks' prompt_id: the message uuid is not known yet.
    #[serde(default = "yes")]
    pub bound: bool,
    /// Where the history this checkpoint begins came from (a fork's first checkpoint, an
    /// import's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<OriginInfo>,
}

fn yes() -> bool {
    true
}

/// The first line of a prompt, at most 120 characters.
fn first_line(p: &str) -> String {
    let line = p.trim_start().lines().next().unwrap_or("");
    match line.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// Where a history came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OriginInfo {
    /// `fork` or `import`.
    pub kind: OriginKind,
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
        // Prompts the transcript shows by now are listed under their message uuid.
        d.engine.bind_from_transcripts();
        let list = d.engine.checkpoints(self.session_id.as_deref())?;
        let mut origins = d.engine.origins()?;
        let checkpoints = list
            .into_iter()
            .map(|c| CheckpointInfo {
                origin: origins.remove(&c.checkpoint.seq).map(|o| OriginInfo {
                    kind: o.kind,
                    workspace: o.workspace,
                    store: o.store,
                    checkpoint: o.uuid,
                    session_id: o.session_id,
                }),
                began_at: crate::store::rfc3339(c.checkpoint.began_at),
                uuid: c.checkpoint.uuid,
                session_id: c.checkpoint.session_id,
                kind: c.checkpoint.kind.as_str().to_string(),
                paths_changed: c.paths_changed,
                bytes_captured: c.bytes_captured,
                prompt: c.checkpoint.prompt.as_deref().map(first_line),
                bound: c.checkpoint.bound,
            })
            .collect();
        Ok(CheckpointList { checkpoints })
    }
}
