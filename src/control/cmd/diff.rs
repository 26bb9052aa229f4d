//! `diff`: a unified diff, current → the state at a checkpoint's start.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::Scope;

/// The diff of what a rewind to `user_message_id` would change, in `scope` (default `all`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default = "all_scope")]
    pub scope: Scope,
}

fn all_scope() -> Scope {
    Scope::All
}

/// The diff text and the files it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReply {
    pub diff: String,
    pub files_changed: Vec<String>,
}

impl Command for Diff {
    const SUBTYPE: &'static str = "diff";
    type Reply = DiffReply;
}

impl Diff {
    pub(super) fn apply(self, d: &Daemon) -> Result<DiffReply, ControlError> {
        let (diff, files_changed) =
            d.engine
                .diff(&self.user_message_id, self.path.as_deref(), self.scope)?;
        Ok(DiffReply {
            diff,
            files_changed: super::rewind_files::absolute(&d.workspace, files_changed),
        })
    }
}
