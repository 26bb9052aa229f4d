//! The four passes every plan of [`Apply::Replace`](crate::store::Apply) targets is applied in,
//! once, for both appliers: behind the mount (`apply.rs`, recovery) and through it (`live.rs`,
//! a live rewind's helper). Each applier says how one target's step is done ([`Steps`]); the
//! order is decided here and nowhere else.
//!
//! 1. deepest first: remove what must go (targets that are absent, and those changing to or
//!    from a directory, with everything beneath);
//! 2. shallowest first: make the missing directories (0700, so pass 3 can fill them);
//! 3. in that order: each file, symlink and special file;
//! 4. deepest first: directory owners, extended attributes and modes, once nothing more is
//!    written into them (a read-only directory is filled before it is closed).
//!
//! The sorts are stable and each starts from the previous order, so two targets at the same
//! depth keep the plan's order in every pass.

use std::cmp::Reverse;
use std::io;

use super::{Differs, Target};
use crate::store::Kind;

/// One target with what planning saw differ at it and the content planning handed over.
pub(super) type Step<'a> = (&'a Target, Differs, Option<&'a [u8]>);

/// How one applier does each pass's step for one target.
pub(super) trait Steps {
    /// Pass 1: removes what is at `s`'s path if its target is absent or changes to or from a
    /// directory.
    fn remove(&mut self, s: &Step<'_>) -> io::Result<()>;
    /// Pass 2: makes `s`'s directory if it is missing.
    fn make_dir(&mut self, s: &Step<'_>) -> io::Result<()>;
    /// Pass 3: writes `s`'s file, symlink or special file.
    fn write(&mut self, s: &Step<'_>) -> io::Result<()>;
    /// Pass 4: `s`'s directory's owner, extended attributes and mode.
    fn dir_attrs(&mut self, s: &Step<'_>) -> io::Result<()>;
}

/// Runs the four passes over `order` (see the module doc).
///
/// # Errors
/// The first step that fails; the targets before it are done.
pub(super) fn run(mut order: Vec<Step<'_>>, steps: &mut impl Steps) -> io::Result<()> {
    let is_dir = |s: &&Step<'_>| s.0.kind == Kind::Dir;
    order.sort_by_key(|s| Reverse(depth(&s.0.path)));
    for s in &order {
        steps.remove(s)?;
    }
    order.sort_by_key(|s| depth(&s.0.path));
    for s in order.iter().filter(is_dir) {
        steps.make_dir(s)?;
    }
    let entries = order
        .iter()
        .filter(|s| matches!(s.0.kind, Kind::File | Kind::Symlink | Kind::Other));
    for (i, s) in entries.enumerate() {
        if crate::faults::fail_rewind_after() == Some(i) {
            // As a disk that failed: an errno the reply must carry.
            return Err(crate::sys::coded(
                libc::EIO,
                "injected failure (REWINDFS_TEST_FAIL_REWIND_AFTER)".into(),
            ));
        }
        steps.write(s)?;
    }
    order.sort_by_key(|s| Reverse(depth(&s.0.path)));
    for s in order.iter().filter(is_dir) {
        steps.dir_attrs(s)?;
    }
    Ok(())
}

/// How deep a path lies: its number of separators (the root's entries are 0).
pub(super) fn depth(p: impl AsRef<[u8]>) -> usize {
    p.as_ref().iter().filter(|b| **b == b'/').count()
}
