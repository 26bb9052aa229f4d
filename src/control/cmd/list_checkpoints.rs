//! `list_checkpoints`: the checkpoints kept, oldest first.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::{OriginKind, RewindScope, Stack};

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
    /// For a `rewind` checkpoint: the rewind, undo or redo that began it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind: Option<RewindInfo>,
}

/// The rewind, undo or redo that began a `rewind` checkpoint, and where it stands on the stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindInfo {
    /// `rewind`, `undo` or `redo`.
    pub action: String,
    /// A rewind's: the checkpoint it went back to; an undo's or redo's: the rewind it undid or
    /// redid (that rewind's checkpoint uuid).
    pub target: String,
    /// A rewind's scope (`tool`, `agent`, `all`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `applying` (unfinished: the next mount finishes it), `done`, or for a rewind `undone`.
    pub state: String,
    /// `undo` when `undo_rewind` undoes this rewind next, `redo` when `redo_rewind` re-applies
    /// it next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

impl RewindInfo {
    /// What the stack says of each rewind checkpoint, by its seq.
    fn by_checkpoint(stack: &Stack) -> HashMap<i64, RewindInfo> {
        let next_undo = stack.next_undo().map(|s| s.rewind.id.clone());
        let next_redo = stack.next_redo().map(|s| s.rewind.id.clone());
        stack
            .rows()
            .iter()
            .map(|r| {
                let (action, scope) = match r.scope {
                    RewindScope::Scope(s) => ("rewind", Some(s.as_str().to_string())),
                    RewindScope::Undo => ("undo", None),
                    RewindScope::Redo => ("redo", None),
                };
                let next = if next_undo.as_deref() == Some(&r.id) {
                    Some("undo".to_string())
                } else if next_redo.as_deref() == Some(&r.id) {
                    Some("redo".to_string())
                } else {
                    None
                };
                let info = RewindInfo {
                    action: action.to_string(),
                    target: r.target.clone(),
                    scope,
                    state: r.state.as_str().to_string(),
                    next,
                };
                (r.checkpoint, info)
            })
            .collect()
    }
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
        let mut rewinds = RewindInfo::by_checkpoint(&d.engine.stack()?);
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
                rewind: rewinds.remove(&c.checkpoint.seq),
            })
            .collect();
        Ok(CheckpointList { checkpoints })
    }
}
