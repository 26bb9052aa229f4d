//! `rewindfs mcp` spoken to as an agent's MCP client speaks to it (JSON-RPC on its stdin and
//! stdout), started by the registered agent (this test process), over a real mount.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rewindfs::control::cmd::{BeginMessage, RegisterAgent};
use serde_json::{Value, json};

use crate::agent::{Agent, uuid};
use crate::support::{BIN, as_stranger, require_fuse, wait_until};

/// An MCP client over a `rewindfs mcp` child.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
}

impl Mcp {
    fn start(socket: &std::path::Path) -> Mcp {
        let mut child = Command::new(BIN)
            .args(["mcp", "--socket"])
            .arg(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp {
            child,
            stdin,
            stdout,
            id: 0,
        };
        let init = m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}),
        );
        assert_eq!(init["serverInfo"]["name"], "rewindfs", "{init}");
        assert!(init["capabilities"]["tools"].is_object(), "{init}");
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the server quit"
            );
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{v}");
                return v["result"].clone();
            }
        }
    }

    /// Calls a tool; returns its text and whether it is an error.
    fn call(&mut self, tool: &str, args: Value) -> (String, bool) {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let text = r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (text, r["isError"] == json!(true))
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent lists its own turns (with who changed what), sees what changed since one, takes a
/// turn back and undoes that; a user's edit since is a conflict the server never overwrites;
/// another session's turns are not the agent's.
#[test]
fn the_agent_lists_previews_rewinds_and_undoes_its_own_turns_and_never_overwrites_the_user() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("keep.txt"), "kept\n").unwrap());
    a.c.call(&RegisterAgent {
        pid: std::process::id(),
        session_id: Some(a.session.clone()),
    })
    .unwrap();
    let t1 = a.turn();
    a.tool_write("notes.txt", b"one\n");
    a.bash("echo built > build.log");
    let _t2 = a.turn();
    a.tool_write("notes.txt", b"two\n");
    a.bash("rm keep.txt");
    // Another session's turn, begun later: not this agent's.
    a.c.call(&BeginMessage {
        session_id: "someone-else".into(),
        user_message_id: uuid(),
    })
    .unwrap();

    let mut m = Mcp::start(&a.m.socket());
    let tools = m.request("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["checkpoints", "changes", "rewind_preview", "rewind", "undo"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }

    let (list, e) = m.call("checkpoints", json!({}));
    assert!(!e, "{list}");
    assert!(
        list.contains(&format!("Session {} has 2 turn(s)", a.session)),
        "only its own session's turns: {list}"
    );
    assert!(
        list.contains("#1 (") && list.contains("tool 1") && list.contains("shell 1"),
        "{list}"
    );
    assert!(
        list.ends_with("A person would type: rewindfs list"),
        "{list}"
    );
    assert!(
        !list.contains("not registered"),
        "found through its parent: {list}"
    );

    let (changes, _) = m.call("changes", json!({"turn": "2", "diff": true}));
    assert!(
        changes.contains("notes.txt (tool)")
            && changes.contains("keep.txt (shell)")
            && changes.contains("what a rewind would do:\n--- /dev/null\n+++ b/keep.txt")
            && changes.contains("+kept"),
        "{changes}"
    );

    let (dry, _) = m.call("rewind_preview", json!({"turn": "2"}));
    assert!(dry.contains("would restore 2 path(s)"), "{dry}");
    assert_eq!(a.read("notes.txt").as_deref(), Some("two\n"), "a dry run");

    let (done, e) = m.call("rewind", json!({"turn": "#2", "scope": "agent"}));
    assert!(!e && done.contains("restored 2 path(s)"), "{done}");
    assert_eq!(a.read("notes.txt").as_deref(), Some("one\n"));
    assert_eq!(a.read("keep.txt").as_deref(), Some("kept\n"));
    let (undo, _) = m.call("undo", json!({}));
    assert!(undo.contains("Undone"), "{undo}");
    assert_eq!(a.read("notes.txt").as_deref(), Some("two\n"));
    assert_eq!(a.read("keep.txt"), None);

    // The user edits a file the agent changed: a rewind is refused and names it.
    as_stranger(&a.m.dir, "echo mine >> notes.txt");
    assert!(wait_until(5, || a
        .read("notes.txt")
        .is_some_and(|s| s.ends_with("mine\n"))));
    let (refused, _) = m.call("rewind", json!({"turn": t1.as_str()}));
    assert!(
        refused.contains("Conflicts") && refused.contains("notes.txt (external)"),
        "{refused}"
    );
    assert_eq!(
        a.read("notes.txt").as_deref(),
        Some("two\nmine\n"),
        "never overwritten"
    );
    // The tool scope goes over a user's edit as the SDK does; the agent's rewind never does.
    let (refused, _) = m.call("rewind", json!({"turn": "1", "scope": "tool"}));
    assert!(
        refused.contains("Refused, nothing was changed") && refused.contains("notes.txt"),
        "{refused}"
    );
    assert_eq!(a.read("notes.txt").as_deref(), Some("two\nmine\n"));
    let (bad, _) = m.call("rewind_preview", json!({"turn": "9"}));
    assert!(
        bad.contains("no turn 9 in this session (it has 2 turn(s))"),
        "{bad}"
    );
    let (bad, is_err) = m.call("rewind", json!({"turn": "1", "scope": "everything"}));
    assert!(is_err && bad.contains("no scope \"everything\""), "{bad}");
}
