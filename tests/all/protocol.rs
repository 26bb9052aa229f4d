//! The control socket, spoken to with raw JSON lines: every response matches
//! `schema/protocol.schema.json`, bad input gets errors (never a crash), the connection and the
//! daemon survive hostile input, and strangers are refused.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;

use serde_json::{Value, json};

use crate::agent::{Agent, uuid};
use crate::support::{Mounted, require_fuse};

fn schema_for(def: &str) -> jsonschema::Validator {
    let mut root: Value =
        serde_json::from_str(include_str!("../../schema/protocol.schema.json")).unwrap();
    let obj = root.as_object_mut().unwrap();
    obj.remove("oneOf");
    obj.insert("$ref".into(), json!(format!("#/$defs/{def}")));
    jsonschema::validator_for(&root).unwrap()
}

fn assert_valid(def: &str, v: &Value) {
    let s = schema_for(def);
    let errors: Vec<String> = s
        .iter_errors(v)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{def}: {v}\n{}", errors.join("\n"));
}

struct Raw {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Raw {
    fn new(m: &Mounted) -> Raw {
        let w = UnixStream::connect(m.socket()).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Raw { w, r }
    }
    fn send(&mut self, line: &[u8]) -> Value {
        self.w.write_all(line).unwrap();
        self.w.write_all(b"\n").unwrap();
        let mut s = String::new();
        self.r.read_line(&mut s).unwrap();
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("not JSON ({e}): {s:?}"))
    }
    fn req(&mut self, id: &str, request: Value) -> Value {
        self.send(
            json!({"type": "control_request", "request_id": id, "request": request})
                .to_string()
                .as_bytes(),
        )
    }
}

/// Checks the envelope and the payload, returns the payload.
fn ok(v: &Value, id: &str, payload_def: &str) -> Value {
    assert_valid("success_envelope", v);
    assert_eq!(v["response"]["request_id"], json!(id));
    let p = v["response"]["response"].clone();
    assert_valid(payload_def, &p);
    p
}

fn err(v: &Value) -> String {
    assert_valid("error_envelope", v);
    v["response"]["error"].as_str().unwrap().to_string()
}

#[test]
fn every_response_matches_the_protocol_schema() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("a.txt"), "a\n").unwrap());
    let mut c = Raw::new(&a.m);
    let u1 = uuid();
    ok(
        &c.req(
            "1",
            json!({"subtype": "begin_message", "session_id": "s", "user_message_id": u1}),
        ),
        "1",
        "response_begin_message",
    );
    a.tool_write("a.txt", b"changed\n");
    ok(&c.req("2", json!({"subtype": "tool_use", "phase": "pre", "tool_name": "Edit", "tool_use_id": "t", "file_path": a.m.p("a.txt")})), "2", "response_unbound");
    ok(
        &c.req(
            "3",
            json!({"subtype": "register_agent", "pid": std::process::id()}),
        ),
        "3",
        "response_empty",
    );
    ok(
        &c.req(
            "4",
            json!({"subtype": "rewind_files", "user_message_id": u1, "dry_run": true}),
        ),
        "4",
        "response_rewind_files_dry",
    );
    let missing = ok(
        &c.req(
            "5",
            json!({"subtype": "rewind_files", "user_message_id": uuid(), "dry_run": true}),
        ),
        "5",
        "response_rewind_files_dry",
    );
    assert_eq!(
        missing["error"],
        json!("No file checkpoint found for this message.")
    );
    ok(
        &c.req("6", json!({"subtype": "list_checkpoints"})),
        "6",
        "response_list_checkpoints",
    );
    ok(
        &c.req("7", json!({"subtype": "diff", "user_message_id": u1})),
        "7",
        "response_diff",
    );
    let u2 = uuid();
    ok(
        &c.req(
            "7b",
            json!({"subtype": "begin_message", "session_id": "s", "user_message_id": u2}),
        ),
        "7b",
        "response_begin_message",
    );
    let d = ok(
        &c.req(
            "7c",
            json!({"subtype": "diff", "user_message_id": u1, "to_message_id": u2}),
        ),
        "7c",
        "response_diff",
    );
    assert_eq!(
        a.files(&serde_json::from_value::<Vec<String>>(d["filesChanged"].clone()).unwrap()),
        ["a.txt"]
    );
    let s = ok(
        &c.req(
            "7d",
            json!({"subtype": "show", "user_message_id": u1, "path": "a.txt"}),
        ),
        "7d",
        "response_show",
    );
    assert_eq!(s["content"], json!("YQo="), "base64 of the file then");
    ok(
        &c.req(
            "7e",
            json!({"subtype": "show", "user_message_id": u1, "path": ".", "content": false}),
        ),
        "7e",
        "response_show",
    );
    ok(
        &c.req("7f", json!({"subtype": "ls", "user_message_id": u2})),
        "7f",
        "response_ls",
    );
    let fork = a.m.tmp.path().join("fork");
    let f = ok(
        &c.req(
            "7h",
            json!({"subtype": "fork", "user_message_id": u1, "dir": fork}),
        ),
        "7h",
        "response_fork",
    );
    assert_eq!(f["files"], json!(1));
    std::fs::write(fork.join("a.txt"), "forked\n").unwrap();
    let d = ok(
        &c.req(
            "7i",
            json!({"subtype": "diff", "user_message_id": u1, "fork_dir": fork}),
        ),
        "7i",
        "response_diff",
    );
    // What differs is the fork's: its paths are under the fork.
    assert_eq!(
        d["filesChanged"],
        json!([fork.join("a.txt").to_str().unwrap()])
    );
    let bundle = a.m.tmp.path().join("h.rwb");
    ok(
        &c.req("7j", json!({"subtype": "export", "path": bundle})),
        "7j",
        "response_export",
    );
    let i = ok(
        &c.req("7k", json!({"subtype": "import", "path": bundle})),
        "7k",
        "response_import",
    );
    assert_eq!(
        i["alreadyImported"],
        json!(true),
        "its own history: all here"
    );
    let e = err(&c.req(
        "7g",
        json!({"subtype": "show", "user_message_id": u1, "path": "nope.txt"}),
    ));
    assert!(e.contains("nope.txt") && e.contains(&u1), "{e}");
    ok(
        &c.req("8", json!({"subtype": "log", "limit": 10})),
        "8",
        "response_log",
    );
    ok(
        &c.req("9", json!({"subtype": "status"})),
        "9",
        "response_status",
    );
    ok(
        &c.req("9gc", json!({"subtype": "gc", "max_age_seconds": 86400})),
        "9gc",
        "response_gc",
    );
    ok(
        &c.req(
            "10",
            json!({"subtype": "rewind_files", "user_message_id": u1, "scope": "all"}),
        ),
        "10",
        "response_rewind_files",
    );
    ok(
        &c.req("11", json!({"subtype": "undo_rewind"})),
        "11",
        "response_undo_rewind",
    );
    assert_eq!(
        err(&c.req(
            "12",
            json!({"subtype": "rewind_files", "user_message_id": uuid()})
        )),
        "No file checkpoint found for this message."
    );
    // Undo and redo are a stack: nothing is left to undo, the undone rewind can be redone.
    let none = ok(
        &c.req("13a", json!({"subtype": "undo_rewind", "dry_run": true})),
        "13a",
        "response_undo_rewind",
    );
    assert_eq!(none["canRewind"], json!(false));
    ok(
        &c.req("13b", json!({"subtype": "redo_rewind", "dry_run": true})),
        "13b",
        "response_redo_rewind",
    );
    ok(
        &c.req("13", json!({"subtype": "redo_rewind"})),
        "13",
        "response_redo_rewind",
    );
    let none = ok(
        &c.req("13c", json!({"subtype": "redo_rewind", "dry_run": true})),
        "13c",
        "response_redo_rewind",
    );
    assert!(
        none["error"]
            .as_str()
            .unwrap()
            .contains("no rewind to redo")
    );
    let listed = ok(
        &c.req("13d", json!({"subtype": "list_checkpoints"})),
        "13d",
        "response_list_checkpoints",
    );
    assert!(
        listed["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["rewind"]["action"] == json!("redo")),
        "{listed}"
    );
    // The older CLIs' subtype, with their error texts (seed 002).
    let missing = uuid();
    assert_eq!(
        err(&c.req(
            "14",
            json!({"subtype": "rewind_code", "user_message_id": missing})
        )),
        format!("No code checkpoint found for message {missing}")
    );
    ok(
        &c.req(
            "15",
            json!({"subtype": "rewind_code", "user_message_id": u1}),
        ),
        "15",
        "response_rewind_files",
    );
    // The plain CLI's hook path: a prompt begins under its prompt_id, is listed as unbound to
    // the session's hooks until bound, and answers to its message uuid once bound.
    let (p, u) = (uuid(), uuid());
    ok(
        &c.req(
            "16",
            json!({"subtype": "begin_prompt", "session_id": "s", "prompt_id": p, "prompt": "hi", "transcript_path": "/nonexistent/t.jsonl"}),
        ),
        "16",
        "response_begin_prompt",
    );
    let unbound = ok(
        &c.req(
            "17",
            json!({"subtype": "tool_use", "phase": "pre", "tool_name": "Write", "tool_use_id": "t2", "session_id": "s"}),
        ),
        "17",
        "response_unbound",
    );
    assert_eq!(unbound["unboundPromptIds"], json!([p]));
    ok(
        &c.req(
            "18",
            json!({"subtype": "bind_message", "prompt_id": p, "user_message_id": u}),
        ),
        "18",
        "response_begin_message",
    );
    let ended = ok(
        &c.req("19", json!({"subtype": "end_turn", "session_id": "s"})),
        "19",
        "response_unbound",
    );
    assert_eq!(ended["unboundPromptIds"], json!([]));
    assert!(
        err(&c.req(
            "20",
            json!({"subtype": "bind_message", "prompt_id": uuid(), "user_message_id": uuid()})
        ))
        .contains("no checkpoint began under prompt")
    );
    // The schema rejects what it should (the test can fail).
    let bad = json!({"canRewind": true, "filesChanged": "a.txt", "insertions": 0, "deletions": 0});
    assert!(!schema_for("response_rewind_files_dry").is_valid(&bad));
    let bad = json!({"canRewind": true, "filesChanged": [], "insertions": 0, "deletions": 0, "conflicts": [], "undoable": 0, "redoable": 0, "undone": uuid()});
    assert!(!schema_for("response_redo_rewind").is_valid(&bad));
}

/// A message's checkpoint begins once: repeating the current message's `begin_message` is
/// answered with the same checkpoint (a client retrying), and beginning an earlier message
/// again is refused, naming it — also while the captures of the turn in between are still in
/// the capture journal, not yet in the database.
#[test]
fn a_checkpoint_begins_once() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("a.txt"), "a\n").unwrap());
    let mut c = Raw::new(&a.m);
    let (u1, u2) = (uuid(), uuid());
    let begin = |c: &mut Raw, id: &str, u: &str| {
        c.req(
            id,
            json!({"subtype": "begin_message", "session_id": "s", "user_message_id": u}),
        )
    };
    let first = ok(&begin(&mut c, "1", &u1), "1", "response_begin_message");
    let again = ok(&begin(&mut c, "2", &u1), "2", "response_begin_message");
    assert_eq!(
        again, first,
        "a repeated begin_message is the same checkpoint"
    );
    a.bash("echo changed > a.txt");
    ok(&begin(&mut c, "3", &u2), "3", "response_begin_message");
    a.bash("echo again > a.txt && echo new > b.txt");
    let e = err(&begin(&mut c, "4", &u1));
    assert!(e.contains(&u1) && e.contains("already began"), "{e}");
    // The refusal changed nothing: the turn of u2 goes on, and u1 still rewinds.
    a.bash("echo more >> b.txt");
    assert_eq!(a.read("b.txt").as_deref(), Some("new\nmore\n"));
    a.rewind(&u1, "all", false).unwrap();
    assert_eq!(a.read("a.txt").as_deref(), Some("a\n"));
    assert_eq!(a.read("b.txt"), None);
}

#[test]
fn hostile_input_gets_errors_and_the_connection_and_daemon_survive() {
    require_fuse();
    let m = Mounted::new();
    let mut c = Raw::new(&m);
    let e = err(&c.req("u", json!({"subtype": "undo_rewind"})));
    assert!(
        e.starts_with("there is no rewind to undo: ") && e.contains("rewindfs list"),
        "{e}"
    );
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "invalid JSON"),
        (vec![0xff, 0xfe, b'{', b'}'], "invalid JSON"),
        (deep.into_bytes(), "invalid JSON"),
        (br#"{"type":"control_request","request_id":"x","request":{"subtype":"format_disk"}}"#.to_vec(), "unknown request subtype"),
        (br#"{"type":"control_request","request_id":"x","request":{"subtype":"begin_message","session_id":"s","user_message_id":"a\u0007b"}}"#.to_vec(), "not a message id"),
        (br#"{"type":"control_request","request_id":"x","request":{"subtype":"rewind_files"}}"#.to_vec(), "No file checkpoint found for this message."),
        (br#"{"type":"control_request","request_id":"x","request":{"subtype":"register_agent","pid":"1"}}"#.to_vec(), "pid"),
        (br#"{"type":"control_request","request_id":"x","request":{"subtype":"rewind_files","user_message_id":"43a0616f-86de-4176-b8c4-b711ba2d9691","paths":["../../etc/passwd"],"scope":"all"}}"#.to_vec(), ""),
    ];
    for (line, want) in cases {
        let e = err(&c.send(&line));
        assert!(
            e.contains(want),
            "{:?}: {e}",
            String::from_utf8_lossy(&line[..line.len().min(80)])
        );
    }
    ok(
        &c.req("alive", json!({"subtype": "status"})),
        "alive",
        "response_status",
    );
    // A line over the cap is refused and that connection closed; the daemon lives on.
    let mut big = Raw::new(&m);
    let huge = vec![b'x'; 2 << 20];
    // The daemon answers and hangs up before the whole line is sent: the write may fail.
    let _ = big.w.write_all(&huge);
    let mut s = String::new();
    big.r.read_line(&mut s).unwrap();
    let e = err(&serde_json::from_str(&s).unwrap());
    assert!(e.contains("longer than"), "{e}");
    // Thousands of connections at once: up to the cap they are served, beyond it each is told
    // so and closed — nobody is left hanging, and the daemon serves again once they go.
    let mut conns: Vec<Raw> = (0..2000).map(|_| Raw::new(&m)).collect();
    let mut refused = 0;
    for c in conns.iter_mut().rev().take(200) {
        c.r.get_ref()
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut s = String::new();
        c.r.read_line(&mut s).unwrap();
        let e = err(&serde_json::from_str(&s).unwrap());
        assert!(e.contains("too many control connections"), "{e}");
        refused += 1;
    }
    assert_eq!(refused, 200);
    drop(conns);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut again = Raw::new(&m);
    ok(
        &again.req("after", json!({"subtype": "status"})),
        "after",
        "response_status",
    );
}

#[test]
fn a_peer_with_another_uid_is_refused() {
    require_fuse();
    let m = Mounted::new();
    let sock = m.socket();
    assert_eq!(
        std::fs::metadata(&sock)
            .map(|md| std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777)
            .unwrap(),
        0o600
    );
    // Open the way to the socket so only the uid check stands between a stranger and it.
    for d in [m.tmp.path(), m.store.as_path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    // Our own client binary, run as nobody (copied where nobody can execute it).
    let bin = m.tmp.path().join("rewindfs-client");
    crate::support::copy_executable(crate::support::BIN, &bin);
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["status", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("permission denied: uid 65534"),
        "stranger got: {text}"
    );
}
