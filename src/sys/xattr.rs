//! Extended attributes, read and set through an fd (an `O_PATH` one through /proc/self/fd).

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::*;

/// The `/proc/self/fd/N` name of an fd: how xattr calls reach an `O_PATH` handle.
pub(super) fn proc_fd(fd: BorrowedFd<'_>) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

pub fn getxattr(fd: BorrowedFd<'_>, name: &OsStr, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_fd(fd);
    if size == 0 {
        let n = rustix::fs::getxattr_query(&p, name).map_err(errno)?;
        return Ok(vec![0; n]);
    }
    let mut buf = vec![0u8; size];
    let n = rustix::fs::getxattr(&p, name, &mut buf[..]).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

pub fn listxattr(fd: BorrowedFd<'_>, size: usize) -> io::Result<Vec<u8>> {
    let p = proc_fd(fd);
    if size == 0 {
        let n = rustix::fs::listxattr_query(&p).map_err(errno)?;
        return Ok(vec![0; n]);
    }
    let mut buf = vec![0u8; size];
    let n = rustix::fs::listxattr(&p, &mut buf[..]).map_err(errno)?;
    buf.truncate(n);
    Ok(buf)
}

pub fn setxattr(fd: BorrowedFd<'_>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let p = proc_fd(fd);
    let flags = rustix::fs::XattrFlags::from_bits_retain(flags as _);
    rustix::fs::setxattr(&p, name, value, flags).map_err(errno)
}

pub fn removexattr(fd: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    rustix::fs::removexattr(proc_fd(fd), name).map_err(errno)
}

/// `listxattrat(2)`'s number (Linux 6.13; one number on every architecture, as for every
/// system call added since 5.1). The libc crate does not name it for x86-64 yet.
const SYS_LISTXATTRAT: libc::c_long = 465;

/// Set once `listxattrat` failed with anything but "no extended attributes here" (an older
/// kernel, a sandbox refusing it): from then on [`xattrs_at`] reads through an fd at once.
static NO_LISTXATTRAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Every extended attribute of `rel` beneath `dir` (a symlink is not followed), as
/// [`xattrs_of`] gives them. A file with none, the common case, costs one `listxattrat`
/// (Linux 6.13) instead of an open, a listing through `/proc/self/fd` and a close. A file with
/// some is read through an `O_PATH` fd, and so is every file once `listxattrat` failed
/// otherwise: a refusal never loses the attributes. `rel` is resolved beneath `dir` only by
/// that fallback: callers pass a name they made (the store's own files).
///
/// # Errors
/// As [`xattrs_of`], and the open of `rel`.
#[allow(unsafe_code)]
pub fn xattrs_at(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::Ordering;
    if !NO_LISTXATTRAT.load(Ordering::Relaxed) {
        let name = std::ffi::CString::new(rel.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a valid dirfd and a NUL-terminated name; with a size of 0 the kernel only
        // returns the length of the list and writes nothing.
        let n = unsafe {
            libc::syscall(
                SYS_LISTXATTRAT,
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
                std::ptr::null_mut::<libc::c_char>(),
                0usize,
            )
        };
        if n == 0 {
            return Ok(Vec::new());
        }
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EOPNOTSUPP) => return Ok(Vec::new()),
                // The fallback's open says what is wrong with the name.
                Some(libc::ENOENT | libc::ENOTDIR) => {}
                _ => NO_LISTXATTRAT.store(true, Ordering::Relaxed),
            }
        }
    }
    let fd = open_beneath(
        dir,
        rel,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW,
        0,
    )?;
    xattrs_of(fd.as_fd())
}

/// Every extended attribute of the file open at `fd`, as (name, value) pairs in the order the
/// filesystem lists them. `fd` may be an `O_PATH` fd (then read through `/proc/self/fd`, as the
/// `f*xattr` calls refuse it with `EBADF`). A filesystem without extended attributes has none;
/// an attribute removed between the listing and its read is left out.
///
/// # Errors
/// The listing or a read failed otherwise; the error names the call.
pub fn xattrs_of(fd: BorrowedFd<'_>) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use rustix::io::Errno;
    // A buffer that grows until what it receives fits (`ERANGE`: it changed meanwhile).
    fn sized(
        mut call: impl FnMut(&mut [u8]) -> rustix::io::Result<usize>,
    ) -> rustix::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        loop {
            match call(&mut buf) {
                Ok(n) => {
                    buf.truncate(n);
                    return Ok(buf);
                }
                Err(Errno::RANGE) if buf.len() < 1 << 21 => buf = vec![0u8; buf.len() * 4],
                Err(e) => return Err(e),
            }
        }
    }
    let proc = proc_fd(fd);
    let mut by_path = false;
    let names = match sized(|b| rustix::fs::flistxattr(fd, b)) {
        Err(Errno::BADF) => {
            by_path = true;
            sized(|b| rustix::fs::listxattr(&proc, b))
        }
        r => r,
    };
    let names = match names {
        Ok(n) => n,
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(ctx(errno(e), format!("listxattr({})", proc.display()))),
    };
    let mut out = Vec::new();
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let n = OsStr::from_bytes(name);
        let value = if by_path {
            sized(|b| rustix::fs::getxattr(&proc, n, b))
        } else {
            sized(|b| rustix::fs::fgetxattr(fd, n, b))
        };
        match value {
            Ok(v) => out.push((name.to_vec(), v)),
            Err(Errno::NODATA) => {}
            Err(e) => {
                return Err(ctx(
                    errno(e),
                    format!("getxattr({}, {n:?})", proc.display()),
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    /// `xattrs_at` gives what `xattrs_of` gives through an fd: nothing for a file with none
    /// (one `listxattrat`), every pair for one with some (read through the fallback), and
    /// the link's own for a symlink (not followed).
    #[test]
    fn attributes_by_name_are_those_read_through_an_fd() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("plain"), "p").unwrap();
        std::fs::write(t.path().join("marked"), "m").unwrap();
        std::os::unix::fs::symlink("marked", t.path().join("link")).unwrap();
        // (ext4 and tmpfs, where tests run, take `user.*` attributes.)
        rustix::fs::setxattr(
            t.path().join("marked"),
            "user.k",
            b"v",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let dir = std::fs::File::open(t.path()).unwrap();
        let d = dir.as_fd();
        let by_fd = |name: &str| {
            let fd = open_beneath(
                d,
                Path::new(name),
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW,
                0,
            )
            .unwrap();
            xattrs_of(fd.as_fd()).unwrap()
        };
        assert_eq!(xattrs_at(d, Path::new("plain")).unwrap(), Vec::new());
        assert_eq!(
            xattrs_at(d, Path::new("marked")).unwrap(),
            vec![(b"user.k".to_vec(), b"v".to_vec())]
        );
        for name in ["plain", "marked", "link"] {
            assert_eq!(
                xattrs_at(d, Path::new(name)).unwrap(),
                by_fd(name),
                "{name}"
            );
        }
        assert!(xattrs_at(d, Path::new("missing")).is_err());
    }
}
