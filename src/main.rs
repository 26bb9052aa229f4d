//! The CLI edge: parse, run, print errors with their causes, set the exit code.

use std::process::ExitCode;

use clap::Parser;
use rewindfs::cli::{Args, Command, MountConfig};
use rewindfs::daemon;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REWINDFS_LOG").unwrap_or_else(|_| "info,fuser=error".into()),
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
    match args.command {
        Command::Mount { dir, foreground, store, threads, ttl, agent_pid, detached, sync } => {
            let cfg = MountConfig::new(dir, store, foreground, detached, threads, ttl, agent_pid, sync)?;
            if cfg.foreground {
                daemon::run(cfg)?;
            } else {
                daemon::spawn_detached(&cfg)?;
            }
        }
        Command::Umount { dir, lazy } => daemon::umount(&dir, lazy)?,
    }
    Ok(ExitCode::SUCCESS)
}
