//! `undo_rewind`: undoes the newest rewind not yet undone (the stack: `rewind/stack.rs`); the
//! reply that it and `redo_rewind` share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::{Direction, Scope, StackOutcome, StackRequest};

/// Undoes the newest rewind not yet undone; with `dry_run`, says what it would change and
/// what others changed since; refused over such changes unless `force`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoRewind {
    /// Plan and report only; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Overwrite the paths others changed since the rewind (otherwise refused).
    #[serde(default)]
    pub force: bool,
    /// Undo the newest rewind to one of this session's checkpoints (its own stack; absent:
    /// the newest of every rewind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// What an undo or redo changed (or, in a dry run, would change).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackReply {
    /// False only for a dry run that would be refused, or has nothing to do (`error` says why).
    pub can_rewind: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Absolute paths it changes.
    pub files_changed: Vec<String>,
    pub insertions: u64,
    pub deletions: u64,
    /// Absolute paths it changes that someone other than rewindfs changed since (a forced one
    /// overwrote them).
    #[serde(default)]
    pub conflicts: Vec<String>,
    /// Who changed each of `conflicts` (workspace-relative path → `tool`, `shell`, `external`,
    /// or `rewind`: another session's rewind, undo or redo, newer than the one reverted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub conflicts_by: BTreeMap<String, Vec<String>>,
    /// Absolute paths a real undo or redo left as someone else made them while it ran
    /// (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_meanwhile: Vec<String>,
    /// Absolute paths it began to restore and then left because someone else changed them
    /// meanwhile: partly restored, also in `files_changed` and `changed_meanwhile` (absent:
    /// none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partially_restored: Vec<String>,
    /// The rewind undone (an undo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<String>,
    /// The rewind redone (a redo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redone: Option<String>,
    /// The checkpoint that rewind went back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewound_to: Option<String>,
    /// That rewind's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// A real undo's or redo's own id: its checkpoint's uuid in `list_checkpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// How many rewinds `undo_rewind` can undo now, one after another.
    pub undoable: u64,
    /// How many `redo_rewind` can re-apply now.
    pub redoable: u64,
}

/// The reply to `undo_rewind`.
pub type UndoReply = StackReply;

impl StackReply {
    /// A dry run that cannot go ahead: still a `success`, as a rewind's dry run.
    fn refused(error: String) -> StackReply {
        StackReply {
            can_rewind: false,
            error: Some(error),
            ..StackReply::default()
        }
    }

    fn of(o: StackOutcome, dir: Direction, d: &Daemon) -> StackReply {
        let ws = &d.workspace;
        let (undone, redone) = match dir {
            Direction::Undo => (Some(o.rewind), None),
            Direction::Redo => (None, Some(o.rewind)),
        };
        StackReply {
            can_rewind: o.outcome.can_rewind,
            error: o.outcome.error,
            files_changed: super::rewind_files::absolute(ws, o.outcome.files_changed),
            insertions: o.outcome.insertions,
            deletions: o.outcome.deletions,
            conflicts: super::rewind_files::absolute(ws, o.outcome.conflicts),
            conflicts_by: o
                .conflict_actors
                .into_iter()
                .map(|(p, who)| (p, who.into_iter().map(str::to_string).collect()))
                .collect(),
            changed_meanwhile: super::rewind_files::absolute(ws, o.outcome.changed_meanwhile),
            partially_restored: super::rewind_files::absolute(ws, o.outcome.partially_restored),
            undone,
            redone,
            rewound_to: Some(o.rewound_to),
            scope: o.scope,
            id: o.id,
            undoable: o.undo_depth as u64,
            redoable: o.redo_depth as u64,
        }
    }

    /// Runs an undo or redo: a dry run answers every failure as `canRewind: false`.
    pub(super) fn run(
        d: &Daemon,
        direction: Direction,
        dry_run: bool,
        force: bool,
        session_id: Option<String>,
    ) -> Result<StackReply, ControlError> {
        let req = StackRequest {
            direction,
            dry_run,
            force,
            session_id,
        };
        match d.rewinder.undo_redo(req) {
            Ok(o) => Ok(StackReply::of(o, direction, d)),
            Err(e) if dry_run => Ok(StackReply::refused(e.to_string())),
            Err(e) => Err(ControlError::Rewind(e)),
        }
    }
}

impl Command for UndoRewind {
    const SUBTYPE: &'static str = "undo_rewind";
    type Reply = UndoReply;
}

impl UndoRewind {
    pub(super) fn apply(self, d: &Daemon) -> Result<UndoReply, ControlError> {
        StackReply::run(
            d,
            Direction::Undo,
            self.dry_run,
            self.force,
            self.session_id,
        )
    }
}
