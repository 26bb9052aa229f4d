//! Reading the mount table: is a directory a rewindfs mount, a stale one, or none; where is
//! the store of the workspace containing the current directory; and unmounting.
//!
//! A rewindfs mount has filesystem type `fuse.rewindfs` and the store directory as its
//! source, so a client that knows only a path inside a workspace can find its control socket.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The filesystem type a rewindfs mount shows in the mount table.
pub const FSTYPE: &str = "fuse.rewindfs";

/// One line of `/proc/self/mountinfo`, the parts we need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The device (major, minor) of the mounted filesystem: `st_dev` of what is inside it.
    pub dev: (u32, u32),
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: PathBuf,
}

/// Undoes the octal escapes (`\040` for space, …) of the mount table.
fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

/// Parses the text of a mountinfo file.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() < sep + 3 {
            continue;
        }
        let dev = fields[2]
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .unwrap_or_default();
        out.push(MountEntry {
            dev,
            mountpoint: PathBuf::from(unescape(fields[4])),
            fstype: fields[sep + 1].to_string(),
            source: PathBuf::from(unescape(fields[sep + 2])),
        });
    }
    out
}

/// The current mount table.
pub fn mounts() -> io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// Makes a path absolute without resolving its last component (which may be a dead mount).
pub fn absolute(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
        return Ok(abs);
    };
    match parent.canonicalize() {
        Ok(p) => Ok(p.join(name)),
        Err(_) => Ok(abs),
    }
}

/// The topmost mount at exactly `dir` (absolute), if any.
pub fn mount_at(dir: &Path) -> io::Result<Option<MountEntry>> {
    Ok(mounts()?.into_iter().rev().find(|m| m.mountpoint == dir))
}

/// The deepest rewindfs mount that is `dir` or one of its ancestors.
pub fn containing(dir: &Path) -> io::Result<Option<MountEntry>> {
    let mut best: Option<MountEntry> = None;
    for m in mounts()? {
        if m.fstype == FSTYPE && dir.starts_with(&m.mountpoint) {
            let deeper = best
                .as_ref()
                .is_none_or(|b| m.mountpoint.as_os_str().len() >= b.mountpoint.as_os_str().len());
            if deeper {
                best = Some(m);
            }
        }
    }
    Ok(best)
}

/// Whether `dir` is a FUSE mount whose daemon is gone ("Transport endpoint is not
/// connected"). `statfs` always asks the daemon; a `stat` may be answered from the kernel's
/// attribute cache for a while after the daemon died.
pub fn is_stale(dir: &Path) -> bool {
    crate::sys::is_disconnected(dir)
}

/// Unmounts a FUSE mount: directly when we may (root), else through `fusermount3 -u`.
/// `lazy` detaches it even if busy.
///
/// # Errors
/// The unmount's own error (e.g. `EBUSY`), with the directory named.
pub fn unmount(dir: &Path, lazy: bool) -> io::Result<()> {
    match crate::sys::unmount(dir, lazy) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => return Err(crate::sys::ctx(e, format!("unmount {}", dir.display()))),
    }
    for bin in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        match cmd.arg(dir).output() {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => {
                return Err(io::Error::other(format!(
                    "{bin} -u {}: {}",
                    dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            Err(_) => continue,
        }
    }
    Err(io::Error::other(format!(
        "unmount {}: permission denied and no fusermount3 found",
        dir.display()
    )))
}

/// Bytes of a path, for hashing it into a workspace id.
pub fn path_bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - fuse.rewindfs /var/st\\040ore rw\n\
                    37 35 98:0 / /proc rw - proc proc rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].dev, (98, 0));
        assert_eq!(m[0].mountpoint, PathBuf::from("/mnt/a b"));
        assert_eq!(m[0].fstype, "fuse.rewindfs");
        assert_eq!(m[0].source, PathBuf::from("/var/st ore"));
        assert_eq!(m[1].fstype, "proc");
    }
}
