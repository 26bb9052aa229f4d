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
        // As the CLI sets it for its hooks: this test process plays the CLI.
        .env("CLAUDE_PID", std::process::id().to_string())
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

/// The prompt's entry as the CLI writes it to the transcript (tests/clients/FINDINGS.md §3),
/// and a tool result of the same prompt (a `user` entry with the same promptId).
fn prompt_entries(prompt_id: &str, uuid: &str, text: &str) -> String {
    line(
        json!({"parentUuid": null, "promptId": prompt_id, "type": "user", "uuid": uuid,
        "message": {"role": "user", "content": text}, "sessionId": "sess-1"}),
    ) + &line(json!({"type": "file-history-snapshot", "messageId": uuid}))
        + &line(
            json!({"type": "user", "promptId": prompt_id, "uuid": crate::agent::uuid(),
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}}),
        )
}

fn append(path: &std::path::Path, text: &str) {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn hook_ok(m: &Mounted, ev: serde_json::Value) {
    let out = run_hook(m, &ev);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{ev}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The race the real CLI has (FINDINGS §3): the prompt's entry reaches the transcript only
/// after UserPromptSubmit, and usually after the turn's first PreToolUse. The checkpoint must
/// begin at UserPromptSubmit anyway, hold the turn's first change, and answer to the message
/// uuid once a later hook sees the entry.
#[test]
fn a_prompt_begins_at_submit_and_takes_its_uuid_when_the_transcript_shows_it() {
    require_fuse();
    let m = Mounted::new();
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let transcript = m.tmp.path().join("t.jsonl"); // not written yet, as at a session's start
    let (prompt_id, message) = (uuid(), uuid());
    let base = json!({"session_id": "sess-1", "transcript_path": transcript, "cwd": m.dir,
        "prompt_id": prompt_id, "permission_mode": "bypassPermissions"});
    let with = |extra: serde_json::Value| {
        let mut v = base.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    hook_ok(
        &m,
        with(json!({"hook_event_name": "UserPromptSubmit", "prompt": "add a file\nand more"})),
    );
    let st = c.request("status", json!({})).unwrap();
    assert_eq!(
        st["currentCheckpoint"],
        json!(prompt_id),
        "begun at submit, under prompt_id"
    );
    assert_eq!(st["sessionId"], json!("sess-1"));
    assert_eq!(
        st["agentPids"],
        json!([std::process::id()]),
        "$CLAUDE_PID is the agent"
    );
    // The first tool call runs before the transcript shows the prompt.
    let target = m.p("new.txt");
    let tool = json!({"tool_name": "Write", "tool_use_id": "toolu_1", "tool_input": {"file_path": target, "content": "x"}});
    hook_ok(
        &m,
        with(json!({"hook_event_name": "PreToolUse"}))
            .as_object()
            .unwrap()
            .clone()
            .into_iter()
            .chain(tool.as_object().unwrap().clone())
            .collect(),
    );
    crate::support::sh(&m.dir, "echo x > new.txt");
    append(
        &transcript,
        &prompt_entries(&prompt_id, &message, "add a file\nand more"),
    );
    hook_ok(
        &m,
        with(json!({"hook_event_name": "PostToolUse"}))
            .as_object()
            .unwrap()
            .clone()
            .into_iter()
            .chain(tool.as_object().unwrap().clone())
            .collect(),
    );
    let st = c.request("status", json!({})).unwrap();
    assert_eq!(
        st["currentCheckpoint"],
        json!(message),
        "bound by the next hook"
    );
    let log = c.request("log", json!({"path": "new.txt"})).unwrap();
    let entries = log["entries"].as_array().unwrap();
    assert!(
        !entries.is_empty()
            && entries
                .iter()
                .all(|e| e["actor"] == json!("tool") && e["checkpoint"] == json!(message)),
        "{log}"
    );
    let r = c
        .request(
            "rewind_files",
            json!({"user_message_id": message, "dry_run": true}),
        )
        .unwrap();
    assert_eq!(
        r["filesChanged"],
        json!([target]),
        "the turn's first change is in its checkpoint"
    );
    let list = c.request("list_checkpoints", json!({})).unwrap();
    let cp = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["uuid"] == json!(message))
        .cloned()
        .unwrap();
    assert_eq!(cp["prompt"], json!("add a file"), "its first line");
    assert_eq!(cp["bound"], json!(true));
}

/// A turn that runs no tool is bound at Stop and rewindable (the SDK can rewind to it); a tool
/// that fails after PreToolUse (no PostToolUse, as an Edit refused on a symlink) has its span
/// closed at Stop, so a later shell write to its file is the shell's; a prompt whose later
/// hooks never came is bound when a rewind names its uuid.
#[test]
fn a_turn_without_tools_is_bound_at_stop_and_a_span_left_open_ends_with_the_turn() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("f.txt"), "plain\n").unwrap());
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let transcript = m.tmp.path().join("t.jsonl");
    let ev = |event: &str, prompt_id: &str, extra: serde_json::Value| {
        let mut v = json!({"hook_event_name": event, "session_id": "sess-1", "transcript_path": transcript,
            "cwd": m.dir, "prompt_id": prompt_id});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let (p1, u1, p2, u2, p3, u3) = (uuid(), uuid(), uuid(), uuid(), uuid(), uuid());
    hook_ok(
        &m,
        ev("UserPromptSubmit", &p1, json!({"prompt": "what is 2+2?"})),
    );
    append(&transcript, &prompt_entries(&p1, &u1, "what is 2+2?"));
    hook_ok(&m, ev("Stop", &p1, json!({"stop_hook_active": false})));
    let dry = c
        .request(
            "rewind_files",
            json!({"user_message_id": u1, "dry_run": true}),
        )
        .unwrap();
    assert_eq!(dry["canRewind"], json!(true), "{dry}");
    assert_eq!(dry["filesChanged"], json!([]));

    hook_ok(
        &m,
        ev("UserPromptSubmit", &p2, json!({"prompt": "edit the link"})),
    );
    hook_ok(
        &m,
        ev(
            "PreToolUse",
            &p2,
            json!({"tool_name": "Edit", "tool_use_id": "toolu_9",
        "tool_input": {"file_path": m.p("f.txt"), "old_string": "plain", "new_string": "x"}}),
        ),
    );
    append(&transcript, &prompt_entries(&p2, &u2, "edit the link"));
    hook_ok(&m, ev("Stop", &p2, json!({})));
    crate::support::sh(&m.dir, "echo more >> f.txt");
    let log = c.request("log", json!({"path": "f.txt"})).unwrap();
    let actors: Vec<_> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["actor"].clone())
        .collect();
    assert!(
        !actors.is_empty() && actors.iter().all(|a| a == "shell"),
        "the span ended with the turn: the agent's child is the shell, not the tool: {log}"
    );

    hook_ok(&m, ev("UserPromptSubmit", &p3, json!({"prompt": "third"})));
    append(&transcript, &prompt_entries(&p3, &u3, "third"));
    let dry = c
        .request(
            "rewind_files",
            json!({"user_message_id": u3, "dry_run": true}),
        )
        .unwrap();
    assert_eq!(dry["canRewind"], json!(true), "bound when named: {dry}");
    assert_eq!(
        c.request("status", json!({})).unwrap()["currentCheckpoint"],
        json!(u3)
    );
}

/// Runs a `rewindfs setup` command, asserting success; returns its stdout.
fn setup_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rewindfs setup claude` writes the hooks into a project's settings once, and takes them out.
#[test]
fn setup_writes_the_hooks_once_and_removes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| setup_ok(Command::new(BIN).args(args).current_dir(tmp.path()));
    assert!(run(&["setup", "claude"]).contains("added the rewindfs hook for 7 event(s)"));
    assert!(run(&["setup", "claude"]).contains("there already"));
    let v: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(tmp.path().join(".claude/settings.json")).unwrap(),
    )
    .unwrap();
    let cmd = v["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cmd.ends_with("rewindfs hook") && cmd.starts_with('/'),
        "{cmd}"
    );
    for e in [
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "PreSkillShellCommand",
        "Stop",
        "SessionEnd",
    ] {
        assert_eq!(v["hooks"][e][0]["hooks"][0]["command"], json!(cmd), "{e}");
    }
    assert!(run(&["setup", "claude", "--remove"]).contains("removed 7"));
    let v: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(tmp.path().join(".claude/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(v, json!({}));
}

/// A CLI whose hooks carry no prompt_id (older than 2.1): UserPromptSubmit waits for the
/// transcript to show the prompt.
#[test]
fn without_a_prompt_id_user_prompt_submit_waits_for_a_lagging_transcript() {
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

/// A Codex session as its hooks report it (the input 0.171.0 gives, `../shared/agents.md`):
/// each turn's checkpoint begins at UserPromptSubmit under its `turn_id` for good, lists with
/// its prompt and place, `apply_patch` is the tool (named by its patch), and `rewind --turn N`
/// / `--last` need no uuid.
#[test]
fn codex_turns_begin_under_their_turn_id_and_rewind_by_place() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("keep.txt"), "kept\n").unwrap());
    let sock = m.socket().display().to_string();
    let ev = |event: &str, turn: &str, extra: serde_json::Value| {
        let mut v = json!({"hook_event_name": event, "session_id": "thread-1",
            "transcript_path": m.tmp.path().join("rollout.jsonl"), "cwd": m.dir,
            "model": "gpt-5.5", "permission_mode": "bypassPermissions", "turn_id": turn});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let (t1, t2) = (uuid(), uuid());
    hook_ok(
        &m,
        ev(
            "UserPromptSubmit",
            &t1,
            json!({"prompt": "add a.txt\nplease"}),
        ),
    );
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+one\n*** End Patch\n";
    let pre = json!({"tool_name": "apply_patch", "tool_use_id": "call_1",
        "tool_input": {"command": patch}});
    hook_ok(&m, ev("PreToolUse", &t1, pre.clone()));
    fs::write(m.p("a.txt"), "one\n").unwrap();
    hook_ok(&m, ev("PostToolUse", &t1, pre));
    hook_ok(&m, ev("Stop", &t1, json!({"stop_hook_active": false})));
    hook_ok(
        &m,
        ev("UserPromptSubmit", &t2, json!({"prompt": "shell work"})),
    );
    crate::support::sh(&m.dir, "echo two > a.txt; rm keep.txt");
    hook_ok(&m, ev("Stop", &t2, json!({})));

    let list = crate::support::rewindfs_ok(&["list", "--socket", &sock]);
    let row = |t: &str| list.lines().find(|l| l.starts_with(t)).map(str::to_string);
    let r1 = row(&t1).unwrap_or_else(|| panic!("{t1} in {list}"));
    assert!(
        r1.contains("#1 add a.txt") && !r1.contains("not known yet"),
        "{list}"
    );
    assert!(
        row(&t2).is_some_and(|r| r.contains("#2 shell work")),
        "{list}"
    );
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let log = c.request("log", json!({"path": "a.txt"})).unwrap();
    let a_txt: Vec<_> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["checkpoint"].clone(), e["actor"].clone()))
        .collect();
    assert!(
        a_txt.contains(&(json!(t1), json!("tool"))),
        "the patch's write is turn 1's tool change: {log}"
    );

    // --last: back to before turn 2 (the shell's work undone).
    crate::support::rewindfs_ok(&["rewind", "--last", "--scope", "agent", "--socket", &sock]);
    assert_eq!(fs::read_to_string(m.p("a.txt")).unwrap(), "one\n");
    assert_eq!(fs::read_to_string(m.p("keep.txt")).unwrap(), "kept\n");
    // --turn 1 in tool scope: what apply_patch wrote goes.
    crate::support::rewindfs_ok(&["rewind", "--turn", "1", "--socket", &sock]);
    assert!(!m.p("a.txt").exists());
    let e = crate::support::rewindfs(&["rewind", "--turn", "7", "--socket", &sock]);
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(
        e.contains("session thread-1 has turns 1 to 2, not 7"),
        "{e}"
    );
}

/// `rewindfs setup codex` writes the hooks and the trust Codex checks, in the user's
/// config.toml, once; `--remove` takes out both.
#[test]
fn setup_codex_writes_hooks_and_their_trust_and_removes_both() {
    let tmp = tempfile::tempdir().unwrap();
    let (proj, codex_home) = (tmp.path().join("proj"), tmp.path().join("codex"));
    fs::create_dir_all(&proj).unwrap();
    fs::create_dir_all(&codex_home).unwrap();
    fs::write(
        codex_home.join("config.toml"),
        "model = \"gpt-5.5\" # mine\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        setup_ok(
            Command::new(BIN)
                .args(args)
                .current_dir(&proj)
                .env("HOME", tmp.path())
                .env("CODEX_HOME", &codex_home),
        )
    };
    let out = run(&["setup", "codex"]);
    assert!(
        out.contains("added the rewindfs hook for 4 event(s)")
            && out.contains("marked the project trusted")
            && out.contains("trusted the 4 rewindfs hook(s)"),
        "{out}"
    );
    let config = fs::read_to_string(codex_home.join("config.toml")).unwrap();
    let hooks_json = fs::canonicalize(&proj).unwrap().join(".codex/hooks.json");
    assert!(
        config.starts_with("model = \"gpt-5.5\" # mine\n"),
        "{config}"
    );
    for key in [
        "user_prompt_submit:0:0",
        "pre_tool_use:0:0",
        "post_tool_use:0:0",
        "stop:0:0",
    ] {
        assert!(
            config.contains(&format!("{}:{key}", hooks_json.display())),
            "{key} in {config}"
        );
    }
    assert!(run(&["setup", "codex"]).contains("there already"));
    assert_eq!(
        fs::read_to_string(codex_home.join("config.toml")).unwrap(),
        config
    );
    let out = run(&["setup", "codex", "--remove"]);
    assert!(
        out.contains("removed 4") && out.contains("took out the trust of 4"),
        "{out}"
    );
    let after = fs::read_to_string(codex_home.join("config.toml")).unwrap();
    assert!(
        !after.contains("trusted_hash") && after.contains("# mine"),
        "{after}"
    );

    // Gemini: its own events and handler form.
    let out = run(&["setup", "gemini"]);
    assert!(
        out.contains("added the rewindfs hook for 5 event(s)"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(proj.join(".gemini/settings.json")).unwrap())
            .unwrap();
    let h = &v["hooks"]["BeforeAgent"][0];
    assert_eq!(h["matcher"], "*");
    assert_eq!(h["hooks"][0]["name"], "rewindfs");
    assert!(
        h["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("rewindfs hook")
    );
}
