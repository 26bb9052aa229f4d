//! What the command line says when it cannot do what was asked: the path or checkpoint, the
//! cause, and what to do, each once.

use std::fs;
use std::process::Command;

use crate::agent::Agent;
use crate::support::{BIN, Mounted, require_fuse, rewindfs};

fn stderr_of(args: &[&str]) -> String {
    let out = rewindfs(args);
    assert!(!out.status.success(), "rewindfs {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn refusals_name_what_and_why_and_say_what_to_do() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("f.txt"), "v0\n").unwrap());
    let sock = a.m.socket();
    let sock = sock.to_str().unwrap();

    // Undo with no rewind made: not a failed rewind.
    let e = stderr_of(&["undo", "--socket", sock]);
    assert!(
        e.starts_with("rewindfs: there is no rewind to undo: ")
            && e.contains("rewindfs list")
            && !e.contains("Failed to rewind"),
        "{e}"
    );

    // The agent scope refuses over the user's own edit: the CLI says --force.
    let t1 = a.turn();
    a.tool_write("f.txt", b"agent\n");
    crate::support::as_stranger(&a.m.dir, "echo user >> f.txt");
    assert!(crate::support::wait_until(5, || a
        .read("f.txt")
        .is_some_and(|s| s.ends_with("user\n"))));
    let e = stderr_of(&["rewind", &t1, "--scope", "agent", "--socket", sock]);
    for want in [
        "Failed to rewind: ",
        "f.txt",
        t1.as_str(),
        "nothing was rewound",
        "--force",
    ] {
        assert!(e.contains(want), "{want:?} in {e}");
    }
    assert!(!e.contains("pass force"), "{e}");
    assert_eq!(a.read("f.txt").as_deref(), Some("agent\nuser\n"));

    // A uuid no message began with: the SDK's words, then which uuid and what to do (the
    // dry run too); `--json` keeps the socket's words as they are.
    let unknown = "11111111-1111-4111-8111-111111111111";
    for dry in [false, true] {
        let mut args = vec!["rewind", unknown, "--socket", sock];
        if dry {
            args.push("--dry-run");
        }
        let e = stderr_of(&args);
        assert!(
            e.contains("No file checkpoint found for this message.")
                && e.contains(unknown)
                && e.contains("rewindfs list"),
            "{e}"
        );
    }
    let out = rewindfs(&["rewind", unknown, "--dry-run", "--json", "--socket", sock]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"], "No file checkpoint found for this message.");

    // A daemon that is not there.
    let e = stderr_of(&["status", "--socket", "/nonexistent/control.sock"]);
    assert!(
        e.contains("no rewindfs daemon answers at /nonexistent/control.sock")
            && e.contains("rewindfs mount"),
        "{e}"
    );
}

#[test]
fn a_busy_unmount_says_why_once_and_what_to_do() {
    require_fuse();
    let mut m = Mounted::new();
    let dir = m.dir.to_str().unwrap().to_string();
    let mut inside = Command::new("sleep")
        .arg("600")
        .current_dir(&m.dir)
        .spawn()
        .unwrap();
    let out = Command::new(BIN).args(["umount", &dir]).output().unwrap();
    let _ = inside.kill();
    let _ = inside.wait();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains(&format!("cannot unmount {dir}: it is busy"))
            && e.contains("--lazy")
            && e.matches("os error").count() <= 1
            && e.matches(&dir).count() <= 4,
        "{e}"
    );
    m.umount();
}
