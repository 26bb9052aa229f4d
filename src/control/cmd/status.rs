//! `status`: the daemon, its store, its current checkpoint, and the processes left underneath
//! its mount.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Command;
use crate::control::Daemon;
use crate::control::error::ControlError;
use crate::host::procs::{Holds, Underneath};

pub use crate::fs::Passthrough;

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
    /// Processes that still see the directory underneath the mount (they were inside it
    /// before the mount): what they change is not recorded. Computed at each request.
    #[serde(default)]
    pub unprotected_processes: Vec<UnprotectedProcess>,
    /// The sessions at work in the workspace since the mount, each with its current
    /// checkpoint and agents.
    #[serde(default)]
    pub sessions: Vec<SessionInfo>,
    /// Bytes free on the store's filesystem (absent: unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_free_bytes: Option<u64>,
    /// The store is full: a change was refused since the mount because its pre-image could not
    /// be saved, and there is still less than 1 MiB free (writes to the workspace fail with
    /// `ENOSPC` until space is freed).
    #[serde(default)]
    pub store_full: bool,
    /// Changes refused since the mount because the store was full, and when the last one was.
    #[serde(default)]
    pub writes_refused_store_full: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refused_at: Option<String>,
    /// Rewinds a crash or failure left unfinished that the mount could not finish, each with
    /// why: `rewindfs undo` puts back what of one was applied; the next mount tries again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfinished_rewinds: Vec<UnfinishedRewind>,
    /// Whether the kernel serves reads from the workspace's files itself (`--passthrough`):
    /// `off` (not asked for), `on`, or `unavailable` (asked for; the daemon's log says why not).
    #[serde(default)]
    pub passthrough: Passthrough,
}

/// A rewind left unfinished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnfinishedRewind {
    pub id: String,
    pub error: String,
}

/// A session and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub current_checkpoint: String,
    pub agent_pids: Vec<u32>,
    /// False once its agents have exited and it has begun no message for 30 minutes (its
    /// checkpoints stay rewindable).
    pub live: bool,
}

/// A process whose cwd, root or an open file is on the directory underneath the mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnprotectedProcess {
    pub pid: u32,
    /// Its command line.
    pub command: String,
    /// What it holds there: `cwd`, `root` or `file`.
    pub holds: Holds,
    /// That directory or file.
    pub path: PathBuf,
}

impl From<Underneath> for UnprotectedProcess {
    fn from(u: Underneath) -> Self {
        UnprotectedProcess {
            pid: u.pid,
            command: u.command,
            holds: u.holds,
            path: u.path,
        }
    }
}

impl UnprotectedProcess {
    /// One line for people: `pid 1234 (bash): current directory /w/src`.
    pub fn describe(&self) -> String {
        let what = match self.holds {
            Holds::Cwd => "current directory",
            Holds::Root => "root directory",
            Holds::File => "open file",
        };
        format!(
            "pid {} ({}): {what} {}",
            self.pid,
            self.command,
            self.path.display()
        )
    }
}

/// The warning about `list` for people: who, why it matters, and what to do.
pub fn unprotected_warning(workspace: &Path, list: &[UnprotectedProcess]) -> String {
    let lines: Vec<String> = list.iter().map(|p| format!("  {}", p.describe())).collect();
    format!(
        "{} process(es) entered {ws} before it was mounted and still see the directory \
         underneath the mount: what they change there is not recorded and cannot be rewound:\n\
         {}\n\
         In a shell, cd out and back in (`cd \"$PWD\"` is enough); restart other programs. \
         `rewindfs status` lists them while they remain.",
        list.len(),
        lines.join("\n"),
        ws = workspace.display(),
    )
}

/// The processes left underneath the mount over `workspace` (none if it is not mounted), the
/// daemon itself and `skip` aside.
pub fn unprotected_processes(workspace: &Path, skip: &[u32]) -> Vec<UnprotectedProcess> {
    let Ok(Some(m)) = crate::host::mounts::mount_at(workspace) else {
        return Vec::new();
    };
    if m.fstype != crate::host::mounts::FSTYPE {
        return Vec::new();
    }
    let mut skip = skip.to_vec();
    skip.push(std::process::id());
    crate::host::procs::underneath(workspace, m.dev, &skip)
        .into_iter()
        .map(UnprotectedProcess::from)
        .collect()
}

impl Command for Status {
    const SUBTYPE: &'static str = "status";
    type Reply = StatusReply;
}

impl Status {
    pub(super) fn apply(self, d: &Daemon) -> Result<StatusReply, ControlError> {
        let (e, t) = (&d.rewinder, &d.turns);
        let current = t.current();
        // A full store may not even take the journal's pending rows: status still answers, and
        // says so, rather than fail when it is needed most.
        let counts = t.counts().unwrap_or_else(|err| {
            tracing::warn!("status: the store's counts: {err}");
            Default::default()
        });
        let (free, refused, last) = e.store_room();
        Ok(StatusReply {
            store_free_bytes: free,
            store_full: refused > 0 && free.is_some_and(|f| f < 1 << 20),
            writes_refused_store_full: refused,
            last_refused_at: (last > 0).then(|| crate::store::rfc3339(last)),
            unfinished_rewinds: e
                .unfinished()
                .into_iter()
                .map(|(id, error)| UnfinishedRewind { id, error })
                .collect(),
            passthrough: d.passthrough.get(),
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
            unprotected_processes: unprotected_processes(&d.workspace, &[]),
            sessions: t
                .live_sessions()
                .into_iter()
                .map(|s| SessionInfo {
                    session_id: s.session_id,
                    current_checkpoint: s.current_checkpoint,
                    agent_pids: s.agent_pids,
                    live: s.live,
                })
                .collect(),
        })
    }
}
