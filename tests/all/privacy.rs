//! The store is private, and a rewind trusts nothing it has not verified (docs/design.md §3,
//! issue 24 §1): another user (uid 65534) can read, replace or add nothing in the store; a
//! blob changed or removed behind the daemon's back is refused by a dry run, a diff, a rewind
//! and an undo, which name the path, the checkpoint and the blob, and change nothing; a store
//! left open is tightened at mount; another user's store is refused.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use rewindfs::control::cmd::{RewindFiles, RewindReply};
use rewindfs::store::Scope;
use serde_json::json;

use crate::support::{BIN, Mounted, require_fuse, tree};

const NOBODY: u32 = 65534;

fn client(m: &Mounted) -> rewindfs::control::client::Client {
    rewindfs::control::client::Client::connect(&m.socket()).unwrap()
}

fn begin(m: &Mounted) -> String {
    let cp = uuid::Uuid::new_v4().to_string();
    client(m)
        .request(
            "begin_message",
            json!({"session_id": "privacy", "user_message_id": cp}),
        )
        .unwrap();
    cp
}

fn blob_of(m: &Mounted, content: &[u8]) -> (String, PathBuf) {
    let h = blake3::hash(content).to_hex().to_string();
    let p = m.store.join("blobs").join(&h[..2]).join(&h[2..]);
    assert!(p.exists(), "the pre-image {h} is in the store");
    (h, p)
}

/// Writes over a blob as root (the owner could; before this fix anyone could).
fn tamper(p: &Path, with: &[u8]) {
    fs::set_permissions(p, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(p, with).unwrap();
}

/// Every entry of a tree with its mode: `path mode`, sockets and symlinks left out.
fn modes(root: &Path) -> Vec<(PathBuf, u32, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let md = fs::symlink_metadata(&d).unwrap();
        out.push((d.clone(), md.mode() & 0o7777, true));
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p);
            } else if md.is_file() {
                out.push((p, md.mode() & 0o7777, false));
            }
        }
    }
    out
}

/// Runs `script` in bash as uid/gid 65534, no supplementary groups; returns stdout.
fn as_nobody(script: &str) -> String {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "bash",
            "-c",
            script,
        ])
        .current_dir("/")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn another_user_can_read_replace_or_add_nothing_in_the_store() {
    require_fuse();
    let m = Mounted::with(|d| fs::write(d.join("a.txt"), "secret pre-image\n").unwrap());
    begin(&m);
    fs::write(m.p("a.txt"), "changed\n").unwrap();
    fs::write(m.p("b.txt"), "new\n").unwrap();
    // Everything the store holds now: the database, its WAL, the journal, blobs, the log.
    client(&m).request("log", json!({})).unwrap();
    let (hash, blob) = blob_of(&m, b"secret pre-image\n");
    // The test process's own umask does not matter: modes are explicit.
    for (p, mode, is_dir) in modes(&m.store) {
        let name = p.strip_prefix(&m.store).unwrap().display().to_string();
        let ok = if is_dir {
            mode == 0o700
        } else if name.starts_with("blobs/") {
            mode == 0o400
        } else {
            mode == 0o600
        };
        assert!(ok, "{name} is mode {mode:o}");
    }
    for f in [
        "rewindfs.db",
        "rewindfs.db-wal",
        "journal",
        "lock",
        "daemon.pid",
        "daemon.log",
    ] {
        assert!(
            m.store.join(f).exists(),
            "{f} exists (and was checked above)"
        );
    }
    let s = m.store.display();
    let b = blob.display();
    let fan = blob.parent().unwrap().display().to_string();
    // Each attempt prints "<what>: denied" when it fails with EACCES, anything else otherwise.
    let script = format!(
        r#"try() {{ what=$1; shift; if err=$("$@" 2>&1); then echo "$what: ALLOWED"; elif [[ $err == *"Permission denied"* ]]; then echo "$what: denied"; else echo "$what: $err"; fi; }}
try read-blob cat '{b}'
try overwrite-blob bash -c 'echo EVIL > "$0"' '{b}'
try add-blob bash -c 'echo EVIL > "$0"/0000000000000000000000000000000000000000000000000000000000' '{fan}'
try append-journal bash -c 'echo EVIL >> "$0"/journal' '{s}'
try open-db bash -c 'exec 3<"$0"/rewindfs.db' '{s}'
try write-db bash -c 'echo EVIL >> "$0"/rewindfs.db' '{s}'
try list-store ls '{s}'
try create-in-store bash -c 'echo x > "$0"/planted' '{s}'
try read-log cat '{s}/daemon.log'
"#
    );
    let out = as_nobody(&script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 9, "{out}");
    for l in &lines {
        assert!(l.ends_with(": denied"), "as uid {NOBODY}: {l}\n{out}");
    }
    assert_eq!(fs::read(&blob).unwrap(), b"secret pre-image\n", "{hash}");
}

/// A mount from a shell whose umask leaves everything open still makes a private store.
#[test]
fn the_store_is_private_whatever_the_umask_of_who_mounts() {
    require_fuse();
    let mut m = Mounted::new();
    m.umount();
    fs::remove_dir_all(&m.store).unwrap();
    let st = Command::new("bash")
        .arg("-c")
        .arg(r#"umask 000 && exec "$0" mount "$1" --store "$2""#)
        .arg(BIN)
        .arg(&m.dir)
        .arg(&m.store)
        .status()
        .unwrap();
    assert!(st.success());
    let _unmount = Unmount(m.dir.clone());
    fs::write(m.p("x"), "x").unwrap();
    for (p, mode, is_dir) in modes(&m.store) {
        assert_eq!(
            mode & 0o077,
            0,
            "{} ({}) is mode {mode:o}",
            p.display(),
            if is_dir { "dir" } else { "file" }
        );
    }
}

/// Unmounts a mount the test made itself (or that a refused mount made after all), lazily if
/// need be.
struct Unmount(PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        if !crate::support::is_fuse(&self.0) {
            return;
        }
        let ok = Command::new(BIN)
            .arg("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn rewind(m: &Mounted, cp: &str, dry: bool) -> Result<RewindReply, String> {
    client(m)
        .call(&RewindFiles {
            dry_run: dry,
            ..RewindFiles::to(cp, Scope::All)
        })
        .map_err(|e| e.to_string())
}

/// The refusal names the path, the checkpoint and the blob, in the SDK's form.
fn assert_names(e: &str, path: &str, cp: &str, hash: &str, why: &str) {
    assert!(e.starts_with("Failed to rewind: "), "{e}");
    for (what, s) in [
        ("path", path),
        ("checkpoint", cp),
        ("blob", hash),
        ("cause", why),
    ] {
        assert!(e.contains(s), "the error names the {what} ({s}): {e}");
    }
}

/// The default `tool` scope checks its blobs too, and its refusal names the path, the
/// checkpoint and the blob: a tracked file whose saved content was changed is not written.
#[test]
fn a_tool_rewind_refuses_a_tampered_blob_naming_the_path_and_checkpoint() {
    require_fuse();
    let mut a = crate::agent::Agent::new(|d| fs::write(d.join("f.txt"), "original f\n").unwrap());
    let t1 = a.turn();
    a.tool_write("f.txt", b"written by the tool\n");
    // The replaced file was adopted whole; a look at the history gives it its hash.
    let ok = a.rewind(&t1, "tool", true).unwrap();
    assert!(ok.can_rewind, "{ok:?}");
    let (hash, blob) = blob_of(&a.m, b"original f\n");
    let before = tree(&a.m.dir);
    tamper(&blob, b"EVIL nobody\n");
    let dry = a.rewind(&t1, "tool", true).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_names(
        dry.error.as_deref().unwrap(),
        "f.txt",
        &t1,
        &hash,
        "corrupt",
    );
    let e = a.rewind(&t1, "tool", false).unwrap_err();
    assert_names(&e, "f.txt", &t1, &hash, "corrupt");
    assert_eq!(tree(&a.m.dir), before, "nothing in the workspace changed");
}

#[test]
fn a_tampered_or_missing_blob_is_refused_by_dry_run_diff_rewind_and_undo_and_nothing_changes() {
    require_fuse();
    let m = Mounted::with(|d| {
        fs::write(d.join("a.txt"), "original a\n").unwrap();
        fs::write(d.join("c.txt"), "original c\n").unwrap();
    });
    let cp = begin(&m);
    fs::write(m.p("a.txt"), "changed a\n").unwrap();
    fs::write(m.p("b.txt"), "new b\n").unwrap();
    fs::remove_file(m.p("c.txt")).unwrap();
    let (hash, blob) = blob_of(&m, b"original a\n");
    let before = tree(&m.dir);

    // Tampered: same length, other content (what `nobody` did in the issue).
    tamper(&blob, b"EVIL nobody\n");
    let dry = rewind(&m, &cp, true).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_names(
        dry.error.as_deref().unwrap(),
        "a.txt",
        &cp,
        &hash,
        "corrupt",
    );
    let e = client(&m)
        .request("diff", json!({"user_message_id": cp}))
        .unwrap_err()
        .to_string();
    assert_names(&e, "a.txt", &cp, &hash, "corrupt");
    let e = rewind(&m, &cp, false).unwrap_err();
    assert_names(&e, "a.txt", &cp, &hash, "corrupt");
    assert_eq!(tree(&m.dir), before, "nothing in the workspace changed");

    // Missing.
    fs::remove_file(&blob).unwrap();
    let e = rewind(&m, &cp, false).unwrap_err();
    assert_names(&e, "a.txt", &cp, &hash, "missing");
    let dry = rewind(&m, &cp, true).unwrap();
    assert_names(
        dry.error.as_deref().unwrap(),
        "a.txt",
        &cp,
        &hash,
        "missing",
    );
    assert_eq!(tree(&m.dir), before, "nothing in the workspace changed");

    // Put back as it was: the rewind goes through.
    fs::write(&blob, b"original a\n").unwrap();
    let r = rewind(&m, &cp, false).unwrap();
    assert!(r.can_rewind, "{r:?}");
    assert_eq!(fs::read_to_string(m.p("a.txt")).unwrap(), "original a\n");
    let rewound = tree(&m.dir);

    // The rewind's own pre-image of a.txt ("changed a") is what an undo restores.
    let (h2, blob2) = blob_of(&m, b"changed a\n");
    tamper(&blob2, b"EVIL again\n");
    let rewind_cp = client(&m).request("list_checkpoints", json!({})).unwrap();
    let rewind_cp = rewind_cp["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|c| c["kind"] == json!("rewind"))
        .map(|c| c["uuid"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("a rewind checkpoint in {rewind_cp}"));
    let e = client(&m)
        .request("undo_rewind", json!({}))
        .unwrap_err()
        .to_string();
    assert_names(&e, "a.txt", &rewind_cp, &h2, "corrupt");
    assert_eq!(tree(&m.dir), rewound, "the refused undo changed nothing");
    fs::write(&blob2, b"changed a\n").unwrap();
    client(&m).request("undo_rewind", json!({})).unwrap();
    assert_eq!(
        tree(&m.dir),
        before,
        "the undo went through once the blob was intact"
    );
}

/// A range pre-image (the saved old bytes of a large file) is verified like a whole one.
#[test]
fn a_tampered_range_pre_image_is_refused_and_nothing_changes() {
    require_fuse();
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    let m = Mounted::with_args(
        |d| fs::write(d.join("big.bin"), &big).unwrap(),
        &["--range-capture-min", "4096"],
    );
    let cp = begin(&m);
    // 200 KiB overwritten in the middle: a saved range held in a blob (over 64 KiB).
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.p("big.bin"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &vec![b'x'; 200 * 1024], 100_000).unwrap();
    drop(f);
    client(&m).request("log", json!({})).unwrap(); // the journal is in the database
    let db = rusqlite::Connection::open(m.store.join("rewindfs.db")).unwrap();
    let hash: String = db
        .query_row(
            "SELECT blob FROM capture_ranges WHERE blob IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    drop(db);
    let blob = m.store.join("blobs").join(&hash[..2]).join(&hash[2..]);
    let mut bad = fs::read(&blob).unwrap();
    bad[1000] ^= 0xff;
    tamper(&blob, &bad);
    let before = tree(&m.dir);
    let dry = rewind(&m, &cp, true).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_names(
        dry.error.as_deref().unwrap(),
        "big.bin",
        &cp,
        &hash,
        "corrupt",
    );
    let e = rewind(&m, &cp, false).unwrap_err();
    assert_names(&e, "big.bin", &cp, &hash, "corrupt");
    assert_eq!(tree(&m.dir), before, "nothing in the workspace changed");
    // Intact again: the rewind gives back the original bytes.
    bad[1000] ^= 0xff;
    fs::write(&blob, &bad).unwrap();
    rewind(&m, &cp, false).unwrap();
    assert!(fs::read(m.p("big.bin")).unwrap() == big);
}

#[test]
fn a_store_left_open_to_everyone_is_tightened_at_mount_and_the_log_says_so() {
    require_fuse();
    let mut m = Mounted::with(|d| fs::write(d.join("a.txt"), "a\n").unwrap());
    begin(&m);
    fs::write(m.p("a.txt"), "b\n").unwrap();
    m.umount();
    // What the store looked like before this fix: 0777 directories, 0666 files.
    for (p, _, is_dir) in modes(&m.store) {
        let mode = if is_dir { 0o777 } else { 0o666 };
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    m.mount(&[]);
    for (p, mode, is_dir) in modes(&m.store) {
        let rel = p.strip_prefix(&m.store).unwrap();
        // Blob files inside the fan-out directories are not walked at mount (they are
        // unreachable through the 0700 directories, and verified before use).
        if !is_dir && rel.components().count() > 2 {
            continue;
        }
        assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", rel.display());
    }
    let log = fs::read_to_string(m.store.join("daemon.log")).unwrap();
    assert!(
        log.contains("was open to other users: tightened"),
        "the log says so: {log}"
    );
}

/// A directory tree that uid 65534 can use: a temp dir 0755 with a home of its own and a copy
/// of rewindfs it may run (the test binary's directory is root's).
struct Nobody {
    tmp: tempfile::TempDir,
    bin: PathBuf,
}

impl Nobody {
    fn new() -> Nobody {
        let tmp = tempfile::Builder::new()
            .prefix("rwfs-priv")
            .tempdir()
            .unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let bin = tmp.path().join("rewindfs");
        crate::support::copy_executable(BIN, &bin);
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        let home = tmp.path().join("home");
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
        Nobody { tmp, bin }
    }
    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }
    /// `rewindfs mount proj --store STORE` as uid 65534, from its home; returns (ok, output).
    fn mount(&self, store: &Path) -> (bool, String) {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&self.bin)
            .arg("mount")
            .arg(self.home().join("proj"))
            .arg("--store")
            .arg(store)
            .env("HOME", self.home())
            .current_dir(self.home())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

/// Refused before anything is mounted or created: no FUSE needed.
#[test]
fn a_store_of_another_user_is_refused_for_a_user_who_is_not_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root to act as a second user; {}",
        crate::support::HOW_TO_SKIP
    );
    let u = Nobody::new();
    let proj = u.home().join("proj");
    fs::create_dir(&proj).unwrap();
    std::os::unix::fs::chown(&proj, Some(NOBODY), Some(NOBODY)).unwrap();
    // A mount that should have been refused is not left behind.
    let _unmount = Unmount(proj.clone());
    // Root's store, left open to everyone (as before this fix): still not nobody's.
    let roots = u.tmp.path().join("roots-store");
    fs::create_dir(&roots).unwrap();
    fs::set_permissions(&roots, fs::Permissions::from_mode(0o777)).unwrap();
    let (ok, out) = u.mount(&roots);
    assert!(!ok, "{out}");
    for s in [
        roots.display().to_string(),
        "owned by uid 0".into(),
        "not by you (uid 65534".into(),
        "--store".into(),
    ] {
        assert!(out.contains(&s), "the refusal says {s:?}: {out}");
    }
    assert_eq!(
        fs::read_dir(&roots).unwrap().count(),
        0,
        "nothing was created in it"
    );
    // The user's own store, with a file someone else put in it.
    let own = u.home().join("store");
    fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::write(own.join("journal"), b"").unwrap();
    let (ok, out) = u.mount(&own);
    assert!(!ok, "{out}");
    let planted = own.join("journal").display().to_string();
    for s in [planted.as_str(), "owned by uid 0", "remove it"] {
        assert!(out.contains(s), "the refusal says {s:?}: {out}");
    }
}

/// Not even root uses a store another user owns: its rows and blobs are that user's to write,
/// and root's rewind would write them into the project with root's rights. Refused, naming the
/// owner and what to do, with nothing mounted and the store left as it was.
#[test]
fn root_refuses_a_store_another_user_owns() {
    require_fuse();
    let mut m = Mounted::new();
    m.umount();
    std::os::unix::fs::chown(&m.store, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::set_permissions(&m.store, fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(crate::support::BIN)
        .args([
            "mount",
            m.dir.to_str().unwrap(),
            "--store",
            m.store.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for s in [m.store.to_str().unwrap(), "owned by", "65534", "--store"] {
        assert!(err.contains(s), "the refusal says {s:?}: {err}");
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&format!(" {} ", m.dir.display())),
        "nothing is mounted: {mounts}"
    );
    let md = fs::metadata(&m.store).unwrap();
    assert_eq!(
        (md.uid(), md.mode() & 0o777),
        (NOBODY, 0o755),
        "left as it was"
    );
}
