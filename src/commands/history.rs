//! The history of the workspace and moving through it: `log`, `status`, `rewind`, `undo`,
//! `redo`, `checkpoint`, `list`.

use std::process::ExitCode;

use rewindfs::cli::{
    AgentArgs, CheckpointArgs, ListArgs, LogArgs, RewindArgs, StackArgs, StatusArgs, UiArgs,
};
use rewindfs::control::client::Client;
use rewindfs::control::cmd::{
    BeginMessage, CheckpointInfo, ListCheckpoints, Log, RedoRewind, RegisterAgent, RewindFiles,
    Status, UndoRewind,
};
use rewindfs::store::CheckpointKind;

use super::print::{Listing, print_log, print_rewind, print_stack, print_status};
use super::{connect, print_json_or, workspace_rel, workspace_rel_glob};

/// `rewindfs log --json`: one change per line. The whole log (a limit at or above its size)
/// streams in pages, so no reply holds all of it; a window of the newest is one request.
pub(crate) fn log_json_lines(client: &mut Client, req: Log) -> anyhow::Result<()> {
    use std::io::Write;
    const PAGE: i64 = 5000;
    let first = client.call(&Log {
        limit: 1,
        newest_first: false,
        ..req.clone()
    })?;
    let mut out = std::io::stdout().lock();
    if req.limit < first.total || req.newest_first {
        let r = client.call(&req)?;
        for e in &r.entries {
            serde_json::to_writer(&mut out, e)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        // Said on stderr, so the lines on stdout stay JSON.
        if r.truncated {
            eprintln!("{}", truncated_notice(r.entries.len(), r.total));
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

/// `rewindfs log`: for people, the newest entries (saying so when there are more); `--json`,
/// one change per line.
pub(crate) fn log(a: LogArgs) -> anyhow::Result<()> {
    let LogArgs {
        path,
        limit,
        since,
        newest_first,
        session,
        raw,
        json,
        socket,
    } = a;
    let mut req = Log {
        path: None,
        since,
        session_id: session,
        limit,
        after: None,
        newest_first,
        raw,
    };
    let (path, socket) = (path.as_deref(), &socket);
    let mut client = connect(socket)?;
    req.path = match path {
        Some(p) => Some(workspace_rel(&mut client, p)?),
        None => None,
    };
    if json {
        return log_json_lines(&mut client, req);
    }
    let r = client.call(&req)?;
    print_log(&r);
    if r.truncated {
        eprintln!("{}", truncated_notice(r.entries.len(), r.total));
    }
    Ok(())
}

/// Runs a rewind, undo or redo with a meter at a terminal: the paths it changed so far, read
/// from the change log (each change it applies is logged) over a second connection.
fn applied<T>(
    what: &str,
    client: &mut Client,
    quiet: bool,
    work: impl FnOnce(&mut Client) -> Result<T, rewindfs::control::client::ClientError>,
) -> Result<T, rewindfs::control::client::ClientError> {
    use super::progress::{Unit, can_show, metered};
    let count = |c: &mut Client| {
        c.call(&Log {
            limit: 1,
            raw: true,
            ..Log::whole()
        })
        .ok()
        .map(|r| r.total)
    };
    // Only where the meter can show: counting the log is not free (it used to hold up every
    // rewind, even in a pipe, by the time the daemon took to count a large log).
    let mut second = can_show(quiet)
        .then(|| Client::connect(client.path()).ok())
        .flatten();
    let base = second.as_mut().and_then(count);
    metered(
        what,
        Unit::Items("paths"),
        quiet || base.is_none(),
        || {
            let (c, base) = (second.as_mut()?, base?);
            count(c).map(|n| ((n - base).max(0) as u64, None))
        },
        || work(client),
    )
}

/// What `log` says when it shows only the newest of the entries.
fn truncated_notice(shown: usize, total: i64) -> String {
    format!(
        "rewindfs: showing the newest {shown} of {total} change(s); `--limit {total}` shows them all, `--since UUID` those since a checkpoint"
    )
}

/// `rewindfs status`.
pub(crate) fn status(a: StatusArgs) -> anyhow::Result<()> {
    let StatusArgs { json, socket } = a;
    let mut r = connect(&socket)?.call(&Status {})?;
    // Run from a shell left underneath, this process is there too: the shell is the one
    // that matters.
    r.unprotected_processes
        .retain(|p| p.pid != std::process::id());
    print_json_or(json, &r, print_status)
}

/// `rewindfs rewind`: fails (exit 1) when the rewind cannot be done.
pub(crate) fn rewind(a: RewindArgs) -> anyhow::Result<ExitCode> {
    let (json, socket) = (a.json, &a.socket);
    let mut client = connect(socket)?;
    let paths = a
        .paths
        .iter()
        .map(|p| workspace_rel_glob(&mut client, p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let uuid = pick_turn(&mut client, a.uuid, a.turn, a.session.as_deref())?;
    let req = RewindFiles {
        user_message_id: uuid.clone(),
        dry_run: a.dry_run,
        scope: a.scope,
        force: a.force,
        paths,
        session_id: a.session,
        trust_imported: a.trust_imported,
    };
    let mut r = applied("rewinding", &mut client, json || a.dry_run, |c| {
        c.call(&req)
    })
    .map_err(|e| anyhow::anyhow!(explain_unknown(e.to_string(), &uuid, json)))?;
    let ws = client.call(&Status {})?.workspace;
    if !json {
        r.error = r.error.map(|e| explain_unknown(e, &uuid, false));
    }
    print_json_or(json, &r, |r| {
        print_rewind(r, a.dry_run, &ws, Listing::of(a.list, Some(a.scope)))
    })?;
    Ok(if r.can_rewind {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The checkpoint a rewind names: its id, or its place among a session's turns (`--turn N`
/// from 1; without either, `--last`: the last). The session is `session`, else the one that began a turn last.
fn pick_turn(
    client: &mut Client,
    uuid: Option<String>,
    turn: Option<usize>,
    session: Option<&str>,
) -> anyhow::Result<String> {
    if let Some(u) = uuid {
        return Ok(u);
    }
    let list = client.call(&ListCheckpoints {
        session_id: session.map(str::to_string),
    })?;
    let turns: Vec<&CheckpointInfo> = list
        .checkpoints
        .iter()
        .filter(|c| c.kind == CheckpointKind::Message)
        .collect();
    let session = match session {
        Some(s) => Some(s.to_string()),
        None => turns.iter().rev().find_map(|c| c.session_id.clone()),
    };
    let turns: Vec<&CheckpointInfo> = turns
        .into_iter()
        .filter(|c| c.session_id == session)
        .collect();
    let whose = session
        .as_deref()
        .map_or_else(|| "this workspace".to_string(), |s| format!("session {s}"));
    let picked = match turn {
        Some(n) => n.checked_sub(1).and_then(|i| turns.get(i)),
        None => turns.last(),
    };
    match picked {
        Some(c) => Ok(c.uuid.clone()),
        None if turns.is_empty() => anyhow::bail!(
            "{whose} has no turns to rewind to; `rewindfs list` shows the checkpoints there are"
        ),
        None => anyhow::bail!(
            "{whose} has turns 1 to {}, not {}; `rewindfs list` numbers them",
            turns.len(),
            turn.unwrap_or(0)
        ),
    }
}

/// The SDK's "No file checkpoint found for this message." says neither which message nor what
/// to do: for people (not `--json`, which keeps the socket's words), name the uuid and how to
/// find the ones that can be rewound to.
fn explain_unknown(message: String, uuid: &str, json: bool) -> String {
    if json || !message.contains("No file checkpoint found for this message.") {
        return message;
    }
    let why = if message.contains("removed by gc") {
        ""
    } else {
        " no message of this workspace began with that uuid (or its prompt's uuid is not in the \
         CLI's transcript yet);"
    };
    format!("{message} ({uuid}:{why} `rewindfs list` shows the checkpoints you can rewind to)")
}

/// Which way along the stack of rewinds.
pub(crate) enum Way {
    Undo,
    Redo,
}

/// `rewindfs undo` and `rewindfs redo`: fail (exit 1) when refused.
pub(crate) fn undo_or_redo(way: Way, a: StackArgs) -> anyhow::Result<ExitCode> {
    let StackArgs {
        dry_run,
        force,
        session,
        json,
        list,
        socket,
    } = a;
    let mut client = connect(&socket)?;
    let quiet = json || dry_run;
    let r = match way {
        Way::Undo => applied("undoing", &mut client, quiet, |c| {
            c.call(&UndoRewind {
                dry_run,
                force,
                session_id: session,
            })
        })?,
        Way::Redo => applied("redoing", &mut client, quiet, |c| {
            c.call(&RedoRewind {
                dry_run,
                force,
                session_id: session,
            })
        })?,
    };
    let ws = client.call(&Status {})?.workspace;
    print_json_or(json, &r, |r| {
        print_stack(r, dry_run, &ws, Listing::of(list, r.scope))
    })?;
    Ok(if r.can_rewind {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `rewindfs checkpoint`: begins a user message's checkpoint.
pub(crate) fn checkpoint(a: CheckpointArgs) -> anyhow::Result<()> {
    let r = connect(&a.socket)?.call(&BeginMessage {
        session_id: a.session,
        user_message_id: a.uuid,
    })?;
    println!("checkpoint {} began (seq {})", r.checkpoint, r.seq);
    Ok(())
}

/// `rewindfs list`: the checkpoints, oldest first.
pub(crate) fn list(a: ListArgs) -> anyhow::Result<()> {
    let mut client = connect(&a.socket)?;
    if a.turns {
        // Every checkpoint, so turns are numbered as everywhere else; then one session's.
        let timeline = rewindfs::timeline::Timeline::fetch(&mut client)?;
        super::print::print_turns(&timeline, a.session.as_deref());
        return Ok(());
    }
    let r = client.call(&ListCheckpoints {
        session_id: a.session,
    })?;
    print_json_or(a.json, &r, super::print::print_checkpoints)
}

/// `rewindfs ui`: the mount's daemon (the socket given, the mount at DIR or containing the
/// current directory), else the store given or the workspace's, read-only.
pub(crate) fn ui(a: UiArgs) -> anyhow::Result<()> {
    use rewindfs::ui::Source;
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "rewindfs ui needs a terminal; `rewindfs list`, `log` and `diff` answer in a pipe"
        );
    }
    let dir = a.dir.as_deref().map(std::path::absolute).transpose()?;
    let source = match (a.store, dir, a.socket.socket) {
        (Some(store), dir, _) => Source::of_store(&store, dir),
        (None, _, Some(socket)) => Source::live(&socket)?,
        (None, dir, None) => {
            let dir = match dir {
                Some(d) => d,
                None => std::env::current_dir()?,
            };
            match rewindfs::daemon::store_of(&dir) {
                Some(store) => Source::of_store(&store, None),
                None => {
                    let store = rewindfs::daemon::store_of_workspace(&dir)?;
                    Source::of_store(&store, Some(dir))
                }
            }
        }
    };
    rewindfs::ui::run(source)
}

/// `rewindfs agent`: registers a process as the agent.
pub(crate) fn agent(a: AgentArgs) -> anyhow::Result<()> {
    connect(&a.socket)?.call(&RegisterAgent {
        pid: a.pid,
        session_id: a.session,
    })?;
    Ok(())
}
