//! `rewindfs hook`: Claude Code's hooks (UserPromptSubmit, PreToolUse, PostToolUse) for users
//! of the plain CLI.
//!
//! The hook reads the hook's JSON on stdin and tells the daemon:
//! - the current user message (its uuid read from the session transcript: the latest entry of
//!   type `user` that is a typed prompt, not a tool result), as `begin_message` — before the
//!   tool runs, so no tool call can run ahead of its checkpoint (hooks are synchronous);
//! - `tool_use` spans (`pre`/`post`, tool name, id and file path);
//! - the agent's pid (the CLI that spawned the hook), as `register_agent`.
//!
//! It never blocks the agent: if the daemon is down it warns and lets the tool run.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::control::client::{Client, ClientError};
use crate::control::cmd::{BeginMessage, Phase, RegisterAgent, Status, ToolUse};

/// The uuid of the latest typed user prompt in a transcript (JSONL), if any.
pub fn latest_prompt_uuid(transcript: &Path) -> Option<String> {
    let f = std::fs::File::open(transcript).ok()?;
    let mut last = None;
    for line in BufReader::new(f).lines() {
        let Ok(line) = line else { continue };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["type"] != "user" || v["isMeta"] == json!(true) {
            continue;
        }
        let content = &v["message"]["content"];
        let is_prompt = match content {
            Value::String(_) => true,
            Value::Array(items) => {
                !items.is_empty() && items.iter().all(|i| i["type"] != "tool_result")
            }
            _ => false,
        };
        if is_prompt {
            if let Some(u) = v["uuid"].as_str() {
                last = Some(u.to_string());
            }
        }
    }
    last
}

/// The Claude Code process that ran the hook: our parent, or its parent when the hook was
/// started through a shell.
fn agent_pid() -> Option<u32> {
    let parent = crate::sys::parent_pid(std::process::id())?;
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
    if matches!(comm.trim(), "sh" | "bash" | "dash" | "zsh") {
        crate::sys::parent_pid(parent).filter(|p| *p > 1)
    } else {
        Some(parent)
    }
}

/// What the hook did, for tests and `--verbose`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HookReport {
    pub began: Option<String>,
    pub span: Option<(String, String)>,
    pub agent: Option<u32>,
}

/// Handles one hook invocation on an open client. `wait` bounds how long a lagging
/// transcript is waited for.
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
    if let Some(pid) = agent_pid() {
        if client.call(&RegisterAgent { pid }).is_ok() {
            report.agent = Some(pid);
        }
    }
    if let Some(t) = input["transcript_path"].as_str() {
        let transcript = Path::new(t);
        let current = client.call(&Status {})?.current_checkpoint;
        let deadline = Instant::now() + wait;
        loop {
            match latest_prompt_uuid(transcript) {
                Some(u) if u != current => {
                    match client.call(&BeginMessage {
                        session_id: session.clone(),
                        user_message_id: u.clone(),
                    }) {
                        Ok(_) => report.began = Some(u),
                        // Already begun earlier (e.g. by UserPromptSubmit): nothing to do.
                        Err(ClientError::Daemon(m)) if m.contains("already began") => {}
                        Err(e) => return Err(e),
                    }
                    break;
                }
                // UserPromptSubmit fires before the prompt is in the transcript: wait for it.
                _ if event == "UserPromptSubmit" && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(25))
                }
                _ => break,
            }
        }
    }
    if event == "PreToolUse" || event == "PostToolUse" {
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
        client.call(&ToolUse {
            phase,
            tool_name: tool,
            tool_use_id: id.clone(),
            file_path: file.map(str::to_string),
        })?;
        let phase = if phase == Phase::Pre { "pre" } else { "post" };
        report.span = Some((phase.to_string(), id));
    }
    Ok(report)
}
