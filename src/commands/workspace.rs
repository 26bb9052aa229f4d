//! The workspace and its store: `mount` (warning about processes left underneath), `exec`,
//! `setup`, `gc`, `fsck`, `agent` and the `hook`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use rewindfs::cli::{
    ExecArgs, FlushArgs, FsckArgs, GcArgs, HookArgs, McpArgs, MountArgs, SetupArgs, UmountArgs,
};
use rewindfs::config::MountRequest;
use rewindfs::control::client::{Client, find_socket};
use rewindfs::control::cmd::{Gc, GcReply, RegisterAgent, Status, unprotected_warning};
use rewindfs::daemon;
use rewindfs::retention::Retention;
use rewindfs::units::{parse_age, parse_size};
use serde_json::Value;

use super::{connect, print_json_or};

/// After a mount: warns about the processes that were inside the directory before it and
/// still see the one underneath (a shell that `cd`'d into it, an editor holding a file).
pub(crate) fn warn_unprotected(store: &Path) {
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
pub(crate) fn setup(a: SetupArgs) -> anyhow::Result<()> {
    use rewindfs::client::{codex_trust, setup, setup_mcp};
    let SetupArgs {
        agent,
        project,
        user,
        remove,
    } = a;
    let agent = agent.as_str();
    let agent = setup::Agent::parse(agent)
        .with_context(|| format!("no agent {agent:?}: `claude`, `qoder`, `codex` or `gemini`"))?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let (path, project) = if user {
        let home = home
            .as_deref()
            .context("HOME is not set; pass --project DIR")?;
        (agent.user_settings(home), None)
    } else {
        let dir = match project {
            Some(p) => p,
            None => std::env::current_dir()?,
        };
        let dir = std::path::absolute(dir)?;
        (agent.settings_in(&dir), Some(dir))
    };
    // Codex runs a hook only when the user's config.toml trusts it (`codex_trust.rs`).
    let codex_config = (agent == setup::Agent::Codex)
        .then(|| {
            home.as_deref()
                .map(|h| setup::codex_home(h).join("config.toml"))
                .context("HOME is not set and CODEX_HOME neither: where is Codex's config.toml?")
        })
        .transpose()?;
    // Where the CLI reads MCP servers: `rewindfs mcp` is registered there (`setup_mcp.rs`).
    let mcp_file = home
        .as_deref()
        .map(|h| setup_mcp::config_file(agent, project.as_deref(), h));
    if remove {
        let ours = codex_trust::our_entries(&path, &setup::read(&path)?);
        let o = setup::remove(&path)?;
        println!(
            "{}: removed {} rewindfs hook(s)",
            o.path.display(),
            o.changed
        );
        if let Some(config) = codex_config {
            let t = codex_trust::untrust(&config, &ours)?;
            println!(
                "{}: took out the trust of {} rewindfs hook(s)",
                t.config.display(),
                t.changed
            );
        }
        if let Some(file) = mcp_file {
            if setup_mcp::unregister(&file)?.changed {
                println!("{}: removed the rewindfs MCP server", file.display());
            }
            if agent == setup::Agent::Claude && project.is_some() {
                setup_mcp::enable_in_claude_settings(&path, false)?;
            }
        }
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding the rewindfs binary")?;
    let command = setup::command_for(&exe);
    let o = setup::install(&path, &command, agent)?;
    if o.changed == 0 {
        println!("{}: the rewindfs hooks are there already", o.path.display());
    } else {
        println!(
            "{}: added the rewindfs hook for {} event(s) ({command})",
            o.path.display(),
            o.changed,
        );
    }
    if let Some(config) = codex_config {
        let settings = setup::read(&path)?;
        let entries = codex_trust::entries_running(&path, &settings, &command);
        let lookalikes = codex_trust::our_entries(&path, &settings).len() - entries.len();
        if lookalikes > 0 {
            eprintln!(
                "rewindfs setup: warning: {}: {lookalikes} hook(s) run a rewindfs other than {} and are not trusted (Codex skips them); take them out with `rewindfs setup codex --remove`, then run this again",
                path.display(),
                exe.display()
            );
        }
        let t = codex_trust::trust(&config, &entries, project.as_deref())?;
        if t.project_trusted {
            println!(
                "{}: marked the project trusted (Codex reads a project's .codex/hooks.json only then)",
                t.config.display()
            );
        }
        if t.changed > 0 {
            println!(
                "{}: trusted the {} rewindfs hook(s) (Codex skips hooks it does not trust)",
                t.config.display(),
                t.changed
            );
        }
    }
    if let Some(file) = mcp_file {
        let r = setup_mcp::register(&file, &exe)?;
        if r.theirs {
            println!(
                "{}: an MCP server named rewindfs is there already and runs something else; left as it is",
                file.display()
            );
        } else if r.changed {
            println!(
                "{}: registered the rewindfs MCP server (`{} mcp`: the agent can list, preview and take back its own turns)",
                file.display(),
                exe.display()
            );
        }
        if agent == setup::Agent::Claude && project.is_some() {
            // Claude Code asks before it starts a project's .mcp.json server otherwise.
            setup_mcp::enable_in_claude_settings(&path, true)?;
        }
    }
    println!(
        "mount the project with `rewindfs mount DIR` before starting {}; `rewindfs list` shows a checkpoint per prompt",
        agent.name()
    );
    Ok(())
}

/// `rewindfs mcp`: the MCP server on stdio, until the agent closes it.
pub(crate) fn mcp(a: McpArgs) -> anyhow::Result<()> {
    // Its stdout is the protocol: a log line there would break it.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(rewindfs::client::mcp::serve(a.socket.socket))
}

/// `rewindfs gc`: through the daemon when one serves the store, else on the store directly.
pub(crate) fn gc(a: GcArgs) -> anyhow::Result<()> {
    let json = a.json;
    let r = super::progress::metered(
        "collecting garbage",
        super::progress::Unit::Time,
        json,
        || None,
        || gc_reply(a),
    )?;
    print_json_or(json, &r, super::print::print_gc)
}

/// What `rewindfs gc` did.
fn gc_reply(a: GcArgs) -> anyhow::Result<GcReply> {
    let GcArgs {
        store,
        max_store_bytes,
        max_age,
        socket,
        ..
    } = a;
    let socket = &socket;
    // Limits not given are the daemon's own (the defaults, on a store no daemon serves); one
    // given as `0` or `none` lifts it.
    let req = Gc {
        max_store_bytes: max_store_bytes
            .as_deref()
            .map(parse_size)
            .transpose()?
            .map(|b| b.unwrap_or(0)),
        max_age_seconds: max_age
            .as_deref()
            .map(parse_age)
            .transpose()?
            .map(|a| a.map_or(0, |d| d.as_secs())),
    };
    let retention = Retention::default().overridden(req.max_store_bytes, req.max_age_seconds);
    Ok(match store {
        Some(store) => match daemon::gc_offline(&store, &retention)? {
            Some(report) => GcReply::of(&report, &retention),
            None => Client::connect(&store.join(daemon::files::SOCKET))?.call(&req)?,
        },
        None => connect(socket)?.call(&req)?,
    })
}

/// `rewindfs fsck`: the store of the mount containing the current directory by default.
pub(crate) fn fsck(a: FsckArgs) -> anyhow::Result<ExitCode> {
    let FsckArgs { store } = a;
    let store = match store {
        Some(s) => s,
        None => {
            let cwd = std::env::current_dir()?;
            daemon::store_of(&cwd).context("not inside a rewindfs mount; pass --store")?
        }
    };
    let meter = super::progress::Meter::new(
        "verifying",
        super::progress::Unit::Items("blobs"),
        None,
        false,
    );
    let checked = rewindfs::store::fsck_with(&store, &mut |done, total| {
        meter.set(done as u64, Some(total as u64))
    });
    meter.finish();
    let (problems, blobs) = checked?;
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
pub(crate) fn hook(a: HookArgs) -> anyhow::Result<()> {
    let HookArgs { wait_ms, socket } = a;
    let mut input = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input) {
        eprintln!("rewindfs hook: reading stdin: {e}");
        return Ok(());
    }
    let v: Value = match serde_json::from_str(&input) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rewindfs hook: the hook input is not JSON ({e}); ignoring");
            return Ok(());
        }
    };
    if let Some(cwd) = v["cwd"].as_str() {
        let _ = std::env::set_current_dir(cwd);
    }
    let r = find_socket(socket.socket.as_deref())
        .and_then(|p| Client::connect(&p))
        .and_then(|mut c| {
            rewindfs::client::hook::handle(&mut c, &v, std::time::Duration::from_millis(wait_ms))
        });
    if let Err(e) = r {
        eprintln!("rewindfs hook: warning: {e}; the change will not be rewindable by message");
    }
    Ok(())
}

/// `rewindfs exec`: the child waits on a FIFO until its pid is registered as the agent, then
/// execs the command (same pid), so not one of its writes is misclassified.
pub(crate) fn exec(a: ExecArgs) -> anyhow::Result<ExitCode> {
    let ExecArgs {
        scope,
        dir,
        store,
        command,
    } = a;
    let cfg = MountRequest {
        store,
        ttl: 1.0,
        ..MountRequest::new(dir)
    }
    .check()?;
    let cwd = exec_cwd(&cfg.dir);
    // This process waits for the command and unmounts: it holds nothing in the directory, so
    // it is never one left underneath the mount, nor what keeps the unmount busy.
    std::env::set_current_dir("/").context("changing to /")?;
    daemon::spawn_detached(&cfg)?;
    let sock = cfg.store.join(daemon::files::SOCKET);
    let gate = cfg.store.join(format!("exec-gate.{}", std::process::id()));
    let _ = std::fs::remove_file(&gate);
    let run = || -> anyhow::Result<std::process::ExitStatus> {
        rewindfs::sys::mkfifo(&gate, 0o600)?;
        let mut child = std::process::Command::new("sh")
            .current_dir(&cwd)
            .arg("-c")
            .arg("read _ < \"$REWINDFS_EXEC_GATE\" && unset REWINDFS_EXEC_GATE && exec \"$@\"")
            .arg("rewindfs-exec")
            .args(&command)
            .env("REWINDFS_SOCKET", &sock)
            .env("REWINDFS_EXEC_GATE", &gate)
            .envs(scope.map(|s| ("REWINDFS_SCOPE", s.as_str())))
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
pub(crate) fn exec_cwd(workspace: &Path) -> PathBuf {
    match std::env::current_dir() {
        Ok(cwd) if cwd.starts_with(workspace) => cwd,
        _ => workspace.to_path_buf(),
    }
}

/// `rewindfs mount`: in the foreground, serves until unmounted; else returns once the mount
/// answers, warning about processes left underneath.
pub(crate) fn mount(a: MountArgs) -> anyhow::Result<()> {
    let cfg = &a.request()?.check()?;
    if cfg.foreground {
        daemon::run(cfg.clone())?;
    } else {
        daemon::spawn_detached(cfg)?;
        warn_unprotected(&cfg.store);
    }
    Ok(())
}

/// `rewindfs umount`.
pub(crate) fn umount(a: UmountArgs) -> anyhow::Result<()> {
    daemon::umount(&a.dir, a.lazy)
}

/// The hidden `__apply-rewind`: the helper a live rewind applies through.
pub(crate) fn apply_rewind() -> anyhow::Result<()> {
    rewindfs::rewind::run_helper().context("the rewind's helper process")
}

/// The hidden `__flush`: writes back the kernel's dirty data through the mount.
pub(crate) fn flush(a: FlushArgs) -> anyhow::Result<()> {
    daemon::run_flush(&a.dir, &a.files).context("flushing the mount")
}
