//! Agent CLI session transcripts (Claude Code's `~/.claude/projects/<dir>/<session>.jsonl`, the
//! Qoder CLI's `~/.qoder/projects/<dir>/<session>.jsonl`): where the uuid of a typed prompt's
//! user message can be read once the CLI has written it.
//!
//! Both CLIs append a prompt's entry only after its UserPromptSubmit hooks have returned, so
//! those hooks cannot see it; but the entry carries the key the hooks were given: Claude Code's
//! `promptId`, equal to the `prompt_id` every hook of that prompt receives
//! (tests/clients/FINDINGS.md §3), and the Qoder CLI's `requestSetId`, equal to its
//! UserPromptSubmit hook's `request_set_id` (tests/clients/qoder/WIRE.md). That pair is how a
//! checkpoint begun at UserPromptSubmit learns its message uuid later.
//!
//! Only lines that contain one of the wanted prompt ids are parsed, so a long transcript costs
//! one read and a substring search per line.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

/// The uuid of the typed prompt of each of `prompt_ids` that `transcript` shows (prompts not
/// written yet are absent from the map). A prompt's tool results are `user` entries with the
/// same `promptId`; they are not the prompt.
///
/// # Errors
/// The transcript cannot be opened or read.
pub fn prompt_uuids(
    transcript: &Path,
    prompt_ids: &HashSet<String>,
) -> std::io::Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    if prompt_ids.is_empty() {
        return Ok(out);
    }
    let f = std::fs::File::open(transcript)?;
    for line in BufReader::new(f).split(b'\n') {
        let line = line?;
        let Ok(text) = std::str::from_utf8(&line) else {
            continue;
        };
        if !(text.contains("\"promptId\"") || text.contains("\"requestSetId\""))
            || !prompt_ids.iter().any(|id| text.contains(id.as_str()))
        {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            continue; // a line being written
        };
        let Some(uuid) = v["uuid"].as_str() else {
            continue;
        };
        // Qoder's entries carry both: its own `promptId` (which no hook is given) and the
        // `requestSetId` its hooks are.
        for key in [&v["promptId"], &v["requestSetId"]] {
            if let Some(pid) = key.as_str() {
                if prompt_ids.contains(pid) && is_typed_prompt(&v) && !out.contains_key(pid) {
                    out.insert(pid.to_string(), uuid.to_string());
                }
            }
        }
    }
    Ok(out)
}

/// The uuid of the latest typed user prompt in a transcript, if any (for hooks of CLIs that
/// send no `prompt_id`).
pub fn latest_prompt_uuid(transcript: &Path) -> Option<String> {
    let f = std::fs::File::open(transcript).ok()?;
    let mut last = None;
    for line in BufReader::new(f).lines() {
        let Ok(line) = line else { continue };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if is_typed_prompt(&v) {
            if let Some(u) = v["uuid"].as_str() {
                last = Some(u.to_string());
            }
        }
    }
    last
}

/// A `user` entry that is what someone typed: not meta, not a tool result.
fn is_typed_prompt(v: &Value) -> bool {
    if v["type"] != "user" || v["isMeta"] == Value::Bool(true) {
        return false;
    }
    match &v["message"]["content"] {
        Value::String(_) => true,
        Value::Array(items) => {
            !items.is_empty() && items.iter().all(|i| i["type"] != "tool_result")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompts_uuid_is_found_by_its_prompt_id_and_tool_results_are_not_prompts() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("s.jsonl");
        let lines = [
            r#"{"type":"user","promptId":"p1","uuid":"u1","message":{"role":"user","content":"first"}}"#,
            r#"{"type":"file-history-snapshot","messageId":"u1"}"#,
            r#"{"type":"assistant","uuid":"a1","message":{"content":[{"type":"tool_use"}]}}"#,
            r#"{"type":"user","promptId":"p1","uuid":"r1","message":{"content":[{"type":"tool_result","content":"ok"}]}}"#,
            r#"{"type":"user","isMeta":true,"promptId":"p2","uuid":"m2","message":{"content":"meta"}}"#,
            r#"{"type":"user","promptId":"p2","uuid":"u2","message":{"content":[{"type":"text","text":"second"}]}}"#,
            r#"{"type":"user","promptId":"p3","uuid":"u3","mess"#,
        ];
        std::fs::write(&t, lines.join("\n")).unwrap();
        let want: HashSet<String> = ["p1", "p2", "p3", "p4"].map(String::from).into();
        let got = prompt_uuids(&t, &want).unwrap();
        assert_eq!(got.get("p1").map(String::as_str), Some("u1"));
        assert_eq!(
            got.get("p2").map(String::as_str),
            Some("u2"),
            "not the meta entry"
        );
        assert_eq!(
            got.len(),
            2,
            "a torn last line and an unwritten prompt are absent: {got:?}"
        );
        assert_eq!(latest_prompt_uuid(&t).as_deref(), Some("u2"));
    }

    /// The Qoder CLI's typed prompt carries `requestSetId` (its hooks' `request_set_id`); its
    /// tool results carry its own `promptId`, never given to hooks.
    #[test]
    fn a_qoder_prompts_uuid_is_found_by_its_request_set_id() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("s.jsonl");
        let lines = [
            r#"{"type":"user","uuid":"m1","promptId":"own-1","requestSetId":"rs1","origin":{"kind":"human"},"message":{"role":"user","content":[{"type":"text","text":"first"}]}}"#,
            r#"{"type":"user","uuid":"r1","promptId":"own-1","message":{"content":[{"type":"tool_result","content":"ok"}]}}"#,
        ];
        std::fs::write(&t, lines.join("\n")).unwrap();
        let want: HashSet<String> = ["rs1", "own-1"].map(String::from).into();
        let got = prompt_uuids(&t, &want).unwrap();
        assert_eq!(got.get("rs1").map(String::as_str), Some("m1"));
    }
}
