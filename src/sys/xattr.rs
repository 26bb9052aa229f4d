//! Extended attributes, read and set through an fd (an `O_PATH` one through /proc/self/fd).

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

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
