//! `end_turn`: a session's turn ended (its Stop hook): the tool spans it left open end, and the
//! reply says which of its prompts are still unbound.

use serde::{Deserialize, Serialize};

use super::Command;
use super::tool_use::Unbound;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Ends the turn of `session_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndTurn {
    #[serde(deserialize_with = "crate::store::session_id")]
    pub session_id: String,
}

impl Command for EndTurn {
    const SUBTYPE: &'static str = "end_turn";
    type Reply = Unbound;
}

impl EndTurn {
    pub(super) fn apply(self, d: &Daemon) -> Result<Unbound, ControlError> {
        d.turns.end_turn(Some(&self.session_id));
        Unbound::of(d, Some(&self.session_id))
    }
}
