//! The validated configuration the daemon runs with, and the default store and trust file.
//! Sizes and ages are parsed in `units`, retention limits are `retention::Retention`. No clap type appears here: `cli` parses the command
//! line and builds these.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

/// Whether the FUSE session serves requests over io_uring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Pass reads through to the backing files (`fs/opens.rs`).
    pub passthrough: bool,
    pub sync: bool,
    pub retention: crate::retention::Retention,
    /// Files larger than this get range pre-images (`u64::MAX`: none do).
    pub range_capture_min: u64,
}

/// The default size above which files get range pre-images.
pub const DEFAULT_RANGE_CAPTURE_MIN: &str = "1M";

/// The trust file (signed history's policy and keys, `store/bundle/sign.rs`): `$REWINDFS_TRUST`,
/// else `$XDG_CONFIG_HOME/rewindfs/trust`, else `~/.config/rewindfs/trust`; `None` with no home
/// (nothing is required or trusted then).
pub fn trust_file() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = var("REWINDFS_TRUST") {
        return Some(p);
    }
    let base = var("XDG_CONFIG_HOME").or_else(|| var("HOME").map(|h| h.join(".config")))?;
    Some(base.join("rewindfs").join("trust"))
}

/// The default signing key: beside the trust file, `signing.key`.
pub fn default_signing_key() -> Option<PathBuf> {
    trust_file().and_then(|t| t.parent().map(|d| d.join("signing.key")))
}

/// The trust file's policy and keys ([`trust_file`]).
///
/// # Errors
/// A trust file that does not parse.
pub fn trust() -> anyhow::Result<crate::store::bundle::Trust> {
    match trust_file() {
        Some(f) => crate::store::bundle::Trust::load(&f).map_err(|e| anyhow::anyhow!(e)),
        None => Ok(crate::store::bundle::Trust::default()),
    }
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
    let hash = blake3::hash(crate::host::mounts::path_bytes(dir)).to_hex();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    Ok(base
        .join("rewindfs")
        .join(format!("{name}-{}", &hash[..16])))
}

/// What a mount is asked for, before it is checked: the workspace and every option, each with
/// its default ([`MountRequest::new`]); [`MountRequest::check`] makes the [`MountConfig`].
#[derive(Debug, Clone)]
pub struct MountRequest {
    /// The workspace, as given.
    pub dir: PathBuf,
    /// The store directory (default: [`default_store`]).
    pub store: Option<PathBuf>,
    pub foreground: bool,
    pub detached: bool,
    /// Threads reading /dev/fuse (1–64).
    pub threads: usize,
    /// Seconds the kernel may cache attributes and entries (0–86400).
    pub ttl: f64,
    pub io_uring: IoUring,
    pub agent_pid: Option<u32>,
    /// Pass reads through to the backing files (`fs/opens.rs`).
    pub passthrough: bool,
    pub sync: bool,
    pub retention: crate::retention::Retention,
    /// Files larger than this get range pre-images (`u64::MAX`: none do).
    pub range_capture_min: u64,
}

impl MountRequest {
    /// A mount of `dir` with every option at its default.
    pub fn new(dir: PathBuf) -> MountRequest {
        MountRequest {
            dir,
            store: None,
            foreground: false,
            detached: false,
            threads: 2,
            ttl: 60.0,
            io_uring: IoUring::Auto,
            agent_pid: None,
            passthrough: false,
            sync: false,
            retention: crate::retention::Retention::default(),
            range_capture_min: crate::capture::DEFAULT_RANGE_CAPTURE_MIN,
        }
    }

    /// Checks the request: the directory exists and is a directory not mounted by rewindfs
    /// already, the store is outside it and apart from it, the numbers are in range. Creates
    /// nothing: the store directory is made by whoever mounts ([`MountConfig::create_store`]).
    ///
    /// # Errors
    /// A one-line reason naming the path or the option.
    pub fn check(self) -> anyhow::Result<MountConfig> {
        let MountRequest {
            dir,
            store,
            foreground,
            detached,
            threads,
            ttl,
            io_uring,
            agent_pid,
            passthrough,
            sync,
            retention,
            range_capture_min,
        } = self;
        let abs =
            crate::host::mounts::absolute(&dir).with_context(|| format!("{}", dir.display()))?;
        if crate::host::mounts::is_stale(&abs) {
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
        if let Some(m) = crate::host::mounts::mount_at(&dir)? {
            if m.fstype == crate::host::mounts::FSTYPE {
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
        // Checked before anything is created: a refused mount leaves nothing behind.
        let store = crate::sys::resolve_uncreated(&store)
            .with_context(|| format!("resolving store {}", store.display()))?;
        if store.starts_with(&dir) {
            bail!(
                "store {} is inside the workspace {}: it must live outside it (it would be captured and could be rewound); pass --store with a directory elsewhere",
                store.display(),
                dir.display()
            );
        }
        if dir.starts_with(&store) {
            bail!(
                "the workspace {} is inside the store {}: the store must live outside the workspace and apart from it; pass --store with a directory elsewhere",
                dir.display(),
                store.display()
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
            io_uring,
            agent_pid,
            passthrough,
            sync,
            retention,
            range_capture_min,
        })
    }
}

impl MountConfig {
    /// Makes the store directory, 0700 whatever the umask; someone else's store is refused
    /// here, before anything is created in it (the daemon then makes it private, see
    /// `daemon::make_private`). The first thing a mount does.
    ///
    /// # Errors
    /// It cannot be made, or it is someone else's.
    pub fn create_store(&self) -> anyhow::Result<()> {
        crate::store::private::create_dir(&self.store)
            .with_context(|| format!("creating store {}", self.store.display()))?;
        crate::store::private::secure(&self.store, false)?;
        Ok(())
    }
}
