//! The blob store's steps of adoption (the lifecycle and its states: `store::Adoptions`):
//! linking a file about to lose its last name under `pending/` (`adopt`), settling or dropping
//! that link, hashing it into a blob once settled (`resolve`), removing the pending name once
//! the records naming it are in the database (`finish`), and making it a copy of its own when
//! its change failed (`unshare`).

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::Ordering;

use rustix::fs::{OFlags, Stat};

use super::{BLOB_MODE, Blobs, PENDING, SETTLE_WAIT, empty_hash, rel};
use crate::store::Adoptions;
use crate::sys;

/// How [`Blobs::adopt`] kept a file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub hash: String,
    pub size: u64,
    /// The blob is a hard link to the file itself: until the file's own name is gone (the
    /// unlink or rename-over it is about to undergo), the blob must not be trusted; if that
    /// change fails, [`Blobs::unshare`] makes the blob a copy.
    pub linked: bool,
    /// `st_mode`, `st_uid`, `st_gid` of the file.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Adopted {
    /// The pre-image this adoption keeps: a regular file, with the file's mode and owner.
    pub fn pre_image(&self) -> crate::store::PreImage {
        crate::store::PreImage {
            imported: false,
            kind: crate::store::Kind::File,
            blob: Some(crate::store::BlobRef::from_stored(self.hash.clone())),
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            target: None,
            partial: false,
            xattrs: None,
        }
    }
}

impl Blobs {
    /// Keeps the content of `rel` beneath `root` — a regular file with one name that is about to
    /// lose it (unlink, or replaced by a rename) — without copying or reading it: the file is
    /// hard-linked to a name under `pending/`, and that key is returned as its blob. The key stays in
    /// flight until [`settle`](Self::settle) (the change happened, or failed and
    /// [`unshare`](Self::unshare) made a copy). `Ok(None)` when that cannot be done (another
    /// filesystem, several names, replaced meanwhile, `--sync`): the caller copies instead.
    /// `known`: the file's stat if the caller has just taken it (the link is checked against it
    /// either way).
    ///
    /// # Errors
    /// I/O errors other than those that only mean "copy instead".
    pub fn adopt(
        &self,
        root: BorrowedFd<'_>,
        path: &Path,
        known: Option<&Stat>,
    ) -> io::Result<Option<Adopted>> {
        if self.sync || self.dirfd.is_none() {
            // A link is durable only once the directory is synced; --sync copies and fsyncs.
            return Ok(None);
        }
        let before = match known {
            Some(st) => *st,
            None => match sys::lstat_beneath(root, path) {
                Ok(st) => st,
                Err(_) => return Ok(None),
            },
        };
        if before.st_mode & libc::S_IFMT != libc::S_IFREG
            || before.st_nlink != 1
            || before.st_dev != self.dev
        {
            return Ok(None);
        }
        // The pre-image's metadata comes from a stat taken now, under the caller's locks: a
        // `known` stat may predate a chmod or chown (which leave the checks below unchanged).
        let adopted = |hash: String, linked: bool, st: &Stat| Adopted {
            hash,
            size: st.st_size as u64,
            linked,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
        };
        if before.st_size == 0 {
            let now = match known {
                Some(_) => match sys::lstat_beneath(root, path) {
                    Ok(st) if (st.st_ino, st.st_nlink, st.st_size) == (before.st_ino, 1, 0) => st,
                    _ => return Ok(None),
                },
                None => before,
            };
            return Ok(Some(adopted(empty_hash(), false, &now)));
        }
        let d = self.dirfd()?;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let key = format!("{PENDING}/{}-{n}", self.nonce);
        // In flight before the link exists: no resolver may take the file for settled.
        self.adoptions.begin(&key);
        if sys::linkat_between(root, path, d, Path::new(&key)).is_err() {
            self.settle(&key);
            return Ok(None);
        }
        // The name may have been replaced between the stat and the link: the pending file must
        // be the file that was looked at, with no other name than the one about to go.
        let linked = sys::lstat_at(d, Path::new(&key)).ok().filter(|st| {
            (
                st.st_ino,
                st.st_nlink,
                st.st_size,
                st.st_mtime,
                st.st_mtime_nsec,
            ) == (
                before.st_ino,
                2,
                before.st_size,
                before.st_mtime,
                before.st_mtime_nsec,
            )
        });
        let Some(linked) = linked else {
            self.discard(&key);
            return Ok(None);
        };
        Ok(Some(adopted(key, true, &linked)))
    }

    /// The extended attributes of the file adopted under `key` (see [`adopt`](Self::adopt)),
    /// read through its pending name: the inode the link was checked to be, whatever has
    /// become of the name it had in the workspace. One system call for a file with none.
    ///
    /// # Errors
    /// The pending name cannot be read.
    pub fn adopted_xattrs(&self, key: &str) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        sys::xattrs_at(self.dirfd()?, Path::new(key))
    }

    /// The change an adoption was for has happened, or failed and the pending file was made a
    /// copy: the resolver may take it.
    pub fn settle(&self, key: &str) {
        self.adoptions.settle(key);
    }

    /// The adoptions in flight (the recorder remembers each under its path until its change is
    /// done).
    pub fn adoptions(&self) -> &Adoptions {
        &self.adoptions
    }

    /// Drops an adoption that no record names (its capture could not be recorded).
    pub fn discard(&self, key: &str) {
        if let Ok(d) = self.dirfd() {
            let _ = sys::unlinkat(d, Path::new(key), false);
        }
        self.settle(key);
    }

    /// The hash of the content of an adopted file (see [`adopt`](Self::adopt)): waits until
    /// its change has settled, hashes the pending file and links it to its hash (unless a blob
    /// of that hash exists); [`finish`](Self::finish) removes the pending name. A pending file that still has another name — a
    /// crash came between the link and the change, or the change never settled — is copied,
    /// never kept by a link to a file that may still change.
    ///
    /// # Errors
    /// The pending file is missing or unreadable.
    pub fn resolve(&self, key: &str) -> io::Result<String> {
        if let Some(h) = self.adoptions.resolved(key) {
            return Ok(h);
        }
        let settled = self.adoptions.wait_settled(key, SETTLE_WAIT);
        let d = self.dirfd()?;
        let name = Path::new(key);
        let fd = sys::open_beneath(d, name, OFlags::RDONLY | OFlags::NOATIME, 0)
            .or_else(|_| sys::open_beneath(d, name, OFlags::RDONLY, 0))
            .map_err(|e| io::Error::new(e.kind(), format!("adopted blob {key}: {e}")))?;
        let st = sys::fstat(fd.as_fd())?;
        let hash = if !settled || st.st_nlink > 1 {
            // (After a crash this may also be a pending file already linked to its hash:
            // storing it again then writes nothing.)
            tracing::debug!("adopted blob {key} still has another name: copying it");
            self.put_fd(fd.as_fd(), Some(st.st_size as u64))?.0
        } else {
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; (st.st_size as usize).clamp(4096, 256 * 1024)];
            let mut off = 0u64;
            loop {
                let n = sys::pread(fd.as_fd(), &mut buf, off)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                off += n as u64;
            }
            let hash = hasher.finalize().to_hex().to_string();
            // Linked, not renamed: the pending name goes only once the records naming it are
            // in the database and out of the journal (see `finish`), so a crash before that
            // finds it again.
            if off > 0 {
                match sys::linkat_between(d, name, d, &rel(&hash)) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {} // equal content
                    Err(e) => return Err(e),
                }
            }
            hash
        };
        self.adoptions.set_resolved(key, &hash);
        Ok(hash)
    }

    /// The records naming these pending keys are in the database and out of the journal: the
    /// pending files go (their content has its hash name).
    pub fn finish<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let done = self.adoptions.finish(keys);
        if let Ok(d) = self.dirfd() {
            for k in done {
                let _ = sys::unlinkat(d, Path::new(&k), false);
            }
        }
    }

    /// Removes pending files no journal record names (after a crash's journal was applied at
    /// open: every file it named was resolved).
    pub fn clear_pending(&self) -> io::Result<()> {
        for e in fs::read_dir(self.dir.join(PENDING))? {
            let _ = fs::remove_file(e?.path());
        }
        Ok(())
    }

    /// Makes an adopted blob a copy of its own again (the change that was to remove the file's
    /// name failed, so the file lives on and may still change).
    ///
    /// # Errors
    /// I/O errors copying.
    pub fn unshare(&self, hash: &str) -> io::Result<()> {
        let d = self.dirfd()?;
        let src = sys::open_beneath(d, &rel(hash), OFlags::RDONLY, 0)?;
        let tmp = self.tmp_name();
        let fd = sys::openat(
            d,
            &tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY,
            BLOB_MODE,
        )?;
        let len = sys::fstat(src.as_fd())?.st_size as u64;
        if let Err(e) = sys::copy_all(src.as_fd(), fd.as_fd(), len) {
            let _ = sys::unlinkat(d, &tmp, false);
            return Err(e);
        }
        drop(fd);
        self.publish(&tmp, hash)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::super::is_pending;
    use super::*;

    fn ino(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(p).unwrap().ino()
    }

    /// A workspace with one file, and a blob store on the same filesystem.
    fn setup(content: &[u8]) -> (tempfile::TempDir, OwnedFd, Blobs) {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("ws")).unwrap();
        fs::write(d.path().join("ws/f"), content).unwrap();
        let root = sys::open_dir_path(&d.path().join("ws")).unwrap();
        let b = Blobs::open(&d.path().join("blobs"), false).unwrap();
        (d, root, b)
    }

    /// The adoption path of `rm`: linked under a pending key (nothing read), then, once the
    /// unlink settled, hashed and renamed to its hash — the very file, not a copy.
    #[test]
    fn an_adopted_file_becomes_its_hash_once_its_change_settles() {
        let (d, root, b) = setup(b"kept by a link");
        let orig = ino(&d.path().join("ws/f"));
        let a = b
            .adopt(root.as_fd(), Path::new("f"), None)
            .unwrap()
            .unwrap();
        assert!(is_pending(&a.hash) && a.linked && a.size == 14, "{a:?}");
        // The resolver waits for the change: it runs here while the unlink is still to come.
        let key = a.hash.clone();
        let h = std::thread::scope(|s| {
            let r = s.spawn(|| b.resolve(&key).unwrap());
            std::thread::sleep(Duration::from_millis(100));
            fs::remove_file(d.path().join("ws/f")).unwrap();
            b.settle(&key);
            r.join().unwrap()
        });
        assert_eq!(h, blake3::hash(b"kept by a link").to_hex().to_string());
        assert_eq!(b.read_verified(&h).unwrap(), b"kept by a link");
        // Linked, not copied: had the resolver not waited, the file would still have had its
        // workspace name, and it would have been copied.
        assert_eq!(ino(&b.path(&h)), orig);
        // Resolving again (a batch applied twice) gives the same hash until finished.
        assert_eq!(b.resolve(&key).unwrap(), h);
        b.finish([key.as_str()]);
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
        assert!(b.resolve(&key).is_err());
        assert_eq!(b.read_verified(&h).unwrap(), b"kept by a link");
    }

    /// The unlink failed: the pending file is made a copy, and later writes to the live file
    /// do not reach the pre-image.
    #[test]
    fn a_failed_change_leaves_the_pre_image_its_own_copy() {
        let (d, root, b) = setup(b"before");
        let a = b
            .adopt(root.as_fd(), Path::new("f"), None)
            .unwrap()
            .unwrap();
        b.unshare(&a.hash).unwrap();
        b.settle(&a.hash);
        fs::write(d.path().join("ws/f"), b"after, and longer").unwrap();
        let h = b.resolve(&a.hash).unwrap();
        assert_eq!(b.read_verified(&h).unwrap(), b"before");
        assert_ne!(ino(&b.path(&h)), ino(&d.path().join("ws/f")));
        assert!(b.verify(&h).unwrap());
    }

    /// A crash between the link and the unlink: after a restart nothing is in flight, and the
    /// pending file still has its workspace name — it is copied, never kept by a link.
    #[test]
    fn a_pending_file_that_still_has_its_name_is_copied() {
        let (d, root, b) = setup(b"still here");
        let a = b
            .adopt(root.as_fd(), Path::new("f"), None)
            .unwrap()
            .unwrap();
        drop(b);
        let b = Blobs::open(&d.path().join("blobs"), false).unwrap();
        let h = b.resolve(&a.hash).unwrap();
        assert_eq!(b.read_verified(&h).unwrap(), b"still here");
        assert_ne!(ino(&b.path(&h)), ino(&d.path().join("ws/f")));
        b.clear_pending().unwrap();
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
    }

    /// Files that cannot be kept by a link are left to the caller to copy.
    #[test]
    fn only_regular_files_with_one_name_are_adopted() {
        let (d, root, b) = setup(b"x");
        fs::hard_link(d.path().join("ws/f"), d.path().join("ws/g")).unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("f"), None)
                .unwrap()
                .is_none()
        );
        fs::create_dir(d.path().join("ws/dir")).unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("dir"), None)
                .unwrap()
                .is_none()
        );
        fs::write(d.path().join("ws/empty"), b"").unwrap();
        let e = b
            .adopt(root.as_fd(), Path::new("empty"), None)
            .unwrap()
            .unwrap();
        assert_eq!((e.hash, e.linked), (empty_hash(), false));
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
    }

    /// The caller's stat is taken before the link: if the name has meanwhile been given another
    /// file, or the file was written, the link is not that file and nothing is adopted (the
    /// caller copies what is there).
    #[test]
    fn a_stat_that_no_longer_fits_adopts_nothing() {
        let (d, root, b) = setup(b"first");
        let old = sys::lstat_at(root.as_fd(), Path::new("f")).unwrap();
        // Another file under the name.
        fs::write(d.path().join("ws/g"), b"second").unwrap();
        fs::rename(d.path().join("ws/g"), d.path().join("ws/f")).unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("f"), Some(&old))
                .unwrap()
                .is_none()
        );
        // The same file, written since.
        let old = sys::lstat_at(root.as_fd(), Path::new("f")).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(d.path().join("ws/f"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b" and more"))
            .unwrap();
        assert!(
            b.adopt(root.as_fd(), Path::new("f"), Some(&old))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            fs::read_dir(d.path().join("blobs/pending"))
                .unwrap()
                .count(),
            0
        );
        // A stat that fits adopts, under a key of its own; a chmod since that stat (which the
        // checks cannot see) is in the pre-image's metadata.
        let now = sys::lstat_at(root.as_fd(), Path::new("f")).unwrap();
        fs::set_permissions(d.path().join("ws/f"), fs::Permissions::from_mode(0o600)).unwrap();
        let a = b
            .adopt(root.as_fd(), Path::new("f"), Some(&now))
            .unwrap()
            .unwrap();
        assert!(is_pending(&a.hash) && a.linked && a.size == 15, "{a:?}");
        assert_eq!(a.mode & 0o7777, 0o600, "{a:?}");
        assert_eq!(ino(&b.path(&a.hash)), ino(&d.path().join("ws/f")));
        // The same for an empty file, which is not linked.
        fs::write(d.path().join("ws/e"), b"").unwrap();
        let then = sys::lstat_at(root.as_fd(), Path::new("e")).unwrap();
        fs::set_permissions(d.path().join("ws/e"), fs::Permissions::from_mode(0o640)).unwrap();
        let e = b
            .adopt(root.as_fd(), Path::new("e"), Some(&then))
            .unwrap()
            .unwrap();
        assert_eq!((e.linked, e.mode & 0o7777), (false, 0o640), "{e:?}");
    }
}
