//! The store's errors, and the one place they become an errno.
//!
//! Invariants (conventions, habit 2): an I/O error keeps its own errno; SQLite's "disk full"
//! is `ENOSPC` and "busy"/"locked" `EAGAIN`, so a refused change tells the caller something it
//! can act on; only what has no better answer is `EIO`.
//!
//! The conversion into `std::io::Error` keeps the number as well as the message
//! ([`crate::sys::coded`]): `EROFS` from the journal reaches a FUSE caller as `EROFS`.

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database was written by a newer rewindfs.
    #[error(
        "store {path} has schema version {found}, newer than this rewindfs supports ({supported}); upgrade rewindfs"
    )]
    TooNew {
        path: String,
        found: i64,
        supported: i64,
    },
    /// The store, or something in it, belongs to another user (docs/design.md §3).
    #[error("{path} is owned by {owner}, not by you ({you}): {fix}")]
    NotYours {
        path: String,
        owner: String,
        you: String,
        /// Why it matters and what to do.
        fix: String,
    },
    /// SQLite failed. (Its cause is in the message, not also a `source`: the CLI prints a
    /// chain of causes, which would say it twice.)
    #[error("store database: {0}")]
    Sql(rusqlite::Error),
    /// A request that contradicts what the store holds (the message says what and why).
    #[error("{0}")]
    Conflict(String),
    /// Blob or directory I/O failed (the cause in the message only, as for `Sql`).
    #[error("store: {0}")]
    Io(std::io::Error),
    /// A row names something that is not a place inside the workspace.
    #[error("{0}")]
    BadPath(BadStoredPath),
}

/// A path column whose bytes are not a workspace path (`.`, `..`, absolute, NUL): rewindfs
/// never writes one, so the store was altered behind it. Read back by the path columns'
/// `FromSql` (`sql.rs`), never handed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the store names {:?} as a path, which is not a path inside the workspace ({why}); rewindfs never records such a path itself: the store was altered (`rewindfs fsck` checks it)",
    crate::wire_path::encode(bytes)
)]
pub struct BadStoredPath {
    pub bytes: Vec<u8>,
    pub why: crate::wspath::PathError,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        if let rusqlite::Error::FromSqlConversionFailure(_, _, cause) = &e {
            if let Some(bad) = cause.downcast_ref::<BadStoredPath>() {
                return StoreError::BadPath(bad.clone());
            }
        }
        StoreError::Sql(e)
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(e)
    }
}

impl StoreError {
    /// The errno a refused change gets: a full store is `ENOSPC`, a busy one `EAGAIN`.
    pub fn errno(&self) -> i32 {
        match self {
            // Its own errno, or the one a `sys::ctx`/`sys::coded` error carries.
            StoreError::Io(e) => crate::sys::errno_of(e),
            StoreError::Sql(rusqlite::Error::SqliteFailure(e, _)) => match e.code {
                rusqlite::ErrorCode::DiskFull => libc::ENOSPC,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => {
                    libc::EAGAIN
                }
                _ => libc::EIO,
            },
            _ => libc::EIO,
        }
    }
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> std::io::Error {
        crate::sys::coded(e.errno(), e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The errno survives the trip into `io::Error` and out to the FUSE reply.
    #[test]
    fn a_store_errors_errno_reaches_the_caller() {
        for code in [libc::EROFS, libc::ENOSPC, libc::EDQUOT, libc::EACCES] {
            let e: std::io::Error = StoreError::Io(std::io::Error::from_raw_os_error(code)).into();
            assert_eq!(crate::sys::errno_of(&e), code, "{e}");
            assert!(e.to_string().starts_with("store: "), "{e}");
        }
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        let e: std::io::Error = StoreError::Sql(busy).into();
        assert_eq!(crate::sys::errno_of(&e), libc::EAGAIN);
    }
}
