//! `log`: the change log, newest `limit` entries (or a page after a cursor), oldest first
//! unless asked newest first, with a file written beside and renamed over its target shown as
//! the one change it is.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::store::{Actor, LogQuery, Op};

/// The change log of the workspace, or of one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log {
    /// Only this path (absolute or workspace-relative), a rename's other name, and paths
    /// beneath it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Only changes made since this checkpoint began (its message uuid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only changes by this session's actors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// How many entries at most (default 1000).
    #[serde(default = "default_limit", deserialize_with = "positive")]
    pub limit: i64,
    /// A cursor for reading a long log in pages: the oldest `limit` entries after this `seq`
    /// (without it: the newest `limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// Newest first (default: oldest first).
    #[serde(default)]
    pub newest_first: bool,
    /// Every entry as recorded: a file written beside its target and renamed over it (a tool's
    /// `f.tmp.<pid>.<hex>`, `sed -i`'s temporary) is otherwise shown as one change to the
    /// target.
    #[serde(default)]
    pub raw: bool,
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
    pub op: Op,
    pub path: String,
    pub path2: Option<String>,
    pub actor: Actor,
    pub pid: u32,
    pub process: String,
    /// The checkpoint's uuid (`None`: dropped by gc).
    pub checkpoint: Option<String>,
    pub tool_use_id: Option<String>,
    /// The session of the actor that made it (absent: an external actor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The temporary file the change was written to before it was renamed over `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// The entries, and whether there are more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogReply {
    pub entries: Vec<LogLine>,
    /// Entries the filter (path, since) matches in all, before `limit` and the cursor.
    #[serde(default)]
    pub total: i64,
    /// More entries match than were returned: older ones (without a cursor), or newer ones
    /// after this page (with one: read on with `after` = `nextAfter`).
    #[serde(default)]
    pub truncated: bool,
    /// With a cursor: the `after` of the next page, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<i64>,
}

impl Command for Log {
    const SUBTYPE: &'static str = "log";
    type Reply = LogReply;
}

impl Log {
    /// The whole log, oldest first, as people read it (a write-then-rename is one change).
    pub fn whole() -> Log {
        Log {
            path: None,
            since: None,
            session_id: None,
            limit: i64::MAX,
            after: None,
            newest_first: false,
            raw: false,
        }
    }

    pub(super) fn apply(self, d: &Daemon) -> Result<LogReply, ControlError> {
        let e = &d.turns;
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
        let since = match &self.since {
            Some(uuid) => Some(
                e.checkpoint_seq(uuid)?
                    .ok_or_else(|| ControlError::NoSuchCheckpoint(uuid.clone()))?,
            ),
            None => None,
        };
        let (entries, total) = e.log(
            rel.as_ref(),
            LogQuery {
                path: None,
                since_checkpoint: since,
                after: self.after,
                limit: self.limit,
                session: self.session_id.as_deref(),
            },
        )?;
        let all = e.store().checkpoint_rows()?;
        Ok(LogReply::of(entries, total, &all, &self))
    }
}

impl LogReply {
    /// The reply to `req` of the store's log `entries` (`total` of them matching in all),
    /// given every checkpoint kept: what the daemon answers, and what `rewindfs ui` reads from a
    /// store no daemon serves.
    pub fn of(
        entries: Vec<crate::store::LogEntry>,
        total: i64,
        all: &[crate::store::Checkpoint],
        req: &Log,
    ) -> LogReply {
        let returned = entries.len() as i64;
        let last_seq = entries.last().map(|x| x.seq);
        let truncated = match req.after {
            None => returned < total,
            Some(_) => returned == req.limit && last_seq.is_some(),
        };
        let cps: HashMap<i64, String> = all.iter().map(|c| (c.seq, c.uuid.clone())).collect();
        // An entry of a session shows under that session's checkpoint at the time (captures go
        // to the checkpoint that began last, which may be another session's).
        let mut by_session: HashMap<&str, Vec<i64>> = HashMap::new();
        for c in all {
            if let Some(s) = c.session_id.as_deref() {
                by_session.entry(s).or_default().push(c.seq);
            }
        }
        let shown_checkpoint = |seq: i64, session: Option<&str>| {
            let own = session
                .and_then(|s| by_session.get(s))
                .and_then(|seqs| seqs.iter().rev().find(|s| **s <= seq).copied());
            cps.get(&own.unwrap_or(seq)).cloned()
        };
        let mut entries: Vec<LogLine> = entries
            .into_iter()
            .map(|x| LogLine {
                seq: x.seq,
                time: crate::store::rfc3339(x.at),
                op: x.op,
                path: crate::wire_path::encode(&x.path),
                path2: x.path2.map(|p| crate::wire_path::encode(&p)),
                actor: x.actor,
                pid: x.pid,
                process: x.process,
                checkpoint: shown_checkpoint(x.checkpoint, x.session.as_deref()),
                tool_use_id: x.tool_use_id,
                session: x.session,
                via: None,
            })
            .collect();
        if !req.raw {
            entries = collapse_temporaries(entries);
        }
        if req.newest_first {
            entries.reverse();
        }
        LogReply {
            entries,
            total,
            truncated,
            next_after: last_seq.filter(|_| truncated && req.after.is_some()),
        }
    }
}

/// Shows a file written beside its target and renamed over it as the one change it is: the
/// entries of a temporary file `T` created in the same directory as `X` — creation, writes,
/// mode and owner changes, all by one actor — and the rename `T -> X` become one `write` of
/// `X` `via` `T`. A tool's Write/Edit (`X.tmp.<pid>.<hex>`) and `sed -i` (`sedXXXXXX`) write
/// files this way; a temporary that was not renamed over anything stays as it is.
fn collapse_temporaries(entries: Vec<LogLine>) -> Vec<LogLine> {
    const CONTENT_OPS: &[Op] = &[
        Op::Write,
        Op::Truncate,
        Op::Chmod,
        Op::Chown,
        Op::Utimes,
        Op::Setxattr,
        Op::Fallocate,
    ];
    let parent = |p: &str| std::path::Path::new(p).parent().map(|d| d.to_path_buf());
    let mut drop = vec![false; entries.len()];
    let mut out_rename: Vec<Option<String>> = vec![None; entries.len()];
    for (i, e) in entries.iter().enumerate() {
        let (true, Some(x)) = (e.op == Op::Rename, e.path2.as_deref()) else {
            continue;
        };
        let t = e.path.as_str();
        if parent(t) != parent(x) {
            continue;
        }
        // The temporary's own entries before the rename, back to its creation.
        let mut mine = Vec::new();
        let mut created = false;
        for (k, prior) in entries[..i].iter().enumerate().rev() {
            if prior.path != t && prior.path2.as_deref() != Some(t) {
                continue;
            }
            if prior.path2.is_some() || prior.actor != e.actor || drop[k] {
                break;
            }
            if prior.op == Op::Create {
                mine.push(k);
                created = true;
                break;
            }
            if !CONTENT_OPS.contains(&prior.op) {
                break;
            }
            mine.push(k);
        }
        if created {
            for k in mine {
                drop[k] = true;
            }
            out_rename[i] = Some(t.to_string());
        }
    }
    entries
        .into_iter()
        .zip(drop)
        .zip(out_rename)
        .filter_map(|((mut e, dropped), via)| {
            if dropped {
                return None;
            }
            if let Some(t) = via {
                e.op = Op::Write;
                e.path = e.path2.take().unwrap_or_default();
                e.via = Some(t);
            }
            Some(e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: i64, op: &str, path: &str, path2: Option<&str>, actor: &str) -> LogLine {
        LogLine {
            seq,
            time: String::new(),
            op: Op::parse(op),
            path: path.into(),
            path2: path2.map(str::to_string),
            actor: Actor::parse(actor),
            pid: 1,
            process: "p".into(),
            checkpoint: None,
            tool_use_id: None,
            session: None,
            via: None,
        }
    }

    #[test]
    fn a_write_beside_and_rename_over_is_one_change_to_the_target() {
        let log = vec![
            entry(1, "create", "d/f.tmp.7.c1", None, "tool"),
            entry(2, "write", "d/f.tmp.7.c1", None, "tool"),
            entry(3, "chmod", "d/f.tmp.7.c1", None, "tool"),
            entry(4, "rename", "d/f.tmp.7.c1", Some("d/f"), "tool"),
            entry(5, "create", "d/sedAb12", None, "shell"),
            entry(6, "write", "d/sedAb12", None, "shell"),
            entry(7, "rename", "d/sedAb12", Some("d/g"), "shell"),
            // Not collapsed: renamed into another directory, and a rename with no creation.
            entry(8, "create", "a/t", None, "shell"),
            entry(9, "rename", "a/t", Some("b/t"), "shell"),
            entry(10, "rename", "x", Some("y"), "shell"),
        ];
        let got: Vec<(i64, String, String, Option<String>)> = collapse_temporaries(log)
            .into_iter()
            .map(|e| (e.seq, e.op.as_str().to_string(), e.path, e.via))
            .collect();
        assert_eq!(
            got,
            vec![
                (4, "write".into(), "d/f".into(), Some("d/f.tmp.7.c1".into())),
                (7, "write".into(), "d/g".into(), Some("d/sedAb12".into())),
                (8, "create".into(), "a/t".into(), None),
                (9, "rename".into(), "a/t".into(), None),
                (10, "rename".into(), "x".into(), None),
            ]
        );
    }
}
