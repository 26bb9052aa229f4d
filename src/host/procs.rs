//! Processes left underneath a mount: their current directory, root or an open file is inside
//! the workspace's path, but on the directory the mount covers rather than on the mount. They
//! were there before the mount (a shell that `cd`'d into the project, an editor holding a file),
//! and what they change goes to that directory directly: nothing is recorded and a rewind
//! cannot bring it back.
//!
//! Read live from `/proc`, so a process is listed while it stays there and not once it leaves
//! (`cd` again) or exits. A process is underneath when the path `/proc` shows for its cwd, root
//! or one of its fds is the workspace or beneath it, and the device of what that link points at
//! is not the mount's. The device is read without syncing ([`crate::sys::dev_cached`]), so a
//! process inside the mount costs no FUSE request. A process of another user is invisible to a
//! daemon that is not root (`/proc` hides its links).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a process holds underneath the mount (on the wire: `cwd`, `root`, `file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Holds {
    /// Its current directory.
    Cwd,
    /// Its root directory (it was chrooted there).
    Root,
    /// An open file or directory.
    File,
}

/// A process that still sees the directory underneath the mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underneath {
    pub pid: u32,
    /// Its command line (arguments joined by spaces), or its name when that is empty.
    pub command: String,
    /// What it holds there, its cwd before its root before a file.
    pub holds: Holds,
    /// That directory or file, as `/proc` names it.
    pub path: PathBuf,
}

/// The processes (except `skip`) whose cwd, root or an open file is inside `workspace` but
/// not on `mount_dev`, the device of the mount over it; sorted by pid.
pub fn underneath(workspace: &Path, mount_dev: (u32, u32), skip: &[u32]) -> Vec<Underneath> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if skip.contains(&pid) {
            continue;
        }
        let base = PathBuf::from(format!("/proc/{pid}"));
        // The link's target is inside the workspace's path but not on the mount.
        let below = |link: &Path| -> Option<PathBuf> {
            let target = std::fs::read_link(link).ok()?;
            if !target.starts_with(workspace) {
                return None;
            }
            let dev = crate::sys::dev_cached(link).ok()?;
            (dev != mount_dev).then_some(target)
        };
        let found = below(&base.join("cwd"))
            .map(|p| (Holds::Cwd, p))
            .or_else(|| below(&base.join("root")).map(|p| (Holds::Root, p)))
            .or_else(|| {
                let fds = std::fs::read_dir(base.join("fd")).ok()?;
                fds.flatten()
                    .find_map(|fd| below(&fd.path()))
                    .map(|p| (Holds::File, p))
            });
        if let Some((holds, path)) = found {
            out.push(Underneath {
                pid,
                command: command(&base),
                holds,
                path,
            });
        }
    }
    out.sort_by_key(|u| u.pid);
    out
}

/// A process's command line, at most 200 bytes of it, else its name.
fn command(base: &Path) -> String {
    let cmdline = std::fs::read(base.join("cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut s = args.join(" ");
    if s.is_empty() {
        s = std::fs::read_to_string(base.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
    }
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_whose_cwd_is_under_the_path_on_another_device_is_listed() {
        // This test's own cwd is not a mount over anything: with a made-up mount device, a
        // process in the directory is "underneath"; with the directory's own device it is not.
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.path())
            .spawn()
            .unwrap();
        // A vfork'ed child's parent resumes before exec has set the new command line.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read(&cmdline).unwrap_or_default() != b"sleep\x0030\x00" {
            assert!(std::time::Instant::now() < end, "sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let dir_path = dir.path().canonicalize().unwrap();
        let real = crate::sys::dev_cached(&dir_path).unwrap();
        let me = std::process::id();
        let listed = underneath(&dir_path, (u32::MAX, u32::MAX), &[me]);
        let here = underneath(&dir_path, real, &[me]);
        let _ = child.kill();
        let _ = child.wait();
        let sleep = listed
            .iter()
            .find(|u| u.pid == child.id())
            .unwrap_or_else(|| panic!("sleep {} not in {listed:?}", child.id()));
        assert_eq!(sleep.holds, Holds::Cwd);
        assert_eq!(sleep.command, "sleep 30");
        assert_eq!(sleep.path, dir_path);
        assert!(here.iter().all(|u| u.pid != child.id()), "{here:?}");
    }
}
