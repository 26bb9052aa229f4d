//! `status`: the daemon, its store and its current checkpoint.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// Asks for the daemon's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {}

/// The daemon's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReply {
    pub workspace: PathBuf,
    pub store: PathBuf,
    pub pid: u32,
    pub version: String,
    pub session_id: Option<String>,
    pub current_checkpoint: String,
    pub current_seq: i64,
    /// Checkpoints kept.
    pub checkpoints: i64,
    /// Checkpoints gc removed.
    pub checkpoints_dropped: i64,
    pub captures: i64,
    pub bytes_captured: i64,
    pub agent_pids: Vec<u32>,
    pub store_bytes: u64,
    /// RFC 3339 UTC, now.
    pub time: String,
}

impl Command for Status {
    const SUBTYPE: &'static str = "status";
    type Reply = StatusReply;
}

impl Status {
    pub(super) fn apply(self, d: &Daemon) -> Result<StatusReply, ControlError> {
        let e = &d.engine;
        let current = e.current();
        let counts = e.counts()?;
        Ok(StatusReply {
            workspace: d.workspace.clone(),
            store: d.store_dir.clone(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            session_id: current.session_id,
            current_checkpoint: current.uuid,
            current_seq: current.seq,
            checkpoints: counts.checkpoints,
            checkpoints_dropped: counts.checkpoints_dropped,
            captures: counts.captures,
            bytes_captured: counts.bytes_captured,
            agent_pids: current.agent_pids,
            store_bytes: counts.store_bytes,
            time: crate::store::rfc3339(crate::store::now_ms()),
        })
    }
}
