//! The CLI edge: parse, run, print errors with their causes, set the exit code.

use std::process::ExitCode;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use rewindfs::cli::{Args, Command, MountConfig, Retention, SocketArgs};
use rewindfs::control::client::{Client, find_socket};
use rewindfs::daemon;
use serde_json::{Value, json};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REWINDFS_LOG")
                .unwrap_or_else(|_| "info,fuser=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rewindfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    if !matches!(
        args.command,
        Command::Mount { .. } | Command::Exec { .. } | Command::Hook { .. } | Command::Agent { .. }
    ) {
        rewindfs::sys::default_sigpipe();
    }
    match args.command {
        Command::Mount {
            dir,
            foreground,
            store,
            threads,
            ttl,
            io_uring,
            agent_pid,
            detached,
            sync,
            max_store_bytes,
            max_age,
            range_capture_min,
        } => {
            let cfg = MountConfig::new(
                dir, store, foreground, detached, threads, ttl, agent_pid, sync,
            )?
            .with_retention(Retention::parse(&max_store_bytes, &max_age)?)
            .with_range_capture_min(&range_capture_min)?
            .with_io_uring(io_uring);
            if cfg.foreground {
                daemon::run(cfg)?;
            } else {
                daemon::spawn_detached(&cfg)?;
            }
        }
        Command::Umount { dir, lazy } => daemon::umount(&dir, lazy)?,
        Command::Checkpoint {
            uuid,
            session,
            socket,
        } => {
            let r = connect(&socket)?.request(
                "begin_message",
                json!({"session_id": session, "user_message_id": uuid}),
            )?;
            println!(
                "checkpoint {} began (seq {})",
                r["checkpoint"].as_str().unwrap_or(""),
                r["seq"]
            );
        }
        Command::List {
            session,
            json: as_json,
            socket,
        } => {
            let r =
                connect(&socket)?.request("list_checkpoints", json!({"session_id": session}))?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{:<36}  {:<8}  {:<24}  {:>6}  {:>10}  SESSION",
                    "UUID", "KIND", "BEGAN", "PATHS", "BYTES"
                );
                for c in r["checkpoints"].as_array().into_iter().flatten() {
                    println!(
                        "{:<36}  {:<8}  {:<24}  {:>6}  {:>10}  {}",
                        c["uuid"].as_str().unwrap_or(""),
                        c["kind"].as_str().unwrap_or(""),
                        c["beganAt"].as_str().unwrap_or(""),
                        c["pathsChanged"].to_string(),
                        c["bytesCaptured"].to_string(),
                        c["sessionId"].as_str().unwrap_or("-")
                    );
                }
            }
        }
        Command::Log {
            path,
            limit,
            json: as_json,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let path = match path {
                Some(p) => Some(workspace_rel(&mut client, &p)?),
                None => None,
            };
            let r = client.request("log", json!({"path": path, "limit": limit}))?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                for e in r["entries"].as_array().into_iter().flatten() {
                    let p2 = e["path2"]
                        .as_str()
                        .map(|p| format!(" -> {p}"))
                        .unwrap_or_default();
                    println!(
                        "{}  {:<8} {:<9} {}{}  [{} pid {} {}]  {}",
                        e["time"].as_str().unwrap_or(""),
                        e["actor"].as_str().unwrap_or(""),
                        e["op"].as_str().unwrap_or(""),
                        e["path"].as_str().unwrap_or(""),
                        p2,
                        e["process"].as_str().unwrap_or(""),
                        e["pid"],
                        e["toolUseId"].as_str().unwrap_or(""),
                        e["checkpoint"].as_str().unwrap_or("")
                    );
                }
            }
        }
        Command::Status {
            json: as_json,
            socket,
        } => {
            let r = connect(&socket)?.request("status", json!({}))?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                for k in [
                    "workspace",
                    "store",
                    "pid",
                    "sessionId",
                    "currentCheckpoint",
                    "checkpoints",
                    "checkpointsDropped",
                    "captures",
                    "bytesCaptured",
                    "agentPids",
                    "storeBytes",
                ] {
                    let v = &r[k];
                    println!(
                        "{k:<18} {}",
                        v.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string())
                    );
                }
            }
        }
        Command::Rewind {
            uuid,
            dry_run,
            scope,
            force,
            json: as_json,
            paths,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let paths = paths
                .iter()
                .map(|p| workspace_rel_glob(&mut client, p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let r = client.request(
                "rewind_files",
                json!({"user_message_id": uuid, "dry_run": dry_run, "scope": scope, "force": force, "paths": paths}),
            )?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_outcome(&r, dry_run);
            }
            if r["canRewind"] == json!(false) {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Undo {
            json: as_json,
            socket,
        } => {
            let r = connect(&socket)?.request("undo_rewind", json!({}))?;
            if as_json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("undid rewind {}", r["undone"].as_str().unwrap_or(""));
                print_outcome(&r, false);
            }
        }
        Command::Diff {
            uuid,
            path,
            scope,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let path = match path {
                Some(p) => Some(workspace_rel_glob(&mut client, &p)?),
                None => None,
            };
            let r = client.request(
                "diff",
                json!({"user_message_id": uuid, "path": path, "scope": scope}),
            )?;
            print!("{}", r["diff"].as_str().unwrap_or(""));
        }
        Command::Gc {
            store,
            max_store_bytes,
            max_age,
            json: as_json,
            socket,
        } => {
            let d = Retention::default();
            let retention = Retention {
                max_bytes: match &max_store_bytes {
                    Some(b) => rewindfs::cli::parse_size(b)?,
                    None => d.max_bytes,
                },
                max_age: match &max_age {
                    Some(a) => rewindfs::cli::parse_age(a)?,
                    None => d.max_age,
                },
            };
            let mut req = json!({});
            if max_store_bytes.is_some() {
                req["max_store_bytes"] = json!(retention.max_bytes.unwrap_or(0));
            }
            if max_age.is_some() {
                req["max_age_seconds"] = json!(retention.max_age.map_or(0, |a| a.as_secs()));
            }
            let r = match store {
                Some(store) => match daemon::gc_offline(&store, &retention.policy())? {
                    Some(report) => rewindfs::control::gc_json(&report, &retention.policy()),
                    None => {
                        Client::connect(&store.join(daemon::files::SOCKET))?.request("gc", req)?
                    }
                },
                None => connect(&socket)?.request("gc", req)?,
            };
            if as_json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let b = |k: &str| rewindfs::store::gc::human_bytes(r[k].as_u64().unwrap_or(0));
                println!(
                    "dropped {} checkpoint(s), {} capture(s), {} blob(s); freed {} ({} -> {})",
                    r["checkpointsDropped"],
                    r["capturesDeleted"],
                    r["blobsDeleted"],
                    b("bytesFreed"),
                    b("bytesBefore"),
                    b("bytesAfter")
                );
                if r["overBudget"] == json!(true) {
                    println!(
                        "still over the budget: the current checkpoint and live sessions' first captures are kept"
                    );
                }
            }
        }
        Command::Fsck { store } => {
            let store = match store {
                Some(s) => s,
                None => {
                    let cwd = std::env::current_dir()?;
                    daemon::store_of(&cwd).context("not inside a rewindfs mount; pass --store")?
                }
            };
            let (problems, blobs) = rewindfs::store::fsck(&store)?;
            if problems.is_empty() {
                println!("{}: ok ({blobs} blobs verified)", store.display());
            } else {
                for p in &problems {
                    println!("{}: {p}", store.display());
                }
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Hook { wait_ms, socket } => {
            // Whatever happens, the agent's tool runs: problems are warnings on stderr.
            let mut input = String::new();
            if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input) {
                eprintln!("rewindfs hook: reading stdin: {e}");
                return Ok(ExitCode::SUCCESS);
            }
            let v: Value = match serde_json::from_str(&input) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("rewindfs hook: the hook input is not JSON ({e}); ignoring");
                    return Ok(ExitCode::SUCCESS);
                }
            };
            if let Some(cwd) = v["cwd"].as_str() {
                let _ = std::env::set_current_dir(cwd);
            }
            let r = find_socket(socket.socket.as_deref())
                .and_then(|p| Client::connect(&p))
                .and_then(|mut c| {
                    rewindfs::hook::handle(&mut c, &v, std::time::Duration::from_millis(wait_ms))
                });
            if let Err(e) = r {
                eprintln!(
                    "rewindfs hook: warning: {e}; the change will not be rewindable by message"
                );
            }
        }
        Command::Exec {
            scope,
            dir,
            store,
            command,
        } => return exec(dir, store, scope, command),
        Command::Agent { pid, socket } => {
            connect(&socket)?.request("register_agent", json!({"pid": pid}))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `rewindfs exec`: the child waits on a FIFO until its pid is registered as the agent, then
/// execs the command (same pid), so not one of its writes is misclassified.
fn exec(
    dir: PathBuf,
    store: Option<PathBuf>,
    scope: Option<String>,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let cfg = MountConfig::new(dir, store, false, false, 2, 1.0, None, false)?;
    daemon::spawn_detached(&cfg)?;
    let sock = cfg.store.join(daemon::files::SOCKET);
    let gate = cfg.store.join(format!("exec-gate.{}", std::process::id()));
    let _ = std::fs::remove_file(&gate);
    let run = || -> anyhow::Result<std::process::ExitStatus> {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &gate,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .with_context(|| format!("creating {}", gate.display()))?;
        // Re-enter the current directory: a cwd inside DIR from before the mount still points
        // at the directory underneath it.
        let cwd = std::env::current_dir()?;
        let mut child = std::process::Command::new("sh")
            .current_dir(&cwd)
            .arg("-c")
            .arg("read _ < \"$REWINDFS_EXEC_GATE\" && unset REWINDFS_EXEC_GATE && exec \"$@\"")
            .arg("rewindfs-exec")
            .args(&command)
            .env("REWINDFS_SOCKET", &sock)
            .env("REWINDFS_EXEC_GATE", &gate)
            .envs(scope.iter().map(|s| ("REWINDFS_SCOPE", s.as_str())))
            .spawn()
            .with_context(|| format!("running {}", command[0]))?;
        Client::connect(&sock)?.request("register_agent", json!({"pid": child.id()}))?;
        std::fs::write(&gate, b"go\n")?;
        Ok(child.wait()?)
    };
    let status = run();
    let _ = std::fs::remove_file(&gate);
    let um = daemon::umount(&cfg.dir, false);
    let status = status?;
    um?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(s)) => ExitCode::from(128u8.wrapping_add(s as u8)),
        _ => ExitCode::FAILURE,
    })
}

fn connect(s: &SocketArgs) -> anyhow::Result<Client> {
    let path = find_socket(s.socket.as_deref())?;
    Ok(Client::connect(&path)?)
}

/// A path given on the command line, made relative to the workspace root.
fn workspace_rel(client: &mut Client, p: &Path) -> anyhow::Result<String> {
    let status = client.request("status", json!({}))?;
    let ws = PathBuf::from(
        status["workspace"]
            .as_str()
            .context("status without workspace")?,
    );
    let abs = std::path::absolute(p)?;
    let mut norm = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                norm.pop();
            }
            std::path::Component::CurDir => {}
            c => norm.push(c),
        }
    }
    let rel = norm.strip_prefix(&ws).with_context(|| {
        format!(
            "{} is not inside the workspace {}",
            p.display(),
            ws.display()
        )
    })?;
    Ok(rel.to_string_lossy().into_owned())
}

/// Like `workspace_rel`, but globs are taken as workspace-relative as they are.
fn workspace_rel_glob(client: &mut Client, p: &str) -> anyhow::Result<String> {
    if p.contains(['*', '?', '[', '{']) {
        Ok(p.trim_start_matches("./").to_string())
    } else {
        workspace_rel(client, Path::new(p))
    }
}

fn print_outcome(r: &Value, dry_run: bool) {
    let files = r["filesChanged"].as_array().cloned().unwrap_or_default();
    let conflicts = r["conflicts"].as_array().is_some_and(|c| !c.is_empty());
    if let Some(e) = r["error"].as_str() {
        eprintln!("rewindfs: cannot rewind: {e}");
        if files.is_empty() && !conflicts {
            return; // nothing to show but the reason (e.g. a checkpoint gc removed)
        }
    }
    // A rewind refused changed nothing: what it lists is what it would have changed.
    let verb = if dry_run || r["canRewind"] == json!(false) {
        "would change"
    } else {
        "changed"
    };
    println!(
        "{verb} {} file(s), +{} -{} lines",
        files.len(),
        r["insertions"],
        r["deletions"]
    );
    for f in &files {
        println!("  {}", f.as_str().unwrap_or(""));
    }
    if let Some(c) = r["conflicts"].as_array().filter(|c| !c.is_empty()) {
        println!("conflicts (also changed by other actors):");
        for f in c {
            println!("  {}", f.as_str().unwrap_or(""));
        }
    }
    if r["skippedLinks"].as_u64().unwrap_or(0) > 0 {
        println!("skipped {} symlink(s)", r["skippedLinks"]);
    }
}
