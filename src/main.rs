//! The CLI edge: parse, run one command, print what it did (or the error with its causes),
//! set the exit code. Every socket command sends a typed request and prints its typed reply.

mod commands;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use rewindfs::cli::{Args, Command};
use rewindfs::config::{MountConfig, Retention};
use rewindfs::control::cmd::{BeginMessage, ListCheckpoints, RegisterAgent};
use rewindfs::daemon;

use crate::commands::print::print_checkpoints;
use crate::commands::{connect, history, print_json_or, travel, workspace};

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

/// One command, by its function in `commands/`.
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
            workspace::mount(&cfg)?;
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
            let req = rewindfs::control::cmd::Log {
                path: None,
                since,
                session_id: session,
                limit,
                after: None,
                newest_first,
                raw,
            };
            history::log(req, path.as_deref(), json, &socket)?;
        }
        Command::Status { json, socket } => history::status(json, &socket)?,
        Command::Rewind {
            uuid,
            dry_run,
            scope,
            force,
            session,
            trust_imported,
            json,
            paths,
            socket,
        } => {
            let req = history::RewindArgs {
                uuid,
                dry_run,
                scope,
                force,
                session,
                trust_imported,
                paths,
            };
            return history::rewind(req, json, &socket);
        }
        Command::Undo(a) => return history::undo_or_redo(history::Way::Undo, a),
        Command::Redo(a) => return history::undo_or_redo(history::Way::Redo, a),
        Command::Diff {
            uuid,
            rest,
            stat,
            fork,
            scope,
            session,
            socket,
        } => travel::diff(uuid, rest, stat, fork.as_deref(), scope, session, &socket)?,
        Command::Show {
            uuid,
            path,
            json,
            socket,
        } => travel::show(&uuid, &path, json, &socket)?,
        Command::Fork {
            uuid,
            dir,
            mount,
            store,
            trust_imported,
            json,
            socket,
        } => travel::fork(&uuid, &dir, mount, store, trust_imported, json, &socket)?,
        Command::Export {
            session,
            since,
            file,
            sign,
            json,
            socket,
        } => travel::export(session, since, &file, sign, json, &socket)?,
        Command::Import {
            file,
            store,
            json,
            socket,
        } => travel::import_cmd(&file, store.as_deref(), json, &socket)?,
        Command::Push {
            remote,
            session,
            since,
            sign,
            json,
            socket,
        } => travel::push(&remote, session, since, sign, json, &socket)?,
        Command::Key { action } => travel::key(action)?,
        Command::Pull {
            remote,
            session,
            store,
            json,
            socket,
        } => travel::pull(&remote, session.as_deref(), store.as_deref(), json, &socket)?,
        Command::Ls {
            uuid,
            dir,
            json,
            socket,
        } => travel::ls(uuid, dir.as_deref(), json, &socket)?,
        Command::Gc {
            store,
            max_store_bytes,
            max_age,
            json,
            socket,
        } => {
            let r = workspace::gc(store, max_store_bytes, max_age, &socket)?;
            print_json_or(json, &r, commands::print::print_gc)?;
        }
        Command::Fsck { store } => return workspace::fsck(store),
        Command::Hook { wait_ms, socket } => workspace::hook(wait_ms, &socket),
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
        } => return workspace::exec(dir, store, scope, command),
        Command::Setup {
            agent,
            project,
            user,
            remove,
        } => workspace::setup(&agent, project, user, remove)?,
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
