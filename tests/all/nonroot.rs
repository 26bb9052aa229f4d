//! An ordinary user mounts, checkpoints, rewinds and unmounts through the setuid fusermount3
//! helper, as on a developer's machine. Runs as root (like the rest of the suite) and drops to
//! uid/gid 65534 (nobody) for every rewindfs command; needs `/dev/fuse` open to others (Debian's
//! default, which `.ci/run` restores) and fusermount3; `scripts/test.sh` leaves it out (and says
//! so) where they are missing.

use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{BIN, HOW_TO_SKIP, require_command, require_fuse};

const NOBODY: u32 = 65534;

struct User {
    home: PathBuf,
    bin: PathBuf,
}

impl User {
    fn run(&self, cmd: &str) -> Output {
        Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", &self.home)
            .env("RW", &self.bin)
            .current_dir(&self.home)
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap()
    }

    fn ok(&self, cmd: &str) -> String {
        let out = self.run(cmd);
        assert!(
            out.status.success(),
            "as uid {NOBODY}: `{cmd}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Lazily unmounts as root if the test fails half-way.
struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        if crate::support::is_fuse(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
fn an_ordinary_user_mounts_rewinds_and_unmounts_through_fusermount3() {
    require_fuse();
    let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o777;
    assert!(
        mode & 0o006 == 0o006,
        "this test mounts as uid {NOBODY}, which needs /dev/fuse readable and writable by others \
         (mode {mode:o} here; Debian's udev rule makes it 0666: `chmod 0666 /dev/fuse`); {HOW_TO_SKIP}"
    );
    require_command("fusermount3", "fuse3");
    let tmp = tempfile::Builder::new()
        .prefix("rwfs-user")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    // The test binary's directory is root's; give the user a copy of rewindfs it can run.
    let bin = tmp.path().join("rewindfs");
    crate::support::copy_executable(BIN, &bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let u = User {
        home: home.clone(),
        bin,
    };
    let ws = home.join("proj");
    let _cleanup = Cleanup(ws.clone());

    u.ok("mkdir proj && echo original > proj/a.txt");
    // Passthrough asked for: an ordinary user cannot have it (registering a backing file needs
    // CAP_SYS_ADMIN), and the mount works as without it, which `status` says.
    u.ok("\"$RW\" mount proj --store \"$HOME/store\" --passthrough");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mountinfo
        .lines()
        .find(|l| l.contains(ws.to_str().unwrap()) && l.contains("fuse.rewindfs"))
        .unwrap_or_else(|| panic!("no rewindfs mount at {} in\n{mountinfo}", ws.display()));
    assert!(
        line.contains(&format!("user_id={NOBODY}")),
        "mounted by the user, through fusermount3: {line}"
    );
    let sock = "--socket \"$HOME/store/control.sock\"";
    u.ok(&format!(
        "\"$RW\" checkpoint 6f1c1a53-2c57-4a43-9d1f-0b8a1f2e3d4c --session s {sock}"
    ));
    u.ok("cd proj && echo changed > a.txt && echo new > b.txt && mkdir d && echo x > d/x");
    let out = u.ok(&format!(
        "\"$RW\" rewind 6f1c1a53-2c57-4a43-9d1f-0b8a1f2e3d4c --scope all {sock}"
    ));
    assert!(out.contains("a.txt"), "{out}");
    assert_eq!(u.ok("cat proj/a.txt"), "original\n");
    assert!(
        !u.run("test -e proj/b.txt || test -e proj/d")
            .status
            .success()
    );
    // A set-user-ID file rewritten in place keeps its bit: the rewind's own write takes it
    // away (as any write by an unprivileged user does), and the rewind gives it back.
    u.ok("cd proj && echo v0 > s.sh && chmod 4755 s.sh");
    u.ok(&format!(
        "\"$RW\" checkpoint 0b5c9d7e-3f7a-4c1e-9a55-6d2e8f1b3c4a --session s {sock}"
    ));
    u.ok("cd proj && echo v1 > s.sh && chmod 4755 s.sh");
    u.ok(&format!(
        "\"$RW\" rewind 0b5c9d7e-3f7a-4c1e-9a55-6d2e8f1b3c4a --scope all {sock}"
    ));
    assert_eq!(u.ok("cat proj/s.sh"), "v0\n");
    assert_eq!(
        u.ok("stat -c %a proj/s.sh").trim(),
        "4755",
        "the set-user-ID bit came back"
    );
    let status = u.ok(&format!("\"$RW\" status {sock}"));
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("passthrough") && l.contains("unavailable")),
        "{status}"
    );
    u.ok("\"$RW\" umount proj");
    assert!(!crate::support::is_fuse(&ws), "unmounted");
    // What the user did is in the directory itself, owned by the user.
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "original\n"
    );
    let st = std::fs::metadata(ws.join("a.txt")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&st), NOBODY);
    assert!(Path::new(&home.join("store/rewindfs.db")).exists());
}
