//! The CLI edge: parse, run one command, print what it did (or the error with its causes),
//! set the exit code. Every socket command sends a typed request and prints its typed reply.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use rewindfs::cli::{Args, Command, SocketArgs};
use rewindfs::config::{MountConfig, Retention, parse_age, parse_size};
use rewindfs::control::client::{Client, find_socket};
use rewindfs::control::cmd::{
    BeginMessage, CheckpointList, Diff, DiffReply, Export, Fork, Gc, GcReply, Import, ImportReply,
    ListCheckpoints, Log, LogReply, Ls, LsReply, RedoRewind, RegisterAgent, RewindFiles,
    RewindInfo, RewindReply, Show, StackReply, Status, StatusReply, UndoRewind,
    unprotected_warning,
};
use rewindfs::daemon;
use rewindfs::rewind::Scope;
use rewindfs::store::{Kind, Origin, OriginKind};
use serde::Serialize;
use serde_json::Value;

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
            .with_io_uring(io_uring.into());
            if cfg.foreground {
                daemon::run(cfg)?;
            } else {
                daemon::spawn_detached(&cfg)?;
                warn_unprotected(&cfg.store);
            }
        }
        Command::Umount { dir, lazy } => daemon::umount(&dir, lazy)?,
        Command::Checkpoint {
            uuid,
            session,
            socket,
        } => {
            let r = connect(&socket)?.call(&BeginMessage {
                session_id: session,
                user_message_id: uuid,
            })?;
            println!("checkpoint {} began (seq {})", r.checkpoint, r.seq);
        }
        Command::List {
            session,
            json,
            socket,
        } => {
            let r = connect(&socket)?.call(&ListCheckpoints {
                session_id: session,
            })?;
            print_json_or(json, &r, print_checkpoints)?;
        }
        Command::Log {
            path,
            limit,
            since,
            newest_first,
            session,
            raw,
            json,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let path = match path {
                Some(p) => Some(workspace_rel(&mut client, &p)?),
                None => None,
            };
            let req = Log {
                path,
                since,
                session_id: session,
                limit,
                after: None,
                newest_first,
                raw,
            };
            if json {
                log_json_lines(&mut client, req)?;
            } else {
                let r = client.call(&req)?;
                print_log(&r);
                if r.truncated {
                    eprintln!(
                        "rewindfs: showing the newest {} of {} change(s); `--limit {}` shows them all, `--since UUID` those since a checkpoint",
                        r.entries.len(),
                        r.total,
                        r.total
                    );
                }
            }
        }
        Command::Status { json, socket } => {
            let mut r = connect(&socket)?.call(&Status {})?;
            // Run from a shell left underneath, this process is there too: the shell is the one
            // that matters.
            r.unprotected_processes
                .retain(|p| p.pid != std::process::id());
            print_json_or(json, &r, print_status)?;
        }
        Command::Rewind {
            uuid,
            dry_run,
            scope,
            force,
            json,
            paths,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let paths = paths
                .iter()
                .map(|p| workspace_rel_glob(&mut client, p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let r = client.call(&RewindFiles {
                user_message_id: uuid,
                dry_run,
                scope: parse_scope(&scope)?,
                force,
                paths,
                session_id: None,
            })?;
            let ws = client.call(&Status {})?.workspace;
            print_json_or(json, &r, |r| print_rewind(r, dry_run, &ws))?;
            if !r.can_rewind {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Undo {
            dry_run,
            force,
            json,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let r = client.call(&UndoRewind { dry_run, force })?;
            let ws = client.call(&Status {})?.workspace;
            print_json_or(json, &r, |r| print_stack(r, dry_run, &ws))?;
            if !r.can_rewind {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Redo {
            dry_run,
            force,
            json,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let r = client.call(&RedoRewind { dry_run, force })?;
            let ws = client.call(&Status {})?.workspace;
            print_json_or(json, &r, |r| print_stack(r, dry_run, &ws))?;
            if !r.can_rewind {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Diff {
            uuid,
            rest,
            stat,
            fork,
            scope,
            socket,
        } => {
            // The reply's paths are absolute: under the fork for --fork, else the workspace.
            let (r, root) = match fork {
                Some(dir) => diff_fork(&dir, rest, &socket)?,
                None => {
                    let uuid = uuid.context("a checkpoint to compare with")?;
                    let mut client = connect(&socket)?;
                    let (to, path) = second_checkpoint(&mut client, rest)?;
                    let path = match path {
                        Some(p) => Some(workspace_rel_glob(&mut client, &p)?),
                        None => None,
                    };
                    let r = client.call(&Diff {
                        user_message_id: uuid,
                        to_message_id: to,
                        fork_dir: None,
                        path,
                        scope: parse_scope(&scope)?,
                    })?;
                    (r, client.call(&Status {})?.workspace)
                }
            };
            if stat {
                print_stat(&r, &root);
            } else {
                print!("{}", r.diff);
            }
        }
        Command::Show {
            uuid,
            path,
            json,
            socket,
        } => show(&uuid, &path, json, &socket)?,
        Command::Fork {
            uuid,
            dir,
            mount,
            store,
            json,
            socket,
        } => fork(&uuid, &dir, mount, store, json, &socket)?,
        Command::Export {
            session,
            since,
            file,
            json,
            socket,
        } => {
            let r = connect(&socket)?.call(&Export {
                path: std::path::absolute(&file)?.to_string_lossy().into_owned(),
                session_id: session,
                since,
            })?;
            print_json_or(json, &r, |r| {
                println!(
                    "exported {} checkpoint(s), {} blob(s) ({} bytes), {} row(s) to {} ({} bytes)",
                    r.checkpoints.len(),
                    r.blobs,
                    r.blob_bytes,
                    r.rows,
                    r.path.display(),
                    r.bytes
                )
            })?;
        }
        Command::Import {
            file,
            store,
            json,
            socket,
        } => {
            let r = import(&std::path::absolute(&file)?, store.as_deref(), &socket)?;
            print_json_or(json, &r, |r| {
                if r.already_imported {
                    println!(
                        "already imported: all {} checkpoint(s) of the bundle are here",
                        r.checkpoint_ids.len()
                    );
                } else {
                    println!(
                        "imported {} checkpoint(s) from {} ({} row(s), {} blob(s), {} bytes)",
                        r.checkpoints, r.workspace, r.rows, r.blobs, r.blob_bytes
                    );
                }
            })?;
        }
        Command::Push {
            remote,
            session,
            since,
            json,
            socket,
        } => {
            let tmp =
                std::env::temp_dir().join(format!("rewindfs-push-{}.rwb", std::process::id()));
            let pushed = (|| -> anyhow::Result<_> {
                let e = connect(&socket)?.call(&Export {
                    path: tmp.to_string_lossy().into_owned(),
                    session_id: session.clone(),
                    since,
                })?;
                let r = rewindfs::remote::Remote::open(&remote)?.push(&tmp, session.as_deref())?;
                Ok((e, r))
            })();
            let _ = std::fs::remove_file(&tmp);
            let (e, r) = pushed?;
            print_json_or(json, &r, |r| {
                println!(
                    "pushed {} checkpoint(s) to {remote}: {} blob(s) uploaded ({} bytes), {} already there; {}",
                    e.checkpoints.len(),
                    r.blobs_uploaded,
                    r.bytes_uploaded,
                    r.blobs_present,
                    r.history
                )
            })?;
        }
        Command::Pull {
            remote,
            session,
            store,
            json,
            socket,
        } => {
            let rm = rewindfs::remote::Remote::open(&remote)?;
            let mut out = Vec::new();
            for key in rm.histories(session.as_deref())? {
                let tmp =
                    std::env::temp_dir().join(format!("rewindfs-pull-{}.rwb", std::process::id()));
                let r = rm
                    .assemble(&key, &tmp)
                    .map_err(anyhow::Error::from)
                    .and_then(|()| import(&tmp, store.as_deref(), &socket));
                let _ = std::fs::remove_file(&tmp);
                out.push((key, r.with_context(|| format!("pulling {remote}"))?));
            }
            if json {
                let v: Vec<_> = out
                    .iter()
                    .map(|(k, r)| serde_json::json!({"history": k, "import": r}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for (k, r) in &out {
                    if r.already_imported {
                        println!("{k}: already here");
                    } else {
                        println!(
                            "{k}: imported {} checkpoint(s) from {}",
                            r.checkpoints, r.workspace
                        );
                    }
                }
                println!("{} push(es) in {remote}", out.len());
            }
        }
        Command::Ls {
            uuid,
            dir,
            json,
            socket,
        } => {
            let mut client = connect(&socket)?;
            let path = match dir {
                Some(d) => Some(workspace_rel(&mut client, &d)?),
                None => None,
            };
            let r = client.call(&Ls {
                user_message_id: uuid,
                path,
            })?;
            print_json_or(json, &r, print_ls)?;
        }
        Command::Gc {
            store,
            max_store_bytes,
            max_age,
            json,
            socket,
        } => {
            let r = gc(store, max_store_bytes, max_age, &socket)?;
            print_json_or(json, &r, print_gc)?;
        }
        Command::Fsck { store } => return fsck(store),
        Command::Hook { wait_ms, socket } => hook(wait_ms, &socket),
        Command::ApplyRewind => {
            rewindfs::rewind::run_helper().context("the rewind's helper process")?;
        }
        Command::Flush { dir, files } => {
            rewindfs::daemon::run_flush(&dir, &files).context("flushing the mount")?;
        }
        Command::Exec {
            scope,
            dir,
            store,
            command,
        } => return exec(dir, store, scope, command),
        Command::Setup {
            agent: _,
            project,
            user,
            remove,
        } => setup(project, user, remove)?,
        Command::Agent {
            pid,
            session,
            socket,
        } => {
            connect(&socket)?.call(&RegisterAgent {
                pid,
                session_id: session,
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Imports a bundle: into the daemon of `store` if one serves it, else directly into it; with
/// no store, into the daemon of the current mount (or --socket).
fn import(file: &Path, store: Option<&Path>, socket: &SocketArgs) -> anyhow::Result<ImportReply> {
    let req = Import {
        path: file.to_string_lossy().into_owned(),
    };
    Ok(match store {
        Some(store) => match daemon::import_offline(store, file)? {
            Some(report) => ImportReply::of(report),
            None => Client::connect(&store.join(daemon::files::SOCKET))?.call(&req)?,
        },
        None => connect(socket)?.call(&req)?,
    })
}

/// `diff A [B] [PATH]`: of two words after A, the first is checkpoint B and the second a
/// path; one word is checkpoint B when it names one (a UUID, or an id the daemon lists: a
/// message id may be any string), else a path.
fn second_checkpoint(
    client: &mut Client,
    rest: Vec<String>,
) -> anyhow::Result<(Option<String>, Option<String>)> {
    let mut it = rest.into_iter();
    Ok(match (it.next(), it.next()) {
        (Some(b), Some(path)) => (Some(b), Some(path)),
        (Some(w), None) if is_checkpoint(client, &w)? => (Some(w), None),
        (w, _) => (None, w),
    })
}

/// Whether `word` names a checkpoint: a UUID, or the id of one the daemon lists.
fn is_checkpoint(client: &mut Client, word: &str) -> anyhow::Result<bool> {
    if uuid::Uuid::parse_str(word).is_ok() {
        return Ok(true);
    }
    let id = rewindfs::store::normalize_message_id(word);
    Ok(client
        .call(&ListCheckpoints { session_id: None })?
        .checkpoints
        .iter()
        .any(|c| c.uuid == id))
}

/// `rewindfs diff --fork DIR [PATH]`: from the fork's origin checkpoint (recorded in the
/// fork's store) to its tree now, asked of the origin's daemon; with the fork's directory.
fn diff_fork(
    dir: &Path,
    rest: Vec<String>,
    socket: &SocketArgs,
) -> anyhow::Result<(DiffReply, PathBuf)> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("fork {}", dir.display()))?;
    let store = daemon::store_of_workspace(&dir)?;
    let origin = rewindfs::store::first_origin(&store)?
        .filter(|o| o.kind == OriginKind::Fork)
        .with_context(|| {
            format!(
                "{} is not a fork made by `rewindfs fork`: its store {} records no origin",
                dir.display(),
                store.display()
            )
        })?;
    if rest.len() > 1 {
        anyhow::bail!("diff --fork DIR takes at most one path");
    }
    let path = rest.into_iter().next().map(|p| {
        // A path inside the fork names the same path in the origin.
        match std::path::absolute(&p)
            .ok()
            .and_then(|a| a.strip_prefix(&dir).ok().map(Path::to_path_buf))
        {
            Some(rel) => rel.to_string_lossy().into_owned(),
            None => p,
        }
    });
    let mut client = match &socket.socket {
        Some(_) => connect(socket)?,
        None => {
            let parent = origin.store.as_deref().with_context(|| {
                format!(
                    "the fork's origin names no store; pass --socket of {}",
                    origin.workspace
                )
            })?;
            Client::connect(&Path::new(parent).join(daemon::files::SOCKET)).with_context(|| {
                format!(
                    "the fork's origin {} is not mounted (its daemon answers the diff)",
                    origin.workspace
                )
            })?
        }
    };
    let r = client.call(&Diff {
        user_message_id: origin.uuid,
        to_message_id: None,
        fork_dir: Some(dir.to_string_lossy().into_owned()),
        path,
        scope: Scope::All,
    })?;
    Ok((r, dir))
}

/// `rewindfs fork`: the daemon writes the tree; the fork's store is begun with its origin;
/// with `--mount`, the fork is mounted.
fn fork(
    uuid: &str,
    dir: &Path,
    mount: bool,
    store: Option<PathBuf>,
    json: bool,
    socket: &SocketArgs,
) -> anyhow::Result<()> {
    let abs = std::path::absolute(dir)?;
    let r = connect(socket)?.call(&Fork {
        user_message_id: uuid.to_string(),
        dir: abs.to_string_lossy().into_owned(),
    })?;
    let cfg = MountConfig::new(r.dir.clone(), store, false, false, 2, 60.0, None, false)?;
    let origin = Origin {
        kind: OriginKind::Fork,
        workspace: r.workspace.to_string_lossy().into_owned(),
        store: Some(r.store.to_string_lossy().into_owned()),
        uuid: r.checkpoint.clone(),
        session_id: r.session_id.clone(),
        at: rewindfs::store::origin_now(),
    };
    daemon::begin_fork_store(&cfg.store, &origin)?;
    if mount {
        daemon::spawn_detached(&cfg)?;
    }
    print_json_or(json, &r, |r| {
        println!(
            "forked {} at {} into {}: {} file(s), {} dir(s), {} symlink(s), {} bytes ({} file(s), {} bytes from the store){}",
            r.workspace.display(),
            r.checkpoint,
            r.dir.display(),
            r.files,
            r.dirs,
            r.symlinks,
            r.bytes,
            r.files_from_store,
            r.bytes_from_store,
            if mount { "; mounted" } else { "" }
        );
        for s in &r.skipped {
            println!("  skipped {s}");
        }
    })
}

/// Bytes `show` asks the daemon for at once: a file up to this size is read in one request
/// (one consistent look); a larger one in pieces.
const SHOW_CHUNK: u64 = 32 << 20;

/// `rewindfs show`: the file's bytes, raw, to stdout (`--json`: what the path was).
fn show(uuid: &str, path: &Path, json: bool, socket: &SocketArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let mut client = connect(socket)?;
    let rel = workspace_rel(&mut client, path)?;
    let ask = |client: &mut Client, content: bool, offset: u64| {
        client.call(&Show {
            user_message_id: uuid.to_string(),
            path: rel.clone(),
            content,
            offset,
            length: content.then_some(SHOW_CHUNK),
        })
    };
    if json {
        let r = ask(&mut client, false, 0)?;
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    loop {
        let r = ask(&mut client, true, offset)?;
        match r.kind {
            Kind::File => {}
            Kind::Symlink => {
                writeln!(out, "{}", r.target.unwrap_or_default())?;
                return Ok(());
            }
            Kind::Dir => anyhow::bail!(
                "{}: a directory when checkpoint {uuid} began; `rewindfs ls {uuid} {}` lists it",
                r.path,
                path.display()
            ),
            k => anyhow::bail!(
                "{}: a special file ({}) when checkpoint {uuid} began",
                r.path,
                k.as_str()
            ),
        }
        let got = r.content.unwrap_or_default();
        out.write_all(&got)?;
        offset += got.len() as u64;
        if got.is_empty() || offset >= r.size {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

/// After a mount: warns about the processes that were inside the directory before it and
/// still see the one underneath (a shell that `cd`'d into it, an editor holding a file).
fn warn_unprotected(store: &Path) {
    let r =
        Client::connect(&store.join(daemon::files::SOCKET)).and_then(|mut c| c.call(&Status {}));
    match r {
        Ok(mut r) => {
            r.unprotected_processes
                .retain(|p| p.pid != std::process::id());
            if !r.unprotected_processes.is_empty() {
                eprintln!(
                    "rewindfs: warning: {}",
                    unprotected_warning(&r.workspace, &r.unprotected_processes)
                );
            }
        }
        Err(e) => eprintln!(
            "rewindfs: warning: mounted, but could not check for processes left underneath the \
             mount (`rewindfs status` lists them): {e}"
        ),
    }
}

/// `rewindfs setup claude`: the settings file, then what was done to it.
fn setup(project: Option<PathBuf>, user: bool, remove: bool) -> anyhow::Result<()> {
    let path = if user {
        let home = std::env::var_os("HOME").context("HOME is not set; pass --project DIR")?;
        PathBuf::from(home).join(".claude/settings.json")
    } else {
        let dir = match project {
            Some(p) => p,
            None => std::env::current_dir()?,
        };
        std::path::absolute(dir)?.join(".claude/settings.json")
    };
    if remove {
        let o = rewindfs::setup::remove(&path)?;
        println!(
            "{}: removed {} rewindfs hook(s)",
            o.path.display(),
            o.changed
        );
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding the rewindfs binary")?;
    let command = format!("{} hook", exe.display());
    let o = rewindfs::setup::install(&path, &command)?;
    if o.changed == 0 {
        println!("{}: the rewindfs hooks are there already", o.path.display());
    } else {
        println!(
            "{}: added the rewindfs hook for {} event(s) ({command}); mount the project with `rewindfs mount DIR` before starting claude, and `rewindfs list` shows a checkpoint per prompt",
            o.path.display(),
            o.changed
        );
    }
    Ok(())
}

/// `rewindfs log --json`: one change per line. The whole log (a limit at or above its size)
/// streams in pages, so no reply holds all of it; a window of the newest is one request.
fn log_json_lines(client: &mut Client, req: Log) -> anyhow::Result<()> {
    use std::io::Write;
    const PAGE: i64 = 5000;
    let first = client.call(&Log {
        limit: 1,
        newest_first: false,
        ..req.clone()
    })?;
    let mut out = std::io::stdout().lock();
    if req.limit < first.total || req.newest_first {
        for e in client.call(&req)?.entries {
            serde_json::to_writer(&mut out, &e)?;
            out.write_all(b"\n")?;
        }
        return Ok(());
    }
    let mut after = 0;
    loop {
        let page = client.call(&Log {
            limit: PAGE,
            after: Some(after),
            ..req.clone()
        })?;
        for e in &page.entries {
            serde_json::to_writer(&mut out, e)?;
            out.write_all(b"\n")?;
        }
        match page.next_after {
            Some(n) => after = n,
            None => return Ok(()),
        }
    }
}

fn parse_scope(s: &str) -> anyhow::Result<Scope> {
    Scope::parse(s).with_context(|| format!("scope {s:?}: use tool, agent or all"))
}

/// `rewindfs gc`: through the daemon when one serves the store, else on the store directly.
fn gc(
    store: Option<PathBuf>,
    max_store_bytes: Option<String>,
    max_age: Option<String>,
    socket: &SocketArgs,
) -> anyhow::Result<GcReply> {
    let d = Retention::default();
    let retention = Retention {
        max_bytes: match &max_store_bytes {
            Some(b) => parse_size(b)?,
            None => d.max_bytes,
        },
        max_age: match &max_age {
            Some(a) => parse_age(a)?,
            None => d.max_age,
        },
    };
    // Limits not given are the daemon's own.
    let req = Gc {
        max_store_bytes: max_store_bytes.map(|_| retention.max_bytes.unwrap_or(0)),
        max_age_seconds: max_age.map(|_| retention.max_age.map_or(0, |a| a.as_secs())),
    };
    Ok(match store {
        Some(store) => match daemon::gc_offline(&store, &retention.policy())? {
            Some(report) => GcReply::of(&report, &retention.policy()),
            None => Client::connect(&store.join(daemon::files::SOCKET))?.call(&req)?,
        },
        None => connect(socket)?.call(&req)?,
    })
}

/// `rewindfs fsck`: the store of the mount containing the current directory by default.
fn fsck(store: Option<PathBuf>) -> anyhow::Result<ExitCode> {
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
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        println!("{}: {p}", store.display());
    }
    Ok(ExitCode::FAILURE)
}

/// `rewindfs hook`: whatever happens, the agent's tool runs: problems are warnings on stderr.
fn hook(wait_ms: u64, socket: &SocketArgs) {
    let mut input = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input) {
        eprintln!("rewindfs hook: reading stdin: {e}");
        return;
    }
    let v: Value = match serde_json::from_str(&input) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rewindfs hook: the hook input is not JSON ({e}); ignoring");
            return;
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
        eprintln!("rewindfs hook: warning: {e}; the change will not be rewindable by message");
    }
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
    let cwd = exec_cwd(&cfg.dir);
    // This process waits for the command and unmounts: it holds nothing in the directory, so
    // it is never one left underneath the mount, nor what keeps the unmount busy.
    std::env::set_current_dir("/").context("changing to /")?;
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
        Client::connect(&sock)?.call(&RegisterAgent {
            pid: child.id(),
            session_id: None,
        })?;
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

/// Where `rewindfs exec`'s command starts: inside the mount, at the caller's place when the
/// caller is inside the workspace, else at its root. It is entered by path once the mount is
/// live: the caller's own cwd, taken before the mount, still points at the directory underneath,
/// where nothing is recorded.
fn exec_cwd(workspace: &Path) -> PathBuf {
    match std::env::current_dir() {
        Ok(cwd) if cwd.starts_with(workspace) => cwd,
        _ => workspace.to_path_buf(),
    }
}

fn connect(s: &SocketArgs) -> anyhow::Result<Client> {
    let path = find_socket(s.socket.as_deref())?;
    Ok(Client::connect(&path)?)
}

/// A path given on the command line, made relative to the workspace root.
fn workspace_rel(client: &mut Client, p: &Path) -> anyhow::Result<String> {
    let ws = client.call(&Status {})?.workspace;
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

/// `--json` prints the socket's answer as is; otherwise `lines` prints it for people.
fn print_json_or<R: Serialize>(json: bool, r: &R, lines: impl FnOnce(&R)) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        lines(r);
    }
    Ok(())
}

fn print_checkpoints(r: &CheckpointList) {
    println!(
        "{:<36}  {:<8}  {:<24}  {:>6}  {:>10}  {:<12}  PROMPT",
        "UUID", "KIND", "BEGAN", "PATHS", "BYTES", "SESSION"
    );
    for c in &r.checkpoints {
        let session = c.session_id.as_deref().unwrap_or("-");
        // A session id is a uuid: its first block tells sessions apart.
        let session = session.get(..12).unwrap_or(session);
        let prompt = match (&c.prompt, c.bound, &c.rewind) {
            (_, _, Some(r)) => rewind_label(r),
            (Some(p), true, _) => p.clone(),
            (Some(p), false, _) => {
                format!("{p}  (message uuid not known yet; this is the prompt_id)")
            }
            (None, _, _) => String::new(),
        };
        println!(
            "{:<36}  {:<8}  {:<24}  {:>6}  {:>10}  {:<12}  {}",
            c.uuid, c.kind, c.began_at, c.paths_changed, c.bytes_captured, session, prompt
        );
        if let Some(o) = &c.origin {
            let how = match o.kind {
                OriginKind::Fork => "forked from",
                OriginKind::Import => "imported from",
            };
            println!("  {how} {} at checkpoint {}", o.workspace, o.checkpoint);
        }
    }
}

fn print_ls(r: &LsReply) {
    for e in &r.entries {
        let target = e
            .target
            .as_deref()
            .map(|t| format!(" -> {t}"))
            .unwrap_or_default();
        let slash = if e.kind == Kind::Dir { "/" } else { "" };
        // `*`: changed since the checkpoint (what a rewind to it would restore).
        let mark = if e.unchanged { ' ' } else { '*' };
        println!(
            "{mark} {:<7} {:04o} {:>10}  {}{slash}{target}",
            e.kind.as_str(),
            e.mode,
            e.size,
            e.name
        );
    }
}

/// `--stat`: lines added and removed per file (relative to `root`), and the totals.
fn print_stat(r: &DiffReply, root: &Path) {
    let names: Vec<_> = r.stats.iter().map(|s| shown(&s.path, root)).collect();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
    let (mut ins, mut del) = (0, 0);
    for (s, name) in r.stats.iter().zip(&names) {
        ins += s.insertions;
        del += s.deletions;
        if s.binary {
            println!(" {name:<width$} | Bin");
        } else {
            let bar = "+".repeat(s.insertions.min(40) as usize)
                + &"-".repeat(s.deletions.min(40) as usize);
            println!(" {name:<width$} | {:>5} {bar}", s.insertions + s.deletions);
        }
    }
    println!(
        " {} file(s) changed, {ins} insertion(s)(+), {del} deletion(s)(-)",
        r.stats.len()
    );
}

/// What began a `rewind` checkpoint, for `list`: "rewind to X (scope all), undone; redo
/// re-applies it next", "undo of rewind X".
fn rewind_label(r: &RewindInfo) -> String {
    let what = match (r.action.as_str(), &r.scope) {
        ("rewind", Some(scope)) => format!("rewind to {} (scope {scope})", r.target),
        (action, _) => format!("{action} of rewind {}", r.target),
    };
    let state = match r.state.as_str() {
        "done" => String::new(),
        s => format!(", {s}"),
    };
    let next = match r.next.as_deref() {
        Some(cmd) => format!("; `rewindfs {cmd}` {cmd}es it next"),
        None => String::new(),
    };
    format!("{what}{state}{next}")
}

fn print_log(r: &LogReply) {
    for e in &r.entries {
        let p2 = match (&e.path2, &e.via) {
            (Some(p), _) => format!(" -> {p}"),
            (None, Some(t)) => format!(" (via {t})"),
            (None, None) => String::new(),
        };
        println!(
            "{}  {:<8} {:<9} {}{}  [{} pid {} {}]  {}",
            e.time,
            e.actor,
            e.op,
            e.path,
            p2,
            e.process,
            e.pid,
            e.tool_use_id.as_deref().unwrap_or(""),
            e.checkpoint.as_deref().unwrap_or("")
        );
    }
}

fn print_status(r: &StatusReply) {
    let pids: Vec<String> = r.agent_pids.iter().map(u32::to_string).collect();
    let rows = [
        ("workspace", r.workspace.display().to_string()),
        ("store", r.store.display().to_string()),
        ("pid", r.pid.to_string()),
        ("sessionId", r.session_id.clone().unwrap_or_default()),
        ("currentCheckpoint", r.current_checkpoint.clone()),
        ("checkpoints", r.checkpoints.to_string()),
        ("checkpointsDropped", r.checkpoints_dropped.to_string()),
        ("captures", r.captures.to_string()),
        ("bytesCaptured", r.bytes_captured.to_string()),
        ("agentPids", format!("[{}]", pids.join(","))),
        ("storeBytes", r.store_bytes.to_string()),
    ];
    for (k, v) in rows {
        println!("{k:<18} {v}");
    }
    for s in &r.sessions {
        let pids: Vec<String> = s.agent_pids.iter().map(u32::to_string).collect();
        println!(
            "session {}  current {}  agents [{}]{}",
            s.session_id,
            s.current_checkpoint,
            pids.join(","),
            if s.live { "" } else { "  (not live)" }
        );
    }
    if !r.unprotected_processes.is_empty() {
        println!(
            "unprotected: {}",
            unprotected_warning(&r.workspace, &r.unprotected_processes)
        );
    }
}

fn print_gc(r: &GcReply) {
    let b = rewindfs::store::gc::human_bytes;
    let size = if r.bytes_freed > 0 {
        format!(
            "the store went from {} to {}",
            b(r.bytes_before),
            b(r.bytes_after)
        )
    } else {
        format!("the store holds {}", b(r.bytes_after))
    };
    println!(
        "dropped {} checkpoint(s), {} capture(s), {} blob(s); freed {}: {size}",
        r.checkpoints_dropped,
        r.captures_deleted,
        r.blobs_deleted,
        b(r.bytes_freed),
    );
    if r.over_budget {
        println!(
            "still over the budget of {}: what is left is the current checkpoint and what the live \
             session needs to rewind to its first message, which gc never drops (a larger \
             --max-store-bytes, or a new session, lets it go)",
            b(r.max_store_bytes.unwrap_or(0))
        );
    }
}

/// An undo's or redo's reply, for people: which rewind, what changed (or would), what others
/// changed since, and what undo and redo can do next.
fn print_stack(r: &StackReply, dry_run: bool, ws: &Path) {
    if let Some(e) = &r.error {
        eprintln!("rewindfs: {e}");
        if r.undone.is_none() && r.redone.is_none() {
            return; // nothing to undo or redo: the reason says it all
        }
    }
    let done = !dry_run && r.can_rewind;
    let (verb, rewind) = match (&r.undone, &r.redone, done) {
        (Some(u), _, true) => ("undid", u),
        (Some(u), _, false) => ("would undo", u),
        (_, Some(u), true) => ("redid", u),
        (_, Some(u), false) => ("would redo", u),
        (None, None, _) => return,
    };
    let what = match (&r.rewound_to, r.scope) {
        (Some(to), Some(scope)) => format!(" (the rewind to {to}, scope {})", scope.as_str()),
        _ => String::new(),
    };
    println!("{verb} rewind {rewind}{what}");
    let changes = if done { "changed" } else { "would change" };
    print_changes(&r.files_changed, r.insertions, r.deletions, changes, ws);
    if !r.conflicts.is_empty() {
        let how = if done { "overwritten" } else { "in the way" };
        println!("changed since by someone other than rewindfs ({how}):");
        for f in &r.conflicts {
            let rel = shown(f, ws);
            let who = r.conflicts_by.get(rel.as_ref()).map(|w| w.join(", "));
            println!(
                "  {rel}{}",
                who.map(|w| format!(" ({w})")).unwrap_or_default()
            );
        }
    }
    if done {
        println!(
            "undo can go back {} more rewind(s), redo re-apply {}",
            r.undoable, r.redoable
        );
    }
}

/// An absolute path from a reply, as people read it: relative to the workspace.
fn shown<'a>(p: &'a str, ws: &Path) -> std::borrow::Cow<'a, str> {
    match Path::new(p).strip_prefix(ws) {
        Ok(rel) => rel.to_string_lossy(),
        Err(_) => p.into(),
    }
}

fn print_rewind(r: &RewindReply, dry_run: bool, ws: &Path) {
    if let Some(e) = &r.error {
        eprintln!("rewindfs: cannot rewind: {e}");
        if r.files_changed.is_empty() && r.conflicts.is_empty() {
            return; // nothing to show but the reason (e.g. a checkpoint gc removed)
        }
    }
    // A rewind refused changed nothing: what it lists is what it would have changed.
    let verb = if dry_run || !r.can_rewind {
        "would change"
    } else {
        "changed"
    };
    print_changes(&r.files_changed, r.insertions, r.deletions, verb, ws);
    if !r.conflicts.is_empty() {
        println!("conflicts (also changed by other actors):");
        for f in &r.conflicts {
            println!("  {}", shown(f, ws));
        }
    }
    if r.skipped_links > 0 {
        let verb = if dry_run { "would skip" } else { "skipped" };
        println!(
            "{verb} {} path(s) as the SDK does: a symlink, not a regular file, hard linked, or \
             beneath a symlink or a non-directory",
            r.skipped_links
        );
    }
    if let Some(o) = &r.omitted {
        let who: Vec<String> = o.by_actor.iter().map(|(a, n)| format!("{a} {n}")).collect();
        println!(
            "left out {} path(s) changed since the checkpoint by actors this scope does not restore ({}): `{}` includes them",
            o.count,
            who.join(", "),
            o.command
        );
    }
}

fn print_changes(files: &[String], insertions: u64, deletions: u64, verb: &str, ws: &Path) {
    println!(
        "{verb} {} file(s), +{insertions} -{deletions} lines",
        files.len()
    );
    for f in files {
        println!("  {}", shown(f, ws));
    }
}
