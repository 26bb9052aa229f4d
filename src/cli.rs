//! Command-line parsing (clap). What it parses is validated into [`crate::config`] types;
//! nothing below this module sees clap types.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand};

use crate::config::{DEFAULT_RANGE_CAPTURE_MIN, IoUring, MountRequest};
use crate::retention::{DEFAULT_MAX_AGE, DEFAULT_MAX_STORE_BYTES, Retention};
use crate::store::Scope;
use crate::units::parse_size;

/// A rewind scope's name on the command line, parsed into its value (clap stays in this file:
/// the store's `Scope` knows nothing of it).
fn scope_arg() -> impl clap::builder::TypedValueParser<Value = Scope> {
    clap::builder::PossibleValuesParser::new(["tool", "agent", "all"])
        .map(|s| Scope::parse(&s).unwrap_or(Scope::Tool))
}

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

/// `--sign` of `export` and `push`.
#[derive(Debug, clap::Args, Clone)]
pub struct SignArgs {
    /// Sign it (Ed25519) with this key, or with no value the trust file's `sign-with` key
    /// or ~/.config/rewindfs/signing.key (`rewindfs key generate` makes one); with the
    /// trust file's `sign-with` line, pushes and exports are signed without asking.
    #[arg(long, value_name = "KEYFILE", num_args = 0..=1, default_missing_value = "")]
    pub sign: Option<PathBuf>,
}

/// `rewindfs key`.
#[derive(Debug, Subcommand)]
pub enum KeyAction {
    /// Make a new signing key (private, 0600) and print its public line for others' trust
    /// files.
    Generate {
        /// Where (default: ~/.config/rewindfs/signing.key).
        file: Option<PathBuf>,
    },
    /// Print a signing key's public line (`ed25519 KEY`), to add to a trust file.
    Show {
        /// The key (default: ~/.config/rewindfs/signing.key).
        file: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount rewindfs over DIR, in place; returns once the mount answers.
    Mount(MountArgs),
    /// Unmount a rewindfs mount cleanly (also clears a mount whose daemon died).
    Umount(UmountArgs),
    /// Begin the checkpoint of a user message (what the SDK does before sending a prompt).
    Checkpoint(CheckpointArgs),
    /// List checkpoints, oldest first.
    List(ListArgs),
    /// A terminal timeline of what the agent did, turn by turn: each checkpoint's paths and
    /// who changed them, their diffs, and a dry run, rewind, undo, redo or fork one key away.
    /// Follows a live mount; over a store no daemon serves (`--store`, or an unmounted
    /// workspace) it is read-only.
    Ui(UiArgs),
    /// Show the change log (when, what, which checkpoint, which actor/process).
    Log(LogArgs),
    /// Show the daemon's state.
    Status(StatusArgs),
    /// Rewind files to the state they had when a user message began.
    Rewind(RewindArgs),
    /// Undo the newest rewind not yet undone (again and again, back to the first). Refuses,
    /// changing nothing, when someone other than rewindfs changed since then a path it would
    /// change (unless --force).
    Undo(StackArgs),
    /// Re-apply the rewind undone last (again and again, in order), until a new rewind clears
    /// what can be redone. Refuses, changing nothing, when someone other than rewindfs changed
    /// since the undo a path it would change (unless --force).
    Redo(StackArgs),
    /// Unified diff from the current files to a checkpoint (`diff A [PATH]`), or from the
    /// tree when checkpoint A began to the tree when B began (`diff A B [PATH]`), or from a
    /// fork's origin checkpoint to the fork's current tree (`diff --fork DIR [PATH]`).
    Diff(DiffArgs),
    /// Print a file as it was when a checkpoint began (raw bytes), without rewinding.
    Show(ShowArgs),
    /// Write the whole tree as it was when a checkpoint began into a new directory (unchanged
    /// files copied from the workspace, changed ones from the store; reflinks where the disk
    /// allows). With --mount, mount it, its history beginning at a checkpoint that records
    /// where it came from.
    Fork(ForkArgs),
    /// Write a session's history (every checkpoint from the first asked for to the newest, with
    /// every blob they need) into one self-checking bundle file.
    Export(ExportArgs),
    /// Import a bundle's checkpoints into a store: listable, showable and rewindable there.
    /// Importing it again does nothing.
    Import(ImportArgs),
    /// Push history to an S3-compatible remote (s3://bucket/prefix): the blobs it lacks (stored
    /// once by hash for every workspace pushing there), then one object of rows per push.
    /// Credentials from AWS_* variables (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP for a local server).
    Push(PushArgs),
    /// Pull history from an S3-compatible remote into a store (each push once; what is here
    /// already is skipped).
    Pull(PullArgs),
    /// List a directory as it was when a checkpoint began, without rewinding.
    Ls(LsArgs),
    /// Drop the oldest checkpoints until the store is within its budget and age limit; report
    /// what was freed. Runs in the daemon when one serves the store, else on the store itself.
    Gc(GcArgs),
    /// Check a store: database integrity, every captured blob present and intact.
    Fsck(FsckArgs),
    /// The agent CLIs' command hook (Claude Code, Qoder, Codex, Gemini; `rewindfs setup AGENT`
    /// writes it): reads the hook JSON on stdin and tells the daemon where a prompt begins and
    /// which tool call is running. Never blocks the agent: if the daemon is down it warns and
    /// lets the tool run.
    Hook(HookArgs),
    /// Mount DIR, run COMMAND inside it (at the caller's place when the caller is inside DIR,
    /// else at its root) as the agent (REWINDFS_SOCKET set, its pid registered), unmount when
    /// it exits, and exit with its status.
    Exec(ExecArgs),
    /// Signing keys for history shared with others: `pull` and `import` can be made to accept
    /// only history signed by a trusted key (`require-signed yes` in ~/.config/rewindfs/trust).
    Key(KeyArgs),
    /// Write `rewindfs hook` into an agent CLI's hook settings (Claude Code, Qoder, Codex,
    /// Gemini; a project's or with --user the user's), so its prompts and tool calls become
    /// rewindfs checkpoints and tool spans; --remove takes them out again.
    Setup(SetupArgs),
    /// An MCP server on stdin/stdout for the agent itself: its session's turns, what changed
    /// since one, a dry run, a rewind of its own work, undo. `rewindfs setup` registers it;
    /// any MCP agent can run it (from inside the workspace, or with --socket).
    Mcp(McpArgs),
    /// Internal: the helper process a live rewind changes the mount through (started by the
    /// daemon; reads its job on stdin).
    #[command(name = "__apply-rewind", hide = true)]
    ApplyRewind,
    /// Internal: the process the daemon writes back the kernel's dirty data through (started
    /// by the daemon before a boundary or a rewind).
    #[command(name = "__flush", hide = true)]
    Flush(FlushArgs),
    /// Register a process as the agent (its writes are `tool`, its children's `shell`).
    Agent(AgentArgs),
}

/// `rewindfs mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// The project directory to cover.
    pub dir: PathBuf,
    /// Stay in the foreground (for supervisors); stops cleanly on SIGINT/SIGTERM.
    #[arg(long, short = 'f')]
    pub foreground: bool,
    /// Where the store lives (default: $XDG_STATE_HOME/rewindfs/WORKSPACE-ID).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Threads reading /dev/fuse (with io_uring they serve only FORGET and INTERRUPT).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seconds the kernel may cache attributes and entries (every change goes through the
    /// mount, and a rewind invalidates what it restores).
    #[arg(long, default_value_t = 60.0)]
    pub ttl: f64,
    /// Serve FUSE requests over io_uring (Linux >= 6.14): `auto` uses it when the kernel
    /// offers it (as root, switching on fuse's `enable_uring` parameter), `on` fails without
    /// it, `off` keeps to /dev/fuse.
    #[arg(long, value_enum, default_value_t = IoUringArg::Auto, env = "REWINDFS_IO_URING")]
    pub io_uring: IoUringArg,
    /// Register this pid as the agent (its writes are `tool`, its children's `shell`).
    #[arg(long)]
    pub agent_pid: Option<u32>,
    /// Let the kernel read files straight from the backing filesystem (FUSE passthrough,
    /// Linux >= 6.9, as root). Cold and random reads of large files get as fast as native;
    /// every open then costs a round trip to the daemon, so a warm `grep -r` over many small
    /// files gets slower. Writes always go through the daemon, which saves pre-images.
    #[arg(long, env = "REWINDFS_PASSTHROUGH")]
    pub passthrough: bool,
    /// fsync every pre-image before the change it protects (survives power loss, slower).
    #[arg(long)]
    pub sync: bool,
    /// Store budget: gc drops the oldest checkpoints beyond it (e.g. 500M, 10G; 0 = none).
    #[arg(long, default_value = DEFAULT_MAX_STORE_BYTES)]
    pub max_store_bytes: String,
    /// Age limit: gc drops checkpoints older than this (e.g. 12h, 30d; 0 = none).
    #[arg(long, default_value = DEFAULT_MAX_AGE)]
    pub max_age: String,
    /// Files larger than this keep only the bytes a change overwrites, not a whole copy
    /// (e.g. 256K, 1M; 0 = always copy whole files).
    #[arg(long, default_value = DEFAULT_RANGE_CAPTURE_MIN)]
    pub range_capture_min: String,
    /// Internal: set by the detaching parent.
    #[arg(long, hide = true)]
    pub detached: bool,
}

/// `rewindfs umount`.
#[derive(Debug, clap::Args)]
pub struct UmountArgs {
    pub dir: PathBuf,
    /// Detach even if files are still open.
    #[arg(long)]
    pub lazy: bool,
}

/// `rewindfs checkpoint`.
#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// The user message's UUID.
    pub uuid: String,
    /// The agent session it belongs to.
    #[arg(long)]
    pub session: String,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this session's.
    #[arg(long)]
    pub session: Option<String>,
    /// Each session's turns as `rewindfs ui` shows them: `#N (time) "prompt"`, who changed how
    /// many paths (tool, shell, external, rewind), and the id.
    #[arg(long, conflicts_with = "json")]
    pub turns: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// The workspace (default: the mount containing the current directory, else the current
    /// directory's history when it is not mounted).
    pub dir: Option<PathBuf>,
    /// A store to look at (through its daemon when one serves it, else read-only: with DIR,
    /// its workspace, diffs and dry runs too).
    #[arg(long)]
    pub store: Option<PathBuf>,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Only changes to this path (or beneath it).
    pub path: Option<PathBuf>,
    /// Show at most this many changes, the newest (default 1000; `rewindfs log` says when
    /// there are more).
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
    /// Only changes made since this checkpoint began (a message uuid from `rewindfs list`).
    #[arg(long)]
    pub since: Option<String>,
    /// Newest first.
    #[arg(long)]
    pub newest_first: bool,
    /// Only changes by this session's actors.
    #[arg(long)]
    pub session: Option<String>,
    /// Every entry as recorded (a file written beside its target and renamed over it is
    /// otherwise shown as one change to the target).
    #[arg(long)]
    pub raw: bool,
    /// JSON lines, one change per line, streamed page by page.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs rewind`.
#[derive(Debug, clap::Args)]
pub struct RewindArgs {
    /// The user message's UUID (a checkpoint), or the id `rewindfs list` shows for a turn.
    #[arg(required_unless_present_any = ["turn", "last"], conflicts_with_all = ["turn", "last"])]
    pub uuid: Option<String>,
    /// The session's N-th turn (from 1, as `rewindfs list` numbers them: `#N`): back to the
    /// tree as it was before that turn began. The session is --session, else the one that
    /// began a turn last.
    #[arg(long, value_name = "N", conflicts_with = "last")]
    pub turn: Option<usize>,
    /// The session's last turn: undoes what it did.
    #[arg(long)]
    pub last: bool,
    /// Only report what would change.
    #[arg(long)]
    pub dry_run: bool,
    /// tool: what Write/Edit/NotebookEdit changed (the SDK's behaviour); agent: tool and
    /// shell; all: everything.
    #[arg(long, env = "REWINDFS_SCOPE", default_value = "tool", value_parser = scope_arg())]
    pub scope: Scope,
    /// Rewind even when other actors (or other sessions) changed the same paths.
    #[arg(long)]
    pub force: bool,
    /// The session the checkpoint must belong to (refused if it is another's).
    #[arg(long)]
    pub session: Option<String>,
    /// Apply what history from elsewhere (`import`, `pull`) would grant: set-user/group-ID
    /// bits, file capabilities and other security.*/trusted.* attributes, owners, device
    /// nodes. Without it they are withheld, and the dry run and the rewind say which.
    #[arg(long)]
    pub trust_imported: bool,
    #[arg(long)]
    pub json: bool,
    /// Print every path changed (at a terminal a long list is summed up: counts, the first
    /// paths, and the file holding the whole list; in a pipe every path is printed anyway).
    #[arg(long)]
    pub list: bool,
    /// Restrict to these paths or globs.
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The checkpoint (a user message's UUID).
    #[arg(required_unless_present = "fork")]
    pub uuid: Option<String>,
    /// A second checkpoint, then a path or glob; or one word: a checkpoint when it names one
    /// (a UUID, or an id `rewindfs list` shows), else a path or glob.
    #[arg(num_args = 0..=2)]
    pub rest: Vec<String>,
    /// Print a summary (lines added and removed per file) instead of the diff.
    #[arg(long)]
    pub stat: bool,
    /// A fork made by `rewindfs fork`: compare its origin checkpoint with its tree now.
    #[arg(long, value_name = "DIR")]
    pub fork: Option<PathBuf>,
    /// Which paths: those a rewind of this scope would change (`agent`, `tool`: of the
    /// checkpoint's own session).
    #[arg(long, default_value = "all", value_parser = scope_arg())]
    pub scope: Scope,
    /// The session the checkpoint must belong to (refused if it is another's).
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The checkpoint (a user message's UUID).
    pub uuid: String,
    /// The file (absolute, or relative to the current directory).
    pub path: PathBuf,
    /// Print what the path was (type, mode, size, hash) as JSON instead of its content.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs fork`.
#[derive(Debug, clap::Args)]
pub struct ForkArgs {
    /// The checkpoint (a user message's UUID).
    pub uuid: String,
    /// The new directory (must not exist, or be empty; outside the workspace and store).
    pub dir: PathBuf,
    /// Mount the fork once written.
    #[arg(long)]
    pub mount: bool,
    /// The fork's store (default: as for a mount of DIR).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Apply what history from elsewhere (`import`, `pull`) would grant: set-user/group-ID
    /// bits, file capabilities and other security.*/trusted.* attributes, owners, device
    /// nodes. Without it they are withheld, and the dry run and the rewind say which.
    #[arg(long)]
    pub trust_imported: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Start at this session's first checkpoint (at or after --since).
    #[arg(long)]
    pub session: Option<String>,
    /// Start at this checkpoint (a UUID).
    #[arg(long)]
    pub since: Option<String>,
    /// The bundle to write (replaced if it exists).
    pub file: PathBuf,
    #[command(flatten)]
    pub sign: SignArgs,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The bundle.
    pub file: PathBuf,
    /// The store to import into (through its daemon if one serves it, else directly).
    #[arg(long)]
    pub store: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs push`.
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// s3://bucket[/prefix]
    pub remote: String,
    /// Push this session's history (from its first checkpoint at or after --since).
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub since: Option<String>,
    #[command(flatten)]
    pub sign: SignArgs,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// s3://bucket[/prefix]
    pub remote: String,
    /// Only this session's pushes.
    #[arg(long)]
    pub session: Option<String>,
    /// The store to import into (through its daemon if one serves it, else directly).
    #[arg(long)]
    pub store: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// The checkpoint (a user message's UUID).
    pub uuid: String,
    /// The directory (default: the workspace).
    pub dir: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// The store directory (default: the daemon of the mount containing the current
    /// directory, or its --socket).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Budget (e.g. 500M, 10G; 0 = none); default: the daemon's, else 10G.
    #[arg(long)]
    pub max_store_bytes: Option<String>,
    /// Age limit (e.g. 12h, 30d; 0 = none); default: the daemon's, else 30d.
    #[arg(long)]
    pub max_age: Option<String>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs fsck`.
#[derive(Debug, clap::Args)]
pub struct FsckArgs {
    /// The store directory (default: the store of the workspace containing the current
    /// directory).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// `rewindfs mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    /// For CLIs whose hooks carry no prompt_id: how long UserPromptSubmit waits for the
    /// prompt to appear in the transcript, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub wait_ms: u64,
    #[command(flatten)]
    pub socket: SocketArgs,
}

/// `rewindfs exec`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// Default scope of `rewindfs rewind` inside the command (exported as REWINDFS_SCOPE).
    #[arg(long, value_parser = scope_arg())]
    pub scope: Option<Scope>,
    pub dir: PathBuf,
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `rewindfs key`.
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub action: KeyAction,
}

/// `rewindfs setup`.
#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// The agent whose settings to write: `claude` (Claude Code: .claude/settings.json),
    /// `qoder` (the Qoder CLI: .qoder/settings.json), `codex` (the Codex CLI: .codex/hooks.json,
    /// and the hooks' trust in $CODEX_HOME/config.toml) or `gemini` (the Gemini CLI:
    /// .gemini/settings.json).
    #[arg(value_parser = ["claude", "qoder", "codex", "gemini"])]
    pub agent: String,
    /// The project whose settings to write (default: the current directory).
    #[arg(long, conflicts_with = "user")]
    pub project: Option<PathBuf>,
    /// Write the user's settings instead, for every project (~/.claude/settings.json,
    /// ~/.qoder/settings.json, $CODEX_HOME/hooks.json, ~/.gemini/settings.json).
    #[arg(long)]
    pub user: bool,
    /// Take the hooks out instead.
    #[arg(long)]
    pub remove: bool,
}

/// `rewindfs __flush` (internal).
#[derive(Debug, clap::Args)]
pub struct FlushArgs {
    /// The mount.
    pub dir: std::path::PathBuf,
    /// Files mapped for writing, to fsync.
    pub files: Vec<std::path::PathBuf>,
}

/// `rewindfs agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    pub pid: u32,
    /// The session it works for (its writes and its children's belong to that session).
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub socket: SocketArgs,
}

impl MountArgs {
    /// The mount these arguments ask for, its sizes and ages parsed (checked by
    /// [`MountRequest::check`]).
    ///
    /// # Errors
    /// A size or age that does not parse, named.
    pub fn request(self) -> anyhow::Result<MountRequest> {
        Ok(MountRequest {
            store: self.store,
            foreground: self.foreground,
            detached: self.detached,
            threads: self.threads,
            ttl: self.ttl,
            io_uring: self.io_uring.into(),
            agent_pid: self.agent_pid,
            passthrough: self.passthrough,
            sync: self.sync,
            retention: Retention::parse(&self.max_store_bytes, &self.max_age)?,
            range_capture_min: parse_size(&self.range_capture_min)?.unwrap_or(u64::MAX),
            ..MountRequest::new(self.dir)
        })
    }
}

impl Command {
    /// Whether the command keeps SIGPIPE ignored (a daemon, or what runs an agent's commands
    /// or hooks, must not die of a closed pipe); every other command dies quietly of one, as a
    /// CLI in a pipeline should.
    pub fn keeps_sigpipe(&self) -> bool {
        matches!(
            self,
            Command::Mount(_) | Command::Exec(_) | Command::Hook(_) | Command::Agent(_)
        )
    }
}

/// `--io-uring`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoUringArg {
    /// When the kernel offers it (as root, switching on fuse's `enable_uring` parameter).
    Auto,
    /// Like `auto`, but fail to mount without it.
    On,
    /// Never: `/dev/fuse` only.
    Off,
}

impl From<IoUringArg> for IoUring {
    fn from(a: IoUringArg) -> IoUring {
        match a {
            IoUringArg::Auto => IoUring::Auto,
            IoUringArg::On => IoUring::On,
            IoUringArg::Off => IoUring::Off,
        }
    }
}

/// What `undo` and `redo` take.
#[derive(Debug, clap::Args)]
pub struct StackArgs {
    /// Only report what would change, and what others changed since the rewind (or the undo).
    #[arg(long)]
    pub dry_run: bool,
    /// Go ahead even over paths others changed since (the opposite command right after gives
    /// them back).
    #[arg(long)]
    pub force: bool,
    /// This session's own stack: its newest rewind not yet undone, its rewind undone last
    /// (without it: of all rewinds).
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub json: bool,
    /// Print every path changed (at a terminal a long list is summed up).
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub socket: SocketArgs,
}
