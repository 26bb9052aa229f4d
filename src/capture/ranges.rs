//! Range pre-images: for a regular file larger than the threshold, a checkpoint saves only
//! the bytes its changes overwrite, instead of a copy of the whole file.
//!
//! The first change of such a file in a checkpoint records a *partial* capture (the file's
//! metadata and size, no content); that change and every later one in the checkpoint then save
//! the bytes they are about to overwrite that are not saved yet ([`Recorder::save_ranges`]).
//!
//! Invariants:
//! - **write-ahead**, as for whole captures: a change runs only once its overwritten bytes are
//!   recorded; if they cannot be, the change is refused;
//! - ranges are saved in whole pages ([`PAGE`]), as the kernel writes them back, and no byte is
//!   saved twice in a checkpoint: a [`Partial`]'s `covered` list is sorted, disjoint and not
//!   touching (tested against a bitmap below);
//! - bytes past the size at capture time are never saved (a rewind truncates back to it);
//! - a change that needs all the bytes saves the rest and drops the [`Partial`]: from then on
//!   the capture is as good as a whole one and later changes cost nothing;
//! - the capture lock is held by the caller throughout, so two changes cannot save one range.
//!
//! Methods of `Recorder` (the recorder; its state is in `mod.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{OFlags, Stat};

use super::{Need, Op, Recorder};
use crate::locks::Locked;
use crate::store::BlobRef;
use crate::store::Purpose;
use crate::store::{Actor, Kind, PreImage, Range, RangeContent};
use crate::sys;
use crate::wspath::Node;

/// Pages: ranges are saved in whole pages, as the kernel writes them back.
const PAGE: u64 = 4096;

/// Bytes read and stored at once when saving a range.
const RANGE_PIECE: u64 = 16 << 20;

/// Ranges up to this size are kept in the journal record and the database row (no blob file:
/// a small random write then costs a read and an append).
const RANGE_INLINE: u64 = 64 << 10;

/// The default size above which a file's first change in a checkpoint saves only the bytes it
/// overwrites (a range pre-image) instead of a copy of the whole file.
pub const DEFAULT_RANGE_CAPTURE_MIN: u64 = 1 << 20;

/// A partial capture in the current checkpoint, and which of its bytes are saved.
#[derive(Debug)]
pub(super) struct Partial {
    /// The capture's id.
    id: i64,
    /// The file's size when the capture was taken (bytes past it need no saving).
    size: u64,
    /// Saved byte ranges `[start, end)`, sorted and disjoint.
    covered: Vec<(u64, u64)>,
    /// The file, open for reading the bytes to save (kept for the checkpoint: a random writer
    /// saves a page per write).
    fd: Option<Arc<OwnedFd>>,
}

impl Partial {
    /// The parts of `[a, b)` not yet saved.
    fn gaps(&self, a: u64, b: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut cur = a;
        // Binary search to the first range ending past `a`: a random writer's file collects a
        // range per write, and a scan from the start made each write O(ranges).
        let first = self.covered.partition_point(|&(_, e)| e <= a);
        for &(s, e) in &self.covered[first..] {
            if s >= b {
                break;
            }
            if s > cur {
                out.push((cur, s.min(b)));
            }
            cur = cur.max(e);
            if cur >= b {
                break;
            }
        }
        if cur < b {
            out.push((cur, b));
        }
        out
    }

    /// Marks `[a, b)` saved: merged with the ranges it overlaps or touches, in place (it used
    /// to push and re-sort the whole list, a third of the daemon's time under random writes).
    fn cover(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        let i = self.covered.partition_point(|&(_, e)| e < a);
        let j = self.covered.partition_point(|&(s, _)| s <= b);
        if i == j {
            self.covered.insert(i, (a, b));
            return;
        }
        let merged = (a.min(self.covered[i].0), b.max(self.covered[j - 1].1));
        self.covered.splice(i..j, [merged]);
    }
}

/// What of a partial capture a change would overwrite unsaved (see `Recorder::unsaved`).
struct Unsaved {
    /// The capture's id.
    id: i64,
    /// The parts not saved yet, page-aligned and in order (possibly none).
    gaps: Vec<(u64, u64)>,
    /// The file, if an earlier save of this checkpoint opened it.
    fd: Option<Arc<OwnedFd>>,
}

impl Recorder {
    /// Sets the size above which files get range pre-images (`u64::MAX`: never).
    pub fn set_range_capture_min(&self, bytes: u64) {
        self.range_capture_min
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Takes a range pre-image of `p` if it is a regular file larger than the threshold: a
    /// capture with the file's metadata and size, then the bytes `need` overwrites. `None` when
    /// the file gets an ordinary capture. `file`: the file at `p`, open, if the caller has it.
    /// The caller holds the capture lock.
    // The capture's identity (path, checkpoint, actor, op), what it needs and how to read it
    // (stat, fd), as `capture_whole` takes them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn capture_partial(
        &self,
        p: &Node,
        seq: i64,
        actor: Actor,
        op: Op,
        need: Need,
        st: &Stat,
        file: Option<BorrowedFd<'_>>,
    ) -> io::Result<Option<i64>> {
        let rel = p.as_path();
        let min = self
            .range_capture_min
            .load(std::sync::atomic::Ordering::Relaxed);
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) <= min {
            return Ok(None);
        }
        let pre = PreImage {
            imported: false,
            kind: Kind::File,
            blob: None,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            target: None,
            partial: true,
            // Through the writer's fd when there is one: one call for a file with none, where
            // by path it took four (an `O_PATH` open, `flistxattr` refused, `listxattr`
            // through `/proc/self/fd`, the close).
            xattrs: match file {
                Some(fd) => super::snapshot::xattrs_of(fd, rel),
                None => super::snapshot::xattrs_at(self.root(), rel),
            },
        };
        let id = self
            .store
            .insert_capture(seq, p, Purpose::Checkpoint, &pre, actor, op)
            .map_err(|e| {
                tracing::error!(
                    "refusing {} of {}: its pre-image could not be recorded: {e}",
                    op.as_str(),
                    rel.display()
                );
                io::Error::from(e)
            })?;
        {
            let mut s = self.state.locked();
            s.seen.insert(p.clone(), actor.bit());
            s.partial.insert(
                p.clone(),
                Partial {
                    id,
                    size: pre.size,
                    covered: Vec::new(),
                    fd: None,
                },
            );
        }
        self.save_ranges(p, need, op)?;
        Ok(Some(id))
    }

    /// Saves the bytes of partially captured `p` that `need` overwrites and that are not saved
    /// yet, before the change is applied. The caller holds the capture lock.
    pub(super) fn save_ranges(&self, p: &Node, need: Need, op: Op) -> io::Result<()> {
        let rel = p.as_path();
        let Some(Unsaved { id, gaps, fd }) = self.unsaved(p, need) else {
            return Ok(());
        };
        let refuse = |e: io::Error| {
            tracing::error!(
                "refusing {} of {}: its overwritten bytes could not be saved: {e}",
                op.as_str(),
                rel.display()
            );
            e
        };
        if !gaps.is_empty() {
            let fd = match fd {
                Some(fd) => fd,
                None => {
                    let fd = Arc::new(
                        sys::open_beneath(self.root(), rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)
                            .map_err(refuse)?,
                    );
                    if let Some(part) = self.state.locked().partial.get_mut(p) {
                        part.fd = Some(fd.clone());
                    }
                    fd
                }
            };
            for (a, b) in gaps {
                self.save_gap(p, id, fd.as_fd(), a, b).map_err(refuse)?;
            }
        }
        if need == Need::All {
            // Every byte is saved: the capture is as good as a full one from here on.
            self.state.locked().partial.remove(p);
        }
        Ok(())
    }

    /// What of `p` a change needing `need` would overwrite unsaved. `None`: nothing to save
    /// (not partially captured, metadata only, or only bytes past the captured size).
    fn unsaved(&self, p: &Node, need: Need) -> Option<Unsaved> {
        let s = self.state.locked();
        let part = s.partial.get(p)?;
        let (a, b) = match need {
            Need::Meta => return None,
            Need::All => (0, part.size),
            Need::Bytes(off, len) => (
                off / PAGE * PAGE,
                off.saturating_add(len)
                    .div_ceil(PAGE)
                    .saturating_mul(PAGE)
                    .min(part.size),
            ),
        };
        if a >= b {
            return None;
        }
        Some(Unsaved {
            id: part.id,
            gaps: part.gaps(a, b),
            fd: part.fd.clone(),
        })
    }

    /// Saves bytes `[a, b)` of `fd` as ranges of capture `id`, in pieces of at most
    /// [`RANGE_PIECE`], marking each covered in `p`'s [`Partial`] once it is recorded.
    fn save_gap(&self, p: &Node, id: i64, fd: BorrowedFd<'_>, a: u64, b: u64) -> io::Result<()> {
        let mut off = a;
        while off < b {
            let len = (b - off).min(RANGE_PIECE);
            let mut buf = vec![0u8; len as usize];
            let n = sys::pread_full(fd, &mut buf, off)?;
            // Bytes past the end (the file shrank outside this checkpoint's view) are
            // zeros, as a read of a hole would give.
            buf[n..].fill(0);
            let content = if len <= RANGE_INLINE {
                RangeContent::Inline(buf)
            } else {
                let (hash, _) = self.store.blobs.put_bytes(&buf)?;
                RangeContent::Blob(BlobRef::hash(hash))
            };
            let range = Range {
                offset: off,
                length: len,
                content,
            };
            self.store.insert_range(id, &range)?;
            if let Some(part) = self.state.locked().partial.get_mut(p) {
                part.cover(off, off + len);
            }
            off += len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The saved-ranges set against a bitmap: `gaps` gives exactly the unsaved bytes of a
        /// range, in order, and `cover` keeps the list sorted, disjoint and not touching.
        #[test]
        fn saved_ranges_match_a_bitmap(ops in proptest::collection::vec((0u64..64, 0u64..64), 1..40)) {
            let mut p = Partial { id: 0, size: 64, covered: Vec::new(), fd: None };
            let mut saved = [false; 64];
            for (x, y) in ops {
                let (a, b) = (x.min(y), x.max(y));
                let want: Vec<(u64, u64)> = {
                    let mut v: Vec<(u64, u64)> = Vec::new();
                    for i in a..b {
                        if saved[i as usize] {
                            continue;
                        }
                        match v.last_mut() {
                            Some(last) if last.1 == i => last.1 = i + 1,
                            _ => v.push((i, i + 1)),
                        }
                    }
                    v
                };
                proptest::prop_assert_eq!(p.gaps(a, b), want);
                p.cover(a, b);
                for i in a..b {
                    saved[i as usize] = true;
                }
                for w in p.covered.windows(2) {
                    proptest::prop_assert!(w[0].1 < w[1].0, "{:?}", p.covered);
                }
                for &(s, e) in &p.covered {
                    proptest::prop_assert!(s < e && (s..e).all(|i| saved[i as usize]));
                }
                let total: u64 = p.covered.iter().map(|(s, e)| e - s).sum();
                proptest::prop_assert_eq!(total as usize, saved.iter().filter(|&&x| x).count());
            }
        }
    }
}
