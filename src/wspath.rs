//! Workspace paths: a path inside the workspace, relative to its root, that can only be built
//! valid.
//!
//! Every path the store keeps (a capture's, a rename's two sides, a tracked file's, the change
//! log's) is one of these: workspace-relative, `/`-separated bytes, no leading `/`. Paths that
//! come from elsewhere — a bundle, a pulled history, a plan read back from the journal — are
//! parsed with [`WsPath::parse`] before anything uses them, so nothing downstream can be handed
//! the workspace root itself, `.`, `..` or an absolute path (issue 29: a bundle capture whose
//! path was `.` made a rewind delete the whole workspace).
//!
//! Invariants of a [`WsPath`]:
//! - not empty (the workspace root is never a path a rewind or an import names);
//! - no leading or trailing `/`, no empty component (`a//b`), no `.` or `..` component;
//! - no NUL byte; each component at most 255 bytes, the whole at most 4095.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The longest name a component may have (`NAME_MAX`).
const NAME_MAX: usize = 255;
/// The longest path (`PATH_MAX` less its NUL).
const PATH_MAX: usize = 4095;

/// Why bytes are not a workspace path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the empty path (the workspace itself)")]
    Empty,
    #[error("an absolute path")]
    Absolute,
    #[error("a `{0}` component")]
    Dots(&'static str),
    #[error("an empty component (`//` or a trailing `/`)")]
    EmptyComponent,
    #[error("a NUL byte")]
    Nul,
    #[error("a component longer than 255 bytes")]
    NameTooLong,
    #[error("longer than 4095 bytes")]
    TooLong,
}

/// A valid workspace-relative path (see the module doc).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WsPath(Vec<u8>);

impl WsPath {
    /// Checks `bytes` and takes them as a workspace path.
    ///
    /// # Errors
    /// [`PathError`], saying what is wrong.
    pub fn parse(bytes: impl Into<Vec<u8>>) -> Result<WsPath, PathError> {
        let b = bytes.into();
        check(&b)?;
        Ok(WsPath(b))
    }

    /// Whether `bytes` are a valid workspace path.
    pub fn is_valid(bytes: &[u8]) -> bool {
        check(bytes).is_ok()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path, for the `*at` calls beneath the workspace's fd.
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }

    /// The bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl fmt::Debug for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Display for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

fn check(b: &[u8]) -> Result<(), PathError> {
    if b.is_empty() {
        return Err(PathError::Empty);
    }
    if b[0] == b'/' {
        return Err(PathError::Absolute);
    }
    if b.contains(&0) {
        return Err(PathError::Nul);
    }
    if b.len() > PATH_MAX {
        return Err(PathError::TooLong);
    }
    for c in b.split(|x| *x == b'/') {
        match c {
            b"" => return Err(PathError::EmptyComponent),
            b"." => return Err(PathError::Dots(".")),
            b".." => return Err(PathError::Dots("..")),
            c if c.len() > NAME_MAX => return Err(PathError::NameTooLong),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_workspace_paths() {
        for ok in [
            "a",
            "a/b",
            "src/main.rs",
            ".git/config",
            "..a",
            "a..",
            "...",
            "a/.b",
        ] {
            assert!(WsPath::parse(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(256);
        let cases: [(&[u8], PathError); 12] = [
            (b"", PathError::Empty),
            (b".", PathError::Dots(".")),
            (b"..", PathError::Dots("..")),
            (b"src/..", PathError::Dots("..")),
            (b"../etc/passwd", PathError::Dots("..")),
            (b"a/./b", PathError::Dots(".")),
            (b"/etc/passwd", PathError::Absolute),
            (b"a//b", PathError::EmptyComponent),
            (b"a/", PathError::EmptyComponent),
            (b"a\0b", PathError::Nul),
            (long.as_bytes(), PathError::NameTooLong),
            (&[b'a'; 5000], PathError::TooLong),
        ];
        for (bad, why) in cases {
            assert_eq!(
                WsPath::parse(bad),
                Err(why),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
