//! `begin_prompt`: a typed prompt of the plain Claude Code CLI begins (its UserPromptSubmit
//! hook). The message uuid is not known yet (the CLI writes it to the transcript only after
//! the hook returns), so the checkpoint begins under the hooks' `prompt_id` and takes the uuid
//! later (`bind_message`).

use serde::{Deserialize, Serialize};

use super::Command;
use super::tool_use::Unbound;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::Prompt;

/// Begins the checkpoint of a prompt under its `prompt_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginPrompt {
    #[serde(deserialize_with = "crate::store::session_id")]
    pub session_id: String,
    #[serde(deserialize_with = "crate::store::message_id")]
    pub prompt_id: String,
    /// What was typed (`list` shows its first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The session transcript, where the prompt's uuid will appear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_path: Option<String>,
}

/// The checkpoint that is now current, and the session's earlier prompts still unbound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeginPromptReply {
    /// The prompt_id: what the checkpoint answers to until it is bound.
    pub checkpoint: String,
    pub seq: i64,
    #[serde(default)]
    pub unbound_prompt_ids: Vec<String>,
}

impl Command for BeginPrompt {
    const SUBTYPE: &'static str = "begin_prompt";
    type Reply = BeginPromptReply;
}

impl BeginPrompt {
    pub(super) fn apply(self, d: &Daemon) -> Result<BeginPromptReply, ControlError> {
        let prompt = Prompt {
            prompt_id: self.prompt_id,
            text: self.prompt,
            transcript: self.transcript_path,
        };
        let seq = d.turns.begin_prompt(&self.session_id, &prompt)?;
        let mut unbound = Unbound::of(d, Some(&self.session_id))?.unbound_prompt_ids;
        unbound.retain(|p| *p != prompt.prompt_id);
        Ok(BeginPromptReply {
            checkpoint: prompt.prompt_id,
            seq,
            unbound_prompt_ids: unbound,
        })
    }
}
