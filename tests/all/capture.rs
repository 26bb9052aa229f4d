//! Captures through a real mount: every kind of change leaves exactly the old state as its
//! pre-image, once per (checkpoint, path); actors are told apart; a full store refuses the
//! change; a message boundary flushes what the kernel still holds; crashes lose nothing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use rusqlite::OptionalExtension;
use serde_json::json;

use crate::agent::{Agent, uuid};
use crate::support::{Mounted, require_fuse, rewindfs, rewindfs_ok, sh, tree, wait_until};

/// (kind, content, mode & 0o7777, symlink target) of a pre-image.
type Pre = (String, Option<Vec<u8>>, u32, Option<String>);

/// The pre-image captured for `path` in the
/// checkpoint `uuid`, read straight from the store.
/// Asks the daemon for its status, which applies its capture journal to the database, so a
/// reader of the database file sees every capture taken so far.
fn settle(m: &Mounted) {
    rewindfs::control::client::Client::connect(&m.socket())
        .unwrap()
        .request("status", serde_json::json!({}))
        .unwrap();
}

fn captured(m: &Mounted, cp: &str, path: &str) -> Option<Pre> {
    settle(m);
    let db = rusqlite::Connection::open_with_flags(
        m.store.join("rewindfs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT c.kind, c.blob, c.mode, c.target FROM captures c JOIN checkpoints k ON k.seq = c.checkpoint
         WHERE k.uuid = ?1 AND c.path = CAST(?2 AS BLOB) AND c.purpose = 'checkpoint' ORDER BY c.id LIMIT 1",
        rusqlite::params![cp, path],
        |r| {
            let blob: Option<String> = r.get(1)?;
            let content = blob.map(|h| {
                if h == blake3::hash(b"").to_hex().as_str() {
                    Vec::new()
                } else {
                    fs::read(m.store.join("blobs").join(&h[..2]).join(&h[2..])).unwrap()
                }
            });
            let target: Option<Vec<u8>> = r.get(3)?;
            Ok((r.get(0)?, content, r.get::<_, i64>(2)? as u32 & 0o7777, target.map(|t| String::from_utf8(t).unwrap())))
        },
    )
    .optional()
    .unwrap()
}

fn count_captures(m: &Mounted, cp: &str, path: &str) -> i64 {
    settle(m);
    let db = rusqlite::Connection::open_with_flags(
        m.store.join("rewindfs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT count(*) FROM captures c JOIN checkpoints k ON k.seq = c.checkpoint WHERE k.uuid = ?1 AND c.path = CAST(?2 AS BLOB) AND c.purpose = 'checkpoint'",
        rusqlite::params![cp, path],
        |r| r.get(0),
    )
    .unwrap()
}

/// `rewindfs fsck` finds the store sound: the database intact, every blob present and hashing
/// to its name.
fn assert_fsck(m: &Mounted) {
    let out = rewindfs(&["fsck", "--store", m.store.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "fsck of {}: {}{}",
        m.store.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn file(content: &[u8], mode: u32) -> Option<Pre> {
    Some(("file".into(), Some(content.to_vec()), mode, None))
}

#[test]
fn every_kind_of_change_captures_exactly_the_old_state() {
    require_fuse();
    let mut a = Agent::new(|d| {
        for n in ["w", "t", "o", "u", "rs", "rd", "ch", "x", "fa", "mm"] {
            fs::write(d.join(n), format!("old {n}\n")).unwrap();
        }
        fs::set_permissions(d.join("ch"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::create_dir(d.join("dir")).unwrap();
        fs::set_permissions(d.join("dir"), fs::Permissions::from_mode(0o750)).unwrap();
        std::os::unix::fs::symlink("w", d.join("sl")).unwrap();
    });
    let cp = a.turn();
    let steps = "set -e
        echo new >> w                       # write
        truncate -s 2 t                     # truncate
        echo replaced > o                   # O_TRUNC
        rm u                                # unlink
        mv rs renamed                       # rename source (and a new target name)
        echo x > newtarget && mv -f newtarget rd   # rename over an existing target
        chmod 600 ch                        # chmod
        setfattr -n user.k -v v x 2>/dev/null || python3 -c \"import os; os.setxattr('x', 'user.k', b'v')\"
        fallocate -l 65536 fa
        rmdir dir
        rm sl && ln -s elsewhere sl         # symlink replaced
        mkdir made && ln -s w madelink && ln w hard && echo c > created";
    a.bash(steps);
    a.bash("python3 -c \"import mmap\nf=open('mm','r+b')\nm=mmap.mmap(f.fileno(),0)\nm[0:3]=b'MAP'\nm.flush()\"");
    assert_eq!(captured(&a.m, &cp, "w"), file(b"old w\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "t"), file(b"old t\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "o"), file(b"old o\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "u"), file(b"old u\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "rs"), file(b"old rs\n", 0o644));
    assert_eq!(
        captured(&a.m, &cp, "renamed").map(|c| c.0),
        Some("absent".into())
    );
    assert_eq!(captured(&a.m, &cp, "rd"), file(b"old rd\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "ch"), file(b"old ch\n", 0o640));
    assert_eq!(captured(&a.m, &cp, "x"), file(b"old x\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "fa"), file(b"old fa\n", 0o644));
    assert_eq!(captured(&a.m, &cp, "mm"), file(b"old mm\n", 0o644));
    assert_eq!(
        captured(&a.m, &cp, "dir"),
        Some(("dir".into(), None, 0o750, None))
    );
    assert_eq!(
        captured(&a.m, &cp, "sl").map(|c| (c.0, c.3)),
        Some(("symlink".into(), Some("w".into())))
    );
    for created in ["made", "madelink", "hard", "created", "newtarget"] {
        assert_eq!(
            captured(&a.m, &cp, created).map(|c| c.0),
            Some("absent".into()),
            "{created}"
        );
    }
    // Each path once per checkpoint, however many times it changed.
    a.bash("for i in $(seq 1 20); do echo $i >> w; done");
    assert_eq!(count_captures(&a.m, &cp, "w"), 1);
    let cp2 = a.turn();
    a.bash("echo again >> w");
    assert_eq!(count_captures(&a.m, &cp2, "w"), 1);
    assert!(
        captured(&a.m, &cp2, "w")
            .unwrap()
            .1
            .unwrap()
            .ends_with(b"20\n")
    );
    // A directory rename is one event: nothing beneath it is copied.
    a.bash("mkdir -p big/sub && for i in $(seq 1 50); do echo $i > big/sub/f$i; done");
    let cp3 = a.turn();
    a.bash("mv big big2");
    settle(&a.m);
    let db = rusqlite::Connection::open_with_flags(
        a.m.store.join("rewindfs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let n: i64 = db
        .query_row("SELECT count(*) FROM captures c JOIN checkpoints k ON k.seq = c.checkpoint WHERE k.uuid = ?1", [&cp3], |r| r.get(0))
        .unwrap();
    assert_eq!(
        n, 2,
        "a directory rename captures its two names, not its contents"
    );
}

/// Blob files in the store (not counting temp files).
fn blob_files(m: &Mounted) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in fs::read_dir(m.store.join("blobs")).unwrap() {
        let d = d.unwrap().path();
        if d.file_name().unwrap() == "tmp" || !d.is_dir() {
            continue;
        }
        for f in fs::read_dir(&d).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out
}

#[test]
fn a_deleted_file_is_kept_by_a_link_and_a_failed_deletion_leaves_the_blob_a_copy() {
    require_fuse();
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // The directory underneath the mount, to lift the append-only flag before the rewind (FUSE
    // passes no ioctl).
    let under: std::cell::RefCell<Option<fs::File>> = std::cell::RefCell::new(None);
    let mut a = Agent::new(|d| {
        *under.borrow_mut() = Some(fs::File::open(d).unwrap());
        fs::write(d.join("gone.txt"), "deleted content\n").unwrap();
        fs::write(d.join("over.txt"), "replaced content\n").unwrap();
        fs::create_dir(d.join("ro")).unwrap();
        fs::write(d.join("ro/stays.txt"), "first\n").unwrap();
        // An append-only directory: its files may be linked elsewhere but not unlinked.
        sh(d, "chattr +a ro");
    });
    let cp = a.turn();
    let ino = fs::metadata(a.m.p("gone.txt")).unwrap().ino();
    a.bash("rm gone.txt && echo new > tmp && mv tmp over.txt");
    assert_eq!(
        captured(&a.m, &cp, "gone.txt"),
        file(b"deleted content\n", 0o644)
    );
    assert_eq!(
        captured(&a.m, &cp, "over.txt"),
        file(b"replaced content\n", 0o644)
    );
    // Kept by a link: the blob is the deleted file's own inode, no copy was written.
    let linked = blob_files(&a.m)
        .into_iter()
        .filter(|b| fs::read(b).unwrap() == b"deleted content\n")
        .collect::<Vec<_>>();
    assert_eq!(linked.len(), 1);
    assert_eq!(
        fs::metadata(&linked[0]).unwrap().ino(),
        ino,
        "the blob is the deleted file itself"
    );
    // The deletion fails (EPERM in an append-only directory) after the pre-image was taken:
    // the file lives on, so the blob must not share it.
    let out = Command::new("rm")
        .arg(a.m.p("ro/stays.txt"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "rm in an append-only directory must fail"
    );
    fs::OpenOptions::new()
        .append(true)
        .open(a.m.p("ro/stays.txt"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"second\n"))
        .unwrap();
    assert_eq!(captured(&a.m, &cp, "ro/stays.txt"), file(b"first\n", 0o644));
    assert_fsck(&a.m);
    let fd = under.borrow().as_ref().unwrap().as_raw_fd();
    sh(
        std::path::Path::new("/"),
        &format!("chattr -a /proc/{}/fd/{fd}/ro", std::process::id()),
    );
    a.rewind(&cp, "all", false).unwrap();
    assert_eq!(a.read("gone.txt").as_deref(), Some("deleted content\n"));
    assert_eq!(a.read("over.txt").as_deref(), Some("replaced content\n"));
    assert_eq!(a.read("ro/stays.txt").as_deref(), Some("first\n"));
}

/// POSIX lets a process keep using a file it holds open after the file's last name went
/// (the kernel opens files without telling the daemon): it reads and writes it as before,
/// while the store keeps the deleted content by a link to that same inode. The first write
/// gives the process a copy of its own, so the pre-image stays what was deleted.
#[test]
fn a_file_held_open_through_its_deletion_stays_usable_and_its_pre_image_intact() {
    require_fuse();
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut a = Agent::new(|d| fs::write(d.join("held.txt"), "held content\n").unwrap());
    let cp = a.turn();
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(a.m.p("held.txt"))
        .unwrap();
    a.bash("rm held.txt");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        f.metadata().unwrap().nlink(),
        0,
        "a deleted file has no links"
    );
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "held content\n");
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(b"CHANGED").unwrap();
    f.set_len(20).unwrap();
    let mut back = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"CHANGEDntent\n\0\0\0\0\0\0\0");
    assert_eq!(f.metadata().unwrap().len(), 20);
    assert_eq!(
        captured(&a.m, &cp, "held.txt"),
        file(b"held content\n", 0o644)
    );
    assert_fsck(&a.m);
    drop(f);
    a.rewind(&cp, "all", false).unwrap();
    assert_eq!(a.read("held.txt").as_deref(), Some("held content\n"));
}

/// The pre-image of a change to a file's content is read through the fd the daemon keeps for
/// it (no path lookup, no second fd closed), but as if through an `O_NOATIME` one: a capture is
/// not a read by anyone, so the file's access time stays what it was.
#[test]
fn capturing_a_file_leaves_its_access_time_alone() {
    require_fuse();
    use std::os::unix::fs::MetadataExt;
    let mut a = Agent::new(|d| {
        fs::write(d.join("t.txt"), "truncated later\n").unwrap();
        fs::write(d.join("w.txt"), "appended later\n").unwrap();
    });
    // An access time older than the change time: relatime would update it on any read.
    a.bash("touch -a -d @1000000000 t.txt w.txt");
    let cp = a.turn();
    a.bash("echo new > t.txt && echo more >> w.txt");
    for (f, old) in [
        ("t.txt", "truncated later\n"),
        ("w.txt", "appended later\n"),
    ] {
        assert_eq!(captured(&a.m, &cp, f), file(old.as_bytes(), 0o644), "{f}");
        assert_eq!(
            fs::metadata(a.m.p(f)).unwrap().atime(),
            1_000_000_000,
            "{f}: the capture read it like an ordinary read"
        );
    }
    assert_eq!(a.read("t.txt").as_deref(), Some("new\n"));
    assert_eq!(a.read("w.txt").as_deref(), Some("appended later\nmore\n"));
}

/// A rewind restores a file in place: a process that had it open across the rewind reads the
/// restored content, and what it writes then goes to the restored file — never to the rewind's
/// pre-image, which is a copy in the store. That write is a change made after the rewind:
/// undo refuses to overwrite it, and a forced undo gives back the file as it was before the
/// rewind (the holder's write is then the redo's to give back).
#[test]
fn a_write_through_a_file_held_open_across_a_rewind_is_a_change_the_undo_does_not_clobber() {
    require_fuse();
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let mut a = Agent::new(|d| fs::write(d.join("f"), "version one\n").unwrap());
    let cp = a.turn();
    a.bash("echo version two > f");
    let mut held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(a.m.p("f"))
        .unwrap();
    let mut s = String::new();
    held.read_to_string(&mut s).unwrap();
    assert_eq!(s, "version two\n");
    a.rewind(&cp, "all", false).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("version one\n"));
    let mut back = vec![0; 12];
    held.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, b"version one\n", "the holder reads the restored file");
    held.write_all_at(b"XXXXXXX", 0).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("XXXXXXX one\n"));
    assert_fsck(&a.m);
    drop(held);
    let e =
        a.c.request("undo_rewind", json!({}))
            .unwrap_err()
            .to_string();
    assert!(e.contains("cannot undo"), "{e}");
    assert_eq!(a.read("f").as_deref(), Some("XXXXXXX one\n"));
    a.c.request("undo_rewind", json!({"force": true})).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("version two\n"));
    a.c.request("redo_rewind", json!({})).unwrap();
    assert_eq!(a.read("f").as_deref(), Some("XXXXXXX one\n"));
}

#[test]
fn actors_are_told_apart_registered_process_children_spans_and_strangers() {
    require_fuse();
    let mut a = Agent::new(|_| {});
    a.turn();
    fs::write(a.m.p("by_agent.txt"), b"t").unwrap();
    a.bash("echo s > by_child.txt; (echo g > by_grandchild.txt)");
    crate::support::as_stranger(&a.m.dir, "echo e > by_stranger.txt");
    assert!(wait_until(5, || a.m.p("by_stranger.txt").exists()));
    // A hook in another process announces a Write of span.txt: the write is the tool's even
    // though it comes from a child (as when the SDK's hooks run in the host process).
    let target = a.m.p("span.txt");
    a.c.request("tool_use", json!({"phase": "pre", "tool_name": "Write", "tool_use_id": "toolu_x", "file_path": target})).unwrap();
    a.bash("echo span > span.txt");
    a.c.request("tool_use", json!({"phase": "post", "tool_name": "Write", "tool_use_id": "toolu_x", "file_path": target})).unwrap();
    let log = a.c.request("log", json!({})).unwrap();
    let actor_of = |p: &str| -> Vec<String> {
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["path"] == json!(p))
            .map(|e| e["actor"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        actor_of("by_agent.txt").iter().all(|x| x == "tool")
            && !actor_of("by_agent.txt").is_empty()
    );
    assert!(
        actor_of("by_child.txt").iter().all(|x| x == "shell")
            && !actor_of("by_child.txt").is_empty()
    );
    assert!(
        actor_of("by_grandchild.txt").iter().all(|x| x == "shell")
            && !actor_of("by_grandchild.txt").is_empty()
    );
    assert!(
        actor_of("by_stranger.txt").iter().all(|x| x == "external")
            && !actor_of("by_stranger.txt").is_empty()
    );
    assert!(actor_of("span.txt").iter().all(|x| x == "tool") && !actor_of("span.txt").is_empty());
    let span_entry = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == json!("span.txt"))
        .unwrap();
    assert_eq!(span_entry["toolUseId"], json!("toolu_x"));
}

#[test]
fn a_full_store_refuses_the_change_and_loses_nothing() {
    require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    fs::create_dir(&store).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=3m", "tmpfs"])
        .arg(&store)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Unmount(store.clone());
    let dir = tmp.path().join("proj");
    fs::create_dir(&dir).unwrap();
    let big: Vec<u8> = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    fs::write(dir.join("big.bin"), &big).unwrap();
    fs::write(dir.join("small.txt"), b"small\n").unwrap();
    rewindfs_ok(&[
        "mount",
        dir.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    let out = Command::new("bash")
        .arg("-c")
        // Emptying the file destroys all of its 8 MiB: they must be saved first, and cannot.
        // (An append would need nothing saved: a large file keeps only overwritten bytes.)
        .arg(": > big.bin")
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(
        fs::read(dir.join("big.bin")).unwrap(),
        big,
        "the refused change did not reach the file"
    );
    // Small changes still work, and the mount is alive.
    sh(&dir, "echo ok >> small.txt");
    assert_eq!(
        fs::read_to_string(dir.join("small.txt")).unwrap(),
        "small\nok\n"
    );
    let log = fs::read_to_string(store.join("daemon.log")).unwrap();
    assert!(
        log.contains("big.bin") && log.contains("refusing"),
        "the log names the path and cause: {log}"
    );
    rewindfs_ok(&["umount", dir.to_str().unwrap()]);
}

#[test]
fn a_message_boundary_flushes_mmap_data_into_the_previous_checkpoint() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("m.bin"), vec![b'.'; 8192]).unwrap());
    let t1 = a.turn();
    let mut py = Command::new("python3")
        .arg("-c")
        .arg("import mmap,sys\nf=open('m.bin','r+b')\nm=mmap.mmap(f.fileno(),0)\nm[0:6]=b'DIRTY!'\nprint('written', flush=True)\nsys.stdin.readline()\n")
        .current_dir(&a.m.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(py.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "written\n");
    let t2 = a.turn();
    drop(py.stdin.take());
    py.wait().unwrap();
    let (c1, c2) = (
        count_captures(&a.m, &t1, "m.bin"),
        count_captures(&a.m, &t2, "m.bin"),
    );
    assert_eq!(
        (c1, c2),
        (1, 0),
        "the dirty page belongs to the first turn, nothing of it to the second"
    );
    assert_eq!(
        count_captures(&a.m, &t2, "m.bin"),
        0,
        "nothing of it is left for the second"
    );
    a.rewind(&t2, "all", false).unwrap();
    assert!(fs::read(a.m.p("m.bin")).unwrap().starts_with(b"DIRTY!"));
}

/// (seq, op, path) of the change log's entries with a seq of at least `from`, oldest first,
/// through the `log` request (which answers the newest `limit`: asked again with more until
/// the answer reaches back to `from`).
fn log_since(m: &Mounted, from: i64) -> Vec<(i64, String, String)> {
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let mut limit = 4096;
    loop {
        let r = c
            .request("log", json!({"limit": limit, "raw": true}))
            .unwrap();
        let all: Vec<(i64, String, String)> = r["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["seq"].as_i64().unwrap(),
                    e["op"].as_str().unwrap().to_string(),
                    e["path"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        if all.len() < limit || all.first().is_some_and(|e| e.0 <= from) {
            return all.into_iter().filter(|e| e.0 >= from).collect();
        }
        limit *= 4;
    }
}

/// Also checks the change log across each kill (issue 24 §5): the entries the log showed when
/// the round began are there unchanged after the remount, and every change that completed
/// before the kill has its entry after them, in order.
#[test]
fn killing_the_daemon_at_random_moments_loses_no_pre_image() {
    require_fuse();
    let rounds: usize = std::env::var("CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut m = Mounted::with(|d| {
        for i in 0..30 {
            fs::write(d.join(format!("f{i}")), format!("original {i}\n")).unwrap();
        }
        fs::create_dir(d.join("sub")).unwrap();
    });
    // xorshift: reproducible per round, no extra crate.
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // Every checkpoint of every round with the tree observed when it began.
    let mut checkpoints: Vec<(String, Vec<String>)> = Vec::new();
    let mut ops_total = 0u64;
    for round in 0..rounds {
        let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
        let first_of_round = checkpoints.len();
        // The last entries of the change log as the round begins.
        let log_before = {
            let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
            let r = c
                .request("log", json!({"limit": 500, "raw": true}))
                .unwrap();
            let from = r["entries"][0]["seq"].as_i64().unwrap_or(1);
            log_since(&m, from)
        };
        // The path each change that completed names in its (first) log entry, in order.
        let mut done: Vec<String> = Vec::new();
        // SIGKILL the daemon at a random moment of the workload below.
        let pid = m.daemon_pid();
        let delay = Duration::from_millis(50 + rnd(400));
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid as i32).unwrap(),
                rustix::process::Signal::KILL,
            );
        });
        // A write-heavy mixed workload with a message boundary every 150 operations; it stops
        // at the first error (the daemon is gone).
        'work: for i in 0..200_000u64 {
            if i % 150 == 0 {
                // The kill may land during the listing: the round's work ends there.
                let Ok(snapshot) = crate::support::try_tree(&m.dir) else {
                    break 'work;
                };
                let cp = uuid();
                if c.request(
                    "begin_message",
                    json!({"session_id": "crash", "user_message_id": cp}),
                )
                .is_err()
                {
                    break 'work;
                }
                checkpoints.push((cp, snapshot));
            }
            let n = rnd(40);
            let p = m.p(&format!("f{n}"));
            // Ok(Some(path)): a change was made, and its log entry names `path`.
            let r = match rnd(7) {
                0 | 1 => fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&p)
                    .and_then(|mut f| {
                        std::io::Write::write_all(&mut f, format!("{i}\n").as_bytes())
                    })
                    .map(|_| Some(format!("f{n}"))),
                2 => fs::write(&p, vec![b'a' + (i % 26) as u8; rnd(20_000) as usize])
                    .map(|_| Some(format!("f{n}"))),
                3 => fs::write(m.p(&format!("sub/t{n}")), format!("{i}\n"))
                    .and_then(|_| fs::rename(m.p(&format!("sub/t{n}")), m.p(&format!("sub/u{n}"))))
                    .map(|_| Some(format!("sub/t{n}"))),
                4 => match fs::remove_file(&p) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    r => r.map(|_| Some(format!("f{n}"))),
                },
                5 => fs::create_dir(m.p(&format!("d{n}")))
                    .and_then(|_| fs::write(m.p(&format!("d{n}/x")), "x"))
                    .map(|_| Some(format!("d{n}")))
                    .or_else(|e| {
                        if e.kind() == std::io::ErrorKind::AlreadyExists {
                            Ok(None)
                        } else {
                            Err(e)
                        }
                    }),
                _ => match fs::remove_dir_all(m.p(&format!("d{n}"))) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    r => r.map(|_| Some(format!("d{n}"))),
                },
            };
            match r {
                Err(_) => break 'work,
                // Consecutive writes to one file by one process are one entry.
                Ok(Some(path)) if done.last() != Some(&path) => done.push(path),
                Ok(_) => {}
            }
            ops_total += 1;
        }
        killer.join().unwrap();
        assert!(wait_until(10, || crate::support::is_stale_or_gone(&m.dir)));
        rewindfs_ok(&["umount", m.dir.to_str().unwrap()]);
        let out = rewindfs(&["fsck", "--store", m.store.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "round {round}: fsck: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        m.mount(&[]);
        let from = log_before.first().map_or(1, |e| e.0);
        let after = log_since(&m, from);
        assert!(
            after.len() >= log_before.len() && after[..log_before.len()] == log_before[..],
            "round {round}: the entries the log showed before the kill are there unchanged"
        );
        let mut rest = after[log_before.len()..].iter();
        for (k, path) in done.iter().enumerate() {
            assert!(
                rest.any(|e| e.2 == *path),
                "round {round}: change {k} of {} (on {path}) completed before the kill and has no log entry after the remount",
                done.len()
            );
        }
        let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
        // A rewind to every checkpoint of this round (newest first, then in random order) and to
        // one of an earlier round gives back the tree seen when it began.
        let mut picks: Vec<usize> = (first_of_round..checkpoints.len()).rev().collect();
        for k in (1..picks.len()).rev() {
            picks.swap(k, rnd(k as u64 + 1) as usize);
        }
        if first_of_round > 0 {
            picks.push(rnd(first_of_round as u64) as usize);
        }
        for k in picks {
            let (cp, want) = &checkpoints[k];
            let r = c.request(
                "rewind_files",
                json!({"user_message_id": cp, "scope": "all"}),
            );
            assert!(r.is_ok(), "round {round}, checkpoint {k}: {r:?}");
            assert_eq!(
                &tree(&m.dir),
                want,
                "round {round}, checkpoint {k}: a change reached the disk without its pre-image"
            );
        }
    }
    eprintln!(
        "crash: {rounds} rounds, {ops_total} operations, {} checkpoints, 0 failures",
        checkpoints.len()
    );
    assert_fsck(&m);
}

#[test]
fn killing_the_daemon_in_the_middle_of_a_large_rewind_finishes_it_at_the_next_mount() {
    require_fuse();
    let mut m = Mounted::with(|d| {
        for i in 0..3000 {
            fs::write(d.join(format!("f{i:04}")), format!("v1 {i}\n")).unwrap();
        }
    });
    let mut c = rewindfs::control::client::Client::connect(&m.socket()).unwrap();
    let cp = uuid();
    c.request(
        "begin_message",
        json!({"session_id": "s", "user_message_id": cp}),
    )
    .unwrap();
    let at_cp = tree(&m.dir);
    sh(
        &m.dir,
        "for f in f*; do echo v2 >> $f; done; mkdir extra && touch extra/a",
    );
    let changed = tree(&m.dir);
    let sock = m.socket();
    let t = std::thread::spawn(move || {
        let mut c = rewindfs::control::client::Client::connect(&sock).unwrap();
        let _ = c.request(
            "rewind_files",
            json!({"user_message_id": cp, "scope": "all"}),
        );
    });
    // Kill once the rewind has begun writing.
    let db_path = m.store.join("rewindfs.db");
    assert!(wait_until(20, || {
        rusqlite::Connection::open_with_flags(&db_path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|db| db.query_row("SELECT count(*) FROM rewinds", [], |r| r.get::<_, i64>(0)))
            .is_ok_and(|n| n > 0)
    }));
    std::thread::sleep(Duration::from_millis(30));
    let pid = m.daemon_pid();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let _ = t.join();
    assert!(wait_until(10, || crate::support::is_stale_or_gone(&m.dir)));
    rewindfs_ok(&["umount", m.dir.to_str().unwrap()]);
    let half = tree(&m.dir);
    m.mount(&[]);
    let after = tree(&m.dir);
    assert!(
        after == at_cp,
        "after remount the rewind must be complete (was {} of {} paths differing before remount)",
        half.iter()
            .zip(changed.iter())
            .filter(|(a, b)| a != b)
            .count(),
        changed.len()
    );
}

/// Bytes of blob content in the store.
fn store_bytes(m: &Mounted) -> u64 {
    use std::os::unix::fs::MetadataExt;
    blob_files(m)
        .iter()
        .map(|b| fs::metadata(b).unwrap().size())
        .sum()
}

#[test]
fn a_small_change_to_a_large_file_stores_only_the_bytes_it_overwrites() {
    require_fuse();
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::FileExt;
    // 64 MiB of non-repeating content.
    let big: Vec<u8> = (0..(64u64 << 20) / 8)
        .flat_map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes())
        .collect();
    let mut a = Agent::new(|d| fs::write(d.join("big.bin"), &big).unwrap());
    let t1 = a.turn();
    let v1 = fs::read(a.m.p("big.bin")).unwrap();
    let before = store_bytes(&a.m);
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(a.m.p("big.bin"))
            .unwrap();
        f.write_all_at(&[0xAB; 4096], 32 << 20).unwrap();
        f.write_all_at(b"x", 12_345).unwrap(); // not page-aligned
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(a.m.p("big.bin"))
            .unwrap();
        f.write_all(&[0xCD; 4096]).unwrap();
    }
    let stored = store_bytes(&a.m) - before;
    assert!(
        stored <= 3 * 4096,
        "an overwrite of 4 KiB and a byte, and an append, stored {stored} bytes"
    );
    // A later checkpoint: a truncate, a punched hole and another write, each saving only what
    // it overwrites.
    let t2 = a.turn();
    let v2 = fs::read(a.m.p("big.bin")).unwrap();
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(a.m.p("big.bin"))
            .unwrap();
        f.set_len(48 << 20).unwrap();
        f.seek(SeekFrom::Start(1 << 20)).unwrap();
        f.write_all(&[0xEE; 10_000]).unwrap();
    }
    sh(&a.m.dir, "fallocate -p -o 4096 -l 8192 big.bin");
    let t3 = a.turn();
    let v3 = fs::read(a.m.p("big.bin")).unwrap();
    // The file goes away: what was not saved yet is saved now.
    sh(
        &a.m.dir,
        "dd if=/dev/zero of=big.bin bs=1M count=2 seek=40 conv=notrunc status=none && rm big.bin",
    );
    assert_fsck(&a.m);
    for (t, want, name) in [(&t3, &v3, "t3"), (&t2, &v2, "t2"), (&t1, &v1, "t1")] {
        let dry = a.rewind(t, "all", true).unwrap();
        assert_eq!(a.files(&dry.files_changed), vec!["big.bin"], "{name}");
        a.rewind(t, "all", false).unwrap();
        let got = fs::read(a.m.p("big.bin")).unwrap();
        assert!(
            got == *want,
            "rewind to {name}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
    assert_eq!(v1, big);
    // Undo goes back to the state at t2 (the last rewind's starting point).
    a.c.request("undo_rewind", json!({})).unwrap();
    assert!(fs::read(a.m.p("big.bin")).unwrap() == v2);
}

/// Blob files no row names (an adopted file waiting under `pending/` is not one of them).
fn unnamed_blobs(m: &Mounted) -> Vec<String> {
    settle(m);
    let db = rusqlite::Connection::open_with_flags(
        m.store.join("rewindfs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    blob_files(m)
        .iter()
        .filter(|p| p.parent().unwrap().file_name().unwrap() != "pending")
        .map(|p| {
            let dir = p.parent().unwrap().file_name().unwrap().to_string_lossy();
            format!("{dir}{}", p.file_name().unwrap().to_string_lossy())
        })
        .filter(|h| {
            db.query_row("SELECT 1 FROM blobs WHERE hash = ?1", [h], |_| Ok(()))
                .optional()
                .unwrap()
                .is_none()
        })
        .collect()
}

/// What a plan puts together (a file's state completed from a chain of range pre-images, a
/// moved file's content) is needed only while the rewind is applied or the dry run or diff
/// reads it: none of them leaves a blob file that no row names, which only a gc would find.
#[test]
fn dry_runs_diffs_and_rewinds_leave_no_blob_file_that_no_row_names() {
    require_fuse();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut a = Agent::with_args(
        |d| fs::write(d.join("big.bin"), &big).unwrap(),
        &["--range-capture-min", "4096"],
    );
    let t1 = a.turn();
    sh(
        &a.m.dir,
        "printf x | dd of=big.bin bs=1 seek=1000 conv=notrunc status=none",
    );
    a.turn();
    sh(
        &a.m.dir,
        "printf y | dd of=big.bin bs=1 seek=150000 conv=notrunc status=none",
    );
    assert_eq!(unnamed_blobs(&a.m), Vec::<String>::new(), "before");
    let dry = a.rewind(&t1, "all", true).unwrap();
    assert_eq!(a.files(&dry.files_changed), vec!["big.bin"]);
    assert_eq!(unnamed_blobs(&a.m), Vec::<String>::new(), "after a dry run");
    let d = a.c.request("diff", json!({"user_message_id": t1})).unwrap();
    assert!(
        d["diff"]
            .as_str()
            .unwrap()
            .contains("Binary files a/big.bin"),
        "{d}"
    );
    assert_eq!(unnamed_blobs(&a.m), Vec::<String>::new(), "after a diff");
    a.rewind(&t1, "all", false).unwrap();
    assert!(fs::read(a.m.p("big.bin")).unwrap() == big);
    assert_eq!(unnamed_blobs(&a.m), Vec::<String>::new(), "after a rewind");
    a.c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(unnamed_blobs(&a.m), Vec::<String>::new(), "after an undo");
    assert_fsck(&a.m);
}

/// A write that found its file by name ends before a removal of that name hands the file's
/// inode to the store (`Core::removing`). The daemon holds the write for 1.5 s after it
/// resolved the name (its test-only fault injection). The write is the write-back of pages
/// dirtied through a shared mapping, sent at close: unlike a write(2), it does not hold the
/// inode's lock in the kernel, so the unlink sent meanwhile (the file's first change in the
/// turn) reaches the daemon. It must wait there. Otherwise it adopts the inode as the turn's
/// pre-image, the held write then lands in that pre-image, and a rewind gives it back instead
/// of the content from before the turn.
#[test]
#[cfg_attr(
    not(feature = "fault-injection"),
    ignore = "needs the fault-injection feature: run `bash scripts/test.sh` (or cargo test --features fault-injection)"
)]
fn a_write_in_flight_lands_before_a_removal_adopts_its_file() {
    require_fuse();
    let mut m = Mounted::with(|d| fs::write(d.join("f"), b"before").unwrap());
    m.umount();
    m.mount_with_env(&[], &[("REWINDFS_TEST_HOLD_NAMED_WRITE_MS", "1500")]);
    let sock = m.socket();
    let sock = sock.to_str().unwrap();
    let turn = uuid();
    rewindfs_ok(&["checkpoint", &turn, "--session", "s", "--socket", sock]);
    let dir = m.dir.clone();
    // The writer says when it has the file mapped and dirtied (on a loaded machine python
    // can take longer to start than any fixed wait), then writes it back.
    let marker = m.tmp.path().join("mapped");
    let mark = marker.display().to_string();
    let writer = std::thread::spawn(move || {
        sh(
            &dir,
            &format!(
                "python3 -c \"import mmap\nf=open('f','r+b')\nm=mmap.mmap(f.fileno(),0)\nm[0:6]=b'AFTER!'\nopen('{mark}','w').close()\nm.close()\nf.close()\""
            ),
        )
    });
    assert!(
        crate::support::wait_until(60, || marker.exists()),
        "the writer never mapped the file"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!writer.is_finished(), "the write-back was not held");
    fs::remove_file(m.p("f")).unwrap();
    writer.join().unwrap();
    assert!(!m.p("f").exists());
    rewindfs_ok(&["rewind", &turn, "--scope", "all", "--socket", sock]);
    assert_eq!(
        fs::read(m.p("f")).unwrap(),
        b"before",
        "the held write reached the removal's pre-image"
    );
}
