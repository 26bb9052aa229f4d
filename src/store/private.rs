//! The store is private (docs/design.md §3): it holds what a rewind writes into the workspace, so
//! no one but the user who mounts may read, replace or add anything in it.
//!
//! - Everything the store creates gets its mode explicitly, whatever the umask (the daemon
//!   clears its umask for the workspace's sake, see `sys::clear_umask`): directories
//!   [`DIR_MODE`] (0700), files [`FILE_MODE`] (0600), blob files [`BLOB_MODE`] (0400: content
//!   addressed, never written in place). SQLite gives `-wal` and `-shm` the database's mode.
//! - [`secure`], at mount (and before `gc --store`): the store directory must belong to the
//!   user who mounts (root too); every entry of the store directory and of `blobs/` must
//!   belong to that user; modes looser than the above
//!   are tightened, and the caller logs what was.
//!
//! Blob files themselves are not walked at mount (a store holds millions): they are reachable
//! only through the 0700 directories, and a rewind verifies every blob's hash before it uses
//! it (`Blobs::read_verified` and friends), so a blob planted or changed while the store was
//! open to others is refused, not restored. An adopted blob (`blobs::Blobs::adopt`) is the
//! deleted file's own inode and keeps the mode it had in the workspace.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{Result, StoreError};
use crate::sys;

/// Mode of every directory of the store.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file of the store but blobs.
pub const FILE_MODE: u32 = 0o600;
/// Mode of a blob file.
pub const BLOB_MODE: u32 = 0o400;

/// Creates a directory of the store (or of the blob store) with mode 0700 whatever the
/// umask; missing parents are created as the umask says (they are not the store's). An
/// existing directory is left as it is ([`secure`] checks it). Returns whether it was created.
///
/// # Errors
/// I/O errors, naming the path.
pub fn create_dir(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::DirBuilderExt;
    let mut b = std::fs::DirBuilder::new();
    b.mode(DIR_MODE);
    let res = match b.create(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => match path.parent() {
            Some(parent) => std::fs::create_dir_all(parent).and_then(|()| b.create(path)),
            None => Err(e),
        },
        r => r,
    };
    match res {
        Ok(()) => {
            // The umask may have taken bits away (never added any): set them exactly.
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| sys::ctx(e, format!("chmod {}", path.display())))?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(sys::ctx(e, format!("creating {}", path.display()))),
    }
}

/// Opens a file of the store with `opts`; one it creates gets mode 0600 whatever the umask.
///
/// # Errors
/// I/O errors, naming the path.
pub fn open_file(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    let f = opts
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| sys::ctx(e, format!("opening {}", path.display())))?;
    let md = f.metadata()?;
    // Created under a umask that took the owner's bits (an existing file keeps its mode:
    // `secure` has tightened it at mount).
    if md.mode() & 0o7777 != FILE_MODE && md.len() == 0 && md.uid() == sys::geteuid() {
        sys::fchmod(std::os::fd::AsFd::as_fd(&f), FILE_MODE)
            .map_err(|e| sys::ctx(e, format!("chmod {}", path.display())))?;
    }
    Ok(f)
}

/// Creates (or truncates) a file of the store and writes `data` to it, mode 0600.
///
/// # Errors
/// I/O errors, naming the path.
pub fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    open_file(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )?
    .write_all(data)
    .map_err(|e| sys::ctx(e, format!("writing {}", path.display())))
}

/// Checks that the store in `dir` belongs to the user who mounts, and with `tighten` makes
/// it private: the store directory and the directories in it and in `blobs/` 0700, the files
/// there 0600 (blob files 0400 are left as they are: they have no bits to take away). Returns
/// the paths whose modes were tightened (none without `tighten`: then nothing is changed).
///
/// The store directory, and every entry checked, must be owned by the effective uid — root's
/// too: a store another user owns could hold rows and blobs (hashed right) that user wrote, and
/// root's rewind would write them into the project with root's rights (a setuid file, say).
///
/// # Errors
/// [`StoreError::NotYours`] naming the path, its owner and what to do; I/O errors.
pub fn secure(dir: &Path, tighten: bool) -> Result<Vec<PathBuf>> {
    let me = sys::geteuid();
    let st = std::fs::metadata(dir).map_err(|e| sys::ctx(e, format!("store {}", dir.display())))?;
    if !st.is_dir() {
        return Err(StoreError::Io(io::Error::other(format!(
            "store {} is not a directory",
            dir.display()
        ))));
    }
    if st.uid() != me {
        return Err(StoreError::NotYours {
            path: dir.display().to_string(),
            owner: user(st.uid()),
            you: user(me),
            fix: "a store must belong to the user who mounts, or its owner could change what a \
                  rewind writes; pass --store with a directory of your own, or mount as its owner"
                .to_string(),
        });
    }
    let mut tightened = Vec::new();
    if tighten {
        tighten_to(dir, st.mode(), DIR_MODE, &mut tightened)?;
    }
    let blobs = dir.join("blobs");
    for d in [dir, blobs.as_path()] {
        let entries = match std::fs::read_dir(d) {
            Ok(it) => it,
            Err(e) if e.kind() == io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => return Err(sys::ctx(e, format!("listing {}", d.display())).into()),
        };
        for e in entries {
            let e = e.map_err(|e| sys::ctx(e, format!("listing {}", d.display())))?;
            let path = e.path();
            let md = match std::fs::symlink_metadata(&path) {
                Ok(md) => md,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // went meanwhile
                Err(e) => return Err(sys::ctx(e, format!("stat {}", path.display())).into()),
            };
            if md.uid() != me {
                return Err(StoreError::NotYours {
                    path: path.display().to_string(),
                    owner: user(md.uid()),
                    you: user(me),
                    fix: format!(
                        "someone else put it in the store {}, and could change what a rewind \
                         writes; remove it (or the whole store) and mount again",
                        dir.display()
                    ),
                });
            }
            if !tighten {
                continue;
            }
            let ft = md.file_type();
            if ft.is_dir() {
                tighten_to(&path, md.mode(), DIR_MODE, &mut tightened)?;
            } else if ft.is_file() {
                // Anything directly in blobs/ is not a blob (those sit in the fan-out dirs).
                tighten_to(&path, md.mode(), FILE_MODE, &mut tightened)?;
            }
            // Symlinks have no mode of their own; the control socket is bound anew (0600).
        }
    }
    Ok(tightened)
}

/// Sets `path` to `want` if its mode has bits beyond it. Only for a path whose directory is
/// already private: nobody else can swap it for a symlink between the stat and the chmod.
fn tighten_to(path: &Path, mode: u32, want: u32, done: &mut Vec<PathBuf>) -> io::Result<()> {
    if mode & 0o7777 & !want != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(want))
            .map_err(|e| sys::ctx(e, format!("chmod {:o} {}", want, path.display())))?;
        done.push(path.to_owned());
    }
    Ok(())
}

/// `uid 1000 (alice)`, the name from /etc/passwd when it has one.
fn user(uid: u32) -> String {
    let name = std::fs::read_to_string("/etc/passwd").ok().and_then(|p| {
        p.lines().find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
        })
    });
    match name {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// Under the daemon's cleared umask, what the store creates is 0700 / 0600 all the same.
    #[test]
    fn what_the_store_creates_is_private_under_an_empty_umask() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("s/store");
        // The umask is the process's: an empty one only makes what other tests create
        // meanwhile more open, never less usable. Restored at once.
        let (created, f) = crate::sys::with_umask(0, || {
            let created = create_dir(&dir);
            let f = open_file(
                &dir.join("journal"),
                OpenOptions::new().append(true).create(true),
            );
            (created, f)
        });
        assert!(created.unwrap());
        drop(f.unwrap());
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("journal")), 0o600);
        assert!(!create_dir(&dir).unwrap(), "an existing one is left alone");
    }

    /// An existing store with loose modes is tightened (and says what), and a second pass
    /// finds nothing to do; without `tighten`, nothing changes.
    #[test]
    fn a_loose_store_is_tightened_and_reported() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("store");
        std::fs::create_dir_all(s.join("blobs/ab")).unwrap();
        std::fs::write(s.join("journal"), b"").unwrap();
        std::fs::write(s.join("blobs/ab/cdef"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", s.join("link")).unwrap();
        for p in ["", "blobs", "blobs/ab"] {
            std::fs::set_permissions(s.join(p), std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::fs::set_permissions(s.join("journal"), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        std::fs::set_permissions(
            s.join("blobs/ab/cdef"),
            std::fs::Permissions::from_mode(0o444),
        )
        .unwrap();
        assert!(secure(&s, false).unwrap().is_empty());
        assert_eq!(mode(&s), 0o777);
        let mut t = secure(&s, true).unwrap();
        t.sort();
        assert_eq!(
            t,
            vec![
                s.clone(),
                s.join("blobs"),
                s.join("blobs/ab"),
                s.join("journal")
            ]
        );
        assert_eq!(
            (
                mode(&s),
                mode(&s.join("blobs/ab")),
                mode(&s.join("journal"))
            ),
            (0o700, 0o700, 0o600)
        );
        assert_eq!(
            mode(Path::new("/etc/passwd")) & 0o077,
            0o044,
            "links are not followed"
        );
        assert!(secure(&s, true).unwrap().is_empty());
    }
}
