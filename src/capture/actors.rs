//! Who made a change: the actor behind a FUSE request's pid (docs/design.md §3).
//!
//! Two sources, both kept here under the recorder's `actors` lock:
//! - **tool spans** (from the agent's PreToolUse/PostToolUse hooks): a change to the file of
//!   an open span, or to that file's `<target>.tmp.<pid>.<ms>`, is the tool's;
//! - **the process tree** (from registered agent pids): the agent itself is `tool`, its
//!   descendants `shell`, anyone else `external`.
//!
//! Invariants:
//! - a pid's classification is trusted for [`PROC_CACHE_TTL`] only, because pids are reused;
//!   registering an agent clears the cache, since it changes every answer;
//! - the cache is bounded (cleared past 4096 entries), so a build spawning thousands of
//!   processes cannot grow it without limit;
//! - `/proc` is read once per new pid with a single small read: this runs on the FUSE request
//!   path for every process that changes a file.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Recorder;
use crate::locks::Locked;
use crate::store::Actor;
use crate::sys;
use crate::wspath::{self, Node};

/// Which processes are the agent, and which tool call is running.
#[derive(Debug, Default)]
pub(super) struct Actors {
    /// Registered agent processes (thread-group ids), each with the session it works for
    /// (`None`: registered without one — it works for whichever session began a message last).
    agents: HashMap<u32, Option<String>>,
    /// Open tool spans, by tool_use_id.
    spans: HashMap<String, Span>,
    /// pid → classification, valid for a short while (pids are reused).
    cache: HashMap<u32, ProcInfo>,
}

/// An open tool call (between its PreToolUse and PostToolUse hooks).
#[derive(Debug, Clone)]
struct Span {
    tool: String,
    /// The files it writes (none: a tool that names none, as a shell command).
    files: Vec<Node>,
    /// The agent session whose hook opened it (`None`: a client that did not say).
    session: Option<String>,
}

/// The tools that change files and run one at a time (the CLI runs only read-only tools
/// concurrently): a new tool call of the session means such a span has ended, even when its
/// PostToolUse never came (a tool that fails after PreToolUse, e.g. an Edit refused on a
/// symlink, gets neither PostToolUse nor PostToolUseFailure).
/// Codex's `apply_patch` and Gemini's `write_file` and `replace` are such tools too.
const FILE_TOOLS: &[&str] = &[
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "apply_patch",
    "write_file",
    "replace",
];

/// One process as the classifier saw it.
#[derive(Debug, Clone)]
struct ProcInfo {
    actor: Actor,
    comm: String,
    /// The session of the agent it is, or descends from.
    session: Option<String>,
    at: Instant,
}

/// Who made a change: the actor, the process's name, the tool span it belongs to, and the
/// session of the agent or span behind it (`None`: no session said, or an external actor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Who {
    pub(super) actor: Actor,
    pub(super) comm: String,
    pub(super) span: Option<String>,
    pub(super) session: Option<String>,
}

/// How long a pid's classification is trusted.
const PROC_CACHE_TTL: Duration = Duration::from_secs(2);

impl Recorder {
    /// Registered agent pids.
    pub fn agents(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.actors.locked().agents.keys().copied().collect();
        v.sort();
        v
    }

    /// Registered agent pids, with the session each works for.
    pub fn agents_by_session(&self) -> Vec<(u32, Option<String>)> {
        let mut v: Vec<(u32, Option<String>)> = self
            .actors
            .locked()
            .agents
            .iter()
            .map(|(p, s)| (*p, s.clone()))
            .collect();
        v.sort();
        v
    }

    /// `pid` is an agent of `session` (its writes are `tool`, its descendants' `shell`, and
    /// both that session's); registering it again moves it to the new session.
    pub fn register_agent(&self, pid: u32, session: Option<&str>) {
        let mut a = self.actors.locked();
        a.agents.insert(pid, session.map(str::to_string));
        a.cache.clear();
    }

    /// Forgets agents that have exited. Returns how many are left.
    pub fn prune_agents(&self) -> usize {
        let mut a = self.actors.locked();
        a.agents.retain(|pid, _| sys::process_alive(*pid));
        a.agents.len()
    }

    /// A tool call of `session` starts (`pre`) or ends (`post`). A start also ends the
    /// session's file-tool spans still open (see [`FILE_TOOLS`]).
    pub fn tool_span(
        &self,
        pre: bool,
        tool_name: &str,
        tool_use_id: &str,
        files: Vec<Node>,
        session: Option<&str>,
    ) {
        let mut a = self.actors.locked();
        if pre {
            a.spans.retain(|_, s| {
                !(s.session.as_deref() == session && FILE_TOOLS.contains(&s.tool.as_str()))
            });
            a.spans.insert(
                tool_use_id.to_string(),
                Span {
                    tool: tool_name.to_string(),
                    files,
                    session: session.map(str::to_string),
                },
            );
        } else {
            a.spans.remove(tool_use_id);
        }
    }

    /// Ends every open span of `session` (and those of no session): its turn ended, or a new
    /// prompt began. Returns how many were open.
    pub fn close_spans(&self, session: Option<&str>) -> usize {
        let mut a = self.actors.locked();
        let before = a.spans.len();
        a.spans
            .retain(|_, s| s.session.is_some() && s.session.as_deref() != session);
        before - a.spans.len()
    }

    /// Who is behind `pid` changing `path` (see [`Actors::classify`]); an agent registered
    /// without a session works for the session that began a message last.
    pub(super) fn classify(&self, pid: u32, path: Option<&[u8]>) -> Who {
        if self.is_rewinder(pid) {
            return self.rewind_actor();
        }
        let mut who = self.actors.locked().classify(pid, path);
        if who.session.is_none() && who.actor != Actor::External {
            who.session = self.state.locked().session.clone();
        }
        who
    }
}

impl Actors {
    /// Classifies the process behind a FUSE request: the agent itself is `tool`, its
    /// descendants `shell`, anyone else `external`. A change to the file of an open tool span
    /// (or to that file's `<target>.tmp.<pid>.<ms>`) is `tool` whenever the process is the agent
    /// or one of its descendants — or no agent is registered — which covers SDKs whose hooks
    /// run in the host process rather than in the CLI. A span of another session than the
    /// process's own is not its: an agent of session A writing a file session B's tool is also
    /// writing is A's change (and a conflict for either's rewind), not B's.
    fn classify(&mut self, pid: u32, path: Option<&[u8]>) -> Who {
        let session_of =
            |spans: &HashMap<String, Span>, id: &str| spans.get(id).and_then(|s| s.session.clone());
        let no_agents = self.agents.is_empty();
        let cached = self
            .cache
            .get(&pid)
            .filter(|p| p.at.elapsed() < PROC_CACHE_TTL)
            .cloned();
        let (actor, comm, session) = match cached {
            Some(p) => (p.actor, p.comm, p.session),
            None => {
                let (actor, comm, session) = self.process_actor(pid);
                if self.cache.len() > 4096 {
                    self.cache.clear();
                }
                self.cache.insert(
                    pid,
                    ProcInfo {
                        actor,
                        comm: comm.clone(),
                        session: session.clone(),
                        at: Instant::now(),
                    },
                );
                (actor, comm, session)
            }
        };
        let span_for_path = path.and_then(|p| self.span_for(p, session.as_deref()));
        let any_span = if self.spans.len() == 1 {
            self.spans
                .iter()
                .find(|(_, s)| fits(s, session.as_deref()))
                .map(|(id, _)| id.clone())
        } else {
            None
        };
        if let Some(id) = span_for_path.clone() {
            if no_agents || actor != Actor::External {
                let session = session_of(&self.spans, &id).or(session);
                return Who {
                    actor: Actor::Tool,
                    comm,
                    span: Some(id),
                    session,
                };
            }
        }
        let span = if actor == Actor::Tool {
            span_for_path.or(any_span)
        } else {
            None
        };
        Who {
            actor,
            comm,
            span,
            session,
        }
    }

    /// The open tool span whose file is `p`, or whose file's write-then-rename temp file `p` is,
    /// of the writing process's `session` (or of no session said, on either side).
    fn span_for(&self, p: &[u8], session: Option<&str>) -> Option<String> {
        self.spans.iter().find_map(|(id, s)| {
            if !fits(s, session) {
                return None;
            }
            let hit = s.files.iter().any(|f| {
                let f = f.as_bytes();
                p == f
                    || (is_tool_temp(p)
                        && wspath::parent(p) == wspath::parent(f)
                        && wspath::name(p)
                            .strip_prefix(wspath::name(f))
                            .is_some_and(|rest| {
                                !wspath::name(f).is_empty() && rest.starts_with(b".tmp.")
                            }))
            });
            hit.then(|| id.clone())
        })
    }

    /// The process-tree classification of one pid (a thread id is mapped to its process).
    /// An ancestor already classified settles it: below an agent or a shell process it is
    /// `shell`, below an external one `external`.
    fn process_actor(&self, pid: u32) -> (Actor, String, Option<String>) {
        let (agents, cache) = (&self.agents, &self.cache);
        if pid == 0 {
            return (Actor::External, String::new(), None);
        }
        let Some((tgid, ppid, comm)) = sys::proc_status(pid) else {
            return (Actor::External, String::new(), None);
        };
        if let Some(session) = agents.get(&tgid) {
            return (Actor::Tool, comm, session.clone());
        }
        if agents.is_empty() {
            return (Actor::External, comm, None);
        }
        let mut cur = ppid;
        for _ in 0..64 {
            if cur <= 1 {
                break;
            }
            if let Some(session) = agents.get(&cur) {
                return (Actor::Shell, comm, session.clone());
            }
            match cache.get(&cur).filter(|p| p.at.elapsed() < PROC_CACHE_TTL) {
                Some(p) if matches!(p.actor, Actor::Tool | Actor::Shell) => {
                    return (Actor::Shell, comm, p.session.clone());
                }
                Some(p) if p.actor == Actor::External => return (Actor::External, comm, None),
                _ => {}
            }
            match sys::proc_status(cur) {
                Some((_, pp, _)) => cur = pp,
                None => break,
            }
        }
        (Actor::External, comm, None)
    }
}

/// Whether span `s` can be the work of a process of `session`: either has no session said, or
/// they are the same.
fn fits(s: &Span, session: Option<&str>) -> bool {
    match (s.session.as_deref(), session) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// Whether a name is the temp file of a tool's write-then-rename
/// (`<target>.tmp.<pid>.<12 hex digits>`, or `.<ms>` from older CLIs).
pub(super) fn is_tool_temp(p: &[u8]) -> bool {
    let Ok(name) = std::str::from_utf8(wspath::name(p)) else {
        return false;
    };
    let mut parts = name.rsplitn(4, '.');
    let (Some(ms), Some(pid), Some(tmp), Some(base)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    // The CLI (2.1.330) ends the name with 12 random hex digits; older ones with the time in
    // milliseconds (tests/clients/FINDINGS.md §6).
    tmp == "tmp"
        && !base.is_empty()
        && !ms.is_empty()
        && ms.bytes().all(|b| b.is_ascii_hexdigit())
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::is_tool_temp;

    #[test]
    fn a_tools_temporary_is_known_by_its_name() {
        for (name, yes) in [
            ("d/a.txt.tmp.7751.c1605b101fba", true), // CLI 2.1.330
            ("a.txt.tmp.123.1700000000000", true),   // older CLIs: milliseconds
            ("a.txt.tmp..123", false),
            ("a.txt.tmp.12x.abc", false),
            (".tmp.1.2", false),
            ("a.txt.tmp.1.", false),
            ("a.txt", false),
        ] {
            assert_eq!(is_tool_temp(name.as_bytes()), yes, "{name}");
        }
    }
}
