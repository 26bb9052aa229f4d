//! The control socket: a Unix socket server (mini-redis shape) and one handler per request.
//!
//! A `Listener` accepts connections up to a cap (beyond it, a connection gets an error line
//! and is closed); each connection gets a `Handler` that reads
//! one line at a time (at most [`protocol::MAX_LINE`] bytes), answers it, and stops when the
//! peer hangs up or the daemon shuts down. Peers whose uid is neither ours nor root are
//! refused. Requests run on the blocking pool (they touch SQLite and the disk).

pub mod client;
pub mod protocol;

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, broadcast};

use self::protocol::{Phase, Request};
use crate::rewind::{Engine, Outcome, RewindError};
use crate::store::now_ms;

/// Most connections served at once; one more is told so and closed.
pub const MAX_CONNECTIONS: usize = 256;

/// What the handlers work with.
pub struct Daemon {
    pub engine: Arc<Engine>,
    /// The workspace (absolute path of the mount).
    pub workspace: PathBuf,
    /// The store directory.
    pub store_dir: PathBuf,
    /// The configured retention limits (`gc` requests default to them).
    pub retention: crate::store::gc::Policy,
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
    v: &Value,
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
    let (peer_uid, peer_pid) = {
        let cred = rustix::net::sockopt::socket_peercred(stream.as_fd())
            .map_err(|e| std::io::Error::from_raw_os_error(e.raw_os_error()))?;
        (
            cred.uid.as_raw(),
            rustix::process::Pid::as_raw(Some(cred.pid)) as u32,
        )
    };
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
                match tokio::task::spawn_blocking(move || handle(&d, req, peer_pid)).await {
                    Ok(Ok(v)) => protocol::success(&id, v),
                    Ok(Err(e)) if dry => protocol::success(
                        &id,
                        json!({"canRewind": false, "error": e, "filesChanged": [], "insertions": 0, "deletions": 0}),
                    ),
                    Ok(Err(e)) => protocol::error(&id, &e),
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

fn rel_to_workspace(daemon: &Daemon, p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    let rel = if path.is_absolute() {
        path.strip_prefix(&daemon.workspace).ok()?.to_path_buf()
    } else {
        path.to_path_buf()
    };
    crate::sys::validate_rel(&rel).ok()
}

fn outcome_json(o: &Outcome, dry: bool) -> Value {
    let mut v = json!({
        "canRewind": o.can_rewind,
        "filesChanged": o.files_changed,
        "insertions": o.insertions,
        "deletions": o.deletions,
        "conflicts": o.conflicts,
        "skippedLinks": o.skipped_links,
    });
    if let Some(e) = &o.error {
        v["error"] = json!(e);
    }
    if !dry {
        if let Some(id) = &o.rewind_id {
            v["rewindId"] = json!(id);
        }
    }
    v
}

/// Formats unix milliseconds as RFC 3339 UTC (`2026-11-22T14:03:51.123Z`).
pub fn rfc3339(ms: i64) -> String {
    // Civil-from-days (Howard Hinnant), to avoid a date crate for one format.
    let secs = ms.div_euclid(1000);
    let (days, sod) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        ms.rem_euclid(1000)
    )
}

/// The `gc` response payload.
pub fn gc_json(r: &crate::store::gc::Report, policy: &crate::store::gc::Policy) -> Value {
    json!({
        "checkpointsDropped": r.checkpoints_dropped,
        "capturesDeleted": r.captures_deleted,
        "blobsDeleted": r.blobs_deleted,
        "bytesFreed": r.bytes_freed,
        "bytesBefore": r.bytes_before,
        "bytesAfter": r.bytes_after,
        "overBudget": r.over_budget,
        "maxStoreBytes": policy.max_bytes,
        "maxAgeSeconds": policy.max_age_ms.map(|a| a / 1000),
    })
}

/// Runs one request. `Err` is the message of an `error` response.
pub fn handle(d: &Daemon, req: Request, _peer_pid: u32) -> Result<Value, String> {
    let e = &d.engine;
    match req {
        Request::BeginMessage {
            session_id,
            user_message_id,
        } => {
            let (seq, uuid, _) = e.recorder.current();
            if uuid == user_message_id {
                return Ok(json!({"checkpoint": uuid, "seq": seq}));
            }
            if e.store
                .checkpoint_began(&user_message_id)
                .map_err(|x| x.to_string())?
            {
                return Err(format!(
                    "checkpoint {user_message_id} already began; a message's checkpoint cannot begin twice"
                ));
            }
            // Data the kernel still holds (mmap pages) belongs to the previous checkpoint.
            e.kernel.flush();
            let seq = e
                .recorder
                .begin(&user_message_id, Some(&session_id), "message")
                .map_err(|x| x.to_string())?;
            Ok(json!({"checkpoint": user_message_id, "seq": seq}))
        }
        Request::ToolUse {
            phase,
            tool_name,
            tool_use_id,
            file_path,
        } => {
            let rel = file_path.as_deref().and_then(|p| rel_to_workspace(d, p));
            e.recorder
                .tool_span(phase == Phase::Pre, &tool_name, &tool_use_id, rel);
            Ok(json!({}))
        }
        Request::RegisterAgent { pid } => {
            if !crate::sys::process_alive(pid) {
                return Err(format!("no process with pid {pid}"));
            }
            e.recorder.register_agent(pid);
            Ok(json!({}))
        }
        Request::RewindFiles {
            user_message_id,
            dry_run,
            scope,
            force,
            paths,
            session_id,
        } => {
            let r = crate::rewind::Request {
                user_message_id,
                dry_run,
                scope,
                force,
                paths,
                session_id,
            };
            match e.rewind(&r) {
                Ok(o) => Ok(outcome_json(&o, dry_run)),
                Err(RewindError::NoCheckpoint) => Err(RewindError::NoCheckpoint.to_string()),
                Err(x) => Err(x.to_string()),
            }
        }
        Request::UndoRewind => {
            let o = e.undo().map_err(|x| x.to_string())?;
            Ok(
                json!({"canRewind": true, "filesChanged": o.files_changed, "insertions": o.insertions, "deletions": o.deletions, "undone": o.rewind_id}),
            )
        }
        Request::ListCheckpoints { session_id } => {
            let list = e
                .store
                .checkpoints(session_id.as_deref())
                .map_err(|x| x.to_string())?;
            let cps: Vec<Value> = list
                .iter()
                .map(|c| {
                    json!({
                        "uuid": c.checkpoint.uuid,
                        "sessionId": c.checkpoint.session_id,
                        "beganAt": rfc3339(c.checkpoint.began_at),
                        "kind": c.checkpoint.kind,
                        "pathsChanged": c.paths_changed,
                        "bytesCaptured": c.bytes_captured,
                    })
                })
                .collect();
            Ok(json!({"checkpoints": cps}))
        }
        Request::Diff {
            user_message_id,
            path,
            scope,
        } => {
            let (diff, files) = e
                .diff(&user_message_id, path.as_deref(), scope)
                .map_err(|x| x.to_string())?;
            Ok(json!({"diff": diff, "filesChanged": files}))
        }
        Request::Log { path, limit } => {
            e.recorder.flush_log();
            let rel = match &path {
                Some(p) => Some(
                    rel_to_workspace(d, p)
                        .ok_or_else(|| format!("{p}: not a path inside the workspace"))?,
                ),
                None => None,
            };
            let key = rel.as_ref().map(|r| crate::capture::path_key(r));
            let entries = e
                .store
                .log(key.as_deref(), limit)
                .map_err(|x| x.to_string())?;
            let cps: std::collections::HashMap<i64, String> = e
                .store
                .checkpoints(None)
                .map_err(|x| x.to_string())?
                .into_iter()
                .map(|c| (c.checkpoint.seq, c.checkpoint.uuid))
                .collect();
            let v: Vec<Value> = entries
                .iter()
                .map(|x| {
                    json!({
                        "seq": x.seq,
                        "time": rfc3339(x.at),
                        "op": x.op,
                        "path": String::from_utf8_lossy(&x.path),
                        "path2": x.path2.as_ref().map(|p| String::from_utf8_lossy(p).into_owned()),
                        "actor": x.actor,
                        "pid": x.pid,
                        "process": x.process,
                        "checkpoint": cps.get(&x.checkpoint),
                        "toolUseId": x.tool_use_id,
                    })
                })
                .collect();
            Ok(json!({"entries": v}))
        }
        Request::Gc {
            max_store_bytes,
            max_age_seconds,
        } => {
            let mut policy = d.retention;
            if let Some(b) = max_store_bytes {
                policy.max_bytes = Some(b).filter(|b| *b > 0);
            }
            if let Some(a) = max_age_seconds {
                policy.max_age_ms =
                    Some(a.saturating_mul(1000).min(i64::MAX as u64) as i64).filter(|a| *a > 0);
            }
            let r = e.gc(&policy, true).map_err(|x| x.to_string())?;
            Ok(gc_json(&r, &policy))
        }
        Request::Status => {
            let (seq, uuid, session) = e.recorder.current();
            let (checkpoints, dropped, captures, bytes) =
                e.store.counts().map_err(|x| x.to_string())?;
            Ok(json!({
                "workspace": d.workspace,
                "store": d.store_dir,
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "sessionId": session,
                "currentCheckpoint": uuid,
                "currentSeq": seq,
                "checkpoints": checkpoints,
                "checkpointsDropped": dropped,
                "captures": captures,
                "bytesCaptured": bytes,
                "agentPids": e.recorder.agents(),
                "storeBytes": e.store.size_bytes().map_err(|x| x.to_string())?,
                "time": rfc3339(now_ms()),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(1_795_356_231_123),
            "2026-11-22T14:03:51.123Z"
        );
    }
}
