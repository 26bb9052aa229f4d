//! Where `rewindfs ui` reads the history from and sends its requests to: the daemon of a live
//! mount, or — read-only — a store no daemon serves (switching to the daemon as soon as one
//! answers on the store's socket).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};

use crate::control::client::Client;
use crate::control::cmd::{
    CheckpointInfo, Command, Diff, DiffReply, Fork, ForkReply, ListCheckpoints, Log, LogReply,
    RedoRewind, RewindFiles, RewindReply, Show, ShowReply, Status, UndoRewind,
};
use crate::store::layout;
use crate::timeline::Timeline;

/// What a read-only window answers to a key that would change something.
pub const READ_ONLY: &str = "read-only: no daemon serves this store. Mount the workspace (`rewindfs mount DIR`) to rewind, undo, redo or fork; this window turns live once it is mounted";

/// The history's source.
pub enum Source {
    /// A mount's daemon.
    Live {
        client: Client,
        workspace: PathBuf,
        /// The log and the checkpoint list as read last: the log is read again only when its
        /// size or the list changed (a prompt bound to its message uuid renames a checkpoint).
        log: Option<(LogReply, Vec<CheckpointInfo>)>,
    },
    /// A store no daemon serves, read directly; with its workspace (as it is, not mounted),
    /// diffs, files as they were and dry runs are answered too, by the daemon's own handlers.
    Offline {
        store: PathBuf,
        workspace: Option<PathBuf>,
    },
}

impl Source {
    /// The daemon at `socket`.
    ///
    /// # Errors
    /// It does not answer.
    pub fn live(socket: &Path) -> anyhow::Result<Source> {
        let mut client = Client::connect(socket)?;
        let workspace = client.call(&Status {})?.workspace;
        Ok(Source::Live {
            client,
            workspace,
            log: None,
        })
    }

    /// The store in `store`: through its daemon when one answers, else read-only (over
    /// `workspace` when it is known).
    pub fn of_store(store: &Path, workspace: Option<PathBuf>) -> Source {
        Source::live(&store.join(layout::SOCKET)).unwrap_or_else(|_| Source::Offline {
            store: store.to_path_buf(),
            workspace,
        })
    }

    /// For the header: the workspace (live) or the store (read-only).
    pub fn describe(&self) -> String {
        match self {
            Source::Live { workspace, .. } => format!("{} (live)", workspace.display()),
            Source::Offline {
                workspace: Some(w), ..
            } => format!("{} (read-only: not mounted)", w.display()),
            Source::Offline { store, .. } => {
                format!("store {} (read-only: not mounted)", store.display())
            }
        }
    }

    /// Whether requests that look at the present or change something can be made.
    pub fn is_live(&self) -> bool {
        matches!(self, Source::Live { .. })
    }

    /// The workspace's absolute path, when known.
    pub fn workspace(&self) -> Option<&Path> {
        match self {
            Source::Live { workspace, .. } => Some(workspace),
            Source::Offline { workspace, .. } => workspace.as_deref(),
        }
    }

    /// The timeline, when `force`d or when the history changed since it was read last (a
    /// checkpoint began or changed, the log grew); `Ok(None)`: nothing new. A read-only source turns live when a daemon
    /// answers on its store's socket.
    ///
    /// # Errors
    /// The daemon or the store cannot be read.
    pub fn timeline(&mut self, force: bool) -> anyhow::Result<Option<Timeline>> {
        if let Source::Offline { store, .. } = self {
            if let Ok(live) = Source::live(&store.join(layout::SOCKET)) {
                *self = live;
            }
        }
        match self {
            Source::Live { client, log, .. } => {
                // The list may change alone (a new turn, a uuid bound), so it is read each time.
                let list = client
                    .call(&ListCheckpoints { session_id: None })?
                    .checkpoints;
                let total = client.call(&log_request(1))?.total;
                let same = log
                    .as_ref()
                    .is_some_and(|(l, seen)| l.total == total && *seen == list);
                if same && !force {
                    return Ok(None);
                }
                let entries = client.call(&log_request(i64::MAX))?;
                let t = Timeline::new(list.clone(), &entries.entries);
                *log = Some((entries, list));
                Ok(Some(t))
            }
            Source::Offline { store, .. } => {
                if !force {
                    return Ok(None);
                }
                match crate::daemon::history_offline(store)? {
                    Some((list, log)) => Ok(Some(Timeline::new(list.checkpoints, &log.entries))),
                    // A daemon is starting: the next refresh reaches it.
                    None => Ok(None),
                }
            }
        }
    }

    fn client(&mut self) -> anyhow::Result<&mut Client> {
        match self {
            Source::Live { client, .. } => Ok(client),
            Source::Offline { .. } => Err(anyhow!(READ_ONLY)),
        }
    }

    /// A request that changes nothing: to the daemon, or answered over the store directly.
    fn look<C: Command>(&mut self, cmd: &C) -> anyhow::Result<C::Reply> {
        match self {
            Source::Live { client, .. } => Ok(client.call(cmd)?),
            Source::Offline {
                workspace: None, ..
            } => Err(anyhow!(
                "read-only over a store alone: name the workspace too (`rewindfs ui DIR --store STORE`) to see diffs, files as they were and dry runs"
            )),
            Source::Offline {
                store,
                workspace: Some(ws),
            } => crate::daemon::ask_offline(store, ws, cmd)?.ok_or_else(|| {
                anyhow!("a daemon serves this store now: the window turns live in a moment")
            }),
        }
    }

    /// A diff (`rewindfs diff`).
    ///
    /// # Errors
    /// The daemon's error, or the store's.
    pub fn diff(&mut self, req: &Diff) -> anyhow::Result<DiffReply> {
        self.look(req)
    }

    /// A path as it was (`rewindfs show`).
    ///
    /// # Errors
    /// The daemon's error, or the store's.
    pub fn show(&mut self, req: &Show) -> anyhow::Result<ShowReply> {
        self.look(req)
    }

    /// A rewind or its dry run (a dry run is answered read-only too).
    ///
    /// # Errors
    /// Read-only for a rewind, or the daemon's error (a refused rewind among them).
    pub fn rewind(&mut self, req: &RewindFiles) -> anyhow::Result<RewindReply> {
        if req.dry_run {
            return self.look(req);
        }
        Ok(self.client()?.call(req)?)
    }

    /// Undo the newest rewind.
    ///
    /// # Errors
    /// Read-only, or the daemon's error.
    pub fn undo(&mut self) -> anyhow::Result<RewindReply> {
        Ok(self.client()?.call(&UndoRewind {
            dry_run: false,
            force: false,
            session_id: None,
        })?)
    }

    /// Redo the rewind undone last.
    ///
    /// # Errors
    /// Read-only, or the daemon's error.
    pub fn redo(&mut self) -> anyhow::Result<RewindReply> {
        Ok(self.client()?.call(&RedoRewind {
            dry_run: false,
            force: false,
            session_id: None,
        })?)
    }

    /// Fork the tree of checkpoint `uuid` into `dir`.
    ///
    /// # Errors
    /// Read-only, or the daemon's error.
    pub fn fork(&mut self, uuid: &str, dir: &Path) -> anyhow::Result<ForkReply> {
        let dir = std::path::absolute(dir).with_context(|| dir.display().to_string())?;
        Ok(self.client()?.call(&Fork {
            user_message_id: uuid.to_string(),
            dir: dir.display().to_string(),
            trust_imported: false,
        })?)
    }
}

/// The whole log as people read it, or with `limit` 1 only its size.
fn log_request(limit: i64) -> Log {
    Log {
        limit,
        ..Log::whole()
    }
}
