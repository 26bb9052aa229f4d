//! The CLI edge: parse, run one command, print what it did (or the error with its causes),
//! set the exit code. Every socket command sends a typed request and prints its typed reply.

mod commands;

use std::process::ExitCode;

use clap::Parser;
use rewindfs::cli::{Args, Command};

use crate::commands::{history, travel, workspace};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REWINDFS_LOG")
                .unwrap_or_else(|_| "info,fuser=error,rmcp=warn".into()),
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

/// One command, by its function in `commands/`; each takes its own arguments.
fn run() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    if !args.command.keeps_sigpipe() {
        rewindfs::sys::default_sigpipe();
    }
    let ok = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    match args.command {
        Command::Mount(a) => ok(workspace::mount(a)),
        Command::Umount(a) => ok(workspace::umount(a)),
        Command::Checkpoint(a) => ok(history::checkpoint(a)),
        Command::List(a) => ok(history::list(a)),
        Command::Ui(a) => ok(history::ui(a)),
        Command::Log(a) => ok(history::log(a)),
        Command::Status(a) => ok(history::status(a)),
        Command::Rewind(a) => history::rewind(a),
        Command::Undo(a) => history::undo_or_redo(history::Way::Undo, a),
        Command::Redo(a) => history::undo_or_redo(history::Way::Redo, a),
        Command::Agent(a) => ok(history::agent(a)),
        Command::Diff(a) => ok(travel::diff(a)),
        Command::Show(a) => ok(travel::show(a)),
        Command::Ls(a) => ok(travel::ls(a)),
        Command::Fork(a) => ok(travel::fork(a)),
        Command::Export(a) => ok(travel::export(a)),
        Command::Import(a) => ok(travel::import_cmd(a)),
        Command::Push(a) => ok(travel::push(a)),
        Command::Pull(a) => ok(travel::pull(a)),
        Command::Key(a) => ok(travel::key(a)),
        Command::Gc(a) => ok(workspace::gc(a)),
        Command::Fsck(a) => workspace::fsck(a),
        Command::Hook(a) => ok(workspace::hook(a)),
        Command::Exec(a) => workspace::exec(a),
        Command::Setup(a) => ok(workspace::setup(a)),
        Command::Mcp(a) => ok(workspace::mcp(a)),
        Command::ApplyRewind => ok(workspace::apply_rewind()),
        Command::Flush(a) => ok(workspace::flush(a)),
    }
}
