//! History from elsewhere is hostile input (issue 29): a bundle, a pulled history or a fork's
//! target that another person made cannot be turned against the machine. The daemon runs as
//! root here; the attacker is a real second user (uid 65534) or the author of a bundle.
//!
//! Bundles are crafted the way an attacker would: a real export, its rows rewritten and every
//! frame hashed again (the hashes are unkeyed), so only the checks on what the rows say stand
//! between the bundle and the tree.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use rewindfs::control::client::Client;
use rewindfs::store::bundle::{self, BundleWriter, Manifest, Row};
use serde_json::{Value, json};

use crate::agent::Agent;
use crate::support::{Mounted, require_fuse, sh, sh_as_nobody, tree};
use crate::undo::setxattr;

/// The frames of a bundle, opened: its blobs (hash, bytes), rows and manifest.
pub(crate) struct Opened {
    pub blobs: Vec<(String, Vec<u8>)>,
    pub rows: Vec<Row>,
    pub manifest: Manifest,
}

pub(crate) fn open_bundle(bytes: &[u8]) -> Opened {
    let frames = bundle::scan(bytes).expect("a sound bundle");
    let mut out = Opened {
        blobs: Vec::new(),
        rows: Vec::new(),
        manifest: Manifest::default(),
    };
    for f in frames {
        let payload = &bytes[f.offset as usize..(f.offset + f.len) as usize];
        match f.kind {
            bundle::BLOB => out.blobs.push((f.hash, payload.to_vec())),
            bundle::ROWS => {
                for line in payload.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    out.rows.push(serde_json::from_slice(line).unwrap());
                }
            }
            _ => out.manifest = serde_json::from_slice(payload).unwrap(),
        }
    }
    out
}

/// Writes `o` as a bundle, every frame hashed anew (what anyone can do).
pub(crate) fn write_bundle(o: &Opened) -> Vec<u8> {
    let mut w = BundleWriter::new(Vec::new()).unwrap();
    for (h, b) in &o.blobs {
        w.blob(h, b.len() as u64, &mut &b[..]).unwrap();
    }
    for r in &o.rows {
        w.row(r).unwrap();
    }
    w.finish(o.manifest.clone()).unwrap().0
}

/// A path as a bundle row holds it.
fn path_value(p: &[u8]) -> Value {
    bundle::blob_value(p)
}

fn export(a: &mut Agent) -> Vec<u8> {
    let file =
        a.m.tmp
            .path()
            .join(format!("h-{}.rwb", crate::agent::uuid()));
    a.c.request("export", json!({"path": file})).unwrap();
    fs::read(&file).unwrap()
}

fn import_bytes(c: &mut Client, dir: &Path, bytes: &[u8]) -> Result<Value, String> {
    let file = dir.join(format!("crafted-{}.rwb", crate::agent::uuid()));
    fs::write(&file, bytes).unwrap();
    c.request("import", json!({"path": file}))
        .map_err(|e| e.to_string())
}

/// Row 5 of issue 29: a capture whose path is `.` made `rewind --scope all` delete the whole
/// workspace and every later mount fail. Every path a bundle names is checked at import: `.`,
/// `src/..`, `..`-components, absolute paths, NUL bytes, in captures, both sides of a rename,
/// tracked files and the log; each refuses the whole bundle, naming the row, and nothing is
/// imported.
#[test]
fn a_bundle_naming_a_path_outside_the_workspace_is_refused_whole_naming_the_row() {
    require_fuse();
    let mut a = Agent::new(|d| {
        fs::create_dir_all(d.join("src")).unwrap();
        fs::write(d.join("src/a.txt"), "a\n").unwrap();
    });
    let u1 = a.turn();
    a.tool_write("src/a.txt", b"changed\n");
    a.bash("mkdir d && echo x > d/x && mv d e");
    let good = open_bundle(&export(&mut a));
    let other = Mounted::with(|d| fs::write(d.join("keep.txt"), "mine\n").unwrap());
    let mut c = Client::connect(&other.socket()).unwrap();
    let before = (
        tree(&other.dir),
        c.request("list_checkpoints", json!({})).unwrap(),
    );
    let bad_paths: [&[u8]; 6] = [b".", b"src/..", b"../escape", b"/etc/passwd", b"a\0b", b""];
    let mut cases = 0;
    for (table, col) in [
        ("captures", "path"),
        ("moves", "src"),
        ("moves", "dst"),
        ("tracked", "path"),
        ("changes", "path"),
    ] {
        for bad in bad_paths {
            // The root's own rows (an empty path in a directory capture or the log) are what
            // older exports carry; an empty path anywhere else is refused.
            if bad.is_empty() && matches!(table, "captures" | "changes") {
                continue;
            }
            let mut o = open_bundle(&write_bundle(&good));
            let row = o
                .rows
                .iter_mut()
                .find(|r| r.t == table)
                .unwrap_or_else(|| panic!("the export has a {table} row"));
            row.r.insert(col.into(), path_value(bad));
            let err = import_bytes(&mut c, other.tmp.path(), &write_bundle(&o)).unwrap_err();
            let shown = String::from_utf8_lossy(bad)
                .chars()
                .take(20)
                .collect::<String>();
            assert!(
                err.contains("bundle refused")
                    && err.contains(&format!("({table})"))
                    && err.contains(col)
                    && err.contains("not a path inside the workspace")
                    && err.contains("nothing was imported"),
                "{table}.{col} = {shown:?}: {err}"
            );
            cases += 1;
        }
    }
    assert!(cases >= 25);
    assert_eq!(
        (
            tree(&other.dir),
            c.request("list_checkpoints", json!({})).unwrap()
        ),
        before,
        "a refused bundle changed something"
    );
    // The sound bundle still imports and rewinds there.
    import_bytes(&mut c, other.tmp.path(), &write_bundle(&good)).unwrap();
    c.request(
        "rewind_files",
        json!({"user_message_id": u1, "scope": "all"}),
    )
    .unwrap();
    assert_eq!(fs::read_to_string(other.p("src/a.txt")).unwrap(), "a\n");
    assert_eq!(fs::read_to_string(other.p("keep.txt")).unwrap(), "mine\n");
}

/// A store altered behind the daemon (its rows say `.`): a rewind refuses before it changes
/// anything, naming the path, and the next mount still works.
#[test]
fn a_store_whose_rows_name_the_workspace_itself_refuses_the_rewind_and_still_mounts() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("a.txt"), "a\n").unwrap());
    let u1 = a.turn();
    a.bash("echo b > a.txt && echo new > n.txt");
    let before = tree(&a.m.dir);
    a.c.request("status", json!({})).unwrap(); // the journal reaches SQLite
    let db = rusqlite::Connection::open(a.m.store.join("rewindfs.db")).unwrap();
    let n = db
        .execute(
            "UPDATE captures SET path = CAST('.' AS BLOB) WHERE path = CAST('n.txt' AS BLOB)",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(db);
    let err = a.rewind(&u1, "all", false).unwrap_err();
    assert!(
        err.contains("\".\"")
            && err.contains("not a path inside the workspace")
            && err.contains("nothing was changed"),
        "{err}"
    );
    let dry = a.rewind(&u1, "all", true).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    assert_eq!(tree(&a.m.dir), before, "a refused rewind changed the tree");
    a.m.umount();
    a.m.mount(&[]);
    assert_eq!(tree(&a.m.dir), before);
}

/// A `vfs_cap_data` (revision 2) granting CAP_SETUID, effective.
fn cap_setuid() -> Vec<u8> {
    let mut v = Vec::new();
    for w in [0x0200_0001u32, 1 << 7, 0, 0, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v
}

/// Row 2 of issue 29: a bundle whose capture was a root-owned copy of bash with the
/// set-user-ID bit (and a file capability, a `trusted.*` attribute, a device node) gave another
/// user `euid=0` after `import` and `rewind --scope all`; the dry run said only `+N lines`.
/// Now the dry run, the rewind and a fork withhold each of them and say so; the other user's
/// shell stays theirs; `--trust-imported` applies them for a user who trusts the source.
#[test]
fn history_from_elsewhere_grants_no_privileges_unless_trusted() {
    require_fuse();
    let mut home = Agent::new(|_| {});
    let u1 = home.turn();
    // What the attacker's machine had: a setuid-root shell with a capability, and a disk.
    let sh_path = home.m.p("bin/sh");
    fs::create_dir_all(home.m.p("bin")).unwrap();
    fs::copy("/bin/bash", &sh_path).unwrap();
    std::os::unix::fs::chown(&sh_path, Some(0), Some(0)).unwrap();
    fs::set_permissions(&sh_path, fs::Permissions::from_mode(0o4755)).unwrap();
    rustix::fs::setxattr(
        &sh_path,
        "security.capability",
        &cap_setuid(),
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    setxattr(&sh_path, "trusted.evil", "1");
    setxattr(&sh_path, "user.note", "kept");
    sh(&home.m.dir, "mknod disk b 7 0 && chmod 0666 disk");
    let u2 = home.turn();
    // Gone at home by the end, so a rewind elsewhere creates them from the bundle's captures.
    home.bash("rm -rf bin disk");
    let bytes = export(&mut home);

    let other = Mounted::with(|d| {
        // Another user's workspace, which root's daemon serves.
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    });
    let mut c = Client::connect(&other.socket()).unwrap();
    import_bytes(&mut c, other.tmp.path(), &bytes).unwrap();

    let dry = c
        .request(
            "rewind_files",
            json!({"user_message_id": u2.clone(), "scope": "all", "dry_run": true}),
        )
        .unwrap();
    let withheld = |v: &Value, name: &str| -> Vec<String> {
        v["withheld"]
            .as_array()
            .unwrap_or_else(|| panic!("no withheld in {v}"))
            .iter()
            .find(|w| w["path"].as_str().is_some_and(|p| p.ends_with(name)))
            .unwrap_or_else(|| panic!("{name} not withheld in {v}"))["what"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let w = withheld(&dry, "bin/sh");
    for want in [
        "set-user-ID bit",
        "attribute security.capability",
        "attribute trusted.evil",
    ] {
        assert!(w.iter().any(|x| x == want), "{want} not in {w:?}");
    }
    assert_eq!(withheld(&dry, "disk"), ["device node (block 7:0)"]);
    // Every dry run shows modes and attributes, not only lines.
    let attrs = dry["attributeChanges"].as_array().unwrap();
    let sh_attrs = attrs
        .iter()
        .find(|a| a["path"].as_str().unwrap().ends_with("bin/sh"))
        .unwrap_or_else(|| panic!("no attribute change for bin/sh in {dry}"));
    assert_eq!(sh_attrs["mode"], json!([null, "0755"]), "{sh_attrs}");
    assert_eq!(sh_attrs["xattrs"], json!(["+user.note"]), "{sh_attrs}");
    // The CLI says it in words.
    let out = crate::support::rewindfs(&[
        "rewind",
        &u2.clone(),
        "--scope",
        "all",
        "--dry-run",
        "--socket",
        other.socket().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("withheld")
            && text.contains("set-user-ID bit")
            && text.contains("--trust-imported")
            && text.contains("mode (new) -> 0755"),
        "{text}"
    );

    let turn = u2.clone();
    let _ = &u1;
    let r = c
        .request(
            "rewind_files",
            json!({"user_message_id": turn, "scope": "all"}),
        )
        .unwrap();
    assert!(
        r["withheld"].as_array().is_some_and(|w| !w.is_empty()),
        "{r}"
    );
    let md = fs::metadata(other.p("bin/sh")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o755, "the set-user-ID bit was applied");
    assert!(
        rustix::fs::getxattr(other.p("bin/sh"), "security.capability", &mut [0u8; 64]).is_err()
    );
    assert!(
        !other.p("disk").exists(),
        "a device node from elsewhere was made"
    );
    // The other user runs it: their own uid, not root's.
    let id = sh_as_nobody(&other.dir, "./bin/sh -p -c 'id -u; id -ru'");
    assert_eq!(
        id.split_whitespace().collect::<Vec<_>>(),
        ["65534", "65534"],
        "{id}"
    );

    // A fork of that checkpoint withholds the same.
    let dir = other.tmp.path().join("fork");
    let f = c
        .request("fork", json!({"user_message_id": turn, "dir": dir}))
        .unwrap();
    assert!(f["withheld"].to_string().contains("set-user-ID bit"), "{f}");
    assert_eq!(
        fs::metadata(dir.join("bin/sh")).unwrap().mode() & 0o7777,
        0o755
    );
    assert!(!dir.join("disk").exists());

    // Trusted: applied as the history says.
    c.request("undo_rewind", json!({})).unwrap();
    let r = c
        .request(
            "rewind_files",
            json!({"user_message_id": turn, "scope": "all", "trust_imported": true}),
        )
        .unwrap();
    assert!(r.get("withheld").is_none(), "{r}");
    assert_eq!(
        fs::metadata(other.p("bin/sh")).unwrap().mode() & 0o7777,
        0o4755
    );
    let md = fs::symlink_metadata(other.p("disk")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_block_device(
        &md.file_type()
    ));
    let _ = fs::remove_file(other.p("disk"));
    let _ = fs::remove_file(other.p("bin/sh"));
}

/// Row 3 of issue 29: `export` into a directory another user can write followed a symlink
/// planted at its predictable temporary name and overwrote a 0600 file of root's; every bundle
/// was 0666. Now the temporary name is random and made exclusively, a symlink at the final name
/// is replaced rather than followed, and the bundle is 0600.
#[test]
fn an_export_into_a_directory_others_can_write_follows_no_planted_link_and_is_private() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("secret.txt"), "root's secret\n").unwrap());
    a.turn();
    a.bash("echo more >> secret.txt");
    let shared = a.m.tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    fs::set_permissions(a.m.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let victim = a.m.tmp.path().join("victim");
    fs::write(&victim, "root only\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    // The attacker plants links at the final name and at the names older builds used.
    let v = victim.display();
    let pid = a.m.daemon_pid();
    sh_as_nobody(
        &shared,
        &format!("ln -s {v} h.rwb; ln -s {v} .h.rwb.rewindfs-export-{pid}"),
    );
    let target = shared.join("h.rwb");
    a.c.request("export", json!({"path": target})).unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), "root only\n");
    let md = fs::symlink_metadata(&target).unwrap();
    assert!(
        md.is_file(),
        "the bundle is a file of its own, not the planted link"
    );
    assert_eq!(md.mode() & 0o777, 0o600, "the bundle is private");
    assert_eq!(md.uid(), 0);
    // The other user can read nothing of it.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(&target)
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Nothing else the export made is left in the directory.
    let left: Vec<String> = fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".h.rwb.rewindfs-export-"))
        .collect();
    assert_eq!(left, ["h.rwb"]);
}

/// Row 1 of issue 29: `fork` while another user swapped a just-made subdirectory of the target
/// for a symlink made root create a file in, and chmod, a directory outside the target. Now the
/// target is made 0700 (or must be an empty directory of root's that no one else can write),
/// and everything beneath it is made through descriptors, never by following a name: the
/// attacker, swapping as fast as it can, never reaches outside, and a target it owns is
/// refused.
#[test]
fn a_fork_next_to_another_user_writes_nothing_outside_its_target() {
    require_fuse();
    // The fork pauses between making its directories and writing its files: the attacker's
    // window, every time.
    let mut a = Agent::with_env(
        |d| {
            for i in 0..10 {
                fs::create_dir_all(d.join(format!("d{i}/sub"))).unwrap();
                fs::write(d.join(format!("d{i}/zz-evil")), "x\n").unwrap();
                fs::set_permissions(d.join(format!("d{i}")), fs::Permissions::from_mode(0o777))
                    .unwrap();
            }
            fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
        },
        &[("REWINDFS_TEST_PAUSE_FORK_FILES_MS", "300")],
    );
    let u1 = a.turn();
    a.bash("echo later > later.txt");
    let shared = a.m.tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    fs::set_permissions(a.m.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let outside = a.m.tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o755)).unwrap();
    // The attacker: swap every subdirectory of any fork in the shared directory for a link to
    // `outside`, as fast as it can, until told to stop.
    let stop = shared.join("stop");
    let o = outside.display();
    let script = format!(
        "cd {s}; while [ ! -e stop ]; do for f in fork*/d*; do [ -d \"$f\" ] && mv \"$f\" \"$f.x\" 2>/dev/null && ln -s {o} \"$f\" 2>/dev/null; done; done",
        s = shared.display()
    );
    let attacker = Attacker(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "bash",
                "-c",
                &script,
            ])
            .spawn()
            .unwrap(),
        stop,
    );
    let mut made = 0;
    for n in 0..6 {
        let dir = shared.join(format!("fork{n}"));
        // (Once done, the fork is the checkpoint's tree, 0777 directories and all: the attacker
        // may rearrange it then, as the workspace's own users could.)
        let r =
            a.c.request("fork", json!({"user_message_id": u1, "dir": dir}));
        made += usize::from(r.is_ok());
    }
    drop(attacker);
    assert!(
        fs::read_dir(&outside).unwrap().next().is_none(),
        "the fork wrote into a directory outside its target"
    );
    assert_eq!(fs::metadata(&outside).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(made, 6, "every fork was written");

    // A target the other user made (empty, theirs) is refused, and nothing is written there.
    let theirs = shared.join("theirs");
    sh_as_nobody(&shared, "mkdir theirs");
    let e =
        a.c.request("fork", json!({"user_message_id": u1, "dir": theirs}))
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("owned by uid 65534") && e.contains("new directory"),
        "{e}"
    );
    assert!(fs::read_dir(&theirs).unwrap().next().is_none());
    // One of root's that others may write to is refused too.
    let loose = shared.join("loose");
    fs::create_dir(&loose).unwrap();
    fs::set_permissions(&loose, fs::Permissions::from_mode(0o777)).unwrap();
    let e =
        a.c.request("fork", json!({"user_message_id": u1, "dir": loose}))
            .unwrap_err()
            .to_string();
    assert!(e.contains("writable by others"), "{e}");
    // A link planted at the target's name is not followed.
    sh_as_nobody(&shared, &format!("ln -s {o} planted"));
    let e =
        a.c.request(
            "fork",
            json!({"user_message_id": u1, "dir": shared.join("planted")}),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("fork into"), "{e}");
    assert!(fs::read_dir(&outside).unwrap().next().is_none());
}

/// A process of the other user's, stopped (its `stop` file made, then killed) however the test
/// ends.
struct Attacker(std::process::Child, std::path::PathBuf);

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = fs::write(&self.1, "");
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A bundle of `mb` MiB of small rows, as an attacker (or a long history) makes one: one
/// checkpoint, then captures of distinct paths and change-log entries, half and half.
fn bundle_of_small_rows(mb: u64) -> Vec<u8> {
    let cp = crate::agent::uuid();
    let mut w = BundleWriter::new(Vec::with_capacity((mb << 20) as usize + (1 << 20))).unwrap();
    let row = |t: &str, v: Value| Row {
        t: t.into(),
        r: v.as_object().unwrap().clone(),
    };
    w.row(&row(
        "checkpoints",
        json!({"seq": 1, "uuid": cp, "session_id": "s", "kind": "message", "began_at": 1}),
    ))
    .unwrap();
    w.row(&row("sessions", json!({"id": "s", "created_at": 1})))
        .unwrap();
    let mut i = 0u64;
    let mut captures = Vec::new();
    let mut changes = Vec::new();
    let per = 180u64; // bytes per row, about
    while (i * per) < (mb << 20) {
        let path = path_value(format!("d{}/f{i}.txt", i % 1000).as_bytes());
        captures.push(row(
            "captures",
            json!({"id": i + 1, "checkpoint": 1, "path": path, "purpose": "checkpoint", "kind": "absent",
                   "blob": null, "mode": 0, "uid": 0, "gid": 0, "size": 0, "target": null, "actor": "shell",
                   "actors": 2, "op": "create", "created_at": 1, "partial": 0, "xattrs": null}),
        ));
        changes.push(row(
            "changes",
            json!({"at": 1, "checkpoint": 1, "op": "create", "path": path, "actor": "shell", "pid": 1, "process": "sh", "session": "s"}),
        ));
        i += 2;
    }
    for r in captures.iter().chain(&changes) {
        w.row(r).unwrap();
    }
    drop((captures, changes));
    w.finish(Manifest {
        export_id: crate::agent::uuid(),
        checkpoints: vec![cp],
        ..Manifest::default()
    })
    .unwrap()
    .0
}

/// The peak resident memory of a process, in bytes.
fn peak_memory(pid: u32) -> u64 {
    crate::support::proc_status_bytes(pid, "VmHWM")
}

/// Row 6 of issue 29: a 100 MB bundle of small rows took 2.6 GB to import, and a daemon with
/// its memory limited died, taking the mount with it. Rows now wait in a staging file: the
/// daemon's peak memory stays under 256 MiB whatever the bundle's size (CI imports a 24 MiB
/// one; `scripts/hostile-bundle.sh` a 1 GiB one, `REWINDFS_TEST_BUNDLE_MB=1024`), the import
/// succeeds, and the mount keeps serving.
#[test]
fn a_large_bundle_of_small_rows_imports_in_bounded_memory() {
    require_fuse();
    let mb: u64 = std::env::var("REWINDFS_TEST_BUNDLE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let m = Mounted::with(|d| fs::write(d.join("a.txt"), "a\n").unwrap());
    let file = m.tmp.path().join("big.rwb");
    fs::write(&file, bundle_of_small_rows(mb)).unwrap();
    let size = fs::metadata(&file).unwrap().len();
    assert!(size >= mb << 20, "{size}");
    let pid = m.daemon_pid();
    let before = peak_memory(pid);
    let mut c = Client::connect(&m.socket()).unwrap();
    c.set_timeout(std::time::Duration::from_secs(1800)).unwrap();
    let t = std::time::Instant::now();
    let r = c.request("import", json!({"path": file})).unwrap();
    let peak = peak_memory(pid);
    eprintln!(
        "imported {} MiB ({} rows) in {:?}: daemon peak memory {} MiB (before: {} MiB)",
        size >> 20,
        r["rows"],
        t.elapsed(),
        peak >> 20,
        before >> 20
    );
    if let Ok(log) = fs::read_to_string(m.store.join("daemon.log")) {
        for l in log.lines().filter(|l| l.contains("import: ")) {
            eprintln!("{l}");
        }
    }
    assert!(r["rows"].as_u64().unwrap() > 100_000, "{r}");
    assert!(
        peak < 256 << 20,
        "the daemon's peak memory was {} MiB importing a {} MiB bundle",
        peak >> 20,
        size >> 20
    );
    // Still serving, and the history is there.
    assert_eq!(fs::read_to_string(m.p("a.txt")).unwrap(), "a\n");
    let l = c.request("list_checkpoints", json!({})).unwrap();
    assert!(l.to_string().contains(r#""kind":"import""#), "{l}");
}

/// Every directory beneath the store's `blobs/`, with its modification time: a blob written or
/// removed (or a temporary file made for one) changes one of them.
fn blob_dirs(store: &Path) -> Vec<(String, i64, i64)> {
    let mut out = Vec::new();
    let mut stack = vec![store.join("blobs")];
    while let Some(d) = stack.pop() {
        let md = fs::metadata(&d).unwrap();
        out.push((d.display().to_string(), md.mtime(), md.mtime_nsec()));
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// The directories of `after` whose time differs from `before`'s (or that are new).
fn changed(before: &[(String, i64, i64)], after: &[(String, i64, i64)]) -> Vec<String> {
    after
        .iter()
        .filter(|a| !before.contains(a))
        .map(|a| a.0.clone())
        .collect()
}

/// Row 8 of issue 29: a range capture's declared size was trusted (a bundle declaring 1 GiB
/// made even a dry run write a 1 GiB blob), and a capture's size was never checked against
/// its blob (`show` said 1 PiB for a 6-byte file). A complete capture whose size is not its
/// blob's is refused at import; a range capture declaring more than its history holds is
/// refused where its content is put together, by the dry run, the rewind and `show`, naming
/// the path; and a dry run writes nothing to the store, even for a legitimate range capture.
#[test]
fn declared_sizes_are_checked_and_a_dry_run_writes_nothing_to_the_store() {
    require_fuse();
    let mut a = Agent::with_args(
        |d| {
            fs::write(d.join("big.bin"), vec![b'x'; 64 << 10]).unwrap();
            fs::write(d.join("small.txt"), "small\n").unwrap();
        },
        &["--range-capture-min", "4096"],
    );
    let u1 = a.turn();
    a.bash("printf Z | dd of=big.bin bs=1 seek=30000 conv=notrunc status=none && echo changed > small.txt");
    // A legitimate range capture: the dry run puts its content together in memory only.
    let before = blob_dirs(&a.m.store);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let dry = a.rewind(&u1, "all", true).unwrap();
    assert!(dry.can_rewind, "{dry:?}");
    assert_eq!(a.files(&dry.files_changed), ["big.bin", "small.txt"]);
    assert_eq!(
        changed(&before, &blob_dirs(&a.m.store)),
        Vec::<String>::new(),
        "a dry run wrote to the store"
    );
    let good = open_bundle(&export(&mut a));

    let other = Mounted::with(|d| {
        fs::write(d.join("big.bin"), vec![b'x'; 64 << 10]).unwrap();
    });
    let mut c = Client::connect(&other.socket()).unwrap();
    let is_capture_of = |r: &Row, p: &str| {
        r.t == "captures"
            && r.bytes("path").as_deref() == Some(p.as_bytes())
            && r.text("purpose") == Some("checkpoint")
    };
    // A complete capture claiming a petabyte: refused at import, naming the path.
    let mut o = open_bundle(&write_bundle(&good));
    let row = o
        .rows
        .iter_mut()
        .find(|r| {
            is_capture_of(r, "small.txt")
                && r.int("partial") == Some(0)
                && r.text("kind") == Some("file")
        })
        .unwrap();
    row.r.insert("size".into(), json!(1u64 << 50));
    let err = import_bytes(&mut c, other.tmp.path(), &write_bundle(&o)).unwrap_err();
    assert!(
        err.contains("small.txt")
            && err.contains("declares 1125899906842624 bytes")
            && err.contains("nothing was imported"),
        "{err}"
    );

    // A range capture claiming a gigabyte: imported (its size can only be judged against the
    // history that completes it), then refused wherever its content is needed.
    let mut o = open_bundle(&write_bundle(&good));
    let row = o
        .rows
        .iter_mut()
        .find(|r| is_capture_of(r, "big.bin") && r.int("partial") == Some(1))
        .unwrap();
    row.r.insert("size".into(), json!(1u64 << 30));
    import_bytes(&mut c, other.tmp.path(), &write_bundle(&o)).unwrap();
    let before = blob_dirs(&other.store);
    let free_before = rustix::fs::statvfs(&other.store).unwrap().f_bavail;
    let dry = c
        .request(
            "rewind_files",
            json!({"user_message_id": u1, "scope": "all", "dry_run": true}),
        )
        .unwrap();
    assert_eq!(dry["canRewind"], false, "{dry}");
    let e = dry["error"].as_str().unwrap();
    assert!(
        e.contains("big.bin") && e.contains("declares 1073741824 bytes"),
        "{e}"
    );
    assert_eq!(
        changed(&before, &blob_dirs(&other.store)),
        Vec::<String>::new(),
        "a refused dry run wrote to the store"
    );
    let used = free_before.saturating_sub(rustix::fs::statvfs(&other.store).unwrap().f_bavail);
    assert!(used < 4096, "{used} blocks went");
    let e = c
        .request(
            "rewind_files",
            json!({"user_message_id": u1, "scope": "all"}),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("big.bin") && e.contains("nothing was changed"),
        "{e}"
    );
    let e = c
        .request("show", json!({"user_message_id": u1, "path": "big.bin"}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("big.bin") && e.contains("declares"), "{e}");
    assert_eq!(fs::metadata(other.p("big.bin")).unwrap().len(), 64 << 10);
}

/// A small tmpfs at `dir`, unmounted when dropped (after the rewindfs mount that uses it, when
/// declared before it).
struct SmallFs(std::path::PathBuf);

impl SmallFs {
    fn mount(dir: &Path, size: &str) -> SmallFs {
        fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs on {}", dir.display());
        SmallFs(dir.to_path_buf())
    }

    /// Fills the filesystem until at most `leave` bytes are free; returns the filler's path.
    fn fill(&self, leave: u64) -> std::path::PathBuf {
        let filler = self.0.join("filler");
        let vfs = rustix::fs::statvfs(&self.0).unwrap();
        let free = vfs.f_bavail * vfs.f_frsize;
        let len = free.saturating_sub(leave);
        let f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&filler)
            .unwrap();
        let chunk = vec![7u8; 64 << 10];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if std::io::Write::write_all(&mut &f, &chunk[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        f.sync_all().unwrap();
        filler
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Row 7 of issue 29: on a store with no room, the dry run warned of nothing and the real
/// rewind deleted 202 paths, then failed with ENOSPC; the rewind stayed "applying", undo
/// refused, every remount failed. Now a rewind (and its dry run) that the store cannot hold is
/// refused before it changes anything, saying how much it needs and where; `status` says when
/// the store is full and writes are refused; once there is room, it goes ahead.
#[test]
fn a_rewind_the_store_cannot_hold_is_refused_before_it_changes_anything() {
    require_fuse();
    let mut small: Option<SmallFs> = None;
    let mut a = Agent::new(|d| {
        small = Some(SmallFs::mount(&d.parent().unwrap().join("store"), "32m"));
        for i in 0..6 {
            fs::write(d.join(format!("f{i}.bin")), vec![b'a' + i as u8; 1 << 20]).unwrap();
        }
    });
    let small = small.unwrap();
    let u1 = a.turn();
    // The agent rewrites every file: their old contents are captured (6 MiB in the store).
    a.bash("for i in 0 1 2 3 4 5; do head -c 1048576 /dev/urandom > f$i.bin; done");
    let before = tree(&a.m.dir);
    a.c.request("status", json!({})).unwrap();
    let filler = small.fill(2 << 20);
    let dry = a.rewind(&u1, "all", true).unwrap();
    assert!(!dry.can_rewind, "{dry:?}");
    let e = dry.error.as_deref().unwrap();
    assert!(
        e.contains(&a.m.store.display().to_string())
            && e.contains("free")
            && e.contains("needs about")
            && e.contains("6 file(s)"),
        "{e}"
    );
    let err = a.rewind(&u1, "all", false).unwrap_err();
    assert!(
        err.contains("nothing was changed") && err.contains("needs about"),
        "{err}"
    );
    assert_eq!(tree(&a.m.dir), before, "a refused rewind changed the tree");
    // Ordinary writes that need a pre-image are refused, and status says why.
    fill_until_refused(&a.m.dir);
    let st = a.c.request("status", json!({})).unwrap();
    assert_eq!(st["storeFull"], true, "{st}");
    assert!(st["writesRefusedStoreFull"].as_u64().unwrap() >= 1, "{st}");
    let text = crate::support::rewindfs_ok(&["status", "--socket", a.m.socket().to_str().unwrap()]);
    assert!(
        text.contains("storeFull") && text.contains("ENOSPC"),
        "{text}"
    );
    // Room again: the rewind goes ahead, and undo gives back what it overwrote.
    fs::remove_file(filler).unwrap();
    let _ = fs::remove_file(a.m.p("new.txt"));
    let before = tree(&a.m.dir);
    a.rewind(&u1, "all", false).unwrap();
    assert_eq!(fs::read(a.m.p("f3.bin")).unwrap(), vec![b'd'; 1 << 20]);
    a.c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(tree(&a.m.dir), before);
    a.m.umount();
    drop(small);
}

/// Makes files in `dir` until a write is refused with ENOSPC (the store cannot save its
/// pre-image); panics if none is.
fn fill_until_refused(dir: &Path) {
    for i in 0..64 {
        let r = fs::write(dir.join("new.txt"), vec![b'n'; (i + 1) << 16]);
        if let Err(e) = r {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            return;
        }
        // A new checkpoint: the next write needs a pre-image again.
        let mut c = Client::connect(&dir.parent().unwrap().join("store/control.sock")).unwrap();
        c.request(
            "begin_message",
            json!({"session_id": "fill", "user_message_id": crate::agent::uuid()}),
        )
        .unwrap();
    }
    panic!("no write was refused on a full store");
}

/// A rewind cut short part-way (a full disk, here the tests' fault injection) stays unfinished
/// for the next mount to finish; when that mount cannot (the store is full by then) it still
/// mounts and serves, `status` names the rewind, and `undo` puts back what of it was applied —
/// after which no later mount applies it.
#[test]
fn a_rewind_left_unfinished_never_keeps_the_workspace_from_mounting_and_undo_reaches_it() {
    require_fuse();
    let mut small: Option<SmallFs> = None;
    let mut m = Mounted::with_env(
        |d| {
            small = Some(SmallFs::mount(&d.parent().unwrap().join("store"), "16m"));
            for i in 0..5 {
                fs::write(
                    d.join(format!("f{i}.txt")),
                    format!("v1 {i}\n").repeat(30_000),
                )
                .unwrap();
            }
        },
        &[("REWINDFS_TEST_FAIL_REWIND_AFTER", "2")],
    );
    let small = small.unwrap();
    let mut c = Client::connect(&m.socket()).unwrap();
    let u1 = crate::agent::uuid();
    c.request(
        "begin_message",
        json!({"session_id": "s", "user_message_id": u1}),
    )
    .unwrap();
    sh(
        &m.dir,
        "for i in 0 1 2 3 4; do yes v2 $i | head -n 30000 > f$i.txt; done",
    );
    let before = tree(&m.dir);
    let e = c
        .request(
            "rewind_files",
            json!({"user_message_id": u1, "scope": "all"}),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("Failed to rewind"), "{e}");
    let half = tree(&m.dir);
    assert_ne!(half, before, "nothing of the rewind was applied");
    drop(c);
    m.umount();
    // The store is full when the workspace is mounted again: the rewind cannot be finished,
    // and the workspace mounts all the same.
    let filler = small.fill(256 << 10);
    m.mount(&[]);
    let mut c = Client::connect(&m.socket()).unwrap();
    let st = c.request("status", json!({})).unwrap();
    let unfinished = st["unfinishedRewinds"]
        .as_array()
        .unwrap_or_else(|| panic!("{st}"));
    assert_eq!(unfinished.len(), 1, "{st}");
    // (Recovery may have got a little further before the store ran out.)
    assert_ne!(tree(&m.dir), before);
    // Room again: undo puts back what the rewind applied, and closes it.
    fs::remove_file(filler).unwrap();
    c.request("undo_rewind", json!({})).unwrap();
    assert_eq!(tree(&m.dir), before);
    let st = c.request("status", json!({})).unwrap();
    assert!(st.get("unfinishedRewinds").is_none(), "{st}");
    drop(c);
    m.umount();
    m.mount(&[]);
    assert_eq!(
        tree(&m.dir),
        before,
        "a later mount applied the undone rewind"
    );
    let st = Client::connect(&m.socket())
        .unwrap()
        .request("status", json!({}))
        .unwrap();
    assert!(st.get("unfinishedRewinds").is_none(), "{st}");
    m.umount();
    drop(small);
}

/// Row 9 of issue 29: refusals say what, where and what to do, once. A bundle with no
/// checkpoint is refused (it said "already imported"); a bundle path outside the workspace is
/// named (it gave `Invalid cross-device link`), once; a 900 KB session id is refused, not
/// stored; `register_agent` of init (every process on the host) is refused; `diff --fork` of a
/// directory that is not a fork of this workspace (`/etc`) is refused.
#[test]
fn small_refusals_name_what_and_say_it_once() {
    require_fuse();
    let mut a = Agent::new(|d| fs::write(d.join("a.txt"), "a\n").unwrap());
    a.turn();
    a.bash("echo b > a.txt");
    let good = open_bundle(&export(&mut a));
    let other = Mounted::new();
    let mut c = Client::connect(&other.socket()).unwrap();
    let empty = Opened {
        blobs: Vec::new(),
        rows: Vec::new(),
        manifest: Manifest {
            checkpoints: Vec::new(),
            ..good.manifest.clone()
        },
    };
    let e = import_bytes(&mut c, other.tmp.path(), &write_bundle(&empty)).unwrap_err();
    assert!(e.contains("holds no checkpoint"), "{e}");
    // Through the CLI: the refusal, its row and its path, said once.
    let mut o = open_bundle(&write_bundle(&good));
    let row = o.rows.iter_mut().find(|r| r.t == "captures").unwrap();
    row.r
        .insert("path".into(), path_value(b"../../etc/cron.d/x"));
    let file = other.tmp.path().join("dotdot.rwb");
    fs::write(&file, write_bundle(&o)).unwrap();
    let out = crate::support::rewindfs(&[
        "import",
        file.to_str().unwrap(),
        "--socket",
        other.socket().to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("../../etc/cron.d/x") && err.contains("(a `..` component)"),
        "{err}"
    );
    assert_eq!(
        err.matches("not a path inside the workspace").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("cross-device"), "{err}");
    // A 900 KB session id.
    let huge = "s".repeat(900 << 10);
    let e = c
        .request(
            "begin_message",
            json!({"session_id": huge, "user_message_id": crate::agent::uuid()}),
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not a session id") && e.len() < 1000,
        "{}",
        &e[..e.len().min(300)]
    );
    let l = c.request("list_checkpoints", json!({})).unwrap();
    assert!(!l.to_string().contains("sssssssss"));
    // init as the agent.
    let e = c
        .request("register_agent", json!({"pid": 1}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pid 1") && e.contains("every process"), "{e}");
    // A diff against a directory that is no fork of this workspace.
    let u = crate::agent::uuid();
    c.request(
        "begin_message",
        json!({"session_id": "s", "user_message_id": u}),
    )
    .unwrap();
    let e = c
        .request("diff", json!({"user_message_id": u, "fork_dir": "/etc"}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a fork of"), "{e}");
    // The daemon is still serving.
    c.request("status", json!({})).unwrap();
}
