//! The control socket: a Unix socket server (mini-redis shape) and one handler per request.
//!
//! A `Listener` accepts connections up to a cap (beyond it, a connection gets an error line
//! and is closed); each connection gets a `Handler` that reads
//! one line at a time (at most [`protocol::MAX_LINE`] bytes), answers it, and stops when the
//! peer hangs up or the daemon shuts down. Peers whose uid is neither ours nor root are
//! refused. Requests run on the blocking pool (they touch SQLite and the disk).

pub mod client;
pub mod cmd;
pub mod error;
pub mod protocol;

use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, broadcast};

use self::cmd::RewindReply;
use crate::wspath::Node;

/// Most connections served at once; one more is told so and closed.
pub const MAX_CONNECTIONS: usize = 256;

/// What the handlers work with.
pub struct Daemon {
    /// Rewinds, undo and redo, gc.
    pub rewinder: Arc<crate::rewind::Rewinder>,
    /// Looks at the past (show, ls, diff A B, fork) and carries history (export, import).
    pub views: Arc<crate::rewind::Views>,
    /// The session and turn bookkeeping (boundaries, tool spans, agents, checkpoints, log).
    pub turns: Arc<crate::turns::Turns>,
    /// The workspace (absolute path of the mount).
    pub workspace: PathBuf,
    /// The store directory.
    pub store_dir: PathBuf,
    /// The configured retention limits (`gc` requests default to them).
    pub retention: crate::retention::Retention,
    /// Which signed history imports accept (`store/bundle/sign.rs`), read at each import.
    pub trust_file: Option<PathBuf>,
    /// Whether the mount's reads pass through the kernel (`Off` for a daemon without a mount).
    pub passthrough: Arc<crate::fs::PassthroughState>,
    /// The directories this daemon wrote forks into since it started (`diff` with a fork reads
    /// only a fork; after a restart, one whose store records this workspace as its origin).
    pub forks: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
}

impl Daemon {
    /// `p` (absolute, or relative to the workspace) as a validated workspace-relative path;
    /// `None` if it does not name anything inside the workspace.
    pub fn rel_to_workspace(&self, p: &str) -> Option<Node> {
        // A path's wire form: a name that is not UTF-8 comes quoted (`wire_path.rs`).
        let bytes = crate::wire_path::decode(p);
        let path = Path::new(std::ffi::OsStr::from_bytes(&bytes));
        let rel = if path.is_absolute() {
            path.strip_prefix(&self.workspace).ok()?.to_path_buf()
        } else {
            path.to_path_buf()
        };
        let rel = crate::sys::validate_rel(&rel).ok()?;
        Node::parse(rel.into_os_string().into_vec()).ok()
    }
}

/// Serves `listener` until `shutdown` fires.
pub async fn serve(
    listener: UnixListener,
    daemon: Arc<Daemon>,
    mut shutdown: broadcast::Receiver<()>,
) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let my_uid = crate::sys::geteuid();
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("control socket accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.recv() => return,
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            // Over the cap: say so and hang up, rather than leave the peer waiting unanswered.
            tokio::spawn(async move {
                let mut stream = stream;
                let msg = protocol::error(
                    "",
                    &format!("too many control connections (limit {MAX_CONNECTIONS}); try again"),
                );
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(1),
                    write_line(&mut stream, &msg),
                )
                .await;
            });
            continue;
        };
        let daemon = daemon.clone();
        let shutdown = shutdown.resubscribe();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = handle_connection(stream, daemon, shutdown, my_uid).await {
                tracing::debug!("control connection: {e}");
            }
        });
    }
}

/// Replies larger than this hand the heap they took back once sent (a `log` of 100k entries
/// left the daemon at 150 MB: glibc keeps freed memory for the next allocation).
const TRIM_AFTER_REPLY_BYTES: usize = 4 << 20;

/// Writes `v` as one line; returns its length.
async fn write_line(
    stream: &mut (impl AsyncWriteExt + Unpin),
    v: &impl Serialize,
) -> std::io::Result<usize> {
    let mut s = serde_json::to_vec(v)?;
    s.push(b'\n');
    stream.write_all(&s).await?;
    Ok(s.len())
}

async fn handle_connection(
    stream: UnixStream,
    daemon: Arc<Daemon>,
    mut shutdown: broadcast::Receiver<()>,
    my_uid: u32,
) -> std::io::Result<()> {
    let peer_uid = crate::sys::peer_uid(stream.as_fd())?;
    let (rd, mut wr) = stream.into_split();
    if peer_uid != my_uid && peer_uid != 0 {
        write_line(
            &mut wr,
            &protocol::error(
                "",
                &format!("permission denied: uid {peer_uid} may not control this daemon"),
            ),
        )
        .await?;
        return Ok(());
    }
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut rd).take(protocol::MAX_LINE as u64 + 1);
        let n = tokio::select! {
            r = limited.read_until(b'\n', &mut line) => r?,
            _ = shutdown.recv() => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        if line.len() > protocol::MAX_LINE {
            write_line(
                &mut wr,
                &protocol::error(
                    "",
                    &format!(
                        "request line longer than {} bytes; closing",
                        protocol::MAX_LINE
                    ),
                ),
            )
            .await?;
            return Ok(());
        }
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let reply = match protocol::parse(&line) {
            Err((id, e)) => protocol::error(&id, &e),
            Ok((id, req)) => {
                let d = daemon.clone();
                let dry = req.is_dry_run();
                match tokio::task::spawn_blocking(move || req.apply(&d)).await {
                    Ok(Ok(v)) => protocol::success(&id, v),
                    // The SDK's rule: a dry run always answers `success`.
                    Ok(Err(e)) if dry => protocol::success(
                        &id,
                        serde_json::to_value(RewindReply::refused(e.to_string()))
                            .unwrap_or_default(),
                    ),
                    Ok(Err(e)) => protocol::error_with(&id, &e.to_string(), e.errno()),
                    Err(e) => protocol::error(&id, &format!("internal error: {e}")),
                }
            }
        };
        let sent = write_line(&mut wr, &reply).await?;
        if sent > TRIM_AFTER_REPLY_BYTES {
            drop(reply);
            // Milliseconds on a large heap: not on the runtime's threads.
            tokio::task::spawn_blocking(crate::sys::trim_heap);
        }
    }
}
