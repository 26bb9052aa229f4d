//! `list_checkpoints`: the checkpoints kept, oldest first.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::{
    CheckpointKind, OriginKind, RewindScope, RewindState, Scope, Stack, Store, StoreError,
};

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
    pub kind: CheckpointKind,
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
    pub action: RewindAction,
    /// A rewind's: the checkpoint it went back to; an undo's or redo's: the rewind it undid or
    /// redid (that rewind's checkpoint uuid).
    pub target: String,
    /// A rewind's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// `applying` (unfinished: the next mount finishes it), `done`, or for a rewind `undone`.
    pub state: RewindState,
    /// `undo` when `undo_rewind` undoes this rewind next, `redo` when `redo_rewind` re-applies
    /// it next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<NextStep>,
}

/// What began a `rewind` checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewindAction {
    Rewind,
    Undo,
    Redo,
}

impl RewindAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RewindAction::Rewind => "rewind",
            RewindAction::Undo => "undo",
            RewindAction::Redo => "redo",
        }
    }
}

/// Which request acts on a rewind next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NextStep {
    /// `undo_rewind` undoes it next.
    Undo,
    /// `redo_rewind` re-applies it next.
    Redo,
}

impl NextStep {
    /// The command that takes it (`rewindfs undo`, `rewindfs redo`).
    pub fn command(self) -> &'static str {
        match self {
            NextStep::Undo => "undo",
            NextStep::Redo => "redo",
        }
    }
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
                    RewindScope::Scope(s) => (RewindAction::Rewind, Some(s)),
                    RewindScope::Undo => (RewindAction::Undo, None),
                    RewindScope::Redo => (RewindAction::Redo, None),
                };
                let next = if next_undo.as_deref() == Some(&r.id) {
                    Some(NextStep::Undo)
                } else if next_redo.as_deref() == Some(&r.id) {
                    Some(NextStep::Redo)
                } else {
                    None
                };
                let info = RewindInfo {
                    action,
                    target: r.target.clone(),
                    scope,
                    state: r.state,
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
        d.turns.bind_from_transcripts();
        Ok(CheckpointList::read(
            d.turns.store(),
            self.session_id.as_deref(),
        )?)
    }
}

impl CheckpointList {
    /// The checkpoints kept in `store` (of one session if given), oldest first, with where
    /// each history came from and what each rewind checkpoint stands for: what the daemon
    /// answers, and what `rewindfs ui` reads from a store no daemon serves.
    ///
    /// # Errors
    /// Store errors.
    pub fn read(store: &Store, session: Option<&str>) -> Result<CheckpointList, StoreError> {
        let list = store.checkpoints(session)?;
        let mut origins = store.origins()?;
        let mut rewinds = RewindInfo::by_checkpoint(&store.stack()?);
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
                kind: c.checkpoint.kind,
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
