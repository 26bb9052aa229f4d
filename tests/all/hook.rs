//! `rewindfs hook` against recorded hook JSON and transcripts, and `rewindfs exec`.

use std::fs;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::agent::uuid;
use crate::support::{BIN, Mounted, is_fuse, require_fuse};

fn run_hook(m: &Mounted, input: &serde_json::Value) -> std::process::Output {
    let mut child = Command::new(BIN)
        .arg("hook")
        .current_dir(&m.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn line(v: serde_json::Value) -> String {
    format!("{v}\n")
}

#[test]
fn the_hook_begins_the_typed_prompts_checkpoint_and_opens_tool_spans() {
    require_fuse();
    let m = Mounted::new();
    let transcript = m.tmp.path().join("t.jsonl");
    let (prompt, tool_result) = (uuid(), uuid());
    let mut t = String::new();
    t += &line(
        json!({"type": "user", "uuid": prompt, "message": {"role": "user", "content": "add a file"}}),
    );
    t += &line(
        json!({"type": "assistant", "uuid": uuid(), "message": {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1"}]}}),
    );
    t += &line(
        json!({"type": "user", "uuid": tool_result, "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}}),
    );
    fs::write(&transcript, t).unwrap();
    let target = m.p("new.txt");
    let pre = json!({
        "hook_event_name": "PreToolUse", "session_id": "sess-1", "transcript_path": transcript, "cwd": m.dir,
        "tool_name": "Write", "tool_use_id": "toolu_2", "tool_input": {"file_path": target, "content": "x"}
    });
    let out = run_hook(&m, &pre);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let st = c.request("status", json!({})).unwrap();
    assert_eq!(
        st["currentCheckpoint"],
        json!(prompt),
        "the typed prompt, not the tool result"
    );
    assert_eq!(st["sessionId"], json!("sess-1"));
    assert_eq!(
        st["agentPids"],
        json!([std::process::id()]),
        "the process that ran the hook is the agent"
    );
    // While the span is open, a write of its file is the tool's even from a child process.
    crate::support::sh(&m.dir, "echo x > new.txt");
    let post = json!({"hook_event_name": "PostToolUse", "session_id": "sess-1", "transcript_path": transcript, "cwd": m.dir,
        "tool_name": "Write", "tool_use_id": "toolu_2", "tool_input": {"file_path": target}});
    assert!(run_hook(&m, &post).status.success());
    let log = c.request("log", json!({"path": "new.txt"})).unwrap();
    assert!(
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["actor"] == json!("tool"))
    );
    // Tool scope sees it: rewinding to the prompt removes the tool-created file.
    let r = c
        .request(
            "rewind_files",
            json!({"user_message_id": prompt, "dry_run": true}),
        )
        .unwrap();
    assert_eq!(r["filesChanged"], json!([m.dir.join("new.txt")]));
}

#[test]
fn user_prompt_submit_waits_for_a_lagging_transcript() {
    require_fuse();
    let m = Mounted::new();
    let transcript = m.tmp.path().join("t.jsonl");
    fs::write(&transcript, "").unwrap();
    let next = uuid();
    let tr = transcript.clone();
    let n2 = next.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        fs::write(&tr, line(json!({"type": "user", "uuid": n2, "message": {"role": "user", "content": "hello"}}))).unwrap();
    });
    let ev = json!({"hook_event_name": "UserPromptSubmit", "session_id": "s", "transcript_path": transcript, "cwd": m.dir, "prompt": "hello"});
    let out = run_hook(&m, &ev);
    writer.join().unwrap();
    assert!(out.status.success());
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    assert_eq!(
        c.request("status", json!({})).unwrap()["currentCheckpoint"],
        json!(next)
    );
}

#[test]
fn the_hook_never_blocks_the_agent_when_the_daemon_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["hook", "--socket"])
        .arg(tmp.path().join("nope.sock"))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"hook_event_name":"PreToolUse","tool_name":"Write","tool_input":{}}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
}

#[test]
fn exec_mounts_runs_the_command_as_the_agent_and_passes_its_exit_code() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    let store = tmp.path().join("s");
    fs::create_dir(&dir).unwrap();
    let out = Command::new(BIN)
        .args([
            "exec",
            dir.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--",
        ])
        .args([
            "bash",
            "-c",
            "test -S \"$REWINDFS_SOCKET\" && echo made > f.txt && exit 3",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_fuse(&dir), "unmounted after the command");
    assert_eq!(fs::read_to_string(dir.join("f.txt")).unwrap(), "made\n");
    let db = rusqlite::Connection::open(store.join("rewindfs.db")).unwrap();
    let actor: String = db
        .query_row(
            "SELECT actor FROM changes WHERE path = CAST('f.txt' AS BLOB) LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(actor, "tool", "the command itself is the agent");
}

/// `rewindfs exec` from outside the workspace starts the command at its root, and from a
/// directory inside it (entered before the mount, so underneath it) at the same place, through
/// the mount: its writes are in the log.
#[test]
fn exec_runs_the_command_inside_the_mount_at_the_callers_place() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p");
    fs::create_dir_all(dir.join("sub")).unwrap();
    let exec = |store: &str, cwd: &std::path::Path, file: &str| {
        let out = Command::new(BIN)
            .args(["exec", dir.to_str().unwrap(), "--store"])
            .arg(tmp.path().join(store))
            .args(["--", "bash", "-c"])
            .arg(format!(
                "set -e; pwd; test \"$(stat -f -c %t .)\" = 65735546; echo made > {file}; \"$RW\" log"
            ))
            .env("RW", BIN)
            .current_dir(cwd)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "exec from {}: {}\n{stdout}{}",
            cwd.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };

    let out = exec("s1", tmp.path(), "top.txt");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some(dir.to_str().unwrap()),
        "starts at the root: {out}"
    );
    assert!(
        lines.any(|l| l.contains(" top.txt ")),
        "the write is recorded: {out}"
    );
    assert!(dir.join("top.txt").exists() && !tmp.path().join("top.txt").exists());

    let sub = dir.join("sub");
    let out = exec("s2", &sub, "inner.txt");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some(sub.to_str().unwrap()),
        "starts in sub: {out}"
    );
    assert!(
        lines.any(|l| l.contains(" sub/inner.txt ")),
        "the write is recorded: {out}"
    );
    assert!(sub.join("inner.txt").exists());
    assert!(!is_fuse(&dir), "unmounted after the command");
}
