//! Many agents, one tree (docs/design.md §3): each session keeps its own checkpoints, and a rewind
//! of one session restores what its own actors changed, never another's work — or says whose
//! change stands in the way.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rewindfs::control::client::Client;
use rewindfs::control::cmd::{RewindFiles, RewindReply};
use rewindfs::store::Scope;
use serde_json::json;

use crate::agent::uuid;
use crate::support::{Mounted, require_fuse, sh};

/// An agent process of one session: a shell reading commands, registered for its session. What
/// it writes itself (redirections) is its `tool` work; the commands it starts are its `shell`.
pub struct SessionAgent {
    pub session: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl SessionAgent {
    pub fn start(m: &Mounted, c: &mut Client, session: &str) -> SessionAgent {
        let mut child = Command::new("bash")
            .current_dir(&m.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.request(
            "register_agent",
            json!({"pid": child.id(), "session_id": session}),
        )
        .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        SessionAgent {
            session: session.to_string(),
            child,
            stdin,
            stdout,
        }
    }

    /// Runs `cmd` in the agent's shell and waits for it.
    pub fn run(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}; echo __done__").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "agent shell died"
            );
            if line.trim() == "__done__" {
                return;
            }
        }
    }

    /// Begins a message of this session; returns its uuid.
    pub fn turn(&self, c: &mut Client) -> String {
        let u = uuid();
        c.request(
            "begin_message",
            json!({"session_id": self.session, "user_message_id": u}),
        )
        .unwrap();
        u
    }
}

impl Drop for SessionAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rewind(c: &mut Client, uuid: &str, dry: bool, force: bool) -> Result<RewindReply, String> {
    c.call(&RewindFiles {
        dry_run: dry,
        force,
        ..RewindFiles::to(uuid, Scope::Agent)
    })
    .map_err(|e| e.to_string())
}

fn files(m: &Mounted, v: &RewindReply) -> Vec<String> {
    let mut f: Vec<String> = v
        .files_changed
        .iter()
        .map(|p| {
            std::path::Path::new(p)
                .strip_prefix(&m.dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    f.sort();
    f
}

fn read(m: &Mounted, p: &str) -> Option<String> {
    std::fs::read_to_string(m.p(p)).ok()
}

/// The case: A begins A1 and writes a.txt; B begins B1 and writes b.txt; A writes
/// a2.txt. a2.txt is A's (its log entry shows A1), a rewind of A1 undoes a.txt and a2.txt and
/// leaves b.txt, and a rewind of B1 undoes b.txt only.
#[test]
fn each_session_rewinds_its_own_work_and_leaves_the_others() {
    require_fuse();
    let m = Mounted::new();
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "session-a");
    let mut b = SessionAgent::start(&m, &mut c, "session-b");
    let a1 = a.turn(&mut c);
    a.run("echo a > a.txt");
    let b1 = b.turn(&mut c);
    b.run("echo b > b.txt && mkdir -p bd && echo x > bd/x.txt");
    a.run("echo a2 > a2.txt && mv a.txt a-moved.txt");
    let log = c.request("log", json!({"path": "a2.txt"})).unwrap();
    let e = &log["entries"][0];
    assert_eq!(
        (&e["checkpoint"], &e["session"]),
        (&json!(a1), &json!("session-a")),
        "recorded under its own session's checkpoint: {log}"
    );
    let st = c.request("status", json!({})).unwrap();
    let sessions: Vec<(String, String)> = st["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().unwrap().to_string(),
                s["currentCheckpoint"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        sessions,
        vec![
            ("session-a".to_string(), a1.clone()),
            ("session-b".to_string(), b1.clone())
        ]
    );

    let dry = rewind(&mut c, &a1, true, false).unwrap();
    // a.txt did not exist when A1 began, and does not now (it was moved).
    assert_eq!(files(&m, &dry), vec!["a-moved.txt", "a2.txt"], "{dry:?}");
    assert!(dry.can_rewind);
    rewind(&mut c, &a1, false, false).unwrap();
    assert_eq!(read(&m, "a.txt"), None);
    assert_eq!(read(&m, "a2.txt"), None);
    assert_eq!(read(&m, "a-moved.txt"), None);
    assert_eq!(read(&m, "b.txt").as_deref(), Some("b\n"), "B's work stays");
    assert_eq!(read(&m, "bd/x.txt").as_deref(), Some("x\n"));
    c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(read(&m, "a2.txt").as_deref(), Some("a2\n"));

    let dry = rewind(&mut c, &b1, true, false).unwrap();
    assert_eq!(files(&m, &dry), vec!["b.txt", "bd", "bd/x.txt"], "{dry:?}");
    rewind(&mut c, &b1, false, false).unwrap();
    assert_eq!(read(&m, "b.txt"), None);
    assert!(!m.p("bd").exists());
    assert_eq!(
        read(&m, "a2.txt").as_deref(),
        Some("a2\n"),
        "A's work stays"
    );
    assert_eq!(read(&m, "a-moved.txt").as_deref(), Some("a\n"));
}

/// A path two sessions changed is a conflict for either's agent-scope rewind: listed by the
/// dry run, refused by a real rewind (nothing changes) unless forced; an external change
/// counts the same way. Three sessions at once.
#[test]
fn a_path_another_session_also_changed_is_a_conflict_until_forced() {
    require_fuse();
    let m = Mounted::with(|d| std::fs::write(d.join("shared.txt"), "v0\n").unwrap());
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "s-a");
    let mut b = SessionAgent::start(&m, &mut c, "s-b");
    let mut k = SessionAgent::start(&m, &mut c, "s-c");
    let a1 = a.turn(&mut c);
    a.run("echo a >> shared.txt && echo mine > a.txt");
    let _b1 = b.turn(&mut c);
    b.run("echo b >> shared.txt");
    let _c1 = k.turn(&mut c);
    k.run("sh -c 'echo c > c.txt'");
    let before = sh(&m.dir, "cat shared.txt a.txt c.txt");
    let dry = rewind(&mut c, &a1, true, false).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(
        dry.conflicts,
        [m.p("shared.txt").display().to_string()],
        "{dry:?}"
    );
    let e = rewind(&mut c, &a1, false, false).unwrap_err();
    assert!(
        e.starts_with("Failed to rewind: ") && e.contains("shared.txt"),
        "{e}"
    );
    assert_eq!(
        sh(&m.dir, "cat shared.txt a.txt c.txt"),
        before,
        "a refused rewind changes nothing"
    );
    let r = rewind(&mut c, &a1, false, true).unwrap();
    assert!(r.can_rewind);
    assert_eq!(read(&m, "shared.txt").as_deref(), Some("v0\n"));
    assert_eq!(read(&m, "a.txt"), None);
    assert_eq!(
        read(&m, "c.txt").as_deref(),
        Some("c\n"),
        "C's shell work stays"
    );
    c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(
        sh(&m.dir, "cat shared.txt a.txt c.txt"),
        before,
        "undo restores all"
    );
}

fn rewind_tool(c: &mut Client, uuid: &str, dry: bool, force: bool) -> Result<RewindReply, String> {
    c.call(&RewindFiles {
        dry_run: dry,
        force,
        ..RewindFiles::to(uuid, Scope::Tool)
    })
    .map_err(|e| e.to_string())
}

/// Another session's directory rename is its work: a rewind of the first session leaves it
/// (neither name comes back or goes), and what the first session then wrote beneath the new
/// name is a conflict naming the session that renamed it.
#[test]
fn a_directory_another_session_renamed_is_left_renamed() {
    require_fuse();
    let m = Mounted::with(|d| {
        std::fs::create_dir(d.join("d")).unwrap();
        std::fs::write(d.join("d/f"), "f\n").unwrap();
    });
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "s-a");
    let mut b = SessionAgent::start(&m, &mut c, "s-b");
    let a1 = a.turn(&mut c);
    a.run("echo a > a.txt");
    let _b1 = b.turn(&mut c);
    b.run("mv d e");
    let dry = rewind(&mut c, &a1, true, false).unwrap();
    assert_eq!(files(&m, &dry), vec!["a.txt"], "{dry:?}");
    assert!(dry.conflicts.is_empty(), "{dry:?}");
    rewind(&mut c, &a1, false, false).unwrap();
    assert_eq!(read(&m, "a.txt"), None);
    assert_eq!(read(&m, "e/f").as_deref(), Some("f\n"), "B's rename stays");
    assert!(!m.p("d").exists(), "B's rename stays");
    c.request("undo_rewind", json!({})).unwrap();

    // A writes beneath the name B gave the directory: restoring it would undo B's rename.
    a.run("echo g > e/g");
    let dry = rewind(&mut c, &a1, true, false).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(dry.conflicts, [m.p("e/g").display().to_string()], "{dry:?}");
    assert_eq!(
        dry.conflicts_by,
        [("e/g".to_string(), vec!["session s-b".to_string()])].into(),
        "who else changed it: {dry:?}"
    );
    let e = rewind(&mut c, &a1, false, false).unwrap_err();
    assert!(
        e.contains("e/g (by session s-b)") && e.contains("--force"),
        "{e}"
    );
    assert_eq!(
        read(&m, "e/g").as_deref(),
        Some("g\n"),
        "refused: nothing changed"
    );
}

/// The SDK's tool scope, with two sessions at work: a file one session's tool wrote that the
/// other session then changed too is a conflict naming that session, refused unless forced; a
/// file only the first session touched is restored as the SDK would.
#[test]
fn a_tool_rewind_over_another_sessions_change_is_refused_until_forced() {
    require_fuse();
    let m = Mounted::with(|d| {
        std::fs::write(d.join("shared.txt"), "v0\n").unwrap();
        std::fs::write(d.join("own.txt"), "own0\n").unwrap();
    });
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "s-a");
    let mut b = SessionAgent::start(&m, &mut c, "s-b");
    let a1 = a.turn(&mut c);
    // The agent's own writes are its tool's: both files become tracked in session s-a.
    a.run("echo a >> shared.txt && echo own1 > own.txt");
    let _b1 = b.turn(&mut c);
    b.run("echo b >> shared.txt");
    let dry = rewind_tool(&mut c, &a1, true, false).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(
        dry.conflicts,
        [m.p("shared.txt").display().to_string()],
        "{dry:?}"
    );
    assert_eq!(
        dry.conflicts_by,
        [("shared.txt".to_string(), vec!["session s-b".to_string()])].into(),
        "{dry:?}"
    );
    let e = rewind_tool(&mut c, &a1, false, false).unwrap_err();
    assert!(
        e.starts_with("Failed to rewind: ") && e.contains("shared.txt (by session s-b)"),
        "{e}"
    );
    assert_eq!(read(&m, "shared.txt").as_deref(), Some("v0\na\nb\n"));
    assert_eq!(
        read(&m, "own.txt").as_deref(),
        Some("own1\n"),
        "refused: nothing changed"
    );
    let r = rewind_tool(&mut c, &a1, false, true).unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(read(&m, "shared.txt").as_deref(), Some("v0\n"));
    assert_eq!(read(&m, "own.txt").as_deref(), Some("own0\n"));
}

/// Each session has its own stack of rewinds: `undo` of a session undoes its newest rewind,
/// not the newer one of another session; `undo` without one undoes the newest of all.
#[test]
fn each_session_undoes_its_own_rewinds() {
    require_fuse();
    let m = Mounted::new();
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "s-a");
    let mut b = SessionAgent::start(&m, &mut c, "s-b");
    let a1 = a.turn(&mut c);
    a.run("echo a > a.txt");
    let b1 = b.turn(&mut c);
    b.run("echo b > b.txt");
    rewind(&mut c, &a1, false, false).unwrap();
    rewind(&mut c, &b1, false, false).unwrap();
    assert_eq!((read(&m, "a.txt"), read(&m, "b.txt")), (None, None));
    let r = stack(&mut c, Undo, Some("s-a"), false, false).unwrap();
    assert_eq!(r.rewound_to.as_ref(), Some(&a1), "{r:?}");
    assert_eq!(read(&m, "a.txt").as_deref(), Some("a\n"));
    assert_eq!(read(&m, "b.txt"), None, "B's rewind stays");
    // Nothing more of A's to undo; B's stack is untouched.
    let e = stack(&mut c, Undo, Some("s-a"), false, false).unwrap_err();
    assert!(e.contains("no rewind to undo"), "{e}");
    let r = stack(&mut c, Redo, Some("s-b"), true, false).unwrap();
    assert!(!r.can_rewind, "B undid nothing: {r:?}");
    let r = stack(&mut c, Undo, None, false, false).unwrap();
    assert_eq!(r.rewound_to.as_ref(), Some(&b1), "{r:?}");
    assert_eq!(read(&m, "b.txt").as_deref(), Some("b\n"));
    // A's undone rewind is A's to redo.
    let r = stack(&mut c, Redo, Some("s-a"), false, false).unwrap();
    assert_eq!(r.rewound_to.as_ref(), Some(&a1), "{r:?}");
    assert_eq!(read(&m, "a.txt"), None);
    assert_eq!(read(&m, "b.txt").as_deref(), Some("b\n"));
}

/// A session's own undo does not clobber another session's later rewind: the paths that
/// rewind changed since are conflicts (`rewind`), refused unless forced.
#[test]
fn a_sessions_undo_refuses_over_another_sessions_later_rewind() {
    require_fuse();
    let m = Mounted::with(|d| std::fs::write(d.join("shared.txt"), "v0\n").unwrap());
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "s-a");
    let mut b = SessionAgent::start(&m, &mut c, "s-b");
    let b1 = b.turn(&mut c);
    b.run("echo b > shared.txt");
    let a1 = a.turn(&mut c);
    a.run("echo a > shared.txt");
    // A's rewind gives shared.txt back as a1 found it (B's); B's rewind then, as b1 found it.
    rewind(&mut c, &a1, false, false).unwrap();
    assert_eq!(read(&m, "shared.txt").as_deref(), Some("b\n"));
    rewind(&mut c, &b1, false, true).unwrap();
    assert_eq!(read(&m, "shared.txt").as_deref(), Some("v0\n"));
    // A's own stack: undoing its rewind would put back "a" over B's rewind.
    let dry = stack(&mut c, Undo, Some("s-a"), true, false).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(
        dry.conflicts_by,
        [("shared.txt".to_string(), vec!["rewind".to_string()])].into(),
        "{dry:?}"
    );
    let e = stack(&mut c, Undo, Some("s-a"), false, false).unwrap_err();
    assert!(e.contains("shared.txt (another session's rewind)"), "{e}");
    assert_eq!(read(&m, "shared.txt").as_deref(), Some("v0\n"), "refused");
    stack(&mut c, Undo, Some("s-a"), false, true).unwrap();
    assert_eq!(
        read(&m, "shared.txt").as_deref(),
        Some("a\n"),
        "A's undo, forced"
    );
}

/// A session's message begun again after another session began one is still its current
/// message: a no-op, not "already began".
#[test]
fn a_sessions_current_message_begun_again_is_a_no_op() {
    require_fuse();
    let m = Mounted::new();
    let mut c = Client::connect(&m.socket()).unwrap();
    let a = SessionAgent::start(&m, &mut c, "s-a");
    let b = SessionAgent::start(&m, &mut c, "s-b");
    let a1 = a.turn(&mut c);
    let _b1 = b.turn(&mut c);
    c.request(
        "begin_message",
        json!({"session_id": "s-a", "user_message_id": a1}),
    )
    .unwrap();
    let a2 = a.turn(&mut c);
    let e = c
        .request(
            "begin_message",
            json!({"session_id": "s-a", "user_message_id": a1}),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("already began"),
        "an earlier message is refused: {e}"
    );
    assert_ne!(a1, a2);
}

/// Retention with two sessions at work: what gc kept of one session's dropped checkpoints (so
/// its first message stays rewindable exactly) stays when another session begins a message
/// and gc runs again.
#[test]
fn gc_keeps_what_each_live_session_needs() {
    require_fuse();
    let m = Mounted::with(|d| std::fs::write(d.join("k.txt"), "k0\n").unwrap());
    let mut c = Client::connect(&m.socket()).unwrap();
    let mut a = SessionAgent::start(&m, &mut c, "s-a");
    let mut b = SessionAgent::start(&m, &mut c, "s-b");
    let at_a1 = crate::support::tree(&m.dir);
    let a1 = a.turn(&mut c);
    a.run("echo k1 > k.txt && head -c 200000 /dev/urandom > big.bin");
    let _a2 = a.turn(&mut c);
    a.run("echo k2 > k.txt && head -c 200000 /dev/urandom > big.bin && echo n > n.txt");
    let _a3 = a.turn(&mut c);
    a.run("rm big.bin && echo k3 > k.txt");
    let _a4 = a.turn(&mut c);
    let gc = json!({"max_store_bytes": 1, "max_age_seconds": 0});
    let r = c.request("gc", gc.clone()).unwrap();
    // The mount's checkpoint, a2 and a3: a1 is s-a's first, a4 its current.
    assert_eq!(r["checkpointsDropped"], json!(3), "{r}");
    let _b1 = b.turn(&mut c);
    b.run("echo b > b.txt");
    let r = c.request("gc", gc).unwrap();
    assert_eq!(r["checkpointsDropped"], json!(0), "{r}");
    let dry = rewind(&mut c, &a1, true, false).unwrap();
    // big.bin came and went; n.txt's creation was recorded in a dropped checkpoint.
    assert_eq!(files(&m, &dry), vec!["k.txt", "n.txt"], "{dry:?}");
    rewind(&mut c, &a1, false, false).unwrap();
    let mut want = at_a1;
    want.push(
        crate::support::tree(&m.dir)
            .into_iter()
            .find(|l| l.starts_with("b.txt "))
            .unwrap(),
    );
    want.sort();
    assert_eq!(
        crate::support::tree(&m.dir),
        want,
        "s-a's first message, exactly, with s-b's work left"
    );
}

mod model {
    //! Model-based: random turns and writes of two or three sessions' agents (their own
    //! writes and their shells') and of an external writer, interleaved; then an agent-scope
    //! rewind of a random session's checkpoint. The model knows who changed each path since
    //! each checkpoint began: what that session changed goes back to the checkpoint's start,
    //! everything else stays byte-identical, and a path it and someone else changed is a
    //! conflict (listed by the dry run; the forced rewind restores it). Undo gives back all.

    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;
    use rewindfs::control::client::Client;
    use serde_json::json;

    use super::SessionAgent;
    use crate::support::{Mounted, require_fuse, tree};

    const PATHS: &[&str] = &["a0", "a1", "b0", "b1", "shared0", "shared1"];

    #[derive(Debug, Clone)]
    enum Step {
        /// Session `s` begins a message.
        Turn(usize),
        /// Session `s`'s agent writes the file itself (`tool`).
        Write(usize, usize, u8),
        /// Session `s`'s shell appends (`shell`).
        Append(usize, usize, u8),
        /// Session `s`'s shell removes the file.
        Remove(usize, usize),
        /// Session `s`'s shell renames one file over another (both names change).
        Rename(usize, usize, usize),
        /// Someone else writes the file (`external`).
        External(usize, u8),
        /// Someone else renames one file over another.
        ExternalRename(usize, usize),
    }

    fn step(sessions: usize) -> impl Strategy<Value = Step> {
        let s = 0..sessions;
        let p = 0..PATHS.len();
        prop_oneof![
            2 => s.clone().prop_map(Step::Turn),
            4 => (s.clone(), p.clone(), any::<u8>()).prop_map(|(s, p, b)| Step::Write(s, p, b)),
            2 => (s.clone(), p.clone(), any::<u8>()).prop_map(|(s, p, b)| Step::Append(s, p, b)),
            1 => (s.clone(), p.clone()).prop_map(|(s, p)| Step::Remove(s, p)),
            1 => (s, p.clone(), p.clone()).prop_map(|(s, a, b)| Step::Rename(s, a, b)),
            1 => (p.clone(), any::<u8>()).prop_map(|(p, b)| Step::External(p, b)),
            1 => (p.clone(), p).prop_map(|(a, b)| Step::ExternalRename(a, b)),
        ]
    }

    /// Who changed a path: a session's actors, or someone outside every session.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Who {
        Session(usize),
        External,
    }

    struct Checkpoint {
        session: usize,
        uuid: String,
        at_start: BTreeMap<String, String>,
        /// Who changed each path since it began.
        changed: BTreeMap<&'static str, BTreeSet<Who>>,
    }

    fn tree_map(m: &Mounted) -> BTreeMap<String, String> {
        tree(&m.dir)
            .into_iter()
            .map(|l| (l.split(' ').next().unwrap().to_string(), l))
            .collect()
    }

    fn check(n: usize, steps: Vec<Step>, pick: usize) -> Result<(), TestCaseError> {
        let m = Mounted::with(|d| {
            for p in PATHS {
                std::fs::write(d.join(p), format!("{p} at mount\n")).unwrap();
            }
        });
        let mut c = Client::connect(&m.socket()).unwrap();
        let mut agents: Vec<SessionAgent> = (0..n)
            .map(|i| SessionAgent::start(&m, &mut c, &format!("session-{i}")))
            .collect();
        let mut cps: Vec<Checkpoint> = Vec::new();
        // Every session begins a first message.
        let steps: Vec<Step> = (0..n).map(Step::Turn).chain(steps).collect();
        for s in &steps {
            let (who, paths): (Who, Vec<&'static str>) = match s {
                Step::Turn(i) => {
                    let at_start = tree_map(&m);
                    let uuid = agents[*i].turn(&mut c);
                    cps.push(Checkpoint {
                        session: *i,
                        uuid,
                        at_start,
                        changed: BTreeMap::new(),
                    });
                    continue;
                }
                Step::Write(i, p, b) => {
                    agents[*i].run(&format!("echo 'tool {i} {b}' > {}", PATHS[*p]));
                    (Who::Session(*i), vec![PATHS[*p]])
                }
                Step::Append(i, p, b) => {
                    agents[*i].run(&format!("sh -c \"echo 'shell {i} {b}' >> {}\"", PATHS[*p]));
                    (Who::Session(*i), vec![PATHS[*p]])
                }
                Step::Remove(i, p) => {
                    if !m.p(PATHS[*p]).exists() {
                        continue;
                    }
                    agents[*i].run(&format!("rm -f {}", PATHS[*p]));
                    (Who::Session(*i), vec![PATHS[*p]])
                }
                Step::Rename(i, a, b) => {
                    if a == b || !m.p(PATHS[*a]).exists() {
                        continue;
                    }
                    agents[*i].run(&format!("mv {} {}", PATHS[*a], PATHS[*b]));
                    (Who::Session(*i), vec![PATHS[*a], PATHS[*b]])
                }
                Step::External(p, b) => {
                    // This test process is no session's agent: an external writer.
                    std::fs::write(m.p(PATHS[*p]), format!("external {b}\n")).unwrap();
                    (Who::External, vec![PATHS[*p]])
                }
                Step::ExternalRename(a, b) => {
                    if a == b || !m.p(PATHS[*a]).exists() {
                        continue;
                    }
                    std::fs::rename(m.p(PATHS[*a]), m.p(PATHS[*b])).unwrap();
                    (Who::External, vec![PATHS[*a], PATHS[*b]])
                }
            };
            for cp in &mut cps {
                for path in &paths {
                    cp.changed.entry(path).or_default().insert(who);
                }
            }
        }
        let end = tree_map(&m);
        let cp = &cps[pick % cps.len()];
        let me = Who::Session(cp.session);
        let mine: BTreeSet<&str> = cp
            .changed
            .iter()
            .filter(|(_, w)| w.contains(&me))
            .map(|(p, _)| *p)
            .collect();
        let want_conflicts: BTreeSet<String> = cp
            .changed
            .iter()
            .filter(|(_, w)| w.contains(&me) && w.iter().any(|x| *x != me))
            .map(|(p, _)| m.p(p).display().to_string())
            .collect();
        let dry = c
            .request(
                "rewind_files",
                json!({"user_message_id": cp.uuid, "scope": "agent", "dry_run": true}),
            )
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got_conflicts: BTreeSet<String> = dry["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        prop_assert_eq!(
            &got_conflicts,
            &want_conflicts,
            "conflicts of {}: {}",
            cp.session,
            dry
        );
        prop_assert_eq!(
            dry["canRewind"].as_bool(),
            Some(want_conflicts.is_empty()),
            "{}",
            dry
        );
        c.request(
            "rewind_files",
            json!({"user_message_id": cp.uuid, "scope": "agent", "force": true}),
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = tree_map(&m);
        for p in PATHS {
            let want = if mine.contains(p) {
                cp.at_start.get(*p)
            } else {
                end.get(*p)
            };
            prop_assert_eq!(
                got.get(*p),
                want,
                "{} (session {} changed: {})",
                p,
                cp.session,
                mine.contains(p)
            );
        }
        if dry["filesChanged"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            c.request("undo_rewind", json!({}))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        prop_assert_eq!(tree_map(&m), end, "undo gives back everything");
        Ok(())
    }

    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(6)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 32, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn a_rewind_of_one_session_restores_exactly_its_own_changes(
            n in 2usize..4,
            steps in prop::collection::vec(step(3), 1..24),
            pick in any::<usize>(),
        ) {
            require_fuse();
            let steps: Vec<Step> = steps.into_iter().map(|s| match s {
                Step::Turn(i) => Step::Turn(i % n),
                Step::Write(i, p, b) => Step::Write(i % n, p, b),
                Step::Append(i, p, b) => Step::Append(i % n, p, b),
                Step::Remove(i, p) => Step::Remove(i % n, p),
                Step::Rename(i, a, b) => Step::Rename(i % n, a, b),
                e => e,
            }).collect();
            check(n, steps, pick)?;
        }
    }
}

/// Which way [`stack`] goes.
#[derive(Clone, Copy)]
enum Way {
    Undo,
    Redo,
}
use Way::{Redo, Undo};

/// An undo or redo (of `session`'s own stack, if given) through the typed client: its reply,
/// or the daemon's error.
fn stack(
    c: &mut Client,
    way: Way,
    session: Option<&str>,
    dry_run: bool,
    force: bool,
) -> Result<rewindfs::control::cmd::RewindReply, String> {
    let session_id = session.map(str::to_string);
    let r = match way {
        Undo => c.call(&rewindfs::control::cmd::UndoRewind {
            dry_run,
            force,
            session_id,
        }),
        Redo => c.call(&rewindfs::control::cmd::RedoRewind {
            dry_run,
            force,
            session_id,
        }),
    };
    r.map_err(|e| e.to_string())
}
