//! Pre-images read ahead of a live rewind's helper.
//!
//! A live rewind writes each file over in place through the mount, and the FUSE core captures
//! what each write overwrites, like any change: a blob file made per file, on the helper's
//! single, serial path. [`Recorder::precapture`] reads those pre-images beforehand, on a thread
//! of its own beside the helper, so that the helper's writes find them read and only record
//! them (a 10,000-file rewind, first after mount: 1.8-2.0 s before, 1.2-1.3 s with it).
//!
//! Invariants:
//! - what it reads is the file's whole state at the start of the rewind's checkpoint; it is
//!   not recorded as a capture but kept in memory (`State::prepared`), and the first change of
//!   the path in the checkpoint — the helper's write, or anyone else's — records it as its own
//!   capture (`ensure_captured`), so the captures are those the changes would have taken
//!   themselves: the same state, the same actor and op, only the read done earlier (and a
//!   copy where an unlink or rename-over of the file's last name would have kept it by a
//!   link);
//! - the content is read without the capture lock (that is the point), and kept only if,
//!   under the lock, the path is still uncaptured in the rewind's checkpoint and no one else
//!   changed it since the rewind began: every change to a path first captures it (under the
//!   capture lock) or, if it began before the checkpoint, was noted by the rewind's watch
//!   before it was applied — so an uncaptured, unnoted path still holds what was read;
//! - only regular files with one name, small enough for a whole pre-image, are read; anything
//!   else, and anything that fails, is left to the helper's write to capture as usual;
//! - the blobs of what no change used (a path the rewind left alone, or a rewind that failed
//!   before it) are handed back once the helper is done ([`Recorder::unprepared`]), and
//!   removed if no row names them; so are those read for a path captured meanwhile;
//! - it runs while the rewind holds the rewinder's one-at-a-time guard (`rewind/one.rs`), which every removal of blob
//!   files no row names (gc, a plan's discard, an import's) also takes: a blob it finds
//!   stored already cannot be removed before its row is recorded.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::sync::atomic::{AtomicBool, Ordering};

use super::adopt::Adopt;
use super::snapshot::snapshot_or_adopt;
use super::{Recorder, Watch};
use crate::locks::Locked;
use crate::store::BlobRef;
use crate::sys;
use crate::wspath::Node;

impl Recorder {
    /// Takes the pre-images of the files at `paths` (workspace-relative, in the order the
    /// helper will write them) under the current checkpoint — the rewind's, begun by
    /// [`Recorder::begin_rewind`] — until all are taken or `stop` is set (the helper is done).
    /// Runs on a thread beside the helper (one is enough: a second measured no faster on two
    /// cores, where the helper's requests keep the other busy).
    pub(crate) fn precapture(
        &self,
        watch: &Watch<'_>,
        paths: &[&[u8]],
        stop: &AtomicBool,
    ) -> Ahead {
        let seq = self.state.locked().seq;
        let mut ahead = Ahead::default();
        for p in paths {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // The plan's targets were checked when it was made or read back: each is a path
            // inside the workspace (one that is not is left to the helper, which refuses it).
            let Ok(p) = Node::parse(*p) else { continue };
            match self.precapture_one(watch, seq, &p) {
                Taken::Yes => ahead.taken += 1,
                Taken::No(Some(b)) => ahead.unused.push(b),
                Taken::No(None) => {}
            }
        }
        ahead
    }

    /// Takes path `p`'s pre-image in checkpoint `seq` (see the module doc).
    fn precapture_one(&self, watch: &Watch<'_>, seq: i64, p: &Node) -> Taken {
        let taken = |s: &super::checkpoint::State| s.seq != seq || s.seen.contains_key(p);
        if taken(&self.state.locked()) || watch.changed(p.as_bytes(), false) {
            return Taken::No(None);
        }
        let rel = p.as_path();
        let Ok(st) = sys::lstat_beneath(self.root(), rel) else {
            return Taken::No(None);
        };
        let min = self.range_capture_min.load(Ordering::Relaxed);
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 1 || st.st_size as u64 > min
        {
            return Taken::No(None);
        }
        let read = snapshot_or_adopt(self.root(), rel, &self.store, Adopt::No, None, Some(Ok(st)));
        let pre = match read {
            Ok((pre, _)) => pre,
            Err(e) => {
                tracing::debug!(
                    "pre-image of {} left to the rewind's write: {e}",
                    rel.display()
                );
                return Taken::No(None);
            }
        };
        let _g = self.capture.locked();
        let mut s = self.state.locked();
        if taken(&s) || s.prepared.contains_key(p) || watch.changed(p.as_bytes(), false) {
            return Taken::No(pre.blob);
        }
        s.prepared.insert(p.clone(), pre);
        Taken::Yes
    }

    /// Takes the blobs of the pre-images read ahead that no change recorded (the helper is
    /// done: the rewind left those paths alone, or failed before them), for the caller to
    /// remove those no row names.
    pub(crate) fn unprepared(&self) -> Vec<BlobRef> {
        let _g = self.capture.locked();
        let mut s = self.state.locked();
        let left = std::mem::take(&mut s.prepared);
        let mut blobs = std::mem::take(&mut s.unprepared);
        blobs.extend(left.into_values().filter_map(|pre| pre.blob));
        blobs
    }
}

/// What [`Recorder::precapture`] did.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// Pre-images read ahead.
    pub(crate) taken: usize,
    /// Blobs it stored for paths captured or changed by someone else meanwhile: the caller
    /// removes those no row names once the rewind is done.
    pub(crate) unused: Vec<BlobRef>,
}

/// One path's outcome.
enum Taken {
    Yes,
    /// Left to the helper's write; the blob stored for it, if any.
    No(Option<BlobRef>),
}
