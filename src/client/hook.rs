//! `rewindfs hook`: the command hooks of Claude Code and the Qoder CLI, for users of the plain
//! CLIs (`rewindfs setup claude|qoder` writes them into a settings file). The Qoder CLI's hooks
//! have Claude Code's events and fields, with `request_set_id` where Claude Code has
//! `prompt_id` (tests/clients/qoder/WIRE.md).
//!
//! What each event tells the daemon (tests/clients/FINDINGS.md records what the CLI sends):
//! - **UserPromptSubmit**: the CLI that runs the hook (`$CLAUDE_PID`) is the agent, and the
//!   prompt's checkpoint begins now, under the hooks' `prompt_id` (`begin_prompt`). Hooks are
//!   synchronous, so nothing of the turn has run yet — but the prompt's message uuid is not in
//!   the transcript yet either (the CLI writes it after this hook returns), so the hook does
//!   not wait for it: the checkpoint takes the uuid later.
//! - **PreToolUse / PostToolUse / PostToolUseFailure**: a tool span opens or closes
//!   (`tool_use`); a tool that fails after PreToolUse may get no PostToolUse at all, so the
//!   daemon also ends a session's open file-tool spans at its next tool call and turn end.
//! - **Stop / SessionEnd**: the turn ended (`end_turn`): every span it left open ends.
//! - After each, the prompts of the session still without a uuid (the daemon's reply lists
//!   them) are looked up in the transcript, whose entries carry `promptId`, and bound
//!   (`bind_message`): the transcript shows a prompt by its first PostToolUse as a rule and
//!   always by Stop, so a turn without tools is bound too.
//!
//! A hook never blocks the agent: if the daemon is down it warns and lets the tool run. It
//! costs a process start and two or three socket round trips, a few milliseconds.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::control::client::{Client, ClientError};
use crate::control::cmd::{
    BeginMessage, BeginPrompt, BindMessage, EndTurn, Phase, RegisterAgent, Status, ToolUse,
};

/// The Claude Code process that runs the hook: `$CLAUDE_PID` (set by the CLI for its hooks),
/// else our parent, or its parent when the hook was started through a shell.
fn agent_pid() -> Option<u32> {
    if let Some(pid) = std::env::var("CLAUDE_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .filter(|p| *p > 1 && crate::sys::process_alive(*p))
    {
        return Some(pid);
    }
    let parent = crate::sys::parent_pid(std::process::id())?;
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
    if matches!(comm.trim(), "sh" | "bash" | "dash" | "zsh") {
        crate::sys::parent_pid(parent).filter(|p| *p > 1)
    } else {
        Some(parent)
    }
}

/// What the hook did, for tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HookReport {
    /// The checkpoint it began (a prompt_id, or a message uuid for CLIs without prompt_id).
    pub began: Option<String>,
    /// `(prompt_id, message uuid)` pairs it bound.
    pub bound: Vec<(String, String)>,
    /// The span it opened or closed: `(phase, tool_use_id)`.
    pub span: Option<(String, String)>,
    /// The agent pid it registered.
    pub agent: Option<u32>,
}

/// Handles one hook invocation on an open client. `wait` bounds how long a CLI that sends no
/// `prompt_id` (older than the ones FINDINGS.md describes) has its transcript waited for.
///
/// # Errors
/// Talking to the daemon failed.
pub fn handle(
    client: &mut Client,
    input: &Value,
    wait: Duration,
) -> Result<HookReport, ClientError> {
    let mut report = HookReport::default();
    let event = input["hook_event_name"].as_str().unwrap_or("");
    let session = input["session_id"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    // Claude Code's `prompt_id`, or the Qoder CLI's `request_set_id`: a key the prompt's
    // transcript entry carries too, to learn its message uuid from later (`transcript.rs`).
    let prompt_id = input["prompt_id"]
        .as_str()
        .or_else(|| input["request_set_id"].as_str())
        .filter(|p| !p.is_empty());
    let transcript = input["transcript_path"].as_str().map(Path::new);
    let unbound = match event {
        "UserPromptSubmit" => {
            if let Some(pid) = agent_pid() {
                let session_id = Some(session.clone());
                if client.call(&RegisterAgent { pid, session_id }).is_ok() {
                    report.agent = Some(pid);
                }
            }
            match prompt_id {
                Some(p) => {
                    let r = client.call(&BeginPrompt {
                        session_id: session.clone(),
                        prompt_id: p.to_string(),
                        prompt: input["prompt"].as_str().map(str::to_string),
                        transcript_path: transcript.map(|t| t.display().to_string()),
                    })?;
                    report.began = Some(r.checkpoint);
                    r.unbound_prompt_ids
                }
                None => {
                    report.began = begin_from_transcript(client, &session, transcript, wait)?;
                    Vec::new()
                }
            }
        }
        "PreToolUse" | "PostToolUse" | "PostToolUseFailure" => {
            let tool = input["tool_name"].as_str().unwrap_or("").to_string();
            let id = input["tool_use_id"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("hook-{tool}"));
            let ti = &input["tool_input"];
            let file = ti["file_path"]
                .as_str()
                .or_else(|| ti["notebook_path"].as_str());
            let phase = if event == "PreToolUse" {
                Phase::Pre
            } else {
                Phase::Post
            };
            let r = client.call(&ToolUse {
                phase,
                tool_name: tool,
                tool_use_id: id.clone(),
                file_path: file.map(str::to_string),
                session_id: Some(session.clone()),
            })?;
            let phase = if phase == Phase::Pre { "pre" } else { "post" };
            report.span = Some((phase.to_string(), id));
            r.unbound_prompt_ids
        }
        "Stop" | "SessionEnd" | "StopFailure" => {
            client
                .call(&EndTurn {
                    session_id: session.clone(),
                })?
                .unbound_prompt_ids
        }
        _ => Vec::new(),
    };
    if let Some(t) = transcript {
        report.bound = bind_unbound(client, t, unbound)?;
    }
    Ok(report)
}

/// Binds the prompts in `unbound` whose entries the transcript shows.
fn bind_unbound(
    client: &mut Client,
    transcript: &Path,
    unbound: Vec<String>,
) -> Result<Vec<(String, String)>, ClientError> {
    if unbound.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: HashSet<String> = unbound.into_iter().collect();
    // Not there yet (the first hook of a session can run before the file exists): a later
    // hook binds them.
    let Ok(found) = crate::host::transcript::prompt_uuids(transcript, &wanted) else {
        return Ok(Vec::new());
    };
    let mut bound = Vec::new();
    for (prompt_id, uuid) in found {
        match client.call(&BindMessage {
            prompt_id: prompt_id.clone(),
            user_message_id: uuid.clone(),
        }) {
            Ok(_) => bound.push((prompt_id, uuid)),
            // Refused (bound elsewhere, uuid taken): the daemon said why; the tool goes on.
            Err(ClientError::Daemon(m, _)) => eprintln!("rewindfs hook: warning: {m}"),
            Err(e) => return Err(e),
        }
    }
    bound.sort();
    Ok(bound)
}

/// For CLIs whose hooks carry no `prompt_id`: begins the checkpoint of the latest typed prompt
/// the transcript shows, waiting up to `wait` for it to appear (racy: the CLI writes the
/// entry after this hook returns; current CLIs send `prompt_id` and never take this path).
fn begin_from_transcript(
    client: &mut Client,
    session: &str,
    transcript: Option<&Path>,
    wait: Duration,
) -> Result<Option<String>, ClientError> {
    let Some(transcript) = transcript else {
        return Ok(None);
    };
    let current = client.call(&Status {})?.current_checkpoint;
    let deadline = Instant::now() + wait;
    loop {
        match crate::host::transcript::latest_prompt_uuid(transcript) {
            Some(u) if u != current => {
                return match client.call(&BeginMessage {
                    session_id: session.to_string(),
                    user_message_id: u.clone(),
                }) {
                    Ok(_) => Ok(Some(u)),
                    Err(ClientError::Daemon(m, _)) if m.contains("already began") => Ok(None),
                    Err(e) => Err(e),
                };
            }
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(25)),
            _ => return Ok(None),
        }
    }
}
