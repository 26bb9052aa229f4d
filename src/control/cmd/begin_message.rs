//! `begin_message`: a user message begins; its uuid becomes the session's current checkpoint.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Begins the checkpoint of a user message. Beginning the current checkpoint again is a
/// no-op success; a uuid that already began earlier is refused (a checkpoint begins once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginMessage {
    #[serde(deserialize_with = "crate::store::session_id")]
    pub session_id: String,
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
}

/// The checkpoint that is now current.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginMessageReply {
    pub checkpoint: String,
    pub seq: i64,
}

impl Command for BeginMessage {
    const SUBTYPE: &'static str = "begin_message";
    type Reply = BeginMessageReply;
}

impl BeginMessage {
    pub(super) fn apply(self, d: &Daemon) -> Result<BeginMessageReply, ControlError> {
        let seq = d
            .turns
            .begin_message(&self.session_id, &self.user_message_id)?;
        Ok(BeginMessageReply {
            checkpoint: self.user_message_id,
            seq,
        })
    }
}
