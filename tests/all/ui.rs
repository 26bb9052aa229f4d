//! `rewindfs ui` in a real terminal: tmux runs it in a shell over a real mount with a scripted
//! session of three prompts; the test sends keys and reads the screen as a person would.

use std::path::{Path, PathBuf};
use std::process::Command;

use rewindfs::control::cmd::{BeginPrompt, RegisterAgent};

use crate::agent::{Agent, uuid};
use crate::support::{BIN, require_command, require_fuse, tree, wait_until};

/// A tmux server of its own, one window of `cols`×`rows` running a shell in `dir`.
struct Tmux {
    name: String,
}

impl Tmux {
    fn start(dir: &Path, cols: u16, rows: u16) -> Tmux {
        let t = Tmux {
            name: format!("rewindfs-ui-{}", uuid()),
        };
        let ok = t
            .cmd()
            .args(["new-session", "-d", "-s", "ui", "-x"])
            .arg(cols.to_string())
            .arg("-y")
            .arg(rows.to_string())
            .arg("-c")
            .arg(dir)
            .args(["env", "PS1=$ ", "TERM=xterm-256color", "sh"])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.name]);
        c
    }

    /// Types `keys` (tmux key names: `Up`, `Enter`, or text).
    fn keys(&self, keys: &[&str]) {
        let ok = self
            .cmd()
            .args(["send-keys", "-t", "ui"])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    fn line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "ui"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen with its attributes as escape sequences (`capture-pane -e`).
    fn styled_screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-e", "-t", "ui"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows every one of `want`; panics with the screen if not.
    fn expect(&self, want: &[&str]) -> String {
        let mut last = String::new();
        let seen = wait_until(15, || {
            last = self.screen();
            want.iter().all(|w| last.contains(w))
        });
        assert!(seen, "the screen never showed {want:?}:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// Whether a `capture-pane -e` screen sets a foreground or background colour anywhere.
fn has_colour(styled: &str) -> bool {
    styled.split('\x1b').any(|seq| {
        seq.strip_prefix('[')
            .and_then(|s| s.split_once('m'))
            .is_some_and(|(params, _)| {
                params.split(';').any(|p| {
                    matches!(p.len(), 2 | 3)
                        && (p.starts_with('3') || p.starts_with('4') || p.starts_with('9'))
                        && p != "39"
                        && p != "49"
                })
            })
    })
}

fn begin(a: &mut Agent, prompt: &str) -> String {
    let id = uuid();
    a.c.call(&BeginPrompt {
        session_id: a.session.clone(),
        prompt_id: id.clone(),
        prompt: Some(prompt.into()),
        transcript_path: None,
    })
    .unwrap();
    id
}

/// The CLI's own dry run of a rewind to `uuid` in `scope`: the paths it would restore,
/// relative to the workspace.
fn cli_dry_run(socket: &Path, uuid: &str, scope: &str, ws: &Path) -> Vec<String> {
    let out = Command::new(BIN)
        .args([
            "rewind",
            uuid,
            "--scope",
            scope,
            "--dry-run",
            "--json",
            "--socket",
        ])
        .arg(socket)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let mut paths: Vec<String> = v["filesChanged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            PathBuf::from(p.as_str().unwrap())
                .strip_prefix(ws)
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    paths.sort();
    paths
}

/// A person opens `rewindfs ui`, finds the turn where things went wrong, sees what it changed
/// and by whom, dry-runs, rewinds it and undoes that, without typing a uuid; `q` gives the
/// terminal back as it was.
#[test]
fn a_person_finds_a_turn_sees_its_changes_rewinds_and_undoes_it_in_a_real_terminal() {
    require_fuse();
    require_command("tmux", "tmux");
    let mut a = Agent::new(|d| std::fs::write(d.join("keep.txt"), "kept\n").unwrap());
    a.c.call(&RegisterAgent {
        pid: std::process::id(),
        session_id: Some(a.session.clone()),
    })
    .unwrap();
    let _t1 = begin(&mut a, "make the notes");
    a.tool_write("notes.txt", b"one\n");
    a.bash("mkdir gen && echo built > gen/out.log");
    let before_t2 = tree(&a.m.dir);
    let t2 = begin(&mut a, "shout the notes");
    a.tool_write("notes.txt", b"ONE\nTWO\n");
    a.bash("rm keep.txt && echo again >> gen/out.log");
    let _t3 = begin(&mut a, "tidy up");
    a.tool_write("readme.md", b"# notes\n");
    let end = tree(&a.m.dir);

    let t = Tmux::start(&a.m.dir, 180, 45);
    let scratch = tempfile::tempdir().unwrap();
    let (stty_before, stty_after) = (scratch.path().join("before"), scratch.path().join("after"));
    // What the terminal is like before: its settings, and a line on the screen.
    t.line(&format!(
        "stty -g > {}; echo BEFORE-THE-$((6*7))",
        stty_before.display()
    ));
    t.expect(&["BEFORE-THE-42"]);
    t.line(&format!(
        "{BIN} ui --socket {}; stty -g > {}; echo UI-$((6*7))-EXITED",
        a.m.socket().display(),
        stty_after.display()
    ));

    // The timeline shows each prompt, numbered, with who changed how many paths; the newest
    // is selected.
    let s = t.expect(&[
        "#1 (",
        "\"make the notes\"",
        "\"shout the notes\"",
        "#3 (",
        "\"tidy up\"",
        "Changed in #3",
    ]);
    assert!(s.contains("tool 1  shell 2"), "turn 1's counts:\n{s}");
    assert!(
        has_colour(&t.styled_screen()),
        "colours without NO_COLOR:\n{}",
        t.styled_screen()
    );

    // A click selects: the timeline's items are two rows high under the header and the
    // border, so turn 1 is on rows 5-6 (xterm's SGR mouse report, 1-based, as a terminal
    // sends it).
    t.keys(&["-l", "\x1b[<0;12;5M\x1b[<0;12;5m"]);
    t.expect(&["Changed in #1", "changed: tool 1, shell 2"]);
    // Down selects turn 2: its paths with their actors, and the diff of the first one (what
    // the turn changed in it, from its start to its end).
    t.keys(&["Down"]);
    let s = t.expect(&["Changed in #2", "changed: tool 1, shell 2"]);
    assert!(s.contains("shell    keep.txt"), "{s}");
    assert!(s.contains("tool     notes.txt"), "{s}");
    // The paths pane lists gen/out.log before keep.txt: select notes.txt (the third).
    t.keys(&["Tab", "Down", "Down"]);
    let s = t.expect(&["notes.txt: what changed in #2", "+ONE", "+TWO", "-one"]);
    assert!(!s.contains("+kept"), "{s}");
    t.keys(&["BTab"]);

    // The dry run says what the CLI's dry run says.
    let cli = cli_dry_run(&a.m.socket(), &t2, "agent", &a.m.dir);
    // Turn 3 is after turn 2: a rewind to turn 2's start takes it back too.
    assert_eq!(cli, ["gen/out.log", "keep.txt", "notes.txt", "readme.md"]);
    t.keys(&["d"]);
    let s = t.expect(&[&format!("agent scope: would restore {} path(s)", cli.len())]);
    for p in &cli {
        assert!(s.contains(p.as_str()), "{p} in the dry run:\n{s}");
    }
    t.keys(&["Escape"]);

    // Rewind: the scope is chosen, the confirmation names it and the count; the tree is as
    // it was when turn 2 began.
    t.keys(&["r"]);
    t.expect(&["which scope?", "[a] agent scope: would restore 4 path(s)"]);
    t.keys(&["a"]);
    t.expect(&["Rewind 4 path(s) to the start of #2", "in agent scope?"]);
    assert_eq!(
        tree(&a.m.dir),
        end,
        "nothing happens before the confirmation"
    );
    // A key, the window saying it is done, and the tree then.
    let step = |key: &str, done: &str, want: &[String]| {
        t.keys(&[key]);
        t.expect(&[done]);
        assert_eq!(tree(&a.m.dir), want, "after {key}");
        t.keys(&["Escape"]);
    };
    step("y", "(agent scope): done", &before_t2);
    // Undo gives back the end of the session exactly; redo applies the rewind again; undo
    // once more.
    step("u", "Undo: done", &end);
    step("U", "Redo: done", &before_t2);
    step("u", "Undo: done", &end);

    // The file as it was: turn 2 selected, notes.txt as it was when turn 2 began.
    t.keys(&["Tab", "Home", "Down", "Down"]);
    t.keys(&["s"]);
    let s = t.expect(&["notes.txt as it was at the start of #2"]);
    assert!(s.contains("│one "), "its content then:\n{s}");
    t.keys(&["s", "BTab"]);

    // Fork: the tree at the start of turn 2 written into a new directory.
    let fork_dir = a.m.tmp.path().join("forked");
    t.keys(&["f"]);
    t.expect(&["Fork the tree at the start of #2"]);
    // The suggested directory is edited: erased, then this one typed.
    for _ in 0..400 {
        t.keys(&["BSpace"]);
    }
    t.keys(&["-l", &fork_dir.display().to_string()]);
    t.keys(&["Enter"]);
    t.expect(&["Fork: done"]);
    assert_eq!(
        tree(&fork_dir),
        before_t2,
        "the fork is the tree when turn 2 began"
    );
    t.keys(&["Escape"]);

    // It follows the mount: a new prompt and its change appear without a restart.
    let _t4 = begin(&mut a, "one more thing");
    a.tool_write("late.txt", b"late\n");
    t.expect(&["#4 (", "\"one more thing\"", "tool 1"]);
    // Resizing: the window is drawn again at the new size.
    let ok = t
        .cmd()
        .args(["resize-window", "-t", "ui", "-x", "100", "-y", "30"])
        .status()
        .unwrap();
    assert!(ok.success());
    let s = t.expect(&["Timeline"]);
    assert!(
        s.lines().all(|l| l.chars().count() <= 100),
        "drawn for 100 columns:\n{s}"
    );

    // q leaves the terminal as it was: the shell's screen back, its settings unchanged.
    t.keys(&["q"]);
    let s = t.expect(&["UI-42-EXITED"]);
    assert!(
        s.contains("BEFORE-THE-42"),
        "the screen before came back:\n{s}"
    );
    assert!(!s.contains("Timeline"), "{s}");
    let before = std::fs::read_to_string(&stty_before).unwrap();
    let after = std::fs::read_to_string(&stty_after).unwrap();
    assert_eq!(before, after, "the terminal's settings");
}

/// Over a workspace no daemon serves, the window shows the same timeline, paths, diffs and
/// dry runs read-only, says so, and refuses to change anything; once the workspace is mounted
/// again it follows the daemon.
#[test]
fn over_an_unmounted_workspace_the_timeline_is_read_only_and_follows_a_new_mount() {
    require_fuse();
    require_command("tmux", "tmux");
    let mut a = Agent::new(|d| std::fs::write(d.join("keep.txt"), "kept\n").unwrap());
    let _t1 = begin(&mut a, "make the notes");
    a.tool_write("notes.txt", b"one\n");
    let _t2 = begin(&mut a, "shout the notes");
    a.bash("rm keep.txt");
    let Agent { mut m, c, .. } = a;
    drop(c);
    m.umount();
    let end = tree(&m.dir);

    let t = Tmux::start(&m.dir, 160, 40);
    // (Markers are printed by arithmetic, so the typed command line never matches them.)
    // NO_COLOR: the window draws without colours.
    t.line(&format!(
        "NO_COLOR=1 {BIN} ui {} --store {}; echo UI-$((6*7))-EXITED",
        m.dir.display(),
        m.store.display()
    ));
    t.expect(&[
        "(read-only: not mounted)",
        "#1 (",
        "\"make the notes\"",
        "\"shout the notes\"",
        "shell    keep.txt",
        // The diff of keep.txt from now to the start of turn 2 (the newest), answered from
        // the store and the directory.
        "+kept",
        "— 3 checkpoint(s)",
    ]);
    let styled = t.styled_screen();
    assert!(!has_colour(&styled), "NO_COLOR: no colours:\n{styled:?}");
    assert!(
        styled.contains("\x1b[7m"),
        "the selection stays marked (reversed)"
    );
    // A dry run is read-only too.
    t.keys(&["d"]);
    t.expect(&[
        "Dry run: rewind to the start of #2",
        "agent scope: would restore 1 path(s)",
    ]);
    t.keys(&["Escape"]);
    t.keys(&["r"]);
    t.expect(&["read-only: no daemon serves this store"]);
    t.keys(&["Escape"]);
    t.expect(&["Timeline"]);
    t.keys(&["u"]);
    t.expect(&["Undo", "read-only: no daemon serves this store"]);
    assert_eq!(tree(&m.dir), end, "nothing changed");
    t.keys(&["Escape"]);

    // Mounted again: the same window turns live and can rewind. The look without a daemon
    // began no checkpoint: the only new one is the mount's.
    m.mount(&[]);
    t.expect(&["(live)", "— 4 checkpoint(s)"]);
    t.keys(&["Up", "d"]);
    t.expect(&[
        "Dry run: rewind to the start of #1",
        "agent scope: would restore 2 path(s)",
    ]);
    t.keys(&["Escape"]);
    t.keys(&["q"]);
    t.expect(&["UI-42-EXITED"]);
}

/// A rewind of thousands of paths at a terminal shows a meter while it runs and then a summary
/// (the first paths and a file holding all of them); in a pipe there is no meter and every
/// path is printed.
#[test]
fn a_long_rewind_shows_progress_and_a_summary_at_a_terminal_and_every_path_in_a_pipe() {
    require_fuse();
    require_command("tmux", "tmux");
    let mut a = Agent::new(|_| {});
    let t1 = begin(&mut a, "generate");
    a.bash("mkdir many && cd many && seq 1 3000 | xargs touch");
    let end = tree(&a.m.dir);

    let t = Tmux::start(&a.m.dir, 160, 40);
    let scratch = tempfile::tempdir().unwrap();
    let recorded = scratch.path().join("pane.log");
    // Everything the terminal was sent, meters that were cleared included.
    let ok = t
        .cmd()
        .args(["pipe-pane", "-o", "-t", "ui"])
        .arg(format!("cat >> {}", recorded.display()))
        .status()
        .unwrap();
    assert!(ok.success());
    t.line(&format!(
        "REWINDFS_PROGRESS_AFTER_MS=0 {BIN} rewind {t1} --scope all --socket {}; echo DONE-$((6*7))",
        a.m.socket().display()
    ));
    let s = t.expect(&["DONE-42"]);
    assert!(s.contains("changed 3001 file(s)"), "{s}");
    assert!(s.contains("scope all; now: 3001 gone"), "{s}");
    let listed = s
        .lines()
        .find_map(|l| l.split("every path is in ").nth(1))
        .unwrap_or_else(|| panic!("no list file named:\n{s}"));
    let listed = listed.split(" (--list").next().unwrap().trim();
    let all = std::fs::read_to_string(listed).unwrap();
    assert_eq!(all.lines().count(), 3001, "{listed}");
    assert!(all.lines().any(|l| l == "many/2999"));
    assert!(
        s.lines().filter(|l| l.starts_with("  many/")).count() <= 10,
        "{s}"
    );
    let sent = String::from_utf8_lossy(&std::fs::read(&recorded).unwrap()).into_owned();
    assert!(
        sent.contains("rewinding paths"),
        "no meter was drawn: {sent}"
    );
    assert!(sent.contains("/s"), "the meter shows a rate: {sent}");
    assert_eq!(tree(&a.m.dir).len(), 0, "rewound to an empty workspace");

    // In a pipe: no meter, every path.
    let out = Command::new(BIN)
        .args(["undo", "--socket"])
        .arg(a.m.socket())
        .env("REWINDFS_PROGRESS_AFTER_MS", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("  many/")).count(),
        3000,
        "{stdout}"
    );
    assert!(!stderr.contains("undoing"), "{stderr}");
    assert_eq!(tree(&a.m.dir), end);
}
