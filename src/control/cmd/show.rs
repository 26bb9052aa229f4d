//! `show`: one path as it was when a checkpoint began, and a file's bytes.

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::rewind::{Entry, Want};
use crate::store::Kind;

/// Shows `path` as it was when `user_message_id` began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Show {
    #[serde(deserialize_with = "crate::store::message_id")]
    pub user_message_id: String,
    /// Absolute, or relative to the workspace (`.` or empty: the workspace itself).
    pub path: String,
    /// Return a file's bytes (default true); false: only what it was, with its hash.
    #[serde(default = "yes")]
    pub content: bool,
    /// The first byte returned.
    #[serde(default)]
    pub offset: u64,
    /// At most this many bytes (default: to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
}

fn yes() -> bool {
    true
}

/// What a path was; for a file, its bytes (base64 on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShowReply {
    /// Workspace-relative (`.` for the workspace itself).
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// A file's size in bytes.
    pub size: u64,
    /// A file's BLAKE3 hash (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// A symlink's target (lossy UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The path is as it is now (unchanged since the checkpoint, at the same name).
    pub unchanged: bool,
    /// Where `content` starts in the file.
    pub offset: u64,
    /// The bytes asked for (base64 on the wire).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::store::base64::option"
    )]
    pub content: Option<Vec<u8>>,
}

impl Command for Show {
    const SUBTYPE: &'static str = "show";
    type Reply = ShowReply;
}

/// `path` as the replies name it (`.` for the workspace itself).
pub(super) fn shown(path: &[u8]) -> String {
    if path.is_empty() {
        ".".into()
    } else {
        crate::wire_path::encode(path)
    }
}

impl ShowReply {
    /// The reply's description of `e` (no hash, no content).
    pub(super) fn of(e: &Entry) -> ShowReply {
        ShowReply {
            path: shown(&e.path),
            kind: e.kind,
            mode: e.mode & 0o7777,
            uid: e.uid,
            gid: e.gid,
            size: if e.kind == Kind::File { e.size } else { 0 },
            hash: e.known_hash().map(str::to_string),
            target: e.target.as_deref().map(crate::wire_path::encode),
            unchanged: e.unchanged(),
            offset: 0,
            content: None,
        }
    }
}

impl Show {
    pub(super) fn apply(self, d: &Daemon) -> Result<ShowReply, ControlError> {
        let rel = d
            .rel_to_workspace(&self.path)
            .ok_or_else(|| ControlError::OutsideWorkspace {
                path: self.path.clone(),
                workspace: d.workspace.clone(),
            })?;
        let want = if self.content {
            Want::Bytes {
                offset: self.offset,
                length: self.length,
            }
        } else {
            Want::Meta
        };
        let s = d.views.show(&self.user_message_id, &rel, want)?;
        let mut r = ShowReply::of(&s.entry);
        r.path = shown(rel.as_bytes());
        r.hash = s.hash;
        if s.content.is_some() {
            r.offset = self.offset;
        }
        r.content = s.content;
        Ok(r)
    }
}
