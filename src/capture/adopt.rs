//! The recorder's side of *adoption*: when a change takes away the only name of a regular
//! file (an unlink or a rename over it that the FUSE core marks `last_name`: nobody has the
//! file open for writing; or a rewind replacing it), its pre-image is the file itself,
//! hard-linked into the store under a pending key
//! ([`Blobs::adopt`](crate::store::blobs::Blobs::adopt)) instead of being read and copied.
//!
//! The steps taken here, in order, for one path:
//! 1. **adopt** — in `before`, the capture links the file ([`Recorder::capture_whole`]) and,
//!    once its row is recorded, remembers the pending key in `adopted` under the path
//!    ([`Recorder::remember_adopted`]); a row that cannot be recorded discards the link;
//! 2. then exactly one of
//!    - **settle** — the change happened ([`Observer::after`](super::Observer::after),
//!      [`Recorder::replaced`]): the link is now the file's only other name;
//!    - **unshare** — the change failed ([`Observer::failed`](super::Observer::failed),
//!      [`Recorder::not_replaced`]): the file lives on and may change, so the pre-image is
//!      made a copy of its own, then settled.
//!
//! What follows (hashing the pending file into a blob: `resolve`, `finish`) is the blob
//! store's, when the capture journal is applied; it waits for the settle. The whole lifecycle
//! and its states are owned by one type, `store::Adoptions` (`store/adoption.rs`); this file is
//! the recorder's calls into it.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::io;

use rustix::fs::Stat;

use super::{Need, Op, Recorder};
use crate::store::Actor;
use crate::sys;
use crate::wspath::{Node, WsPath};

/// Whether a capture may keep the file by a link (see
/// [`Blobs::adopt`](crate::store::blobs::Blobs::adopt)): `Yes` with the file's stat when the
/// caller has just taken it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Adopt<'a> {
    No,
    Yes(Option<&'a Stat>),
}

impl Recorder {
    /// Captures `p`, which a rewind is about to replace by renaming a file over it: a regular
    /// file with one name is adopted rather than copied. Call [`Recorder::replaced`] once the
    /// rename is done, or [`Recorder::not_replaced`] if it failed.
    pub fn capture_for_replace(&self, p: &WsPath) -> io::Result<()> {
        let st = sys::lstat_beneath(self.root(), p.as_path()).ok();
        let adopt = match &st {
            Some(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink == 1 => {
                Adopt::Yes(Some(st))
            }
            _ => Adopt::No,
        };
        self.ensure_captured(
            &Node::from(p.clone()),
            Actor::Rewind,
            Op::Rename,
            adopt,
            Need::All,
            None,
        )
        .map(|_| ())
    }

    /// The file [`Recorder::capture_for_replace`] captured has lost its name.
    pub fn replaced(&self, p: &WsPath) {
        self.settle_adopted(p.as_bytes());
    }

    /// Renaming over the file [`Recorder::capture_for_replace`] captured failed: the file lives
    /// on, so an adopted pre-image gets its own copy.
    pub fn not_replaced(&self, p: &WsPath) {
        self.unshare_adopted(p.as_bytes());
    }

    /// Step 1: the capture of `p` adopted its file under the pending `key`, and its row is
    /// recorded.
    pub(super) fn remember_adopted(&self, p: &[u8], key: String) {
        if let Some(old) = self.store.blobs.adoptions().remember(p, key) {
            self.store.blobs.settle(&old);
        }
    }

    /// Step 2, the change happened: the file's name is gone, and the adopted blob is the
    /// file's only other name now.
    pub(super) fn settle_adopted(&self, p: &[u8]) {
        let key = self.store.blobs.adoptions().take(p);
        if let Some(key) = key {
            self.store.blobs.settle(&key);
        }
    }

    /// Step 2, the change failed: the file lives on under its name and may change, so its
    /// pre-image needs its own copy.
    pub(super) fn unshare_adopted(&self, p: &[u8]) {
        let Some(hash) = self.store.blobs.adoptions().take(p) else {
            return;
        };
        if let Err(e) = self.store.blobs.unshare(&hash) {
            tracing::error!(
                "the pre-image of {} shares its storage with the file and could not be copied: {e}",
                String::from_utf8_lossy(p)
            );
        }
        // Settled either way: a resolver finding the file still linked copies it itself.
        self.store.blobs.settle(&hash);
    }
}
