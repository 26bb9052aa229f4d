//! `gc`: a retention pass now (`crate::retention` says where retention lives).

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::retention::Retention;
use crate::store::gc::Report;

/// Drops the oldest checkpoints beyond the limits; `None` takes the daemon's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gc {
    /// `0`: no size budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_store_bytes: Option<u64>,
    /// `0`: no age limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<u64>,
}

/// What the pass did, and the limits it kept to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReply {
    pub checkpoints_dropped: u64,
    pub captures_deleted: u64,
    pub blobs_deleted: u64,
    pub bytes_freed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Still over the budget: what is left is protected.
    pub over_budget: bool,
    pub max_store_bytes: Option<u64>,
    pub max_age_seconds: Option<i64>,
}

impl GcReply {
    /// The reply for a pass that kept to `policy`.
    pub fn of(r: &Report, policy: &Retention) -> GcReply {
        GcReply {
            checkpoints_dropped: r.checkpoints_dropped,
            captures_deleted: r.captures_deleted,
            blobs_deleted: r.blobs_deleted,
            bytes_freed: r.bytes_freed,
            bytes_before: r.bytes_before,
            bytes_after: r.bytes_after,
            over_budget: r.over_budget,
            max_store_bytes: policy.max_bytes,
            max_age_seconds: policy
                .max_age_seconds()
                .map(|s| s.min(i64::MAX as u64) as i64),
        }
    }
}

impl Command for Gc {
    const SUBTYPE: &'static str = "gc";
    type Reply = GcReply;
}

impl Gc {
    pub(super) fn apply(self, d: &Daemon) -> Result<GcReply, ControlError> {
        let policy = d
            .retention
            .overridden(self.max_store_bytes, self.max_age_seconds);
        let r = d.rewinder.gc(&policy, true)?;
        Ok(GcReply::of(&r, &policy))
    }
}
