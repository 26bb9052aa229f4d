//! `rewind_files`: the SDK's own request (same subtype, same fields, same answers), with
//! rewindfs's additions: `scope`, `force`, `paths`, `session_id`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::{AttrChange, Outcome, Scope, Withheld};

/// Rewinds (or with `dry_run`, plans a rewind of) the workspace to the state at the start of
/// the checkpoint `user_message_id`: the rewinder's own request type.
pub use crate::rewind::Request as RewindFiles;

/// What a rewind, an undo or a redo changed (or, in a dry run, would change): one reply for
/// the three. A rewind's is the SDK's answer — a dry run's `{canRewind, error?, filesChanged,
/// insertions, deletions}`, a real rewind's `{canRewind, skippedLinks}` — with rewindfs's
/// additions; an undo's or redo's names the rewind it undid or redid and what the stack can do
/// next. Fields one of them never sets are absent from its reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindReply {
    /// False for a dry run that would be refused, or has nothing to do (`error` says why).
    pub can_rewind: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Absolute paths it changes.
    pub files_changed: Vec<String>,
    pub insertions: u64,
    pub deletions: u64,
    /// Absolute paths it changes that someone else also changed since (a rewind: since the
    /// checkpoint; an undo or redo: since the rewind it reverts, and a forced one overwrote
    /// them).
    #[serde(default)]
    pub conflicts: Vec<String>,
    /// Who else changed each of `conflicts` (workspace-relative path →, for a rewind,
    /// `session <id>` for another session's actors or `external`; for an undo or redo, `tool`,
    /// `shell`, `external` or `rewind`: another session's rewind, undo or redo newer than the
    /// one reverted). Absent: no conflict.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub conflicts_by: std::collections::BTreeMap<String, Vec<String>>,
    /// A rewind's: paths the tool scope left alone as the SDK does (links and the like).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_links: Option<u64>,
    /// Absolute paths a real one left as someone else made them while it ran: changed by
    /// another process after it began (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_meanwhile: Vec<String>,
    /// Absolute paths it began to restore and then left because someone else changed them
    /// meanwhile: partly restored, also in `files_changed` and `changed_meanwhile` (absent:
    /// none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partially_restored: Vec<String>,
    /// A real rewind's id (what `undo_rewind` undoes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind_id: Option<String>,
    /// A rewind's: paths changed since the checkpoint that this scope leaves out (absent:
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<OmittedReply>,
    /// What history from elsewhere (an import or pull) would have granted and the rewind
    /// withholds — set-user/group-ID bits, `security.*`/`trusted.*` attributes, owners, device
    /// nodes — by absolute path (absent: nothing; `trust_imported` applies them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<Withheld>,
    /// What it changes besides content — mode, owner, extended attributes — by absolute path
    /// (absent: nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attribute_changes: Vec<AttrChange>,
    /// An undo's: the rewind undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<String>,
    /// A redo's: the rewind redone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redone: Option<String>,
    /// An undo's or redo's: the checkpoint the rewind it reverts went back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewound_to: Option<String>,
    /// An undo's or redo's: that rewind's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// A real undo's or redo's own id: its checkpoint's uuid in `list_checkpoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// An undo's or redo's: how many rewinds `undo_rewind` can undo now, one after another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undoable: Option<u64>,
    /// An undo's or redo's: how many `redo_rewind` can re-apply now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redoable: Option<u64>,
}

/// What a scope left out, and how to include it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OmittedReply {
    /// How many paths changed since the checkpoint the scope does not restore.
    pub count: u64,
    /// How many of them each actor changed (`shell`, `external`, …).
    pub by_actor: std::collections::BTreeMap<String, u64>,
    /// The scope that includes them.
    pub scope: Scope,
    /// The command that would include them.
    pub command: String,
}

impl RewindReply {
    /// A dry run that cannot rewind: still a `success`, as the SDK answers it.
    pub fn refused(error: String) -> RewindReply {
        RewindReply {
            can_rewind: false,
            error: Some(error),
            ..RewindReply::default()
        }
    }

    /// A rewind's reply.
    fn of(o: Outcome, dry_run: bool, workspace: &Path, uuid: &str) -> RewindReply {
        let omitted = o.omitted.scope.map(|scope| OmittedReply {
            count: o.omitted.count,
            by_actor: o.omitted.by_actor.clone(),
            scope,
            command: format!(
                "rewindfs rewind {uuid} --scope {}{}",
                scope.as_str(),
                if dry_run { " --dry-run" } else { "" }
            ),
        });
        let skipped_links = Some(o.skipped_links);
        let rewind_id = o.rewind_id.clone().filter(|_| !dry_run);
        RewindReply {
            skipped_links,
            rewind_id,
            omitted,
            ..RewindReply::changes(o, workspace)
        }
    }

    /// What any of the three changed, from the outcome of its plan and apply.
    pub(super) fn changes(o: Outcome, workspace: &Path) -> RewindReply {
        RewindReply {
            can_rewind: o.can_rewind,
            error: o.error,
            files_changed: absolute(workspace, o.files_changed),
            insertions: o.insertions,
            deletions: o.deletions,
            conflicts: absolute(workspace, o.conflicts),
            conflicts_by: o.conflicts_by,
            changed_meanwhile: absolute(workspace, o.changed_meanwhile),
            partially_restored: absolute(workspace, o.partially_restored),
            withheld: o
                .withheld
                .into_iter()
                .map(|w| Withheld {
                    path: abs(workspace, &w.path),
                    ..w
                })
                .collect(),
            attribute_changes: o
                .attr_changes
                .into_iter()
                .map(|c| AttrChange {
                    path: abs(workspace, &c.path),
                    ..c
                })
                .collect(),
            ..RewindReply::default()
        }
    }
}

/// One workspace-relative path (its wire form) as the SDK answers paths: absolute.
fn abs(workspace: &Path, rel: &str) -> String {
    crate::wire_path::encode_under(workspace, &crate::wire_path::decode(rel))
}

/// Workspace-relative paths as the SDK answers them: absolute, under the workspace (which, with
/// the mount in place, is the project's own path).
pub(super) fn absolute(workspace: &Path, rel: Vec<String>) -> Vec<String> {
    rel.into_iter().map(|p| abs(workspace, &p)).collect()
}

impl Command for RewindFiles {
    const SUBTYPE: &'static str = "rewind_files";
    type Reply = RewindReply;
}

impl RewindFiles {
    pub(super) fn run(self, d: &Daemon) -> Result<RewindReply, ControlError> {
        Ok(RewindReply::of(
            d.rewinder.rewind(&self)?,
            self.dry_run,
            &d.workspace,
            &self.user_message_id,
        ))
    }
}
