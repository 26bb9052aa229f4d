//! `bind_message`: the checkpoint begun under a prompt's `prompt_id` learns its message uuid
//! (read from the transcript by a later hook), and answers to it from now on.

use serde::{Deserialize, Serialize};

use super::{BeginMessageReply, Command};
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Binds `user_message_id` to the checkpoint begun under `prompt_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMessage {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub prompt_id: String,
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
}

impl Command for BindMessage {
    const SUBTYPE: &'static str = "bind_message";
    type Reply = BeginMessageReply;
}

impl BindMessage {
    pub(super) fn apply(self, d: &Daemon) -> Result<BeginMessageReply, ControlError> {
        match d
            .turns
            .bind_prompt(&self.prompt_id, &self.user_message_id)?
        {
            Some(seq) => Ok(BeginMessageReply {
                checkpoint: self.user_message_id,
                seq,
            }),
            None => Err(ControlError::NoSuchPrompt(self.prompt_id)),
        }
    }
}
