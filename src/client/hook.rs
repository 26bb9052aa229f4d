//! `rewindfs hook`: the command hooks of Claude Code, the Qoder CLI, the Codex CLI and the Gemini
//! CLI, for users of the plain CLIs (`rewindfs setup claude|qoder|codex|gemini` writes them into
//! the CLI's settings). One command serves all four: the CLI is told by its events and fields.
//! The Qoder CLI's hooks have Claude Code's events and fields, with `request_set_id` where
//! Claude Code has `prompt_id` (tests/clients/qoder/WIRE.md); Codex has Claude Code's event names
//! with a `turn_id`; Gemini has events of its own (`../shared/agents.md` records both).
//!
//! What each event tells the daemon (tests/clients/FINDINGS.md records what Claude Code sends):
//! - **A prompt begins** (UserPromptSubmit; Gemini's BeforeAgent): the CLI that runs the hook
//!   (`$CLAUDE_PID`, else the hook's parent) is the agent, and the prompt's checkpoint begins
//!   now. Every one of these hooks is synchronous (measured for each CLI), so nothing of the
//!   turn has run yet.
//!   - Claude Code and Qoder: under the hooks' `prompt_id` (`begin_prompt`). The prompt's
//!     message uuid is not in the transcript yet (the CLI writes it after this hook returns),
//!     so the hook does not wait for it: the checkpoint takes the uuid later.
//!   - Codex: under its `turn_id`, which is the turn's id for good (bound at once).
//!   - Gemini: its hooks carry no id of the prompt, so the hook makes one (a fresh UUID).
//! - **A tool call** (PreToolUse / PostToolUse / PostToolUseFailure; Claude Code's
//!   PreSkillShellCommand, a skill's shell line, which gets no Post; Gemini's BeforeTool /
//!   AfterTool): a tool span opens or closes (`tool_use`), naming the files a file tool writes
//!   (Codex's `apply_patch` names them in its patch). A tool that fails after PreToolUse may get
//!   no PostToolUse at all, so the daemon also ends a session's open file-tool spans at its
//!   next tool call and turn end.
//! - **The turn ends** (Stop, SessionEnd; Gemini's AfterAgent): every span it left open ends.
//! - After each, the Claude Code and Qoder prompts of the session still without a uuid (the
//!   daemon's reply lists them) are looked up in the transcript, whose entries carry
//!   `promptId`, and bound (`bind_message`): the transcript shows a prompt by its first
//!   PostToolUse as a rule and always by Stop, so a turn without tools is bound too.
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
    let unbound = match Event::of(event) {
        Some(Event::Prompt) => {
            if let Some(pid) = agent_pid() {
                let session_id = Some(session.clone());
                if client.call(&RegisterAgent { pid, session_id }).is_ok() {
                    report.agent = Some(pid);
                }
            }
            let prompt = input["prompt"].as_str().map(str::to_string);
            match (prompt_id, turn_id(event, input)) {
                (Some(p), _) => {
                    let r = client.call(&BeginPrompt {
                        session_id: session.clone(),
                        prompt_id: p.to_string(),
                        prompt,
                        transcript_path: transcript.map(|t| t.display().to_string()),
                    })?;
                    report.began = Some(r.checkpoint);
                    r.unbound_prompt_ids
                }
                (None, Some(turn)) => {
                    report.began = Some(begin_turn(client, &session, &turn, prompt)?);
                    Vec::new()
                }
                (None, None) => {
                    report.began = begin_from_transcript(client, &session, transcript, wait)?;
                    Vec::new()
                }
            }
        }
        Some(phase @ (Event::Pre | Event::Post)) => {
            let tool = input["tool_name"].as_str().unwrap_or("").to_string();
            let ti = &input["tool_input"];
            let id = input["tool_use_id"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| span_id(&tool, ti));
            let mut files = tool_files(&tool, ti, input["cwd"].as_str());
            let first = (!files.is_empty()).then(|| files.remove(0));
            let phase = if phase == Event::Pre {
                Phase::Pre
            } else {
                Phase::Post
            };
            let r = client.call(&ToolUse {
                phase,
                tool_name: tool,
                tool_use_id: id.clone(),
                file_path: first,
                file_paths: files,
                session_id: Some(session.clone()),
            })?;
            let phase = if phase == Phase::Pre { "pre" } else { "post" };
            report.span = Some((phase.to_string(), id));
            r.unbound_prompt_ids
        }
        Some(Event::End) => {
            client
                .call(&EndTurn {
                    session_id: session.clone(),
                })?
                .unbound_prompt_ids
        }
        None => Vec::new(),
    };
    if let Some(t) = transcript {
        report.bound = bind_unbound(client, t, unbound)?;
    }
    Ok(report)
}

/// What a hook event means, whichever CLI sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// A prompt was submitted; nothing of its turn has run.
    Prompt,
    /// A tool call starts.
    Pre,
    /// A tool call ended (or failed).
    Post,
    /// The turn (or the session) ended.
    End,
}

impl Event {
    fn of(name: &str) -> Option<Event> {
        Some(match name {
            "UserPromptSubmit" | "BeforeAgent" => Event::Prompt,
            // A skill's or slash command's shell line (Claude Code 2.1.332) is about to run in
            // a child of the CLI: its writes are `shell` by the process tree; as a new tool
            // call it ends the session's open file-tool spans, so they cannot take it for a
            // Write's (tests/clients/findings_2_1_332/NOTES.md).
            "PreToolUse" | "BeforeTool" | "PreSkillShellCommand" => Event::Pre,
            "PostToolUse" | "PostToolUseFailure" | "AfterTool" => Event::Post,
            "Stop" | "StopFailure" | "SessionEnd" | "AfterAgent" => Event::End,
            _ => return None,
        })
    }
}

/// The id a prompt's checkpoint takes for good, for CLIs without a transcript to learn one
/// from: Codex's `turn_id`; for Gemini's BeforeAgent, which names no turn, a fresh UUID.
fn turn_id(event: &str, input: &Value) -> Option<String> {
    if let Some(t) = input["turn_id"].as_str().filter(|t| !t.is_empty()) {
        return Some(t.to_string());
    }
    (event == "BeforeAgent").then(|| uuid::Uuid::new_v4().to_string())
}

/// Begins a turn's checkpoint under `turn` and binds it to that same id at once: it answers to
/// it for good, and no transcript is read for it.
fn begin_turn(
    client: &mut Client,
    session: &str,
    turn: &str,
    prompt: Option<String>,
) -> Result<String, ClientError> {
    let r = client.call(&BeginPrompt {
        session_id: session.to_string(),
        prompt_id: turn.to_string(),
        prompt,
        transcript_path: None,
    })?;
    client.call(&BindMessage {
        prompt_id: turn.to_string(),
        user_message_id: turn.to_string(),
    })?;
    Ok(r.checkpoint)
}

/// A span's id when the hook gives none (Gemini's): the tool and its input, which its
/// BeforeTool and AfterTool both carry, so the two name the same span.
fn span_id(tool: &str, tool_input: &Value) -> String {
    let hash = blake3::hash(tool_input.to_string().as_bytes());
    format!("hook-{tool}-{}", &hash.to_hex()[..16])
}

/// The files a file tool call writes: `file_path` (Claude Code's Write/Edit, Gemini's
/// write_file/replace), `notebook_path`, or every file a Codex `apply_patch` names. Relative
/// paths are taken from the hook's `cwd` (the agent's working directory).
fn tool_files(tool: &str, tool_input: &Value, cwd: Option<&str>) -> Vec<String> {
    let mut files: Vec<String> = ["file_path", "notebook_path"]
        .iter()
        .filter_map(|k| tool_input[*k].as_str())
        .map(str::to_string)
        .collect();
    if tool == "apply_patch" {
        let patch = tool_input["command"]
            .as_str()
            .or_else(|| tool_input["input"].as_str())
            .or_else(|| tool_input.as_str())
            .unwrap_or("");
        files.extend(patch_files(patch));
    }
    files
        .into_iter()
        .map(|f| match cwd {
            Some(cwd) if !Path::new(&f).is_absolute() => {
                Path::new(cwd).join(&f).display().to_string()
            }
            _ => f,
        })
        .collect()
}

/// The paths an `apply_patch` patch adds, updates, deletes or moves to (its `*** Add File:`,
/// `*** Update File:`, `*** Delete File:` and `*** Move to:` lines).
fn patch_files(patch: &str) -> Vec<String> {
    const HEADERS: &[&str] = &[
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    patch
        .lines()
        .filter_map(|l| HEADERS.iter().find_map(|h| l.strip_prefix(h)))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_clis_events_mean_the_same_four_things() {
        for (names, e) in [
            (&["UserPromptSubmit", "BeforeAgent"][..], Event::Prompt),
            (
                &["PreToolUse", "BeforeTool", "PreSkillShellCommand"][..],
                Event::Pre,
            ),
            (
                &["PostToolUse", "PostToolUseFailure", "AfterTool"][..],
                Event::Post,
            ),
            (
                &["Stop", "StopFailure", "SessionEnd", "AfterAgent"][..],
                Event::End,
            ),
        ] {
            for n in names {
                assert_eq!(Event::of(n), Some(e), "{n}");
            }
        }
        assert_eq!(Event::of("SessionStart"), None);
        assert_eq!(Event::of("BeforeModel"), None);
    }

    #[test]
    fn a_codex_turn_keeps_its_id_and_a_gemini_prompt_gets_a_fresh_one() {
        let codex = json!({"turn_id": "019f-turn", "prompt": "x"});
        assert_eq!(
            turn_id("UserPromptSubmit", &codex).as_deref(),
            Some("019f-turn")
        );
        // Claude Code's UserPromptSubmit has no turn_id: its checkpoint waits for a uuid.
        assert_eq!(turn_id("UserPromptSubmit", &json!({"prompt": "x"})), None);
        let a = turn_id("BeforeAgent", &json!({"prompt": "x"})).unwrap();
        let b = turn_id("BeforeAgent", &json!({"prompt": "x"})).unwrap();
        assert!(uuid::Uuid::parse_str(&a).is_ok() && a != b, "{a} {b}");
    }

    #[test]
    fn an_apply_patch_names_every_file_it_touches_from_the_agents_cwd() {
        let patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** Update File: src/b.rs\n*** Move to: src/c.rs\n@@\n-x\n+y\n*** Delete File: /abs/d\n*** End Patch\n";
        let files = tool_files("apply_patch", &json!({"command": patch}), Some("/w/sub"));
        assert_eq!(
            files,
            [
                "/w/sub/a.txt",
                "/w/sub/src/b.rs",
                "/w/sub/src/c.rs",
                "/abs/d"
            ]
        );
        // Gemini's write_file names its file; a shell command names none.
        let w = tool_files("write_file", &json!({"file_path": "x.txt"}), Some("/w"));
        assert_eq!(w, ["/w/x.txt"]);
        assert!(tool_files("Bash", &json!({"command": patch}), Some("/w")).is_empty());
        // Gemini's BeforeTool and AfterTool carry no id but the same input: one span.
        let ti = json!({"file_path": "x.txt", "content": "1"});
        assert_eq!(
            span_id("write_file", &ti),
            span_id("write_file", &ti.clone())
        );
        assert_ne!(
            span_id("write_file", &ti),
            span_id("write_file", &json!({}))
        );
    }
}
