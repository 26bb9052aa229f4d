//! Files and directories the daemon makes outside the mount: an export's bundle and a fork's
//! directory. The daemon may run as root with an empty umask, and the place it writes to may
//! be writable by another user, so nothing here follows a name someone else could swap:
//!
//! - everything is created private (a file 0600, a directory 0700), never with the daemon's
//!   umask, and exclusively (`O_EXCL | O_NOFOLLOW`): a planted file or symlink makes the call
//!   fail instead of being written through;
//! - a bundle is written under a random temporary name beside its final one, through the
//!   directory's fd, fsynced, and renamed over the final name (a symlink planted there is
//!   replaced, never followed); a failure removes the temporary file;
//! - a fork's directory is made 0700, or is an existing empty one that the daemon's user owns
//!   and that no one else can write to; what goes beneath it is resolved beneath its fd
//!   (`fork.rs`, `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::RewindError;
use crate::sys;

/// A file being written privately beside its final name, put in place by [`NewFile::commit`]
/// (removed if dropped before).
pub(super) struct NewFile {
    /// The directory both names are in.
    dir: OwnedFd,
    tmp: OsString,
    name: OsString,
    /// The file, open for writing (0600, made by this call).
    pub(super) file: Option<File>,
    /// Where it goes, for messages.
    shown: PathBuf,
}

impl NewFile {
    /// Creates a private temporary file beside `path` (whose directory must exist).
    ///
    /// # Errors
    /// The directory cannot be opened; the file cannot be created (with the path).
    pub(super) fn create(path: &Path) -> Result<NewFile, RewindError> {
        let refuse = |e: io::Error| RewindError::Refused(format!("{}: {e}", path.display()));
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(refuse(io::Error::from_raw_os_error(libc::EISDIR)));
        };
        let dir = sys::open_dir_read(parent).map_err(refuse)?;
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".rewindfs-{}", uuid::Uuid::new_v4().simple()));
        let fd = sys::openat(
            dir.as_fd(),
            Path::new(&tmp),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            0o600,
        )
        .map_err(|e| {
            refuse(sys::ctx(
                e,
                format!("creating {}", Path::new(&tmp).display()),
            ))
        })?;
        Ok(NewFile {
            dir,
            tmp,
            name: name.to_os_string(),
            file: Some(File::from(fd)),
            shown: path.to_path_buf(),
        })
    }

    /// Syncs the file and renames it over the final name (and syncs the directory).
    ///
    /// # Errors
    /// I/O errors (the temporary file is removed then).
    pub(super) fn commit(mut self) -> Result<(), RewindError> {
        let refuse = |e: io::Error| RewindError::Refused(format!("{}: {e}", self.shown.display()));
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(refuse)?;
        }
        sys::renameat_between(
            self.dir.as_fd(),
            Path::new(&self.tmp),
            self.dir.as_fd(),
            Path::new(&self.name),
        )
        .map_err(refuse)?;
        self.tmp.clear();
        sys::fsync(self.dir.as_fd(), false).map_err(refuse)
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if !self.tmp.is_empty() {
            let _ = sys::unlinkat(self.dir.as_fd(), Path::new(&self.tmp), false);
        }
    }
}

/// Opens `dest` as a fork's directory: made 0700 if missing (its parent must exist), or an
/// existing empty directory that the daemon's user owns and no one else may write to. The fd
/// is an `O_RDONLY` one, opened without following a symlink.
///
/// # Errors
/// `Refused`, saying why the destination cannot be used and what to do.
pub(super) fn open_fork_dir(dest: &Path) -> Result<OwnedFd, RewindError> {
    let refuse = |why: String| RewindError::Refused(format!("fork into {}: {why}", dest.display()));
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(refuse("not a directory that can be made".into()));
    };
    let pdir = sys::open_dir_path(parent).map_err(|e| refuse(e.to_string()))?;
    let made = match sys::mkdirat(pdir.as_fd(), Path::new(name), 0o700) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
        Err(e) => return Err(refuse(e.to_string())),
    };
    let fd = sys::openat(
        pdir.as_fd(),
        Path::new(name),
        OFlags::RDONLY | OFlags::DIRECTORY,
        0,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => {
            refuse("it exists and is not a directory (a symlink is not followed)".into())
        }
        _ => refuse(e.to_string()),
    })?;
    let st = sys::fstat(fd.as_fd()).map_err(|e| refuse(e.to_string()))?;
    let me = sys::geteuid();
    if st.st_uid != me {
        return Err(refuse(format!(
            "it {} owned by uid {}, not by uid {me}, which writes the fork: another user could \
             change what is written there meanwhile; fork into a new directory",
            if made { "was replaced by one" } else { "is" },
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(refuse(format!(
            "it is writable by others (mode {:o}): another user could change what is written \
             there meanwhile; fork into a new directory, or `chmod go-w` it first",
            st.st_mode & 0o7777
        )));
    }
    if !made {
        let names =
            sys::read_dir_all(sys::dup_cloexec(fd.as_fd()).map_err(|e| refuse(e.to_string()))?)
                .map_err(|e| refuse(e.to_string()))?;
        if !names.is_empty() {
            return Err(refuse(
                "it exists and is not empty (a fork goes into a new or empty directory)".into(),
            ));
        }
    }
    Ok(fd)
}

/// `rel`'s parent directory beneath `root` (opened `O_PATH`, no symlink followed on the way)
/// and its last name: where a fork makes `rel`.
///
/// # Errors
/// The parent cannot be opened beneath `root` (a symlink on the way among the causes).
pub(super) fn parent_beneath<'a>(
    root: std::os::fd::BorrowedFd<'_>,
    rel: &'a Path,
) -> io::Result<(OwnedFd, &'a OsStr)> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let fd = sys::open_beneath(root, parent, OFlags::PATH | OFlags::DIRECTORY, 0)?;
    Ok((fd, name))
}
