//! What an `error` response says: one type for every handler's failures.

use std::path::PathBuf;

use crate::rewind::{BeginError, RewindError};
use crate::store::StoreError;

impl From<StoreError> for ControlError {
    fn from(e: StoreError) -> Self {
        ControlError::Store(e)
    }
}

impl ControlError {
    /// The errno of the system call that failed, when that is what stopped the request (the
    /// `errno` of the error frame).
    pub fn errno(&self) -> Option<i32> {
        match self {
            ControlError::Rewind(e) => e.errno(),
            _ => None,
        }
    }
}

/// A request that could not be carried out. Its `Display` is the `error` of the response.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A rewind, undo or diff failed: the SDK's own wording (`No file checkpoint found for
    /// this message.`, `Failed to rewind: <cause>`).
    #[error(transparent)]
    Rewind(#[from] RewindError),
    /// The store could not answer (its cause in the message only, not also a `source`).
    #[error("store: {0}")]
    Store(StoreError),
    /// `begin_message` failed.
    #[error(transparent)]
    Begin(#[from] BeginError),
    /// `register_agent` for a pid that does not exist.
    #[error("no process with pid {0}; register a running process")]
    NoProcess(u32),
    /// A checkpoint named by a request that no checkpoint began under.
    #[error("no checkpoint {0}: `rewindfs list` shows the checkpoints")]
    NoSuchCheckpoint(String),
    /// `bind_message` for a prompt no checkpoint began under.
    #[error(
        "no checkpoint began under prompt {0}: its UserPromptSubmit hook did not reach the daemon (was the hook set up, and the workspace mounted, when it was typed?)"
    )]
    NoSuchPrompt(String),
    /// A failure of a request in an older protocol, in that protocol's words.
    #[error("{0}")]
    Legacy(String),
    /// A request whose fields do not go together (the message says how).
    #[error("{0}")]
    Invalid(String),
    /// A path that does not name anything inside the workspace.
    #[error("{path}: not a path inside the workspace {}", workspace.display())]
    OutsideWorkspace { path: String, workspace: PathBuf },
}
