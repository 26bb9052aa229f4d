//! `diff`: a unified diff, current → the state at a checkpoint's start; or, with a second
//! checkpoint, from the state at the first one's start to the state at the second one's.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::{DiffOut, FileStat, Scope};

/// The diff of what a rewind to `user_message_id` would change, in `scope` (default `all`);
/// with `to_message_id`, the diff from the tree when `user_message_id` began to the tree when
/// `to_message_id` began (scope `all` only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::store::optional_message_id"
    )]
    pub to_message_id: Option<String>,
    /// A fork of `user_message_id` (absolute): the diff goes from the tree when that
    /// checkpoint began to the fork's tree as it is now (scope `all` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default = "all_scope")]
    pub scope: Scope,
    /// If given, the checkpoint must belong to this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

fn all_scope() -> Scope {
    Scope::All
}

/// Lines one path's diff adds and removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffStat {
    /// Absolute, under the workspace (as `filesChanged`).
    pub path: String,
    pub insertions: u64,
    pub deletions: u64,
    /// Content that is not text (counted as no lines).
    pub binary: bool,
}

/// The diff text and the files it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReply {
    pub diff: String,
    pub files_changed: Vec<String>,
    /// Per path, in the order of the diff.
    #[serde(default)]
    pub stats: Vec<DiffStat>,
}

impl DiffReply {
    /// The reply for a computed diff: its paths absolute, under `workspace` (as a rewind's).
    pub fn of(workspace: &Path, d: DiffOut) -> DiffReply {
        DiffReply {
            diff: d.text,
            files_changed: super::rewind_files::absolute(workspace, d.files_changed),
            stats: d
                .stats
                .into_iter()
                .map(|s| DiffStat::of(workspace, s))
                .collect(),
        }
    }
}

impl DiffStat {
    fn of(workspace: &Path, s: FileStat) -> DiffStat {
        DiffStat {
            path: crate::wire_path::encode_under(workspace, &crate::wire_path::decode(&s.path)),
            insertions: s.insertions,
            deletions: s.deletions,
            binary: s.binary,
        }
    }
}

impl Command for Diff {
    const SUBTYPE: &'static str = "diff";
    type Reply = DiffReply;
}

/// `dir` is a fork of this workspace: this daemon wrote it, or its store (the one its mount
/// uses, else its default one) begins with a `fork` origin naming this workspace. A diff reads
/// every file of `dir` with the daemon's rights, so it reads only what this daemon wrote.
fn is_fork_of(d: &Daemon, dir: &Path) -> Result<(), ControlError> {
    if crate::locks::Locked::locked(&d.forks).contains(dir) {
        return Ok(());
    }
    let store = match crate::host::mounts::mount_at(dir) {
        Ok(Some(m)) if m.fstype == crate::host::mounts::FSTYPE => Some(m.source),
        _ => crate::config::default_store(dir).ok(),
    };
    let origin = store.and_then(|s| crate::store::first_origin(&s).ok().flatten());
    match origin {
        Some(o)
            if o.kind == crate::store::OriginKind::Fork
                && Path::new(&o.workspace) == d.workspace =>
        {
            Ok(())
        }
        _ => Err(ControlError::Invalid(format!(
            "diff: {} is not a fork of {} made by `rewindfs fork` (its store records no such \
             origin; a fork made with its own --store must be mounted for this)",
            dir.display(),
            d.workspace.display()
        ))),
    }
}

impl Diff {
    pub(super) fn apply(self, d: &Daemon) -> Result<DiffReply, ControlError> {
        if self.fork_dir.is_some() && (self.to_message_id.is_some() || self.scope != Scope::All) {
            return Err(ControlError::Invalid(
                "a diff with a fork compares the checkpoint's tree with the fork's: give no to_message_id, and scope \"all\"".into(),
            ));
        }
        if let Some(dir) = &self.fork_dir {
            let dir = super::fork::destination(d, dir)?;
            is_fork_of(d, &dir)?;
            // What differs is the fork's: its paths are under the fork.
            return Ok(DiffReply::of(
                &dir,
                d.views
                    .diff_dir(&self.user_message_id, &dir, self.path.as_deref())?,
            ));
        }
        let out = match &self.to_message_id {
            None => d.rewinder.diff(
                &self.user_message_id,
                self.path.as_deref(),
                self.scope,
                self.session_id.as_deref(),
            )?,
            Some(_) if self.scope != Scope::All => {
                return Err(ControlError::Invalid(
                    "a diff between two checkpoints compares whole trees: scope must be \"all\""
                        .into(),
                ));
            }
            Some(to) => d
                .views
                .diff_between(&self.user_message_id, to, self.path.as_deref())?,
        };
        Ok(DiffReply::of(&d.workspace, out))
    }
}
