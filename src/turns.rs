//! Turns: the session and turn bookkeeping, a service of its own beside the rewinder.
//!
//! Message boundaries, tool spans and agents (which decide how every later change is tagged),
//! and what the store can tell about the history (checkpoints, the change log, counts). The
//! control layer reaches the recorder and the store for these only through [`Turns`]; the
//! rewinder asks it for the live sessions (gc) and to bind prompts (a rewind names a uuid).
//!
//! # Invariants
//! - A checkpoint begins only after the kernel's dirty data is flushed ([`KernelCache`]): what
//!   was written before the boundary belongs to the checkpoint before it.
//! - Nothing here waits for a rewind: a boundary takes the capture gate for a moment, never the
//!   rewinder's one-at-a-time lock.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use std::sync::Arc;

use crate::capture::Recorder;
use crate::store::{
    CheckpointKind, CheckpointSummary, LogEntry, LogQuery, Origin, Prompt, Store, StoreError,
};
use crate::wspath::Node;

/// Why a message's checkpoint could not begin.
#[derive(Debug, thiserror::Error)]
pub enum BeginError {
    /// The uuid began before and is not the current checkpoint.
    #[error(
        "checkpoint {0} already began; a message's checkpoint cannot begin twice (send a new uuid for a new message)"
    )]
    AlreadyBegan(String),
    /// The store could not answer whether it began.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The boundary could not be recorded.
    #[error("beginning checkpoint {uuid}: {source}")]
    Record {
        uuid: String,
        source: std::io::Error,
    },
}

/// The current checkpoint and who is working.
#[derive(Debug, Clone)]
pub struct Current {
    pub seq: i64,
    pub uuid: String,
    pub session_id: Option<String>,
    /// Registered agent processes.
    pub agent_pids: Vec<u32>,
}

/// A session at work in the workspace.
#[derive(Debug, Clone)]
pub struct LiveSession {
    pub session_id: String,
    /// The last message it began.
    pub current_checkpoint: String,
    pub current_seq: i64,
    /// Its registered agent processes still running.
    pub agent_pids: Vec<u32>,
    /// Whether it still counts as at work: an agent of it runs, or it began a message within
    /// [`SESSION_IDLE`]. A session that is not live keeps its checkpoints (still rewindable),
    /// but retention no longer holds its history back.
    pub live: bool,
}

/// How long a session without a running agent process stays live after its last message.
pub const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// What the store holds, in numbers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Checkpoints kept.
    pub checkpoints: i64,
    /// Checkpoints gc removed.
    pub checkpoints_dropped: i64,
    pub captures: i64,
    pub bytes_captured: i64,
    /// Bytes the store takes on disk.
    pub store_bytes: u64,
}

/// The kernel side of a boundary or a rewind: flush what the kernel still holds first.
/// Implemented by the daemon on top of the FUSE session. (A rewind changes the tree through
/// the mount, so the kernel's caches follow by themselves.)
pub trait KernelCache: Send + Sync {
    /// Writes back dirty data (mmap pages) so it reaches the daemon now.
    fn flush(&self);
    /// After a message's checkpoint began, before the boundary answers: saves what writes the
    /// daemon will not see may change (files open for writing through passthrough).
    fn after_boundary(&self) {}
}

/// The session and turn bookkeeping of one mount.
pub struct Turns {
    /// Tags every change with the current checkpoint, actor and session.
    recorder: Arc<Recorder>,
    /// Checkpoints, prompts and the change log.
    store: Arc<Store>,
    /// Flushed before a boundary.
    kernel: Arc<dyn KernelCache>,
}

impl Turns {
    /// The bookkeeping over the recorder and store of one mount.
    pub fn new(recorder: Arc<Recorder>, store: Arc<Store>, kernel: Arc<dyn KernelCache>) -> Turns {
        Turns {
            recorder,
            store,
            kernel,
        }
    }

    /// A user message begins: its uuid becomes the current checkpoint of its session (a no-op
    /// if it already is, even after another session began one since). Returns the checkpoint's
    /// sequence number.
    ///
    /// # Errors
    /// [`BeginError::AlreadyBegan`] for a uuid that began earlier; store and I/O errors.
    pub fn begin_message(&self, session_id: &str, uuid: &str) -> Result<i64, BeginError> {
        if let Some(seq) = self.current_of(session_id, uuid) {
            return Ok(seq);
        }
        if self.store.checkpoint_began(uuid)? {
            return Err(BeginError::AlreadyBegan(uuid.to_string()));
        }
        let t = std::time::Instant::now();
        self.recorder.close_spans(Some(session_id));
        let closed = t.elapsed();
        // Data the kernel still holds (mmap pages) belongs to the previous checkpoint.
        self.kernel.flush();
        let flushed = t.elapsed();
        let seq = self
            .recorder
            .begin(uuid, Some(session_id), CheckpointKind::Message)
            .map_err(|source| BeginError::Record {
                uuid: uuid.to_string(),
                source,
            })?;
        self.kernel.after_boundary();
        tracing::debug!(
            "begin_message {uuid}: spans {closed:?}, flush {:?}, checkpoint {:?}",
            flushed - closed,
            t.elapsed() - flushed
        );
        Ok(seq)
    }

    /// A typed prompt of the plain CLI begins (its UserPromptSubmit hook: nothing of the turn
    /// has run yet). Its checkpoint begins under the hooks' prompt_id, and takes the message
    /// uuid when [`Turns::bind_prompt`] learns it from the transcript. Beginning the current
    /// prompt again is a no-op. Returns the checkpoint's sequence number.
    ///
    /// # Errors
    /// [`BeginError::AlreadyBegan`] for a prompt that began earlier and is not the current
    /// one; store and I/O errors.
    pub fn begin_prompt(&self, session_id: &str, prompt: &Prompt) -> Result<i64, BeginError> {
        if let Some(c) = self.store.checkpoint_of_prompt(&prompt.prompt_id)? {
            let current = self.recorder.current().0 == c.seq
                || self
                    .recorder
                    .sessions()
                    .iter()
                    .any(|(s, now)| s == session_id && now.seq == c.seq);
            if current {
                return Ok(c.seq);
            }
            return Err(BeginError::AlreadyBegan(prompt.prompt_id.clone()));
        }
        if self.store.checkpoint_began(&prompt.prompt_id)? {
            return Err(BeginError::AlreadyBegan(prompt.prompt_id.clone()));
        }
        self.recorder.close_spans(Some(session_id));
        self.kernel.flush();
        let seq = self
            .recorder
            .begin_for(
                &prompt.prompt_id,
                Some(session_id),
                CheckpointKind::Message,
                Some(prompt),
            )
            .map_err(|source| BeginError::Record {
                uuid: prompt.prompt_id.clone(),
                source,
            })?;
        self.kernel.after_boundary();
        Ok(seq)
    }

    /// The seq of `uuid` if it is the current checkpoint of the mount or of `session_id`.
    fn current_of(&self, session_id: &str, uuid: &str) -> Option<i64> {
        let (seq, current, _) = self.recorder.current();
        if current == uuid {
            return Some(seq);
        }
        self.recorder
            .sessions()
            .into_iter()
            .find(|(s, now)| s == session_id && now.uuid == uuid)
            .map(|(_, now)| now.seq)
    }

    /// The checkpoint begun under `prompt_id` is message `uuid`'s (the transcript showed it):
    /// from now on it answers to `uuid`. Returns its seq (`None`: no checkpoint began under
    /// that prompt_id).
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when it is bound to another uuid, or the uuid is taken.
    pub fn bind_prompt(&self, prompt_id: &str, uuid: &str) -> Result<Option<i64>, StoreError> {
        let seq = self.store.bind_prompt(prompt_id, uuid)?;
        if let Some(seq) = seq {
            self.recorder.renamed(seq, uuid);
        }
        Ok(seq)
    }

    /// The prompt_ids of `session`'s checkpoints whose message uuid is not known yet.
    ///
    /// # Errors
    /// Store errors.
    pub fn unbound_prompts(&self, session_id: Option<&str>) -> Result<Vec<String>, StoreError> {
        Ok(self
            .store
            .unbound_prompts(session_id)?
            .into_iter()
            .map(|(_, p)| p.prompt_id)
            .collect())
    }

    /// Binds every checkpoint whose message uuid its transcript now shows (the hooks bind them
    /// as they go; this catches up when a hook could not, e.g. before a rewind names a uuid the
    /// daemon has not heard of). Returns how many were bound.
    pub fn bind_from_transcripts(&self) -> usize {
        let Ok(unbound) = self.store.unbound_prompts(None) else {
            return 0;
        };
        let mut by_transcript: HashMap<String, HashSet<String>> = HashMap::new();
        for (_, p) in unbound {
            if let Some(t) = p.transcript {
                by_transcript.entry(t).or_default().insert(p.prompt_id);
            }
        }
        let mut bound = 0;
        for (t, ids) in by_transcript {
            let found = match crate::host::transcript::prompt_uuids(Path::new(&t), &ids) {
                Ok(f) => f,
                Err(e) => {
                    tracing::debug!("transcript {t}: {e}");
                    continue;
                }
            };
            for (prompt_id, uuid) in found {
                match self.bind_prompt(&prompt_id, &uuid) {
                    Ok(Some(_)) => bound += 1,
                    Ok(None) => {}
                    Err(e) => tracing::warn!("binding prompt {prompt_id} to {uuid}: {e}"),
                }
            }
        }
        bound
    }

    /// A tool call of `session` starts (`pre`) or ends: writes to `files` in between are the
    /// tool's.
    pub fn tool_span(
        &self,
        pre: bool,
        tool_name: &str,
        tool_use_id: &str,
        files: Vec<Node>,
        session: Option<&str>,
    ) {
        self.recorder
            .tool_span(pre, tool_name, tool_use_id, files, session);
    }

    /// The turn of `session` ended (its Stop hook): every span it left open ends. Returns how
    /// many were open.
    pub fn end_turn(&self, session: Option<&str>) -> usize {
        self.recorder.close_spans(session)
    }

    /// `pid` is an agent (of `session`, if given): its writes are `tool`, its descendants'
    /// `shell`, and both belong to the session.
    pub fn register_agent(&self, pid: u32, session: Option<&str>) {
        self.recorder.register_agent(pid, session);
    }

    /// The sessions that began a message since the mount, each with its current checkpoint and
    /// agents, in the order their current checkpoints began.
    pub fn live_sessions(&self) -> Vec<LiveSession> {
        self.recorder.prune_agents();
        let agents = self.recorder.agents_by_session();
        let latest = self.recorder.current().2;
        self.recorder
            .sessions()
            .into_iter()
            .map(|(id, now)| {
                // An agent registered without a session works for the latest one.
                let pids: Vec<u32> = agents
                    .iter()
                    .filter(|(_, s)| {
                        s.as_deref() == Some(id.as_str())
                            || (s.is_none() && latest.as_deref() == Some(id.as_str()))
                    })
                    .map(|(p, _)| *p)
                    .collect();
                LiveSession {
                    live: !pids.is_empty() || now.since.elapsed() < SESSION_IDLE,
                    session_id: id,
                    current_checkpoint: now.uuid,
                    current_seq: now.seq,
                    agent_pids: pids,
                }
            })
            .collect()
    }

    /// The store, for reads that need no bookkeeping (the checkpoint list).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The current checkpoint and the registered agents.
    pub fn current(&self) -> Current {
        let (seq, uuid, session_id) = self.recorder.current();
        Current {
            seq,
            uuid,
            session_id,
            agent_pids: self.recorder.agents(),
        }
    }

    /// The checkpoints kept (of one session if given), oldest first.
    ///
    /// # Errors
    /// Store errors.
    pub fn checkpoints(&self, session: Option<&str>) -> Result<Vec<CheckpointSummary>, StoreError> {
        self.store.checkpoints(session)
    }

    /// Where the histories in this store came from (a fork's first checkpoint, each import's),
    /// by the seq of the checkpoint each begins with.
    ///
    /// # Errors
    /// Store errors.
    pub fn origins(&self) -> Result<HashMap<i64, Origin>, StoreError> {
        self.store.origins()
    }

    /// The change-log entries `q` selects (with `q.path` as a workspace-relative path),
    /// oldest first, and how many match in all; everything buffered so far is included.
    ///
    /// # Errors
    /// Store errors.
    pub fn log(
        &self,
        path: Option<&Node>,
        q: LogQuery<'_>,
    ) -> Result<(Vec<LogEntry>, i64), StoreError> {
        self.recorder.flush_log();
        self.store.log(&LogQuery {
            path: path.map(Node::as_bytes),
            ..q
        })
    }

    /// The seq of checkpoint `uuid`, if it began (binding prompts the transcripts show first).
    ///
    /// # Errors
    /// Store errors.
    pub fn checkpoint_seq(&self, uuid: &str) -> Result<Option<i64>, StoreError> {
        let uuid = crate::store::normalize_message_id(uuid);
        if let Some(c) = self.store.checkpoint(&uuid)? {
            return Ok(Some(c.seq));
        }
        self.bind_from_transcripts();
        Ok(self.store.checkpoint(&uuid)?.map(|c| c.seq))
    }

    /// What the store holds.
    ///
    /// # Errors
    /// Store errors.
    pub fn counts(&self) -> Result<Counts, StoreError> {
        let (checkpoints, checkpoints_dropped, captures, bytes_captured) = self.store.counts()?;
        Ok(Counts {
            checkpoints,
            checkpoints_dropped,
            captures,
            bytes_captured,
            store_bytes: self.store.size_bytes()?,
        })
    }
}
