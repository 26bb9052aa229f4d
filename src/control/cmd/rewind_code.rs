//! `rewind_code`: the subtype older Claude Code CLIs used for the same request (seed
//! `002_e44238db8bd31646.txt`), with that era's error texts. A client speaking the old protocol
//! gets the answers it was written for; the rewind itself is today's `rewind_files` (tool
//! scope, not a dry run).

use serde::{Deserialize, Serialize};

use super::rewind_files::RewindReply;
use super::{Command, RewindFiles};
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::{RewindError, Scope};

/// Rewinds the files the agent's tools changed to the checkpoint of `user_message_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewindCode {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
}

impl Command for RewindCode {
    const SUBTYPE: &'static str = "rewind_code";
    type Reply = RewindReply;
}

impl RewindCode {
    pub(super) fn apply(self, d: &Daemon) -> Result<RewindReply, ControlError> {
        let req = RewindFiles {
            user_message_id: self.user_message_id.clone(),
            dry_run: false,
            scope: Scope::Tool,
            force: false,
            paths: Vec::new(),
            session_id: None,
            trust_imported: false,
        };
        req.run(d).map_err(|e| match e {
            ControlError::Rewind(RewindError::NoCheckpoint | RewindError::Dropped { .. }) => {
                ControlError::Legacy(format!(
                    "No code checkpoint found for message {}",
                    self.user_message_id
                ))
            }
            ControlError::Rewind(RewindError::Failed(cause)) => {
                ControlError::Legacy(format!("Failed to rewind code: {cause}"))
            }
            e => e,
        })
    }
}
