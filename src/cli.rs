//! Command-line parsing (clap) and its validation into a [`Config`]. Nothing below this module
//! sees clap types.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "rewindfs",
    version,
    about = "Make a coding agent's work on a directory rewindable"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// Options every socket client takes.
#[derive(Debug, clap::Args, Clone)]
pub struct SocketArgs {
    /// The daemon's control socket (default: $REWINDFS_SOCKET, else the mount containing the
    /// current directory).
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount rewindfs over DIR, in place; returns once the mount answers.
    Mount {
        /// The project directory to cover.
        dir: PathBuf,
        /// Stay in the foreground (for supervisors); stops cleanly on SIGINT/SIGTERM.
        #[arg(long, short = 'f')]
        foreground: bool,
        /// Where the store lives (default: $XDG_STATE_HOME/rewindfs/<workspace-id>).
        #[arg(long)]
        store: Option<PathBuf>,
        /// FUSE session threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds the kernel may cache attributes and entries.
        #[arg(long, default_value_t = 1.0)]
        ttl: f64,
        /// Register this pid as the agent (its writes are `tool`, its children's `shell`).
        #[arg(long)]
        agent_pid: Option<u32>,
        /// fsync every pre-image before the change it protects (survives power loss, slower).
        #[arg(long)]
        sync: bool,
        /// Internal: set by the detaching parent.
        #[arg(long, hide = true)]
        detached: bool,
    },
    /// Unmount a rewindfs mount cleanly (also clears a mount whose daemon died).
    Umount {
        dir: PathBuf,
        /// Detach even if files are still open.
        #[arg(long)]
        lazy: bool,
    },
    /// Begin the checkpoint of a user message (what the SDK does before sending a prompt).
    Checkpoint {
        /// The user message's UUID.
        uuid: String,
        /// The agent session it belongs to.
        #[arg(long)]
        session: String,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// List checkpoints, oldest first.
    List {
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Show the change log (when, what, which checkpoint, which actor/process).
    Log {
        /// Only changes to this path (or beneath it).
        path: Option<PathBuf>,
        #[arg(long, default_value_t = 1000)]
        limit: i64,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Show the daemon's state.
    Status {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Rewind files to the state they had when a user message began.
    Rewind {
        /// The user message's UUID (a checkpoint).
        uuid: String,
        /// Only report what would change.
        #[arg(long)]
        dry_run: bool,
        /// tool: what Write/Edit/NotebookEdit changed (the SDK's behaviour); agent: tool and
        /// shell; all: everything.
        #[arg(long, env = "REWINDFS_SCOPE", default_value = "tool", value_parser = ["tool", "agent", "all"])]
        scope: String,
        /// Rewind even when other actors changed the same paths.
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
        /// Restrict to these paths or globs.
        paths: Vec<String>,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Undo the last rewind.
    Undo {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Unified diff from the current files to a checkpoint.
    Diff {
        uuid: String,
        path: Option<String>,
        #[arg(long, default_value = "all", value_parser = ["tool", "agent", "all"])]
        scope: String,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Check a store: database integrity, every captured blob present and intact.
    Fsck {
        /// The store directory (default: the store of the workspace containing the current
        /// directory).
        #[arg(long)]
        store: Option<PathBuf>,
    },
    /// For Claude Code's hooks (UserPromptSubmit, PreToolUse, PostToolUse): reads the hook
    /// JSON on stdin and tells the daemon the current message and the tool call. Never blocks
    /// the agent: if the daemon is down it warns and lets the tool run.
    Hook {
        /// How long to wait for a lagging transcript, in milliseconds.
        #[arg(long, default_value_t = 2000)]
        wait_ms: u64,
        #[command(flatten)]
        socket: SocketArgs,
    },
    /// Mount DIR, run COMMAND as the agent (REWINDFS_SOCKET set, its pid registered),
    /// unmount when it exits, and exit with its status.
    Exec {
        /// Default scope of `rewindfs rewind` inside the command (exported as REWINDFS_SCOPE).
        #[arg(long, value_parser = ["tool", "agent", "all"])]
        scope: Option<String>,
        dir: PathBuf,
        #[arg(long)]
        store: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Register a process as the agent (its writes are `tool`, its children's `shell`).
    Agent {
        pid: u32,
        #[command(flatten)]
        socket: SocketArgs,
    },
}

/// A validated mount configuration.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// The workspace, absolute.
    pub dir: PathBuf,
    /// The store directory, absolute, outside the workspace.
    pub store: PathBuf,
    pub foreground: bool,
    pub detached: bool,
    pub threads: usize,
    pub ttl: Duration,
    pub agent_pid: Option<u32>,
    pub sync: bool,
}

/// The default store of a workspace: `$XDG_STATE_HOME/rewindfs/<name>-<hash>`.
pub fn default_store(dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => {
            let home = std::env::var_os("HOME")
                .context("neither XDG_STATE_HOME nor HOME is set; pass --store")?;
            PathBuf::from(home).join(".local/state")
        }
    };
    let hash = blake3::hash(crate::mounts::path_bytes(dir)).to_hex();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    Ok(base
        .join("rewindfs")
        .join(format!("{name}-{}", &hash[..16])))
}

impl MountConfig {
    /// Validates the mount arguments: the directory exists and is a directory, the store is
    /// outside it.
    ///
    /// # Errors
    /// A one-line reason naming the path.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dir: PathBuf,
        store: Option<PathBuf>,
        foreground: bool,
        detached: bool,
        threads: usize,
        ttl: f64,
        agent_pid: Option<u32>,
        sync: bool,
    ) -> anyhow::Result<MountConfig> {
        let abs = crate::mounts::absolute(&dir).with_context(|| format!("{}", dir.display()))?;
        if crate::mounts::is_stale(&abs) {
            bail!(
                "{} has a rewindfs mount whose daemon is gone (Transport endpoint is not connected); run `rewindfs umount {}` first",
                abs.display(),
                abs.display()
            );
        }
        let meta = std::fs::metadata(&abs).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow::anyhow!("cannot mount {}: no such directory", abs.display())
            }
            std::io::ErrorKind::PermissionDenied => {
                anyhow::anyhow!("cannot mount {}: permission denied", abs.display())
            }
            _ => anyhow::anyhow!("cannot mount {}: {e}", abs.display()),
        })?;
        if !meta.is_dir() {
            bail!("cannot mount {}: not a directory", abs.display());
        }
        let dir = abs
            .canonicalize()
            .with_context(|| format!("resolving {}", abs.display()))?;
        if let Some(m) = crate::mounts::mount_at(&dir)? {
            if m.fstype == crate::mounts::FSTYPE {
                bail!(
                    "{} is already mounted by rewindfs (store {})",
                    dir.display(),
                    m.source.display()
                );
            }
        }
        let store = match store {
            Some(s) => std::path::absolute(&s)?,
            None => default_store(&dir)?,
        };
        std::fs::create_dir_all(&store)
            .with_context(|| format!("creating store {}", store.display()))?;
        let store = store.canonicalize()?;
        if store.starts_with(&dir) {
            bail!(
                "store {} is inside the workspace {}: it must live outside it (it would be captured and could be rewound)",
                store.display(),
                dir.display()
            );
        }
        if threads == 0 || threads > 64 {
            bail!("--threads must be between 1 and 64");
        }
        if !(0.0..=86400.0).contains(&ttl) {
            bail!("--ttl must be between 0 and 86400 seconds");
        }
        Ok(MountConfig {
            dir,
            store,
            foreground,
            detached,
            threads,
            ttl: Duration::from_secs_f64(ttl),
            agent_pid,
            sync,
        })
    }
}
