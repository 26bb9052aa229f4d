//! `rewindfs log` through a real mount: a tool's write-then-rename and `sed -i` are shown as
//! the change to their file, a window says when it leaves changes out, `--since`, newest
//! first, and `--json` lines.

use std::process::Command;

use crate::agent::Agent;
use crate::support::{BIN, require_fuse};

fn log(a: &Agent, args: &[&str]) -> (String, String) {
    let out = Command::new(BIN)
        .arg("log")
        .args(args)
        .current_dir(&a.m.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_log_shows_a_write_beside_and_rename_over_as_the_change_to_the_file() {
    require_fuse();
    let mut a = Agent::new(|d| std::fs::write(d.join("s.txt"), "old\n").unwrap());
    let _t1 = a.turn();
    a.tool_write("f.txt", b"one\n");
    let t2 = a.turn();
    a.bash("sed -i s/old/new/ s.txt");
    for i in 0..3 {
        a.bash(&format!("echo {i} > n{i}.txt"));
    }
    let (out, _) = log(&a, &[]);
    let f_lines: Vec<&str> = out.lines().filter(|l| l.contains("f.txt")).collect();
    assert_eq!(f_lines.len(), 1, "one change to f.txt:\n{out}");
    assert!(
        f_lines[0].contains(" write ") && f_lines[0].contains("(via f.txt.tmp."),
        "{out}"
    );
    assert!(!out.contains(" -> f.txt"), "no rename shown:\n{out}");
    let s_lines: Vec<&str> = out.lines().filter(|l| l.contains("s.txt")).collect();
    assert_eq!(s_lines.len(), 1, "sed -i is one change to s.txt:\n{out}");
    assert!(
        s_lines[0].contains(" write ") && s_lines[0].contains("(via sed"),
        "{out}"
    );
    let (raw, _) = log(&a, &["--raw"]);
    assert!(
        raw.contains(" -> f.txt") && raw.contains(" -> s.txt"),
        "{raw}"
    );
    // A window says what it leaves out.
    let (two, note) = log(&a, &["--limit", "2", "--raw"]);
    assert_eq!(two.lines().count(), 2, "{two}");
    let total: usize = raw.lines().count();
    assert!(
        note.contains(&format!("the newest 2 of {total} change(s)")),
        "{note}"
    );
    // Since a checkpoint; newest first; JSON lines, one per change.
    let (since, _) = log(&a, &["--since", &t2]);
    assert!(
        !since.contains("f.txt") && since.contains("n2.txt"),
        "{since}"
    );
    let (newest, _) = log(&a, &["--newest-first"]);
    assert!(
        newest.lines().next().unwrap().contains("n2.txt"),
        "{newest}"
    );
    let (json, _) = log(&a, &["--json", "--raw"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), total);
    assert!(
        lines
            .windows(2)
            .all(|w| w[0]["seq"].as_i64() < w[1]["seq"].as_i64())
    );
    // A JSON window says on stderr what it leaves out; stdout stays JSON lines.
    let (two, note) = log(&a, &["--json", "--raw", "--limit", "2"]);
    assert_eq!(two.lines().count(), 2, "{two}");
    assert!(
        two.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
    assert!(
        note.contains(&format!("the newest 2 of {total} change(s)")),
        "{note}"
    );
}
