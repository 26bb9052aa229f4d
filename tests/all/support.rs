//! Test support: a real rewindfs mount in a temp dir that is always unmounted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_rewindfs");

/// What to do when a prerequisite is missing: the tests never skip (a skipped test would
/// print "ok"); `scripts/test.sh` checks the prerequisites first and leaves those tests out,
/// saying so.
pub const HOW_TO_SKIP: &str = "run `bash scripts/test.sh`, which checks the prerequisites first \
     and leaves out (and names) the tests that cannot run here";

/// Panics with what is missing and what to do unless this process can mount FUSE directly:
/// root, and a `/dev/fuse` it can open. A test that needs a mount calls it first (and
/// [`Mounted`] does), so that a machine without FUSE fails the test instead of passing it.
pub fn require_fuse() {
    let mut missing = Vec::new();
    if !rustix::process::geteuid().is_root() {
        missing.push("root (the mount tests mount directly, as root does in CI)");
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_err()
    {
        missing.push("a /dev/fuse that opens read-write (`modprobe fuse`; in a container `--device /dev/fuse`)");
    }
    assert!(
        missing.is_empty(),
        "this test mounts FUSE and needs {}; {HOW_TO_SKIP}",
        missing.join(" and ")
    );
}

/// Panics naming `bin` and what to do unless `bin` is on PATH.
pub fn require_command(bin: &str, package: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "this test needs `{bin}` on PATH (Debian: `apt-get install {package}`); {HOW_TO_SKIP}"
    );
}

/// Copies the executable `from` to `to` with `cp`, in a process of its own, for a test to run
/// the copy. Copied by this process, the file would be open for writing here for a moment, and
/// a test on another thread that forks meanwhile holds that fd until its child execs
/// (close-on-exec acts only then): running the copy in that window fails with ETXTBSY ("Text
/// file busy"), as `a_rewind_works_after_the_daemons_binary_was_replaced` did in CI.
pub fn copy_executable(from: impl AsRef<Path>, to: impl AsRef<Path>) {
    let (from, to) = (from.as_ref(), to.as_ref());
    let out = Command::new("cp")
        .arg(from)
        .arg(to)
        .output()
        .expect("run cp");
    assert!(out.status.success(), "cp {from:?} {to:?}: {out:?}");
}

/// Runs the rewindfs binary.
pub fn rewindfs(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run rewindfs")
}

pub fn rewindfs_ok(args: &[&str]) -> String {
    let out = rewindfs(args);
    assert!(
        out.status.success(),
        "rewindfs {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A temp dir holding a workspace `proj/` (mounted) and its store `store/`.
pub struct Mounted {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub store: PathBuf,
    mounted: bool,
}

impl Mounted {
    /// A workspace prepared by `setup` before mounting.
    pub fn with(setup: impl FnOnce(&Path)) -> Mounted {
        Self::with_args(setup, &[])
    }

    pub fn with_args(setup: impl FnOnce(&Path), extra: &[&str]) -> Mounted {
        let mut m = Self::prepared(setup);
        m.mount(extra);
        m
    }

    /// A workspace prepared by `setup`, not mounted yet.
    fn prepared(setup: impl FnOnce(&Path)) -> Mounted {
        let tmp = tempfile::Builder::new()
            .prefix("rwfs-test")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("proj");
        let store = tmp.path().join("store");
        std::fs::create_dir_all(&dir).unwrap();
        setup(&dir);
        Mounted {
            tmp,
            dir,
            store,
            mounted: false,
        }
    }

    /// A workspace prepared by `setup`, mounted with `env` set for the daemon.
    pub fn with_env(setup: impl FnOnce(&Path), env: &[(&str, &str)]) -> Mounted {
        let mut m = Self::prepared(setup);
        m.mount_with_env(&[], env);
        m
    }

    pub fn new() -> Mounted {
        Self::with(|_| {})
    }

    pub fn mount(&mut self, extra: &[&str]) {
        self.mount_with_env(extra, &[]);
    }

    /// [`mount`](Self::mount) with `env` set for the daemon (the tests' fault injection).
    pub fn mount_with_env(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        require_fuse();
        let mut args = vec![
            "mount",
            self.dir.to_str().unwrap(),
            "--store",
            self.store.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = Command::new(BIN)
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .expect("run rewindfs");
        assert!(
            out.status.success(),
            "rewindfs {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The command returns only once the mount answers; check it really is one.
        assert!(
            is_fuse(&self.dir),
            "{} is not a FUSE mount after `rewindfs mount`",
            self.dir.display()
        );
        self.mounted = true;
    }

    /// Records that the workspace is mounted (`true`, by a test's own `rewindfs mount`) or
    /// not, for [`umount`](Self::umount) and the drop.
    pub fn mount_state(&mut self, mounted: bool) {
        assert!(!mounted || is_fuse(&self.dir));
        self.mounted = mounted;
    }

    pub fn umount(&mut self) {
        if self.mounted {
            rewindfs_ok(&["umount", self.dir.to_str().unwrap()]);
            self.mounted = false;
        }
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub fn socket(&self) -> PathBuf {
        self.store.join("control.sock")
    }

    pub fn daemon_pid(&self) -> u32 {
        std::fs::read_to_string(self.store.join("daemon.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted {
            let out = rewindfs(&["umount", self.dir.to_str().unwrap()]);
            if !out.status.success() {
                let _ = rewindfs(&["umount", "--lazy", self.dir.to_str().unwrap()]);
            }
        }
    }
}

pub fn is_fuse(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| s.f_type == 0x6573_5546)
}

/// Polls `f` until it is true or `secs` pass.
pub fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// Starts `cmd` in `dir` in a process that descends from nobody here: the user's editor, a
/// stranger to any agent this process registered. `setsid -f` forks and its parent exits, but
/// until it has exited the child is still this process's grandchild (and would be the agent's
/// shell), so the command first waits for its parent to be something other than `setsid`.
/// Returns at once; callers wait for the command's effect.
pub fn as_stranger(dir: &Path, cmd: &str) {
    let orphaned = "while p=$(cut -d' ' -f4 /proc/$$/stat) && \
        [ \"$(cat /proc/$p/comm 2>/dev/null)\" = setsid ]; do sleep 0.01; done";
    let st = Command::new("setsid")
        .args(["-f", "bash", "-c", &format!("{orphaned}; {cmd}")])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "setsid -f bash -c {cmd:?}: {st}");
}

/// Runs a shell command in `dir`, asserting success; returns stdout.
pub fn sh(dir: &Path, cmd: &str) -> String {
    let mut c = Command::new("bash");
    c.arg("-c").arg(cmd);
    run_sh(c, dir, cmd)
}

/// [`sh`], as uid/gid 65534 with no supplementary groups (through `setpriv`).
pub fn sh_as_nobody(dir: &Path, cmd: &str) -> String {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "bash",
        "-c",
        cmd,
    ]);
    run_sh(c, dir, cmd)
}

fn run_sh(mut c: Command, dir: &Path, cmd: &str) -> String {
    let out = c.current_dir(dir).output().expect("run bash");
    assert!(
        out.status.success(),
        "`{cmd}` in {} failed ({}):\n{}{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A listing of a tree: path, type, mode, size, content hash, symlink target — no times or inodes.
pub fn tree(root: &Path) -> Vec<String> {
    try_tree(root).unwrap_or_else(|e| panic!("listing {}: {e}", root.display()))
}

/// [`tree`], with I/O errors returned (a walk a killed daemon cuts short).
pub fn try_tree(root: &Path) -> std::io::Result<Vec<String>> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
        let mut ents = std::fs::read_dir(root.join(rel))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<Vec<_>>>()?;
        ents.sort();
        for name in ents {
            let r = rel.join(&name);
            let p = root.join(&r);
            let md = std::fs::symlink_metadata(&p)?;
            use std::os::unix::fs::PermissionsExt;
            let mode = md.permissions().mode() & 0o7777;
            if md.is_symlink() {
                out.push(format!(
                    "{} link -> {}",
                    r.display(),
                    std::fs::read_link(&p)?.display()
                ));
            } else if md.is_dir() {
                out.push(format!("{} dir {:o}", r.display(), mode));
                walk(root, &r, out)?;
            } else if md.is_file() {
                let data = std::fs::read(&p)?;
                out.push(format!(
                    "{} file {:o} {} {}",
                    r.display(),
                    mode,
                    data.len(),
                    blake3::hash(&data).to_hex()
                ));
            } else {
                out.push(format!("{} other {:o}", r.display(), mode));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out)?;
    Ok(out)
}

/// A FUSE mount whose daemon died ("Transport endpoint is not connected"), or no mount at all.
pub fn is_stale_or_gone(dir: &Path) -> bool {
    match rustix::fs::statfs(dir) {
        Err(e) => e.raw_os_error() == libc::ENOTCONN,
        Ok(s) => s.f_type != 0x6573_5546,
    }
}

/// A size field of `/proc/PID/status` (`VmRSS`, `VmHWM`, …), in bytes.
pub fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    kb * 1024
}

/// Held for writing by a test that makes the kernel drop every mount's cached dentries and
/// inodes (`drop_caches`), and for reading by the tests that count what a mount holds or is sent
/// (requests, fds): a forget in the middle of one of those changes what it counts.
pub static KERNEL_CACHES: std::sync::RwLock<()> = std::sync::RwLock::new(());
