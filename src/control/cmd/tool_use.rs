//! `tool_use`: a tool span opens (`pre`) or closes (`post`): the agent's own file tools'
//! writes inside a span are `tool` changes (docs/design.md §3).

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Which end of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Pre,
    Post,
}

/// A PreToolUse / PostToolUse / PostToolUseFailure hook's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolUse {
    pub phase: Phase,
    pub tool_name: String,
    pub tool_use_id: String,
    /// Absolute or workspace-relative; a path outside the workspace is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_path: Option<String>,
    /// More files the tool writes (a Codex `apply_patch` names several), in the same form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_paths: Vec<String>,
    /// The hook's session: a `pre` ends the session's file-tool spans still open.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::store::optional_session_id"
    )]
    pub session_id: Option<String>,
}

/// The prompts of the session whose message uuid the daemon does not know yet (the hook
/// binds those the transcript shows: `bind_message`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unbound {
    #[serde(default)]
    pub unbound_prompt_ids: Vec<String>,
}

impl Unbound {
    pub(super) fn of(d: &Daemon, session: Option<&str>) -> Result<Unbound, ControlError> {
        Ok(Unbound {
            unbound_prompt_ids: match session {
                Some(s) => d.turns.unbound_prompts(Some(s))?,
                None => Vec::new(),
            },
        })
    }
}

impl Command for ToolUse {
    const SUBTYPE: &'static str = "tool_use";
    type Reply = Unbound;
}

impl ToolUse {
    pub(super) fn apply(self, d: &Daemon) -> Result<Unbound, ControlError> {
        let files = self
            .file_path
            .iter()
            .chain(&self.file_paths)
            .filter_map(|p| d.rel_to_workspace(p))
            .collect();
        d.turns.tool_span(
            self.phase == Phase::Pre,
            &self.tool_name,
            &self.tool_use_id,
            files,
            self.session_id.as_deref(),
        );
        Unbound::of(d, self.session_id.as_deref())
    }
}
