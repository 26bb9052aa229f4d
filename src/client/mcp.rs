//! `rewindfs mcp`: an MCP server on stdio (the official Rust SDK, `rmcp`) through which an agent
//! looks back at its own turns and takes them back. Any agent that speaks MCP can use it; each
//! `rewindfs setup` registers it.
//!
//! The agent's own session: the server is started by the agent CLI, so its parent (or an
//! ancestor) is the agent process the hooks registered. The session that process works for is
//! the agent's; every tool keeps to it: it lists that session's turns, and a rewind names a
//! turn of it (the daemon refuses another session's checkpoint). When no ancestor is a
//! registered agent (a CLI without the hooks), the session that began a turn last is taken, and
//! every answer says so.
//!
//! Safety is the daemon's: a rewind never overwrites what someone else (the user, another
//! session) changed since — that is a conflict, reported, and this server never forces.
//!
//! Every answer is a few lines a model can act on, ending with the command a person would type
//! to do the same. The daemon is reached per call, so the server outlives a remount.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::control::client::{Client, find_socket};
use crate::control::cmd::{Diff, Log, LogReply, RewindFiles, RewindReply, Status, UndoRewind};
use crate::rewind::Scope;
use crate::timeline::{Row, Timeline};

/// How an answer lists paths: this many, then how many more.
const SHOWN: usize = 20;

/// The MCP server: where the daemon is, and its tools.
#[derive(Clone)]
pub struct Server {
    /// `--socket`, else found from the current directory at each call.
    socket: Option<PathBuf>,
    tool_router: ToolRouter<Server>,
}

/// A turn named by the agent.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TurnArg {
    /// The turn: its number as `checkpoints` lists it (1 is the session's first turn), or its
    /// id.
    pub turn: String,
}

/// What changed since a turn.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ChangesArg {
    /// The turn: its number as `checkpoints` lists it, or its id.
    pub turn: String,
    /// Include the unified diff of what changed (default: only the files and who changed
    /// them).
    #[serde(default)]
    pub diff: bool,
}

/// A rewind of the agent's own work.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RewindArg {
    /// The turn to go back to the start of: its number as `checkpoints` lists it, or its id.
    pub turn: String,
    /// `agent` (default): everything the agent did since, its shell commands included;
    /// `tool`: only what its file-editing tool wrote.
    #[serde(default)]
    pub scope: Option<String>,
}

/// The agent's session, and how it was found.
struct Own {
    session: Option<String>,
    /// Why this session (said in answers when it is a guess).
    note: Option<String>,
}

fn err(e: impl std::fmt::Display) -> String {
    format!("rewindfs: {e}")
}

impl Server {
    /// A server reaching the daemon at `socket`, or at the mount containing the current
    /// directory.
    pub fn new(socket: Option<PathBuf>) -> Server {
        Server {
            socket,
            tool_router: Server::tool_router(),
        }
    }

    fn client(&self) -> Result<Client, String> {
        let path = find_socket(self.socket.as_deref()).map_err(err)?;
        Client::connect(&path).map_err(err)
    }

    /// The session of the registered agent this server descends from, else the one that began
    /// a turn last.
    fn own(&self, c: &mut Client) -> Result<Own, String> {
        let status = c.call(&Status {}).map_err(err)?;
        let mut pid = std::process::id();
        for _ in 0..64 {
            let Some(parent) = crate::sys::parent_pid(pid).filter(|p| *p > 1) else {
                break;
            };
            if let Some(s) = status
                .sessions
                .iter()
                .find(|s| s.agent_pids.contains(&parent))
            {
                return Ok(Own {
                    session: Some(s.session_id.clone()),
                    note: None,
                });
            }
            pid = parent;
        }
        Ok(Own {
            session: status.session_id.clone(),
            note: Some(
                "(this server's agent process is not registered with rewindfs, so these are the turns of the session that began one last; `rewindfs setup <agent>` wires the hooks that register it)"
                    .into(),
            ),
        })
    }

    /// Every checkpoint, and who changed what in each (the user's changes too: they are
    /// what a rewind would conflict with).
    fn timeline(c: &mut Client) -> Result<Timeline, String> {
        Timeline::fetch(c).map_err(err)
    }

    /// The turn `arg` names among the session's: a number from 1, or an id of the session's.
    fn pick<'a>(t: &'a Timeline, own: &Own, arg: &str) -> Result<&'a Row, String> {
        let turns: Vec<&Row> = t.turns_of(own.session.as_deref()).collect();
        let arg = arg.trim().trim_start_matches('#');
        let found = match arg.parse::<usize>() {
            Ok(n) => n.checked_sub(1).and_then(|i| turns.get(i)),
            Err(_) => turns.iter().find(|t| t.info.uuid == arg),
        };
        found.copied().ok_or_else(|| {
            format!(
                "no turn {arg} in this session (it has {} turn(s)); call `checkpoints` to see them",
                turns.len()
            )
        })
    }

    fn scope(s: Option<&str>) -> Result<Scope, String> {
        match s.unwrap_or("agent") {
            "agent" => Ok(Scope::Agent),
            "tool" => Ok(Scope::Tool),
            other => Err(format!(
                "no scope {other:?}: `agent` (everything the agent did, shell included) or `tool` (only its file-editing tool's writes)"
            )),
        }
    }

    fn rewind_to(&self, a: &RewindArg, dry_run: bool) -> Result<String, String> {
        let mut c = self.client()?;
        let own = self.own(&mut c)?;
        let scope = Self::scope(a.scope.as_deref())?;
        let timeline = Self::timeline(&mut c)?;
        let turn = Self::pick(&timeline, &own, &a.turn)?;
        let request = |dry_run| RewindFiles {
            dry_run,
            session_id: own.session.clone(),
            ..RewindFiles::to(&turn.info.uuid, scope)
        };
        let ws = c.call(&Status {}).map_err(err)?.workspace;
        // The `tool` scope goes over a user's edit as the SDK does; the agent never may: a
        // path someone else changed since refuses the rewind here, in either scope.
        if !dry_run {
            let dry = c.call(&request(true)).map_err(err)?;
            if !dry.conflicts.is_empty() {
                return Ok(describe_rewind(&dry, turn, scope, false, &ws, &own));
            }
        }
        match c.call(&request(dry_run)) {
            Ok(r) => Ok(describe_rewind(&r, turn, scope, dry_run, &ws, &own)),
            // A refused rewind comes back as an error that tells a person to force it; the
            // dry run names what refused it, which is what the agent can act on.
            Err(e) if !dry_run => match c.call(&request(true)) {
                Ok(dry) if !dry.conflicts.is_empty() => {
                    Ok(describe_rewind(&dry, turn, scope, false, &ws, &own))
                }
                _ => Err(err(e)),
            },
            Err(e) => Err(err(e)),
        }
    }
}

/// A rewind's answer for a model: what it changes (or would), what it refused and why, and the
/// command a person would type.
fn describe_rewind(
    r: &RewindReply,
    turn: &Row,
    scope: Scope,
    dry_run: bool,
    ws: &Path,
    own: &Own,
) -> String {
    let scope_name = if scope == Scope::Tool {
        "tool"
    } else {
        "agent"
    };
    let mut out = String::new();
    let rel = |p: &String| {
        Path::new(p)
            .strip_prefix(ws)
            .map_or_else(|_| p.clone(), |r| r.display().to_string())
    };
    let what = if dry_run { "would restore" } else { "restored" };
    if !r.conflicts.is_empty() {
        out.push_str(&format!(
            "{} to the start of turn {} ({scope_name} scope): someone else changed {} of its path(s) since.\n",
            if dry_run { "This rewind would be refused" } else { "Refused, nothing was changed: the rewind" },
            turn.label(),
            r.conflicts.len()
        ));
    } else if let Some(e) = &r.error {
        out.push_str(&format!("Turn {}: {e}\n", turn.label()));
    } else if r.files_changed.is_empty() {
        out.push_str(&format!(
            "Turn {}: nothing to restore in {scope_name} scope.\n",
            turn.label()
        ));
    } else {
        out.push_str(&format!(
            "Back to the start of turn {} ({scope_name} scope): {what} {} path(s):\n",
            turn.label(),
            r.files_changed.len()
        ));
        list_paths(&mut out, r.files_changed.iter().map(rel));
    }
    if !r.conflicts.is_empty() {
        out.push_str(&format!(
            "Conflicts (never overwritten from here: ask the user which to keep): {}\n",
            r.conflicts
                .iter()
                .map(|p| {
                    let by = r
                        .conflicts_by
                        .get(&rel(p))
                        .map(|b| b.join(", "))
                        .unwrap_or_default();
                    format!("{} ({by})", rel(p))
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(id) = &r.rewind_id {
        out.push_str(&format!("Rewind {id} done; `undo` takes it back.\n"));
    }
    if let Some(n) = &own.note {
        out.push_str(n);
        out.push('\n');
    }
    out.push_str(&format!(
        "A person would type: rewindfs rewind {} --scope {scope_name}{}",
        turn.info.uuid,
        if dry_run { " --dry-run" } else { "" }
    ));
    out
}

fn list_paths(out: &mut String, paths: impl Iterator<Item = String>) {
    let paths: Vec<String> = paths.collect();
    for p in paths.iter().take(SHOWN) {
        out.push_str(&format!("  {p}\n"));
    }
    if paths.len() > SHOWN {
        out.push_str(&format!("  … and {} more\n", paths.len() - SHOWN));
    }
}

#[tool_router]
impl Server {
    #[tool(
        description = "This session's turns (checkpoints), oldest first: number, time, the prompt's first line, and how many paths the agent's file tool, its shell commands, and others changed in each. A turn's number names it in the other tools."
    )]
    async fn checkpoints(&self) -> Result<String, String> {
        let mut c = self.client()?;
        let own = self.own(&mut c)?;
        let timeline = Self::timeline(&mut c)?;
        let turns: Vec<&Row> = timeline.turns_of(own.session.as_deref()).collect();
        if turns.is_empty() {
            return Ok("This session has no turns yet: a turn begins when a prompt is submitted (the rewindfs hooks must be set up: `rewindfs setup <agent>`).".into());
        }
        let mut out = format!(
            "Session {} has {} turn(s):\n",
            own.session.as_deref().unwrap_or("-"),
            turns.len()
        );
        for t in turns {
            out.push_str(&format!("{}  {}\n", t.label(), t.who()));
        }
        if let Some(n) = &own.note {
            out.push_str(n);
            out.push('\n');
        }
        out.push_str("A person would type: rewindfs list");
        Ok(out)
    }

    #[tool(
        description = "What changed since a turn began (everything after it, to now): each path with who changed it (tool = the agent's file tool, shell = its commands, external = someone else), and optionally the diff."
    )]
    async fn changes(&self, Parameters(a): Parameters<ChangesArg>) -> Result<String, String> {
        let mut c = self.client()?;
        let own = self.own(&mut c)?;
        let timeline = Self::timeline(&mut c)?;
        let turn = Self::pick(&timeline, &own, &a.turn)?;
        let log = log_since(&mut c, Some(turn.info.uuid.clone()))?;
        let mut by: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
        for e in log.entries {
            by.entry(e.path).or_default().insert(e.actor.as_str());
        }
        let mut out = format!(
            "Since turn {} began, {} path(s) changed:\n",
            turn.label(),
            by.len()
        );
        list_paths(
            &mut out,
            by.iter().map(|(p, who)| {
                let who: Vec<&str> = who.iter().copied().collect();
                format!("{p} ({})", who.join(", "))
            }),
        );
        if a.diff && !by.is_empty() {
            let d = c
                .call(&Diff {
                    user_message_id: turn.info.uuid.clone(),
                    to_message_id: None,
                    fork_dir: None,
                    path: None,
                    scope: Scope::All,
                    session_id: None,
                })
                .map_err(err)?;
            out.push_str("Diff from now (a/) to as it was when the turn began (b/), which is what a rewind would do:\n");
            const MAX: usize = 16 * 1024;
            if d.diff.len() > MAX {
                let cut = (0..=MAX)
                    .rev()
                    .find(|i| d.diff.is_char_boundary(*i))
                    .unwrap_or(0);
                out.push_str(&d.diff[..cut]);
                out.push_str("\n… (diff cut at 16 KiB; ask for fewer turns or read the files)\n");
            } else {
                out.push_str(&d.diff);
            }
        }
        out.push_str(&format!(
            "A person would type: rewindfs diff {}",
            turn.info.uuid
        ));
        Ok(out)
    }

    #[tool(
        description = "Dry run of a rewind to the start of one of this session's turns: which paths it would restore, and conflicts (paths someone else changed since, which a rewind never overwrites). Changes nothing."
    )]
    async fn rewind_preview(&self, Parameters(a): Parameters<RewindArg>) -> Result<String, String> {
        self.rewind_to(&a, true)
    }

    #[tool(
        description = "Rewind the workspace to the start of one of this session's turns: restores what this agent changed since (scope agent: its file tool and shell commands; scope tool: its file tool only). Refused, changing nothing, when someone else changed the same paths since. `undo` takes it back."
    )]
    async fn rewind(&self, Parameters(a): Parameters<RewindArg>) -> Result<String, String> {
        self.rewind_to(&a, false)
    }

    #[tool(
        description = "Undo this session's last rewind: puts back what it overwrote. Refused when someone else changed those paths since."
    )]
    async fn undo(&self) -> Result<String, String> {
        let mut c = self.client()?;
        let own = self.own(&mut c)?;
        let r = c
            .call(&UndoRewind {
                dry_run: false,
                force: false,
                session_id: own.session.clone(),
            })
            .map_err(err)?;
        let mut out = match &r.error {
            Some(e) => format!("Not undone: {e}\n"),
            None => format!("Undone: put back {} path(s).\n", r.files_changed.len()),
        };
        let ws = c.call(&Status {}).map_err(err)?.workspace;
        list_paths(
            &mut out,
            r.files_changed.iter().map(|p| {
                Path::new(p)
                    .strip_prefix(&ws)
                    .map_or_else(|_| p.clone(), |r| r.display().to_string())
            }),
        );
        if !r.conflicts.is_empty() {
            out.push_str(&format!(
                "Conflicts (changed by someone else since the rewind; not overwritten): {}\n",
                r.conflicts.join(", ")
            ));
        }
        out.push_str("A person would type: rewindfs undo");
        Ok(out)
    }
}

/// Every change since checkpoint `since` (or all), oldest first, as people read the log (a
/// write-then-rename is one change to its target).
fn log_since(c: &mut Client, since: Option<String>) -> Result<LogReply, String> {
    c.call(&Log {
        since,
        limit: 100_000,
        ..Log::whole()
    })
    .map_err(err)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rewindfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(
            "rewindfs records every change in this workspace, turn by turn. Use `checkpoints` to see this session's turns, `changes` to see what changed since one, `rewind_preview` before `rewind` to take a turn back, and `undo` to take a rewind back. Conflicts with the user's own edits are never overwritten: ask the user.",
        )
    }
}

/// Serves MCP on stdin/stdout until the client closes it.
///
/// # Errors
/// The transport failed.
pub async fn serve(socket: Option<PathBuf>) -> anyhow::Result<()> {
    let service = Server::new(socket).serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
