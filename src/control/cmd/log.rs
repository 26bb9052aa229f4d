//! `log`: the change log, newest `limit` entries, oldest first.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;

/// The change log of the workspace, or of one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default = "default_limit", deserialize_with = "positive")]
    pub limit: i64,
}

fn default_limit() -> i64 {
    1000
}

fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match i64::deserialize(d)? {
        n if n > 0 => Ok(n),
        _ => Err(serde::de::Error::custom("must be a positive integer")),
    }
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    pub seq: i64,
    /// RFC 3339 UTC.
    pub time: String,
    pub op: String,
    pub path: String,
    pub path2: Option<String>,
    pub actor: String,
    pub pid: u32,
    pub process: String,
    /// The checkpoint's uuid (`None`: dropped by gc).
    pub checkpoint: Option<String>,
    pub tool_use_id: Option<String>,
}

/// The entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogReply {
    pub entries: Vec<LogLine>,
}

impl Command for Log {
    const SUBTYPE: &'static str = "log";
    type Reply = LogReply;
}

impl Log {
    pub(super) fn apply(self, d: &Daemon) -> Result<LogReply, ControlError> {
        let e = &d.engine;
        let rel = match &self.path {
            Some(p) => {
                Some(
                    d.rel_to_workspace(p)
                        .ok_or_else(|| ControlError::OutsideWorkspace {
                            path: p.clone(),
                            workspace: d.workspace.clone(),
                        })?,
                )
            }
            None => None,
        };
        let entries = e.log(rel.as_deref(), self.limit)?;
        let cps: HashMap<i64, String> = e
            .checkpoints(None)?
            .into_iter()
            .map(|c| (c.checkpoint.seq, c.checkpoint.uuid))
            .collect();
        let entries = entries
            .into_iter()
            .map(|x| LogLine {
                seq: x.seq,
                time: crate::store::rfc3339(x.at),
                op: x.op.as_str().to_string(),
                path: String::from_utf8_lossy(&x.path).into_owned(),
                path2: x.path2.map(|p| String::from_utf8_lossy(&p).into_owned()),
                actor: x.actor.as_str().to_string(),
                pid: x.pid,
                process: x.process,
                checkpoint: cps.get(&x.checkpoint).cloned(),
                tool_use_id: x.tool_use_id,
            })
            .collect();
        Ok(LogReply { entries })
    }
}
