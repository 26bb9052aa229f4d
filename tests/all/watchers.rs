//! Rewinds that editors, dev servers and watchers see (docs/design.md §2, "A rewind is itself a
//! change"): a rewind, undo or redo changes the tree through the mount, so an inotify watch on
//! the mount gets the events a process making the same changes would cause; a file restored in
//! place keeps its inode; a change someone makes while a rewind runs is left as they made it
//! and reported (`changedMeanwhile`); and an interrupted one is finished at the next mount.
//! Every watch here is an `inotify` watch on the mounted directory, as `inotifywait -m -r`,
//! an editor or a dev server's watcher sets up.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use rewindfs::control::client::Client;
use rewindfs::control::cmd::{RewindFiles, RewindReply, UndoRewind};
use rewindfs::store::Scope;
use rustix::fs::inotify::{self, ReadFlags, WatchFlags};
use serde_json::{Value, json};

use crate::support::{BIN, Mounted, is_stale_or_gone, require_fuse, rewindfs_ok, sh, wait_until};

/// An inotify watch on some directories of a mount.
struct Watcher {
    fd: OwnedFd,
    /// Watch descriptor → the directory it watches, workspace-relative (`""`: the root).
    dirs: HashMap<i32, String>,
}

impl Watcher {
    /// Watches `dirs` (workspace-relative; `""` is the root) of the mount at `root` for what a
    /// watcher of a project cares about: contents written, attributes, names made, removed
    /// and moved.
    fn new(root: &Path, dirs: &[&str]) -> Watcher {
        let fd =
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
        let mask = WatchFlags::MODIFY
            | WatchFlags::ATTRIB
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::DELETE_SELF;
        let mut map = HashMap::new();
        for d in dirs {
            let wd = inotify::add_watch(&fd, root.join(d), mask).unwrap();
            map.insert(wd, (*d).to_string());
        }
        Watcher { fd, dirs: map }
    }

    /// The events queued so far, as (workspace-relative path, flags); a directory's own events
    /// (`DELETE_SELF`) under its own path.
    fn drain(&mut self) -> Vec<(String, ReadFlags)> {
        // Events are queued by the syscalls that cause them, which have all returned; the
        // pause only lets a slow machine's last ones land.
        std::thread::sleep(Duration::from_millis(100));
        let mut buf = [MaybeUninit::uninit(); 8192];
        let mut r = inotify::Reader::new(&self.fd, &mut buf);
        let mut out = Vec::new();
        loop {
            let e = match r.next() {
                Ok(e) => e,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => panic!("reading inotify events: {e}"),
            };
            let dir = self.dirs.get(&e.wd()).cloned().unwrap_or_default();
            let path = match e.file_name().map(|n| n.to_string_lossy().into_owned()) {
                Some(n) if dir.is_empty() => n,
                Some(n) => format!("{dir}/{n}"),
                None => dir,
            };
            out.push((path, e.events()));
        }
        out
    }
}

/// The events of `path` among `events`.
fn of(events: &[(String, ReadFlags)], path: &str) -> ReadFlags {
    events
        .iter()
        .filter(|(p, _)| p == path)
        .fold(ReadFlags::empty(), |a, (_, f)| a | *f)
}

/// A client of the mount's socket with a generous timeout.
fn client(m: &Mounted) -> Client {
    let mut c = Client::connect(&m.socket()).unwrap();
    c.set_timeout(Duration::from_secs(600)).unwrap();
    c
}

/// Begins a checkpoint and returns its uuid.
fn checkpoint(c: &mut Client) -> String {
    let u = uuid::Uuid::new_v4().to_string();
    c.request(
        "begin_message",
        json!({"session_id": "watchers", "user_message_id": u}),
    )
    .unwrap();
    u
}

fn rewind_all(c: &mut Client, uuid: &str) -> RewindReply {
    c.call(&RewindFiles::to(uuid, Scope::All)).unwrap()
}

/// An undo of the last rewind (`dry_run`, `force` as given), through the typed client.
fn undo(c: &mut Client, dry_run: bool, force: bool) -> RewindReply {
    c.call(&UndoRewind {
        dry_run,
        force,
        session_id: None,
    })
    .unwrap()
}

/// The workspace-relative paths of a reply's `changedMeanwhile` (absent: none), sorted.
fn meanwhile(m: &Mounted, v: &RewindReply) -> Vec<String> {
    relative(m, &v.changed_meanwhile)
}

/// Absolute paths of a reply as workspace-relative ones, sorted.
fn relative(m: &Mounted, paths: &[String]) -> Vec<String> {
    let mut out: Vec<String> = paths
        .iter()
        .map(|p| {
            Path::new(p)
                .strip_prefix(&m.dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

fn set_user_xattr(p: &Path, value: &str) {
    rustix::fs::setxattr(
        p,
        "user.note",
        value.as_bytes(),
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
}

fn user_xattr(p: &Path) -> String {
    let mut buf = vec![0u8; 64];
    let n = rustix::fs::getxattr(p, "user.note", &mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Each kind of change a rewind makes, as a watcher of the mount sees it. Without the rewind
/// going through the mount (it used to write behind it), the watcher saw none of these.
#[test]
fn a_watcher_on_the_mount_sees_every_kind_of_change_a_rewind_makes() {
    every_kind_of_change_a_rewind_makes_is_seen(&[]);
}

/// The same with `--passthrough`, and a process reading the file restored in place all along:
/// its open passes through, so the rewind's helper writes through the kernel's passthrough too
/// (src/fs/opens.rs), which a watcher of the mount sees as a process's write.
#[test]
fn with_passthrough_a_watcher_on_the_mount_sees_every_kind_of_change_a_rewind_makes() {
    every_kind_of_change_a_rewind_makes_is_seen(&["--passthrough"]);
}

/// Mounted with `extra`: see [`a_watcher_on_the_mount_sees_every_kind_of_change_a_rewind_makes`].
fn every_kind_of_change_a_rewind_makes_is_seen(extra: &[&str]) {
    require_fuse();
    let m = Mounted::with_args(
        |d| {
            fs::write(d.join("content.txt"), "one\n").unwrap();
            fs::write(d.join("deleted.txt"), "deleted since\n").unwrap();
            fs::write(d.join("old.txt"), "renamed since\n").unwrap();
            fs::write(d.join("mode.txt"), "mode\n").unwrap();
            fs::set_permissions(d.join("mode.txt"), fs::Permissions::from_mode(0o644)).unwrap();
            fs::write(d.join("xattr.txt"), "xattr\n").unwrap();
            set_user_xattr(&d.join("xattr.txt"), "before");
            fs::create_dir(d.join("gone")).unwrap();
            fs::write(d.join("gone/inside.txt"), "in a removed directory\n").unwrap();
            std::os::unix::fs::symlink("content.txt", d.join("link")).unwrap();
        },
        extra,
    );
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    sh(
        &m.dir,
        "echo two > content.txt; rm deleted.txt; mv old.txt renamed.txt; chmod 600 mode.txt; \
         rm -r gone; mkdir made && echo new > made/new.txt; echo created > created.txt; rm link",
    );
    // Held open for reading across the rewind (with `--passthrough`, served by the kernel).
    let mut reader = fs::File::open(m.p("content.txt")).unwrap();
    set_user_xattr(&m.p("xattr.txt"), "after");
    let mut w = Watcher::new(&m.dir, &["", "made"]);
    let r = rewind_all(&mut c, &cp);
    assert!(r.can_rewind, "{r:?}");
    let ev = w.drain();

    // (path, events it must have: any of each group, events it must not have)
    let any = |f: ReadFlags| f;
    let cases: &[(&str, &[ReadFlags], ReadFlags)] = &[
        // Restored in place: emptied and written, then closed.
        (
            "content.txt",
            &[any(ReadFlags::MODIFY), any(ReadFlags::CLOSE_WRITE)],
            ReadFlags::DELETE | ReadFlags::MOVED_TO,
        ),
        // Back again: arrives by a rename of a complete file.
        (
            "deleted.txt",
            &[any(ReadFlags::CREATE | ReadFlags::MOVED_TO)],
            ReadFlags::empty(),
        ),
        // A rename undone: the new name goes, the old one comes back.
        ("renamed.txt", &[any(ReadFlags::DELETE)], ReadFlags::empty()),
        (
            "old.txt",
            &[any(ReadFlags::CREATE | ReadFlags::MOVED_TO)],
            ReadFlags::empty(),
        ),
        // A mode alone: a chmod, nothing written.
        (
            "mode.txt",
            &[any(ReadFlags::ATTRIB)],
            ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE,
        ),
        // An extended attribute alone: the same.
        (
            "xattr.txt",
            &[any(ReadFlags::ATTRIB)],
            ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE,
        ),
        // A directory removed since comes back.
        (
            "gone",
            &[any(ReadFlags::CREATE | ReadFlags::MOVED_TO)],
            ReadFlags::empty(),
        ),
        // A directory made since goes, with what is in it.
        (
            "made/new.txt",
            &[any(ReadFlags::DELETE)],
            ReadFlags::empty(),
        ),
        ("made", &[any(ReadFlags::DELETE)], ReadFlags::empty()),
        // A file made since goes.
        ("created.txt", &[any(ReadFlags::DELETE)], ReadFlags::empty()),
        // A symlink comes back.
        (
            "link",
            &[any(ReadFlags::CREATE | ReadFlags::MOVED_TO)],
            ReadFlags::empty(),
        ),
    ];
    for (path, want, never) in cases {
        let got = of(&ev, path);
        for w in *want {
            assert!(
                got.intersects(*w),
                "{path}: a watcher of the mount got {got:?}, not {w:?} (all events: {ev:?})"
            );
        }
        assert!(
            !got.intersects(*never),
            "{path}: a watcher of the mount got {got:?}, including {never:?}, which the change \
             does not cause (all events: {ev:?})"
        );
    }
    assert!(
        of(&ev, "gone").contains(ReadFlags::ISDIR),
        "a directory's events say so: {ev:?}"
    );
    // And the tree is what it was, also to the reader that held the file open.
    assert_eq!(fs::read_to_string(m.p("content.txt")).unwrap(), "one\n");
    let mut held = String::new();
    reader.rewind().unwrap();
    reader.read_to_string(&mut held).unwrap();
    assert_eq!(held, "one\n", "what the open reader reads after the rewind");
    assert_eq!(
        fs::read_to_string(m.p("deleted.txt")).unwrap(),
        "deleted since\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("old.txt")).unwrap(),
        "renamed since\n"
    );
    assert!(!m.p("renamed.txt").exists() && !m.p("made").exists());
    assert!(!m.p("created.txt").exists());
    assert_eq!(
        fs::metadata(m.p("mode.txt")).unwrap().permissions().mode() & 0o7777,
        0o644
    );
    assert_eq!(user_xattr(&m.p("xattr.txt")), "before");
    assert_eq!(
        fs::read_to_string(m.p("gone/inside.txt")).unwrap(),
        "in a removed directory\n"
    );
    assert_eq!(
        fs::read_link(m.p("link")).unwrap(),
        Path::new("content.txt")
    );
    // The rewind's changes are in the change log, as a process's are: rewriting a file in
    // place (written over, then cut to length) is one entry, a write.
    let log = c.request("log", json!({})).unwrap();
    let rewrites: Vec<&serde_json::Value> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["actor"] == "rewind" && e["path"] == "content.txt")
        .collect();
    assert_eq!(rewrites.len(), 1, "{log}");
    assert_eq!(rewrites[0]["op"], "write", "{log}");
}

/// A file that still exists is restored in place, in every scope: its inode stays, and a
/// process that holds it open reads the restored content (before, scopes `agent` and `all`
/// wrote a new file beside it and exchanged the two: the open descriptor kept the old content).
#[test]
fn a_file_restored_by_a_rewind_keeps_its_inode_and_an_open_descriptor_reads_the_restored_content() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("open.txt"), "restored content\n").unwrap());
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    fs::write(m.p("open.txt"), "changed since, and longer than before\n").unwrap();
    let ino = fs::metadata(m.p("open.txt")).unwrap().ino();
    let mut held = fs::File::open(m.p("open.txt")).unwrap();
    let r = rewind_all(&mut c, &cp);
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(fs::metadata(m.p("open.txt")).unwrap().ino(), ino);
    let mut s = String::new();
    held.rewind().unwrap();
    held.read_to_string(&mut s).unwrap();
    assert_eq!(s, "restored content\n");
}

/// With `--passthrough`, a process's write that the kernel passes through (a writer beside a
/// reader: src/fs/opens.rs) never reaches the daemon, yet a watcher of the mount sees it as any
/// write (the kernel's own write path on the FUSE file queues the events), and a rewind to the
/// checkpoint before it gives the file back.
#[test]
fn with_passthrough_a_watcher_sees_a_write_the_kernel_passes_through() {
    require_fuse();
    // The workspace as it is under the mount, opened before the mount covers it.
    let mut under = None;
    let m = Mounted::with_args(
        |d| {
            fs::write(d.join("f.txt"), "before\n").unwrap();
            under = Some(fs::File::open(d).unwrap());
        },
        &["--passthrough"],
    );
    let under_dir = under.unwrap();
    let under = format!(
        "/proc/self/fd/{}/f.txt",
        std::os::fd::AsRawFd::as_raw_fd(&under_dir)
    );
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    let mut reader = fs::File::open(m.p("f.txt")).unwrap();
    let mut seen = String::new();
    reader.read_to_string(&mut seen).unwrap();
    assert_eq!(seen, "before\n");
    // The reader is served from the backing file: bytes written behind the daemon's back show,
    // where a reader through the daemon keeps the page it read. So the writer below must pass
    // through too (src/fs/opens.rs).
    fs::write(&under, "BEFORE\n").unwrap();
    seen.clear();
    reader.rewind().unwrap();
    reader.read_to_string(&mut seen).unwrap();
    assert_eq!(seen, "BEFORE\n", "the reader does not pass through");
    let mut w = Watcher::new(&m.dir, &[""]);
    {
        use std::io::Write;
        let mut writer = fs::OpenOptions::new()
            .write(true)
            .open(m.p("f.txt"))
            .unwrap();
        writer
            .write_all(b"AFTER, written past the daemon\n")
            .unwrap();
    }
    let ev = w.drain();
    let got = of(&ev, "f.txt");
    assert!(
        got.contains(ReadFlags::MODIFY) && got.contains(ReadFlags::CLOSE_WRITE),
        "a watcher of the mount got {got:?} for a passthrough write (all events: {ev:?})"
    );
    drop(reader);
    let r = rewind_all(&mut c, &cp);
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(fs::read_to_string(m.p("f.txt")).unwrap(), "BEFORE\n");
    let ev = w.drain();
    assert!(
        of(&ev, "f.txt").contains(ReadFlags::MODIFY),
        "the rewind's write is seen too: {ev:?}"
    );
}

/// Undo and redo change the tree through the mount too.
#[test]
fn undo_and_redo_are_seen_by_a_watcher_too() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("u.txt"), "checkpoint\n").unwrap());
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    fs::write(m.p("u.txt"), "after\n").unwrap();
    fs::write(m.p("v.txt"), "made after\n").unwrap();
    rewind_all(&mut c, &cp);
    for (cmd, content, v_events) in [
        (
            "undo_rewind",
            "after\n",
            ReadFlags::CREATE | ReadFlags::MOVED_TO,
        ),
        ("redo_rewind", "checkpoint\n", ReadFlags::DELETE),
    ] {
        let mut w = Watcher::new(&m.dir, &[""]);
        let r = c.request(cmd, json!({})).unwrap();
        assert_eq!(r["canRewind"], json!(true), "{cmd}: {r:?}");
        let ev = w.drain();
        assert!(
            of(&ev, "u.txt").contains(ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE),
            "{cmd}: {ev:?}"
        );
        assert!(of(&ev, "v.txt").intersects(v_events), "{cmd}: {ev:?}");
        assert_eq!(fs::read_to_string(m.p("u.txt")).unwrap(), content);
    }
}

/// A mount whose daemon runs with `env` (the fault-injection build's faults).
fn paused(env: &[(&str, &str)], setup: impl FnOnce(&Path)) -> Mounted {
    let mut m = Mounted::with(setup);
    m.umount();
    m.mount_with_env(&[], env);
    m
}

/// Runs a real rewind to `cp` on a thread of its own, and returns its answer once it is done.
fn rewind_in_background(m: &Mounted, cp: &str) -> std::thread::JoinHandle<RewindReply> {
    let (sock, cp) = (m.socket(), cp.to_string());
    std::thread::spawn(move || {
        let mut c = Client::connect(&sock).unwrap();
        c.set_timeout(Duration::from_secs(600)).unwrap();
        rewind_all(&mut c, &cp)
    })
}

/// Someone changes a path the rewind is about to restore after the rewind planned, before its
/// plan is journalled (`REWINDFS_TEST_PAUSE_PLANNED_MS` pauses there): the rewind leaves that
/// path as they made it, restores the rest, and says so. Before, a rewind held every writer off while it ran; without that, and without the
/// watch, the rewind would have overwritten the change.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_change_made_after_a_rewind_planned_and_before_it_journalled_is_left_alone_and_reported() {
    require_fuse();
    let m = paused(&[("REWINDFS_TEST_PAUSE_PLANNED_MS", "1500")], |d| {
        fs::write(d.join("a.txt"), "a at the checkpoint\n").unwrap();
        fs::write(d.join("b.txt"), "b at the checkpoint\n").unwrap();
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    fs::write(m.p("a.txt"), "a since\n").unwrap();
    fs::write(m.p("b.txt"), "b since\n").unwrap();
    let rewind = rewind_in_background(&m, &cp);
    std::thread::sleep(Duration::from_millis(500));
    fs::write(m.p("a.txt"), "a written before the plan was journalled\n").unwrap();
    let r = rewind.join().unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(meanwhile(&m, &r), vec!["a.txt"], "{r:?}");
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a written before the plan was journalled\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("b.txt")).unwrap(),
        "b at the checkpoint\n"
    );
    let files: Vec<&str> = r.files_changed.iter().map(String::as_str).collect();
    assert_eq!(
        files,
        vec![m.p("b.txt").to_str().unwrap()],
        "filesChanged lists what the rewind changed: {r:?}"
    );
    // The change it left alone is not in what undo would give back.
    let u = undo(&mut c, false, false);
    assert!(u.can_rewind, "{u:?}");
    assert_eq!(fs::read_to_string(m.p("b.txt")).unwrap(), "b since\n");
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a written before the plan was journalled\n"
    );
}

/// A path that was a file at the checkpoint is a directory now; someone else writes into that
/// directory after the rewind planned, before its plan is journalled. What the rewound session
/// made in it goes (a target of its own), the directory stays with the other writer's file in
/// it, and the path is reported as changed meanwhile, not as partly restored; a sibling whose
/// name sorts just after `d/` is rewound as usual. (Both the journalled plan, which leaves out a
/// target with something changed beneath it, and the FUSE core, which refuses the rewind's
/// unlink of the other writer's file, keep the directory; the range that answers "beneath" is
/// tested against a scan in `wspath`.)
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_directory_written_into_after_a_rewind_planned_is_left_whole() {
    require_fuse();
    let m = paused(&[("REWINDFS_TEST_PAUSE_PLANNED_MS", "1500")], |d| {
        fs::write(d.join("d"), "d was a file at the checkpoint\n").unwrap();
        fs::write(d.join("e.txt"), "e at the checkpoint\n").unwrap();
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    fs::remove_file(m.p("d")).unwrap();
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/untouched.txt"), "made since\n").unwrap();
    // A sibling whose name sorts just after `d/`: not beneath `d`.
    fs::write(m.p("d0"), "d0 since\n").unwrap();
    fs::write(m.p("e.txt"), "e since\n").unwrap();
    let rewind = rewind_in_background(&m, &cp);
    std::thread::sleep(Duration::from_millis(500));
    fs::write(
        m.p("d/theirs.txt"),
        "written into d while the rewind paused\n",
    )
    .unwrap();
    let r = rewind.join().unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(meanwhile(&m, &r), vec!["d"], "{r:?}");
    assert!(r.partially_restored.is_empty(), "{r:?}");
    assert!(
        !m.p("d/untouched.txt").exists(),
        "what the rewound session made in d goes: {r:?}"
    );
    assert_eq!(
        fs::read_to_string(m.p("d/theirs.txt")).unwrap(),
        "written into d while the rewind paused\n"
    );
    assert!(!m.p("d0").exists(), "the sibling was rewound: {r:?}");
    assert_eq!(
        fs::read_to_string(m.p("e.txt")).unwrap(),
        "e at the checkpoint\n"
    );
}

/// Someone changes a path after the rewind's plan is journalled, before the rewind reaches it:
/// the FUSE core refuses the rewind's own step on that path, and the rest goes on. The same for
/// a file made in a directory the rewind removes: the file, and so the directory, stay.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_change_made_while_a_rewind_applies_is_refused_to_the_rewind_and_reported() {
    require_fuse();
    let m = paused(&[("REWINDFS_TEST_PAUSE_JOURNALLED_MS", "1500")], |d| {
        fs::write(d.join("a.txt"), "a at the checkpoint\n").unwrap();
        fs::write(d.join("b.txt"), "b at the checkpoint\n").unwrap();
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    fs::write(m.p("a.txt"), "a since\n").unwrap();
    fs::write(m.p("b.txt"), "b since\n").unwrap();
    fs::create_dir(m.p("made")).unwrap();
    fs::write(m.p("made/x.txt"), "x\n").unwrap();
    let rewind = rewind_in_background(&m, &cp);
    std::thread::sleep(Duration::from_millis(500));
    fs::write(m.p("a.txt"), "a written while the rewind applied\n").unwrap();
    fs::write(m.p("made/mine.txt"), "made while the rewind applied\n").unwrap();
    let r = rewind.join().unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(
        meanwhile(&m, &r),
        vec!["a.txt", "made", "made/mine.txt"],
        "{r:?}"
    );
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a written while the rewind applied\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("made/mine.txt")).unwrap(),
        "made while the rewind applied\n"
    );
    assert!(
        !m.p("made/x.txt").exists(),
        "what the rewind planned to remove beside it went"
    );
    assert_eq!(
        fs::read_to_string(m.p("b.txt")).unwrap(),
        "b at the checkpoint\n"
    );
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}

/// A rewind that fails part-way stays journalled while the mount goes on; the next mount
/// finishes it — behind the mount, before serving — except for what someone changed since it
/// began, which stays as they made it.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn an_interrupted_rewind_is_finished_at_the_next_mount_without_clobbering_later_changes() {
    require_fuse();
    let mut m = paused(&[("REWINDFS_TEST_FAIL_REWIND_AFTER", "1")], |d| {
        for f in ["f1", "f2", "f3", "f4"] {
            fs::write(d.join(f), format!("{f} at the checkpoint\n")).unwrap();
        }
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    for f in ["f1", "f2", "f3", "f4"] {
        fs::write(m.p(f), format!("{f} since\n")).unwrap();
    }
    let e = c
        .request(
            "rewind_files",
            json!({"user_message_id": cp, "scope": "all"}),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("injected failure"), "{e}");
    assert_eq!(
        fs::read_to_string(m.p("f1")).unwrap(),
        "f1 at the checkpoint\n"
    );
    assert_eq!(fs::read_to_string(m.p("f2")).unwrap(), "f2 since\n");
    // Someone changes one of the paths the rewind has not reached yet.
    fs::write(m.p("f3"), "f3 after the failed rewind\n").unwrap();
    drop(c);
    m.umount();
    m.mount(&[]);
    assert_eq!(
        fs::read_to_string(m.p("f2")).unwrap(),
        "f2 at the checkpoint\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("f4")).unwrap(),
        "f4 at the checkpoint\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("f3")).unwrap(),
        "f3 after the failed rewind\n",
        "recovery left the later change alone"
    );
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(
        log.contains("finishing rewind") && log.contains("f3"),
        "the log says what was finished and what was left: {log}"
    );
    // The rewind is done, and on the undo stack.
    let mut c = client(&m);
    let u = undo(&mut c, true, false);
    assert!(u.undone.is_some(), "{u:?}");
}

/// Two files changed since a checkpoint, whose content a rewind to it restores in place.
fn two_files(d: &Path) {
    fs::write(d.join("a.txt"), "a at the checkpoint\n").unwrap();
    fs::write(d.join("b.txt"), "b at the checkpoint\n").unwrap();
}

fn change_both(m: &Mounted) {
    fs::write(m.p("a.txt"), "a since, and longer than at the checkpoint\n").unwrap();
    fs::write(m.p("b.txt"), "b since, and longer than at the checkpoint\n").unwrap();
}

/// A mount with [`two_files`], both changed since a checkpoint, and a rewind to it running on
/// a thread of its own, which pauses 1.5 s in a.txt, between its content and its length.
fn a_rewind_paused_in_its_first_file() -> (Mounted, Client, std::thread::JoinHandle<RewindReply>) {
    let m = paused(&[("REWINDFS_TEST_PAUSE_APPLYING_MS", "1500")], two_files);
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    change_both(&m);
    let rewind = rewind_in_background(&m, &cp);
    (m, c, rewind)
}

/// Another session begins a message while a rewind applies (it pauses in its first file,
/// `REWINDFS_TEST_PAUSE_APPLYING_MS`): the boundary waits for the rewind, so everything the
/// rewind overwrote is captured under its own checkpoint, and undo gives every file back.
/// Before, the rewind's later captures went to the new message's checkpoint, and undo, which
/// reads only the rewind's, left b.txt as the rewind made it.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_message_begun_while_a_rewind_applies_waits_for_it_and_undo_gives_every_file_back() {
    require_fuse();
    let (m, mut c, rewind) = a_rewind_paused_in_its_first_file();
    std::thread::sleep(Duration::from_millis(500));
    let other = uuid::Uuid::new_v4().to_string();
    let t = std::time::Instant::now();
    c.request(
        "begin_message",
        json!({"session_id": "another", "user_message_id": other}),
    )
    .unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "the boundary waited for the rewind to be applied ({:?})",
        t.elapsed()
    );
    let r = rewind.join().unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(
        fs::read_to_string(m.p("b.txt")).unwrap(),
        "b at the checkpoint\n"
    );
    let u = undo(&mut c, false, false);
    assert!(u.can_rewind, "{u:?}");
    for f in ["a", "b"] {
        assert_eq!(
            fs::read_to_string(m.p(&format!("{f}.txt"))).unwrap(),
            format!("{f} since, and longer than at the checkpoint\n"),
            "undo gave {f}.txt back: {u:?}"
        );
    }
}

/// A file the rewind has read ahead (`capture/precapture.rs`) and someone else changes before
/// the helper reaches it: their change records the pre-image read ahead as its own capture, so
/// the rewind leaves the file to them, undo neither restores it nor counts it as a conflict,
/// and a rewind to the moment the rewind began gives back what was there then. (Recorded as
/// the rewind's, the read-ahead pre-image made undo refuse over that file.)
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_file_read_ahead_and_changed_by_someone_else_before_the_rewind_reaches_it_stays_theirs() {
    require_fuse();
    let (m, mut c, rewind) = a_rewind_paused_in_its_first_file();
    // The helper pauses in a.txt; b.txt has been read ahead by then.
    std::thread::sleep(Duration::from_millis(700));
    fs::write(m.p("b.txt"), "b written while the rewind applied\n").unwrap();
    let r = rewind.join().unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(meanwhile(&m, &r), vec!["b.txt"], "{r:?}");
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    let ahead = log
        .lines()
        .find(|l| l.contains("pre-images read ahead of its helper"))
        .unwrap_or_else(|| panic!("no read-ahead line in the log:\n{log}"));
    assert!(
        ahead.contains("2 of 2 pre-images") || ahead.contains("1 of 2 pre-images"),
        "b.txt was read ahead: {ahead}"
    );
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a at the checkpoint\n"
    );
    let dry = undo(&mut c, true, false);
    assert_eq!(
        dry.can_rewind,
        json!(true),
        "no conflict over b.txt: {dry:?}"
    );
    let u = undo(&mut c, false, false);
    assert!(u.can_rewind, "{u:?}");
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a since, and longer than at the checkpoint\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("b.txt")).unwrap(),
        "b written while the rewind applied\n",
        "undo left b.txt to its writer: {u:?}"
    );
    // The rewind's own checkpoint holds b.txt as it was when the rewind began.
    let id = r.rewind_id.as_deref().unwrap().to_string();
    let back = rewind_all(&mut c, &id);
    assert!(back.can_rewind, "{back:?}");
    for f in ["a", "b"] {
        assert_eq!(
            fs::read_to_string(m.p(&format!("{f}.txt"))).unwrap(),
            format!("{f} since, and longer than at the checkpoint\n"),
            "{back:?}"
        );
    }
}

/// A mount whose helper pauses after a file's content and before its cut, and `a.txt`, made
/// longer since the returned checkpoint: a rewind to it writes the content, then pauses.
fn longer_since_a_checkpoint() -> (Mounted, String) {
    let m = paused(&[("REWINDFS_TEST_PAUSE_APPLYING_MS", "1500")], |d| {
        fs::write(d.join("a.txt"), "short\n").unwrap();
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    fs::write(
        m.p("a.txt"),
        "a much longer content than at the checkpoint\n",
    )
    .unwrap();
    (m, cp)
}

/// Someone else's write into `a.txt` while the rewind (started just before) pauses on it.
fn write_between_two_steps(m: &Mounted) {
    use std::os::unix::fs::FileExt;
    std::thread::sleep(Duration::from_millis(500));
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.p("a.txt"))
        .unwrap();
    f.write_at(b"THEIRS", 20).unwrap();
}

/// Someone writes to a file between two steps of the rewind on it (its content written over,
/// not yet cut to length; the helper pauses there): the cut is refused, and the file holds the
/// rewind's content, the old tail and their write. The answer says so: the file is in
/// `filesChanged` (the rewind changed it), in `changedMeanwhile` and in `partiallyRestored`.
/// Before, it was reported as left alone, and `filesChanged` left it out.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_file_changed_between_two_steps_of_a_rewind_is_reported_partly_restored() {
    require_fuse();
    let (m, cp) = longer_since_a_checkpoint();
    let rewind = rewind_in_background(&m, &cp);
    write_between_two_steps(&m);
    let r = rewind.join().unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(relative(&m, &r.partially_restored), vec!["a.txt"], "{r:?}");
    assert_eq!(relative(&m, &r.changed_meanwhile), vec!["a.txt"], "{r:?}");
    assert_eq!(relative(&m, &r.files_changed), vec!["a.txt"], "{r:?}");
    let now = fs::read_to_string(m.p("a.txt")).unwrap();
    assert!(
        now.starts_with("short\n") && now.contains("THEIRS"),
        "the rewind's first step and their write: {now:?}"
    );
}

/// The same, by the command line: its lines for people name the path that came back only in
/// part, and say what to do (a `changed N file(s)` alone hid it).
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn the_command_line_says_which_paths_a_rewind_left_to_someone_else() {
    require_fuse();
    let (m, cp) = longer_since_a_checkpoint();
    let (sock, id) = (m.socket(), cp.clone());
    let cli = std::thread::spawn(move || {
        let sock = sock.to_str().unwrap().to_string();
        rewindfs_ok(&["rewind", &id, "--scope", "all", "--socket", &sock])
    });
    write_between_two_steps(&m);
    let out = cli.join().unwrap();
    assert!(
        out.contains("partly restored 1 path(s)") && out.contains("\n  a.txt\n"),
        "{out}"
    );
    assert!(out.contains("rewindfs undo --dry-run"), "what to do: {out}");
    assert!(
        !out.contains("left 1 path(s) as another process changed them"),
        "a partly restored path is not also reported as left whole: {out}"
    );
}

/// `kill -9` of the daemon while its helper is half-way through a rewind (the first file
/// written, not cut to length): the next mount finishes the rewind before it serves, the tree
/// is the checkpoint's, the change log keeps the rewind's write, and the rewind is on the undo
/// stack.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_daemon_killed_while_a_rewind_applies_through_the_mount_finishes_it_at_the_next_mount() {
    require_fuse();
    let mut m = paused(&[("REWINDFS_TEST_PAUSE_APPLYING_MS", "30000")], |d| {
        two_files(d);
        fs::write(d.join("gone.txt"), "removed since\n").unwrap();
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    change_both(&m);
    fs::remove_file(m.p("gone.txt")).unwrap();
    fs::write(m.p("made.txt"), "made since\n").unwrap();
    let rewind = rewind_in_background(&m, &cp);
    // The helper has written a.txt's content (the rewind's entry is in the log) and waits.
    let half = || {
        fs::read_to_string(m.p("a.txt"))
            .is_ok_and(|s| s.starts_with("a at the checkpoint\n") && s.len() > 20)
    };
    assert!(wait_until(20, half), "the rewind got half-way");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(m.daemon_pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = rewind.join();
    drop(c);
    assert!(wait_until(10, || is_stale_or_gone(&m.dir)));
    rewindfs_ok(&["umount", m.dir.to_str().unwrap()]);
    m.mount(&[]);
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a at the checkpoint\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("b.txt")).unwrap(),
        "b at the checkpoint\n"
    );
    assert_eq!(
        fs::read_to_string(m.p("gone.txt")).unwrap(),
        "removed since\n"
    );
    assert!(!m.p("made.txt").exists());
    let daemon_log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(daemon_log.contains("finishing rewind"), "{daemon_log}");
    let mut c = client(&m);
    let log = c.request("log", json!({})).unwrap();
    assert!(
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["actor"] == "rewind" && e["path"] == "a.txt"),
        "the rewind's write before the kill is in the change log: {log}"
    );
    let u = undo(&mut c, false, false);
    assert!(u.can_rewind, "{u:?}");
    assert_eq!(
        fs::read_to_string(m.p("b.txt")).unwrap(),
        "b since, and longer than at the checkpoint\n"
    );
    assert_eq!(fs::read_to_string(m.p("made.txt")).unwrap(), "made since\n");
    assert!(!m.p("gone.txt").exists());
}

/// A helper that stops getting on (here it sleeps, as one stuck in a request would wait) is
/// killed after the silence the daemon allows it (shortened here), and the rewind fails with
/// an error that says so, instead of holding every rewind, dry run, diff and gc for ever; the
/// mount goes on serving, and the next mount finishes the journalled rewind.
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
#[test]
fn a_rewind_whose_helper_is_stuck_fails_clearly_and_is_finished_at_the_next_mount() {
    require_fuse();
    let mut m = paused(
        &[
            ("REWINDFS_TEST_PAUSE_APPLYING_MS", "20000"),
            ("REWINDFS_TEST_HELPER_SILENCE_MS", "1500"),
        ],
        two_files,
    );
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    change_both(&m);
    let t = std::time::Instant::now();
    let e = c
        .request(
            "rewind_files",
            json!({"user_message_id": cp, "scope": "all"}),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("made no progress"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(rustix::fs::statfs(&m.dir).is_ok(), "the mount serves");
    let d = c
        .request(
            "rewind_files",
            json!({"user_message_id": cp, "scope": "all", "dry_run": true}),
        )
        .unwrap();
    assert_eq!(
        d["canRewind"],
        json!(true),
        "a dry run is not held up: {d:?}"
    );
    drop(c);
    m.umount();
    m.mount(&[]);
    for f in ["a", "b"] {
        assert_eq!(
            fs::read_to_string(m.p(&format!("{f}.txt"))).unwrap(),
            format!("{f} at the checkpoint\n")
        );
    }
}

/// The helper applies only through the mount its daemon serves: a job naming another device
/// (what a file system mounted over the workspace since shows) is refused before anything is
/// changed. Before, any FUSE file system whose root is inode 1 was taken for the mount.
#[test]
fn the_rewind_helper_refuses_a_mount_that_is_not_its_daemons() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("a.txt"), "a\n").unwrap());
    let job = json!({
        "mount": m.dir,
        "dev": [0, 0],
        "blobs": m.store.join("blobs"),
        "id": uuid::Uuid::new_v4().to_string(),
        "planned": [],
    });
    let mut child = std::process::Command::new(BIN)
        .arg("__apply-rewind")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut to = child.stdin.take().unwrap();
        writeln!(to, "{job}").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let answer: Value = serde_json::from_str(said.trim()).unwrap();
    let error = answer["failed"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("mounted over it"),
        "the helper refused the job: {said}"
    );
}

/// An upgrade replaces the binary a daemon was started from (`cargo install`, npm, pip): the
/// daemon's next rewind still starts its helper, from the image it runs. Before, it started
/// `current_exe()`, which then reads `… (deleted)`, and every rewind failed.
#[test]
fn a_rewind_works_after_the_daemons_binary_was_replaced() {
    require_fuse();
    let mut m = Mounted::with(two_files);
    m.umount();
    let bin = m.tmp.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let exe = bin.join("rewindfs");
    crate::support::copy_executable(BIN, &exe);
    let out = std::process::Command::new(&exe)
        .args(["mount", m.dir.to_str().unwrap(), "--store"])
        .arg(&m.store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    m.mount_state(true);
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    change_both(&m);
    // The upgrade: the old file goes, a new one takes its name.
    fs::remove_file(&exe).unwrap();
    fs::write(&exe, "#!/bin/sh\nexit 1\n").unwrap();
    let r = rewind_all(&mut c, &cp);
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(
        fs::read_to_string(m.p("a.txt")).unwrap(),
        "a at the checkpoint\n"
    );
}

/// Another process holds a lease on a file the rewind restores (as Samba or an editor might):
/// opening it for writing without waiting answers `EAGAIN`, and the rewind restores the file
/// beside it and renames it into place, as for a file it may not open. Before, `EAGAIN` failed
/// the whole rewind.
#[test]
fn a_file_leased_by_another_process_is_restored_by_a_rename() {
    require_fuse();
    crate::support::require_command("python3", "python3");
    let m = Mounted::with(two_files);
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    change_both(&m);
    // The lease's holder ignores the SIGIO that tells it the lease is being broken, and keeps
    // the lease until it is killed (the kernel would break it after lease-break-time).
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import fcntl, os, signal, sys, time\n\
             signal.signal(signal.SIGIO, signal.SIG_IGN)\n\
             fd = os.open(sys.argv[1], os.O_RDONLY)\n\
             fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n\
             print('leased', flush=True)\n\
             time.sleep(60)\n",
        )
        .arg(m.p("a.txt"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "leased");
    let r = c.request(
        "rewind_files",
        json!({"user_message_id": cp, "scope": "all"}),
    );
    let _ = holder.kill();
    let _ = holder.wait();
    let r = r.unwrap();
    assert_eq!(r["canRewind"], json!(true), "{r:?}");
    for f in ["a", "b"] {
        assert_eq!(
            fs::read_to_string(m.p(&format!("{f}.txt"))).unwrap(),
            format!("{f} at the checkpoint\n")
        );
    }
}

/// A writer at work on the files a rewind restores, from the moment the rewind has begun
/// (its first file restored) to the moment it answers: no write of theirs is lost, every file
/// they did not touch is restored, and a forced undo gives back exactly what the rewind
/// overwrote — the state when it began, read ahead or captured by its own writes — and leaves
/// the files it left to the writer as the writer made them. (`scripts/bench.sh` rewind-10k is
/// the same rewind, without the writer.)
#[test]
fn a_writer_at_work_during_a_rewind_loses_nothing_and_a_forced_undo_gives_back_exactly_what_it_overwrote()
 {
    const N: usize = 600;
    require_fuse();
    let m = Mounted::with(|d| {
        fs::create_dir(d.join("r")).unwrap();
        for i in 0..N {
            fs::write(d.join(format!("r/f{i:03}")), format!("one {i}\n")).unwrap();
        }
    });
    let mut c = client(&m);
    let cp = checkpoint(&mut c);
    let path = |i: usize| m.p(&format!("r/f{i:03}"));
    let before: Vec<String> = (0..N)
        .map(|i| {
            let s = format!("two {i}, longer\n");
            fs::write(path(i), &s).unwrap();
            s
        })
        .collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (r, written) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut written: HashMap<usize, String> = HashMap::new();
            // From the moment the rewind has restored its first file: it watches by then.
            while fs::read_to_string(path(0)).unwrap() != "one 0\n" {
                std::thread::yield_now();
            }
            let mut k = 7usize;
            // At least a few writes, should the rewind be done before this thread runs (the
            // checks below hold for writes after it too).
            while written.len() < 20 || !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k = (k * 31 + 17) % N;
                let s = format!("the writer's {k}, round {}\n", written.len());
                fs::write(path(k), &s).unwrap();
                written.insert(k, s);
                std::thread::sleep(Duration::from_micros(300));
            }
            written
        });
        let r = rewind_all(&mut c, &cp);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (r, writer.join().unwrap())
    });
    assert!(r.can_rewind, "{r:?}");
    let left: std::collections::HashSet<String> = meanwhile(&m, &r).into_iter().collect();
    for i in 0..N {
        let now = fs::read_to_string(path(i)).unwrap();
        let want = written.get(&i).cloned().unwrap_or(format!("one {i}\n"));
        assert_eq!(now, want, "r/f{i:03} after the rewind");
    }
    // A file the rewind began to restore before the writer came back to it (partly restored:
    // its content written, its length not yet set) was overwritten by the rewind: a forced
    // undo gives back what the rewind overwrote there too, as it does for every file the
    // writer changed after the rewind restored it.
    let partial: std::collections::HashSet<String> =
        relative(&m, &r.partially_restored).into_iter().collect();
    let u = undo(&mut c, false, true);
    assert!(u.can_rewind, "{u:?}");
    for i in 0..N {
        let now = fs::read_to_string(path(i)).unwrap();
        let name = format!("r/f{i:03}");
        let want = if left.contains(&name) && !partial.contains(&name) {
            written[&i].clone()
        } else {
            before[i].clone()
        };
        assert_eq!(
            now, want,
            "{name} after a forced undo (partly restored: {partial:?})"
        );
    }
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}
