//! `undo_rewind`: undoes the newest rewind not yet undone (the stack: `rewind/stack.rs`); the
//! run that it and `redo_rewind` share (their reply is a rewind's, [`RewindReply`]).

use serde::{Deserialize, Serialize};

use super::{Command, RewindReply};
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::{Direction, StackOutcome, StackRequest};

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

/// The reply to `undo_rewind`.
pub type UndoReply = RewindReply;

/// An undo or redo: how it runs and what it answers.
pub(super) struct Stack;

impl Stack {
    /// A dry run that cannot go ahead: still a `success`, as a rewind's dry run.
    fn refused(error: String) -> RewindReply {
        RewindReply {
            can_rewind: false,
            error: Some(error),
            undoable: Some(0),
            redoable: Some(0),
            ..RewindReply::default()
        }
    }

    fn of(o: StackOutcome, dir: Direction, d: &Daemon) -> RewindReply {
        let (undone, redone) = match dir {
            Direction::Undo => (Some(o.rewind), None),
            Direction::Redo => (None, Some(o.rewind)),
        };
        RewindReply {
            conflicts_by: o
                .conflict_actors
                .into_iter()
                .map(|(p, who)| (p, who.into_iter().map(str::to_string).collect()))
                .collect(),
            undone,
            redone,
            rewound_to: Some(o.rewound_to),
            scope: o.scope,
            id: o.id,
            undoable: Some(o.undo_depth as u64),
            redoable: Some(o.redo_depth as u64),
            ..RewindReply::changes(o.outcome, &d.workspace)
        }
    }

    /// Runs an undo or redo: a dry run answers every failure as `canRewind: false`.
    pub(super) fn run(
        d: &Daemon,
        direction: Direction,
        dry_run: bool,
        force: bool,
        session_id: Option<String>,
    ) -> Result<RewindReply, ControlError> {
        let req = StackRequest {
            direction,
            dry_run,
            force,
            session_id,
        };
        match d.rewinder.undo_redo(req) {
            Ok(o) => Ok(Stack::of(o, direction, d)),
            Err(e) if dry_run => Ok(Stack::refused(e.to_string())),
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
        Stack::run(
            d,
            Direction::Undo,
            self.dry_run,
            self.force,
            self.session_id,
        )
    }
}
