//! Scope `tool` against what the SDK's own rewind does (tests/clients/FINDINGS.md §4, measured
//! with the real Claude Code CLI 2.1.330): one test per measured outcome, through a real mount
//! with the stand-in agent. (`sdk_scenarios.rs` replays the recordings themselves.)

use std::fs;
use std::io::{Read, Seek};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::json;

use rewindfs::control::cmd::{RewindFiles, RewindReply};
use rewindfs::store::Scope;

use crate::agent::Agent;
use crate::support::{require_fuse, tree};

/// A dry run of the tool scope to `t`, only for `path`.
fn dry_for(a: &mut Agent, t: &str, path: &str) -> RewindReply {
    a.c.call(&RewindFiles {
        dry_run: true,
        paths: vec![path.to_string()],
        ..RewindFiles::to(t, Scope::Tool)
    })
    .unwrap()
}

/// `filesChanged` relative to the workspace, in the order answered.
fn listed(a: &Agent, v: &RewindReply) -> Vec<String> {
    v.files_changed
        .iter()
        .map(|x| {
            std::path::Path::new(x)
                .strip_prefix(&a.m.dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

fn mode(a: &Agent, rel: &str) -> u32 {
    fs::symlink_metadata(a.m.p(rel))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// How a case's file gets its current content after a tool first tracked it.
enum Then {
    /// The tool's own write is the change (the case is rewound to the turn of that write).
    Nothing,
    /// A later Bash command (the case is rewound to the turn of that command).
    Bash(&'static str),
}

/// One line-count case: a file `name` holding `before` (or nothing) when a tool writes `tool`
/// to it, then changed as `then` says; the dry run back to before that change must answer
/// `want` = (listed, insertions, deletions).
struct Case {
    name: &'static str,
    before: Option<&'static [u8]>,
    tool: &'static [u8],
    then: Then,
    want: (bool, u64, u64),
}

const fn case(
    name: &'static str,
    before: Option<&'static [u8]>,
    tool: &'static [u8],
    then: Then,
    want: (bool, u64, u64),
) -> Case {
    Case {
        name,
        before,
        tool,
        then,
        want,
    }
}

#[test]
fn dry_run_line_counts_are_the_sdks() {
    require_fuse();
    // The SDK's answers measured for current → target (FINDINGS.md §4).
    let blob = r"printf '\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0b\x0c' > ";
    let cases = [
        case("created3", None, b"a\nb\nc\n", Then::Nothing, (true, 0, 3)),
        case("created2nonl", None, b"a\nb", Then::Nothing, (true, 0, 2)),
        case("createdabc", None, b"abc", Then::Nothing, (true, 0, 1)),
        case("creatednl", None, b"\n", Then::Nothing, (true, 0, 1)),
        case("createdempty", None, b"", Then::Nothing, (true, 0, 0)),
        case(
            "modify",
            Some(b"x\ny\n"),
            b"x\nY\n",
            Then::Nothing,
            (true, 1, 1),
        ),
        case(
            "dropnl",
            Some(b"a\nb\n"),
            b"a\nb",
            Then::Nothing,
            (true, 1, 1),
        ),
        case(
            "addnl",
            Some(b"a\nb"),
            b"a\nb\n",
            Then::Nothing,
            (true, 1, 1),
        ),
        case("toempty", Some(b""), b"a\n", Then::Nothing, (true, 0, 1)),
        case("fromempty", Some(b"a\n"), b"", Then::Nothing, (true, 1, 0)),
        case(
            "crlf",
            Some(b"a\r\nb\r\n"),
            b"a\nb\n",
            Then::Nothing,
            (true, 2, 2),
        ),
        case(
            "reverse",
            Some(b"a\nb\nc\n"),
            b"c\nb\na\n",
            Then::Nothing,
            (true, 2, 2),
        ),
        case(
            "lcs",
            Some(b"a\nb\na\nb\n"),
            b"b\na\nb\na\n",
            Then::Nothing,
            (true, 1, 1),
        ),
        case("binary", None, b"text\n", Then::Bash(blob), (true, 1, 1)),
        case("deleted", None, b"x\n", Then::Bash("rm "), (true, 1, 0)),
        case(
            "samedecoded",
            None,
            b"x\n",
            Then::Bash(r"printf '\xfe' > "),
            (true, 1, 1),
        ),
    ];
    let mut a = Agent::new(|d| {
        for c in &cases {
            if let Some(b) = c.before {
                fs::write(d.join(c.name), b).unwrap();
            }
        }
    });
    let t1 = a.turn();
    for c in &cases {
        a.tool_write(c.name, c.tool);
    }
    let t2 = a.turn();
    for c in &cases {
        if let Then::Bash(cmd) = c.then {
            a.bash(&format!("{cmd}{}", c.name));
        }
    }
    let mut wrong = Vec::new();
    for c in &cases {
        let to = match c.then {
            Then::Nothing => &t1,
            Then::Bash(_) => &t2,
        };
        let r = dry_for(&mut a, to, c.name);
        let got = (!listed(&a, &r).is_empty(), r.insertions, r.deletions);
        if got != c.want {
            wrong.push(format!("{}: expected {:?}, got {got:?}", c.name, c.want));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // A blob back to text, and `\xff` → `\xfe`: both decode to U+FFFD, so no line differs.
    let t3 = a.turn();
    a.bash(r"echo text > binary; printf '\xff' > samedecoded");
    let back = dry_for(&mut a, &t3, "binary");
    assert_eq!(
        (back.insertions, back.deletions),
        (1, 1),
        "a 12-byte blob → text\\n: {back:?}"
    );
    let same = dry_for(&mut a, &t3, "samedecoded");
    assert_eq!(
        listed(&a, &same),
        Vec::<String>::new(),
        "\\xff → \\xfe: {same:?}"
    );
}

#[test]
fn a_mode_only_change_is_left_out_of_the_dry_run_and_restored_by_the_rewind() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("f", b"x\n");
    let t2 = a.turn();
    a.bash("chmod 755 f");
    let dry = a.rewind(&t2, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry), Vec::<String>::new(), "{dry:?}");
    assert_eq!((&dry.insertions, &dry.deletions), (&(0), &(0)));
    let r = a.rewind(&t2, "tool", false).unwrap();
    assert_eq!(r.skipped_links, Some(0));
    assert_eq!(mode(&a, "f"), 0o644, "the real rewind restores the mode");
    assert_eq!(
        listed(&a, &r),
        vec!["f"],
        "rewindfs's answer names what it changed"
    );
}

#[test]
fn a_tracked_file_replaced_by_a_symlink_fifo_directory_or_hard_link_is_listed_but_skipped() {
    require_fuse();
    // (what Bash does to the tracked file `f` (holding "x\n"), what the dry run counts, what
    // stays there)
    let cases: &[(&str, (u64, u64), &str)] = &[
        ("echo other > o; rm f; ln -s o f", (1, 1), "link"),
        ("rm f; mkfifo f", (1, 0), "other"),
        ("rm f; mkdir f", (1, 0), "dir"),
        ("echo y > f; ln f f2", (1, 1), "file"),
    ];
    for (cmd, (i, d), kind) in cases {
        let mut a = Agent::new(|_| {});
        a.turn();
        a.tool_write("f", b"x\n");
        let t2 = a.turn();
        a.bash(cmd);
        let before = tree(&a.m.dir);
        let dry = a.rewind(&t2, "tool", true).unwrap();
        assert_eq!(listed(&a, &dry), vec!["f"], "{cmd}: {dry:?}");
        assert_eq!((&dry.insertions, &dry.deletions), (i, d), "{cmd}: {dry:?}");
        let r = a.rewind(&t2, "tool", false).unwrap();
        assert!(r.can_rewind, "{cmd}");
        assert_eq!(r.skipped_links, Some(1), "{cmd}: {r:?}");
        assert_eq!(listed(&a, &r), Vec::<String>::new(), "{cmd}: {r:?}");
        assert_eq!(tree(&a.m.dir), before, "{cmd}: the path is left as it is");
        assert!(
            before.iter().any(|l| l.starts_with(&format!("f {kind}"))),
            "{cmd}: {before:?}"
        );
    }
}

#[test]
fn a_tracked_file_whose_directory_was_renamed_is_made_again_under_its_old_name() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("d/f.txt", b"x\n");
    a.turn();
    a.bash("echo y > d/f.txt");
    let t3 = a.turn();
    a.bash("mv d d2");
    let dry = a.rewind(&t3, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry), vec!["d/f.txt"]);
    assert_eq!((&dry.insertions, &dry.deletions), (&(1), &(0)));
    let r = a.rewind(&t3, "tool", false).unwrap();
    assert_eq!(r.skipped_links, Some(0));
    assert_eq!(a.read("d/f.txt").as_deref(), Some("y\n"));
    assert_eq!(
        a.read("d2/f.txt").as_deref(),
        Some("y\n"),
        "the moved copy stays"
    );
    assert_eq!(mode(&a, "d"), 0o755);
}

#[test]
fn a_tracked_file_whose_directory_was_replaced_by_a_symlink_is_skipped_and_not_written_through_it()
{
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("d/f.txt", b"x\n");
    a.turn();
    a.bash("echo y > d/f.txt");
    let t3 = a.turn();
    a.bash("echo z > d/f.txt; mv d d2; ln -s d2 d");
    // The dry run reads through the link (the SDK's reads follow it): "z" against "y".
    let dry = a.rewind(&t3, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry), vec!["d/f.txt"], "{dry:?}");
    let r = a.rewind(&t3, "tool", false).unwrap();
    assert_eq!(r.skipped_links, Some(1), "parent directory moved: {r:?}");
    assert_eq!(
        a.read("d2/f.txt").as_deref(),
        Some("z\n"),
        "nothing written through the link"
    );
    assert!(
        fs::symlink_metadata(a.m.p("d"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn a_file_that_still_exists_is_restored_in_place_and_an_open_descriptor_sees_it() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("f", b"one\n");
    let t2 = a.turn();
    a.tool_write("f", b"two\n");
    fs::set_permissions(a.m.p("f"), fs::Permissions::from_mode(0o600)).unwrap();
    let ino = fs::metadata(a.m.p("f")).unwrap().ino();
    let mut open = fs::File::open(a.m.p("f")).unwrap();
    let mut s = String::new();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(s, "two\n");
    a.rewind(&t2, "tool", false).unwrap();
    assert_eq!(fs::metadata(a.m.p("f")).unwrap().ino(), ino, "same inode");
    assert_eq!(a.read("f").as_deref(), Some("one\n"));
    assert_eq!(mode(&a, "f"), 0o644);
    // The same file, so a descriptor opened before the rewind reads what it restored.
    open.rewind().unwrap();
    s.clear();
    open.read_to_string(&mut s).unwrap();
    assert_eq!(
        s, "one\n",
        "the kernel's cached pages of the file were dropped"
    );
    // Undo gives back the tree from before the rewind.
    a.c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("two\n"));
    assert_eq!(mode(&a, "f"), 0o600);
}

#[test]
fn answers_follow_the_order_files_were_first_tracked_and_deletions_interleave_with_restores() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("e.txt"), "e\n").unwrap());
    let t1 = a.turn();
    a.tool_write("z.txt", b"z\n");
    a.tool_write("e.txt", b"E\n");
    a.tool_write("a.txt", b"a\n");
    let t2 = a.turn();
    a.tool_write("m.txt", b"m\n");
    a.bash("echo more >> z.txt");
    let dry = a.rewind(&t1, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry), vec!["z.txt", "e.txt", "a.txt", "m.txt"]);
    let dry2 = a.rewind(&t2, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry2), vec!["z.txt", "m.txt"]);
    // The real rewind answers in the same order (it restores first and removes last, as the
    // SDK does since 2.1.331, which only matters when a restore fails: see below).
    let r = a.rewind(&t1, "tool", false).unwrap();
    assert_eq!(listed(&a, &r), vec!["z.txt", "e.txt", "a.txt", "m.txt"]);
    assert_eq!(
        tree(&a.m.dir).len(),
        1,
        "only e.txt, as before the turn: {:?}",
        tree(&a.m.dir)
    );
    assert_eq!(a.read("e.txt").as_deref(), Some("e\n"));
}

/// SDK quirk (a): a same-size change whose mtime is older than the backup reads as unchanged.
#[test]
fn a_same_size_change_with_an_mtime_set_back_is_listed_but_not_restored() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("f", b"aaaa\n");
    a.tool_write("g", b"aaaa\n");
    let t2 = a.turn();
    a.bash("echo bbbb > f; touch -d 2000-01-01 f; echo bbbb > g");
    let dry = a.rewind(&t2, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry), vec!["f", "g"]);
    let r = a.rewind(&t2, "tool", false).unwrap();
    assert_eq!(
        a.read("f").as_deref(),
        Some("bbbb\n"),
        "not restored, as by the SDK"
    );
    assert_eq!(a.read("g").as_deref(), Some("aaaa\n"));
    assert_eq!(listed(&a, &r), vec!["g"]);
    // Scope agent has no such quirk.
    a.c.request("undo_rewind", json!({})).unwrap();
    a.rewind(&t2, "agent", false).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("aaaa\n"));
}

/// The backup the mtime is compared with is the SDK's: taken when the file's message began
/// (for a file changed in an earlier turn, at the first message after that change), not when
/// rewindfs captured the change. A file written after that backup and moved in later is newer
/// than it, so it is restored; and a tool's own write, whose temp file got its mtime before the
/// rename rewindfs captures, is newer than the backup the SDK took before the tool ran.
#[test]
fn mtimes_are_compared_with_when_the_sdk_took_its_backup() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("h"), "hhhh\n").unwrap());
    a.turn();
    a.tool_write("f", b"aaaa\n");
    let t2 = a.turn();
    a.bash("echo bbbb > g");
    // Longer than the slack allowed for the kernel's clock, so the times are told apart.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let t3 = a.turn();
    a.bash("mv g f");
    // A tool's write whose temp file is written well before the rename.
    let span = json!({"phase": "pre", "tool_name": "Write", "tool_use_id": "toolu_slow", "file_path": a.m.p("h")});
    a.c.request("tool_use", span.clone()).unwrap();
    fs::write(a.m.p("h.tmp.1.1700000000000"), "HHHH\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    fs::rename(a.m.p("h.tmp.1.1700000000000"), a.m.p("h")).unwrap();
    let mut post = span;
    post["phase"] = json!("post");
    a.c.request("tool_use", post).unwrap();
    let r = a.rewind(&t3, "tool", false).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("aaaa\n"), "{r:?}");
    assert_eq!(a.read("h").as_deref(), Some("hhhh\n"), "{r:?}");
    let _ = t2;
}

/// SDK quirk (b): texts are compared as decoded UTF-8, so bytes that decode alike are equal.
#[test]
fn bytes_that_decode_to_the_same_text_are_neither_listed_nor_restored() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("f", b"x\n");
    a.turn();
    a.bash(r"printf '\xff' > f");
    let t3 = a.turn();
    a.bash(r"printf '\xfe' > f");
    let dry = a.rewind(&t3, "tool", true).unwrap();
    assert_eq!(listed(&a, &dry), Vec::<String>::new(), "{dry:?}");
    a.rewind(&t3, "tool", false).unwrap();
    assert_eq!(fs::read(a.m.p("f")).unwrap(), b"\xfe");
    a.rewind(&t3, "agent", false).unwrap();
    assert_eq!(
        fs::read(a.m.p("f")).unwrap(),
        b"\xff",
        "scope agent restores it"
    );
}

#[test]
fn undo_after_a_tool_rewind_gives_back_the_exact_tree() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    a.tool_write("d/e/f.txt", b"f\n");
    a.tool_write("g.txt", b"g\n");
    let t2 = a.turn();
    a.tool_write("new.txt", b"new\n");
    a.bash("chmod 600 g.txt; echo more >> g.txt; rm -rf d");
    let before = tree(&a.m.dir);
    a.rewind(&t2, "tool", false).unwrap();
    assert_eq!(a.read("d/e/f.txt").as_deref(), Some("f\n"));
    assert!(a.read("new.txt").is_none());
    a.c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(tree(&a.m.dir), before);
}

/// A rewind that fails in the middle of rewriting a file in place (as one that runs out of
/// space would: the file truncated) stays 'applying', and the next mount writes it again.
#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
fn a_tool_rewind_cut_short_in_the_middle_of_a_file_is_finished_at_the_next_mount() {
    require_fuse();
    let mut a = Agent::with_args(|_| {}, &[]);
    a.m.umount();
    a.m.mount_with_env(&[], &[("REWINDFS_TEST_FAIL_REWIND_AFTER", "1")]);
    let mut c = rewindfs::control::client::Client::connect(&a.m.socket()).unwrap();
    c.request("register_agent", json!({"pid": std::process::id()}))
        .unwrap();
    a.c = c;
    a.turn();
    a.tool_write("a.txt", b"a one\n");
    a.tool_write("b.txt", b"b one\n");
    let t2 = a.turn();
    a.tool_write("a.txt", b"a two\n");
    a.tool_write("b.txt", b"b two\n");
    let e = a.rewind(&t2, "tool", false).unwrap_err();
    assert!(e.contains("injected failure"), "{e}");
    assert_eq!(a.read("a.txt").as_deref(), Some("a one\n"));
    assert_eq!(
        a.read("b.txt").as_deref(),
        Some(""),
        "left truncated by the failure"
    );
    a.m.umount();
    a.m.mount(&[]);
    assert_eq!(a.read("a.txt").as_deref(), Some("a one\n"));
    assert_eq!(
        a.read("b.txt").as_deref(),
        Some("b one\n"),
        "the next mount wrote it again"
    );
}

/// `dir` made read-only by a read-only bind mount over itself (inside the rewindfs mount: the
/// rewind's writes there fail with EROFS, as a read-only mount or an immutable file makes the
/// SDK's own fail); unmounted when dropped.
struct ReadOnly(std::path::PathBuf);

impl ReadOnly {
    fn over(dir: &std::path::Path) -> ReadOnly {
        let d = dir.to_str().unwrap();
        crate::support::sh(
            dir,
            &format!("mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}'"),
        );
        ReadOnly(dir.to_path_buf())
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A restore that fails (Claude Code 2.1.332, measured with `chattr +i` and a read-only bind
/// mount: tests/clients/findings_2_1_332/NOTES.md): the other restores are made, every removal
/// is held (the file the turn created is kept), and the answer is a success; when nothing could
/// be restored at all, the rewind fails in the SDK's words and changes nothing.
#[test]
fn a_restore_that_fails_holds_every_removal_and_fails_the_rewind_only_when_nothing_changed() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::write(d.join("ok.txt"), "ok0\n").unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        fs::write(d.join("sub/bad.txt"), "bad0\n").unwrap();
    });
    let t1 = a.turn();
    a.tool_write("new.txt", b"new\n");
    a.tool_write("ok.txt", b"ok1\n");
    a.tool_write("sub/bad.txt", b"bad1\n");
    let t2 = a.turn();
    a.tool_write("new2.txt", b"new2\n");
    a.tool_write("sub/bad.txt", b"bad2\n");
    let ro = ReadOnly::over(&a.m.p("sub"));
    assert!(
        fs::write(a.m.p("sub/bad.txt"), "x").is_err(),
        "sub is read-only now"
    );

    // Only a removal and the failing restore: nothing changes, and the rewind fails.
    let e = a.rewind(&t2, "tool", false).unwrap_err();
    assert!(
        e.contains(
            "Failed to rewind: No files were restored: 1 file failed (backup missing, or the file could not be updated)"
        ),
        "{e}"
    );
    assert_eq!(a.read("new2.txt").as_deref(), Some("new2\n"), "held");
    assert_eq!(a.read("sub/bad.txt").as_deref(), Some("bad2\n"));

    // A restore that works besides: it is made, the removals are held, and it succeeds.
    let r = a.rewind(&t1, "tool", false).unwrap();
    assert!(r.can_rewind && r.error.is_none(), "{r:?}");
    assert_eq!(r.skipped_links, Some(0), "{r:?}");
    assert_eq!(a.read("ok.txt").as_deref(), Some("ok0\n"), "restored");
    assert_eq!(
        a.read("sub/bad.txt").as_deref(),
        Some("bad2\n"),
        "could not be"
    );
    assert_eq!(
        a.read("new.txt").as_deref(),
        Some("new\n"),
        "kept: a restore failed"
    );
    assert_eq!(
        a.read("new2.txt").as_deref(),
        Some("new2\n"),
        "kept: a restore failed"
    );
    assert_eq!(listed(&a, &r), vec!["ok.txt"], "what it changed");

    // With the obstacle gone, the same rewind removes them and restores the file.
    drop(ro);
    let u = a.rewind(&t1, "tool", false).unwrap();
    assert!(u.can_rewind, "{u:?}");
    assert_eq!(a.read("sub/bad.txt").as_deref(), Some("bad0\n"));
    assert_eq!(a.read("new.txt"), None);
    assert_eq!(a.read("new2.txt"), None);
}
