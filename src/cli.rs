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
        /// Threads reading /dev/fuse (with io_uring they serve only FORGET and INTERRUPT).
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Seconds the kernel may cache attributes and entries (every change goes through the
        /// mount, and a rewind invalidates what it restores).
        #[arg(long, default_value_t = 60.0)]
        ttl: f64,
        /// Serve FUSE requests over io_uring (Linux >= 6.14): `auto` uses it when the kernel
        /// offers it (as root, switching on fuse's `enable_uring` parameter), `on` fails without
        /// it, `off` keeps to /dev/fuse.
        #[arg(long, value_enum, default_value_t = IoUring::Auto, env = "REWINDFS_IO_URING")]
        io_uring: IoUring,
        /// Register this pid as the agent (its writes are `tool`, its children's `shell`).
        #[arg(long)]
        agent_pid: Option<u32>,
        /// fsync every pre-image before the change it protects (survives power loss, slower).
        #[arg(long)]
        sync: bool,
        /// Store budget: gc drops the oldest checkpoints beyond it (e.g. 500M, 10G; 0 = none).
        #[arg(long, default_value = DEFAULT_MAX_STORE_BYTES)]
        max_store_bytes: String,
        /// Age limit: gc drops checkpoints older than this (e.g. 12h, 30d; 0 = none).
        #[arg(long, default_value = DEFAULT_MAX_AGE)]
        max_age: String,
        /// Files larger than this keep only the bytes a change overwrites, not a whole copy
        /// (e.g. 256K, 1M; 0 = always copy whole files).
        #[arg(long, default_value = DEFAULT_RANGE_CAPTURE_MIN)]
        range_capture_min: String,
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
    /// Drop the oldest checkpoints until the store is within its budget and age limit; report
    /// what was freed. Runs in the daemon when one serves the store, else on the store itself.
    Gc {
        /// The store directory (default: the daemon of the mount containing the current
        /// directory, or its --socket).
        #[arg(long)]
        store: Option<PathBuf>,
        /// Budget (e.g. 500M, 10G; 0 = none); default: the daemon's, else 10G.
        #[arg(long)]
        max_store_bytes: Option<String>,
        /// Age limit (e.g. 12h, 30d; 0 = none); default: the daemon's, else 30d.
        #[arg(long)]
        max_age: Option<String>,
        #[arg(long)]
        json: bool,
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

/// Whether the FUSE session serves requests over io_uring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoUring {
    /// When the kernel offers it (as root, switching on fuse's `enable_uring` parameter).
    Auto,
    /// Like `auto`, but fail to mount without it.
    On,
    /// Never: `/dev/fuse` only.
    Off,
}

impl IoUring {
    pub fn as_str(self) -> &'static str {
        match self {
            IoUring::Auto => "auto",
            IoUring::On => "on",
            IoUring::Off => "off",
        }
    }
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
    pub io_uring: IoUring,
    pub agent_pid: Option<u32>,
    pub sync: bool,
    pub retention: Retention,
    /// Files larger than this get range pre-images (`u64::MAX`: none do).
    pub range_capture_min: u64,
}

/// The default size above which files get range pre-images.
pub const DEFAULT_RANGE_CAPTURE_MIN: &str = "1M";

/// The default store budget.
pub const DEFAULT_MAX_STORE_BYTES: &str = "10G";
/// The default age limit.
pub const DEFAULT_MAX_AGE: &str = "30d";

/// Store retention limits (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub max_bytes: Option<u64>,
    pub max_age: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention::parse(DEFAULT_MAX_STORE_BYTES, DEFAULT_MAX_AGE).expect("valid defaults")
    }
}

impl Retention {
    /// Parses `--max-store-bytes` and `--max-age`.
    ///
    /// # Errors
    /// A message naming the bad value.
    pub fn parse(bytes: &str, age: &str) -> anyhow::Result<Retention> {
        Ok(Retention {
            max_bytes: parse_size(bytes)?,
            max_age: parse_age(age)?,
        })
    }

    pub fn policy(&self) -> crate::store::gc::Policy {
        crate::store::gc::Policy {
            max_bytes: self.max_bytes,
            max_age_ms: self
                .max_age
                .map(|d| d.as_millis().min(i64::MAX as u128) as i64),
        }
    }
}

/// `1234`, `500K`, `500M`, `1.5G`, `2T` (powers of 1024); `0` or `none` is no limit.
///
/// # Errors
/// A message naming the value.
pub fn parse_size(s: &str) -> anyhow::Result<Option<u64>> {
    let t = s.trim();
    if t == "0" || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let mult: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => bail!("size {s:?}: unknown unit (use K, M, G or T)"),
            };
            (&t[..i], mult)
        }
        None => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("size {s:?} is not a number with an optional K/M/G/T"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("size {s:?} must be a non-negative number");
    }
    Ok(Some((n * mult as f64) as u64).filter(|b| *b > 0))
}

/// `90s`, `30m`, `12h`, `30d`, `2w` (a bare number is seconds); `0` or `none` is no limit.
///
/// # Errors
/// A message naming the value.
pub fn parse_age(s: &str) -> anyhow::Result<Option<Duration>> {
    let t = s.trim();
    if t == "0" || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let (num, mult) = match t.chars().last() {
        Some('s') => (&t[..t.len() - 1], 1),
        Some('m') => (&t[..t.len() - 1], 60),
        Some('h') => (&t[..t.len() - 1], 3600),
        Some('d') => (&t[..t.len() - 1], 86_400),
        Some('w') => (&t[..t.len() - 1], 7 * 86_400),
        _ => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("age {s:?} is not a number with an optional s/m/h/d/w"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("age {s:?} must be a non-negative number");
    }
    Ok(Some(Duration::from_secs_f64(n * mult as f64)).filter(|d| !d.is_zero()))
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
            io_uring: IoUring::Auto,
            agent_pid,
            sync,
            retention: Retention::default(),
            range_capture_min: crate::capture::DEFAULT_RANGE_CAPTURE_MIN,
        })
    }

    /// Sets the io_uring mode (`--io-uring`).
    pub fn with_io_uring(mut self, mode: IoUring) -> MountConfig {
        self.io_uring = mode;
        self
    }

    /// Sets the size above which files get range pre-images (`--range-capture-min`).
    ///
    /// # Errors
    /// A message naming the bad value.
    pub fn with_range_capture_min(mut self, s: &str) -> anyhow::Result<MountConfig> {
        self.range_capture_min = parse_size(s)?.unwrap_or(u64::MAX);
        Ok(self)
    }

    /// Sets the retention limits.
    pub fn with_retention(mut self, r: Retention) -> MountConfig {
        self.retention = r;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_parse_with_units_and_bad_ones_are_named() {
        assert_eq!(parse_size("10G").unwrap(), Some(10 << 30));
        assert_eq!(parse_size("1.5M").unwrap(), Some(3 << 19));
        assert_eq!(parse_size("500mib").unwrap(), Some(500 << 20));
        assert_eq!(parse_size("4096").unwrap(), Some(4096));
        assert_eq!(parse_size("0").unwrap(), None);
        assert_eq!(parse_size("none").unwrap(), None);
        assert!(parse_size("12Q").unwrap_err().to_string().contains("12Q"));
        assert!(parse_size("-1G").is_err());
        assert_eq!(
            parse_age("30d").unwrap(),
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(parse_age("90").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("1.5h").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(parse_age("0").unwrap(), None);
        assert!(parse_age("soon").unwrap_err().to_string().contains("soon"));
    }
}
