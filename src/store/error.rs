//! The store's errors, and the one place they become an errno.
//!
//! Invariants (conventions, habit 2): an I/O error keeps its own errno; SQLite's "disk full"
//! is `ENOSPC` and "busy"/"locked" `EAGAIN`, so a refused change tells the caller something it
//! can act on; only what has no better answer is `EIO`.
//!
//! Known gap, kept as it was: the conversion into `std::io::Error` carries the errno's
//! `ErrorKind` and the message, not the number; `fs::errno_of` gets `ENOSPC` and `EAGAIN`
//! back from the kind, but any other (`EROFS` from the journal) reaches a FUSE caller as
//! `EIO` (issue 19 §6).

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
    /// The store, or something in it, belongs to another user (design.md §3).
    #[error("{path} is owned by {owner}, not by you ({you}): {fix}")]
    NotYours {
        path: String,
        owner: String,
        you: String,
        /// Why it matters and what to do.
        fix: String,
    },
    /// SQLite failed.
    #[error("store database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// Blob or directory I/O failed.
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// The errno a refused change gets: a full store is `ENOSPC`, a busy one `EAGAIN`.
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
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
        let code = e.errno();
        std::io::Error::new(
            std::io::Error::from_raw_os_error(code).kind(),
            e.to_string(),
        )
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;
