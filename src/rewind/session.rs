//! What the control requests ask of the engine besides rewinds: message boundaries, tool
//! spans and agents (which decide how every later change is tagged), and what the store can
//! tell about the history (checkpoints, the change log, counts). The control layer reaches the
//! recorder and the store only through these.

use std::path::{Path, PathBuf};

use super::Engine;
use crate::store::{CheckpointKind, CheckpointSummary, LogEntry, StoreError};

/// Why a message's checkpoint could not begin.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    /// The uuid began before and is not the current checkpoint.
    #[error(
        "checkpoint {0} already began; a message's checkpoint cannot begin twice (send a new uuid for a new message)"
    )]
    AlreadyBegan(String),
    /// The store could not answer whether it began.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The boundary could not be recorded.
    #[error("beginning checkpoint {uuid}: {source}")]
    Record {
        uuid: String,
        source: std::io::Error,
    },
}

/// The current checkpoint and who is working.
#[derive(Debug, Clone)]
pub struct Current {
    pub seq: i64,
    pub uuid: String,
    pub session_id: Option<String>,
    /// Registered agent processes.
    pub agent_pids: Vec<u32>,
}

/// What the store holds, in numbers.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// Checkpoints kept.
    pub checkpoints: i64,
    /// Checkpoints gc removed.
    pub checkpoints_dropped: i64,
    pub captures: i64,
    pub bytes_captured: i64,
    /// Bytes the store takes on disk.
    pub store_bytes: u64,
}

impl Engine {
    /// A user message begins: its uuid becomes the current checkpoint (a no-op if it already
    /// is). Returns the checkpoint's sequence number.
    ///
    /// # Errors
    /// [`BeginError::AlreadyBegan`] for a uuid that began earlier; store and I/O errors.
    pub fn begin_message(&self, session_id: &str, uuid: &str) -> Result<i64, BeginError> {
        let (seq, current, _) = self.recorder.current();
        if current == uuid {
            return Ok(seq);
        }
        if self.store.checkpoint_began(uuid)? {
            return Err(BeginError::AlreadyBegan(uuid.to_string()));
        }
        // Data the kernel still holds (mmap pages) belongs to the previous checkpoint.
        self.kernel.flush();
        self.recorder
            .begin(uuid, Some(session_id), CheckpointKind::Message)
            .map_err(|source| BeginError::Record {
                uuid: uuid.to_string(),
                source,
            })
    }

    /// A tool call starts (`pre`) or ends: writes to `file` in between are the tool's.
    pub fn tool_span(&self, pre: bool, tool_name: &str, tool_use_id: &str, file: Option<PathBuf>) {
        self.recorder.tool_span(pre, tool_name, tool_use_id, file);
    }

    /// `pid` is an agent: its writes are `tool`, its descendants' `shell`.
    pub fn register_agent(&self, pid: u32) {
        self.recorder.register_agent(pid);
    }

    /// The current checkpoint and the registered agents.
    pub fn current(&self) -> Current {
        let (seq, uuid, session_id) = self.recorder.current();
        Current {
            seq,
            uuid,
            session_id,
            agent_pids: self.recorder.agents(),
        }
    }

    /// The checkpoints kept (of one session if given), oldest first.
    ///
    /// # Errors
    /// Store errors.
    pub fn checkpoints(&self, session: Option<&str>) -> Result<Vec<CheckpointSummary>, StoreError> {
        self.store.checkpoints(session)
    }

    /// The newest `limit` change-log entries (of `path` and beneath it, if given), oldest
    /// first; everything buffered so far is included.
    ///
    /// # Errors
    /// Store errors.
    pub fn log(&self, path: Option<&Path>, limit: i64) -> Result<Vec<LogEntry>, StoreError> {
        self.recorder.flush_log();
        let key = path.map(crate::capture::path_key);
        self.store.log(key.as_deref(), limit)
    }

    /// What the store holds.
    ///
    /// # Errors
    /// Store errors.
    pub fn counts(&self) -> Result<Counts, StoreError> {
        let (checkpoints, checkpoints_dropped, captures, bytes_captured) = self.store.counts()?;
        Ok(Counts {
            checkpoints,
            checkpoints_dropped,
            captures,
            bytes_captured,
            store_bytes: self.store.size_bytes()?,
        })
    }
}
