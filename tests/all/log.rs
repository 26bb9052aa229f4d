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

/// What a process does to a file right after it made it is one change in the log, the create's
/// (`store/changes.rs`, folding): `tar x` makes each file, writes it, and sets its mode and
/// times, and each file is one `create`. A change by another process is an entry of its own:
/// the fold is by process.
#[test]
fn a_file_a_process_makes_and_sets_up_is_one_change_in_the_log() {
    require_fuse();
    let src = tempfile::tempdir().unwrap();
    for i in 0..5 {
        std::fs::write(src.path().join(format!("t{i}.txt")), format!("file {i}\n")).unwrap();
    }
    let tar = src.path().join("in.tar");
    let st = Command::new("tar")
        .args([
            "cf",
            tar.to_str().unwrap(),
            "--mode=0640",
            "--mtime=2020-01-02 03:04:05",
        ])
        .args((0..5).map(|i| format!("t{i}.txt")))
        .current_dir(src.path())
        .status()
        .unwrap();
    assert!(st.success(), "tar cf");
    let mut a = Agent::new(|_| {});
    let _t1 = a.turn();
    a.bash(&format!("tar xf {}", tar.display()));
    a.bash("echo later > later.txt");
    a.bash("chmod 600 later.txt");
    let (json, _) = log(&a, &["--json", "--raw"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let entries = |path: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["path"].as_str() == Some(path))
            .map(|l| l["op"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    for i in 0..5 {
        let p = format!("t{i}.txt");
        // tar set the mode and times it was given: the file is set up, not only made.
        let md = std::fs::metadata(a.m.dir.join(&p)).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
            0o640
        );
        assert_eq!(
            entries(&p),
            ["create"],
            "{p}: one change, its create:\n{json}"
        );
    }
    // The shell made and wrote it; chmod, another process, changed its mode afterwards.
    assert_eq!(entries("later.txt"), ["create", "chmod"], "{json}");
}
