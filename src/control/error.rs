//! What an `error` response says: one type for every handler's failures.

use std::path::PathBuf;

use crate::rewind::RewindError;
use crate::store::StoreError;

/// A request that could not be carried out. Its `Display` is the `error` of the response.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A rewind, undo or diff failed: the SDK's own wording (`No file checkpoint found for
    /// this message.`, `Failed to rewind: <cause>`).
    #[error(transparent)]
    Rewind(#[from] RewindError),
    /// The store could not answer.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// `begin_message` for a uuid that began before and is not the current one.
    #[error(
        "checkpoint {0} already began; a message's checkpoint cannot begin twice (send a new uuid for a new message)"
    )]
    AlreadyBegan(String),
    /// `begin_message` could not record the boundary.
    #[error("beginning checkpoint {uuid}: {source}")]
    Begin {
        uuid: String,
        source: std::io::Error,
    },
    /// `register_agent` for a pid that does not exist.
    #[error("no process with pid {0}; register a running process")]
    NoProcess(u32),
    /// A request whose fields do not go together (the message says how).
    #[error("{0}")]
    Invalid(String),
    /// A path that does not name anything inside the workspace.
    #[error("{path}: not a path inside the workspace {}", workspace.display())]
    OutsideWorkspace { path: String, workspace: PathBuf },
}
