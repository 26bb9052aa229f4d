//! `redo_rewind`: re-applies the rewind undone last (the stack: `rewind/stack.rs`), answered
//! like `undo_rewind`.

use serde::{Deserialize, Serialize};

use super::Command;
use super::RewindReply;
use super::undo_rewind::Stack;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::Direction;

/// Re-applies the rewind undone last; with `dry_run`, says what it would change and what
/// others changed since the undo; refused over such changes unless `force`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedoRewind {
    /// Plan and report only; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Overwrite the paths others changed since the undo (otherwise refused).
    #[serde(default)]
    pub force: bool,
    /// Redo the rewind to one of this session's checkpoints undone last (its own stack; absent:
    /// of every rewind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// The reply to `redo_rewind`.
pub type RedoReply = RewindReply;

impl Command for RedoRewind {
    const SUBTYPE: &'static str = "redo_rewind";
    type Reply = RedoReply;
}

impl RedoRewind {
    pub(super) fn apply(self, d: &Daemon) -> Result<RedoReply, ControlError> {
        Stack::run(
            d,
            Direction::Redo,
            self.dry_run,
            self.force,
            self.session_id,
        )
    }
}
