//! Completing a range pre-image: the chain reader.
//!
//! A range capture (schema 003) saves only the bytes a write overwrote. The file's full
//! content at that capture is its *next recorded state* — a complete pre-image, the file as
//! it is now, or another range pre-image completed the same way — cut or zero-extended to the
//! size it had, with the saved bytes laid over it. [`Rewinder::materialize`] follows that chain
//! with [`History::lineage_from`] and streams a [`Patched`] reader over it into a blob, so a
//! plan's targets never depend on the tree the rewind rewrites.
//!
//! Invariants:
//! - A layer's ranges are sorted by offset and do not overlap (capture saves only the gaps
//!   not yet saved; the store returns them by offset), so a binary search finds the one that
//!   answers a position.
//! - Reads only go forward, so each range is loaded once and dropped once read past: memory
//!   is at most one range per layer (a range can be 16 MiB, and a chain can have a layer
//!   per checkpoint), and the chain costs one pass over the file.
//! - A saved range whose bytes are not `length` long is an error, never a silently short file.

use std::io;
use std::os::fd::AsFd;

use rustix::fs::OFlags;

use super::history::{History, Lineage};
use super::one::One;
use super::{Ground, RewindError, Rewinder};
use crate::store::BlobRef;
use crate::store::{Capture, Kind, PreImage, Store};
use crate::sys;

impl Rewinder {
    /// The full pre-image of a range capture `c` of the file known as `at` when it was taken:
    /// the file's next recorded state (what the path's events after `c` say it was, or the
    /// file as it is now), cut or zero-extended to the size it had, with the saved old bytes
    /// laid over it. Stored as a blob. A next state that is itself a range pre-image is
    /// completed the same way: the chain is read in one pass (see [`Patched`]).
    pub(super) fn materialize(
        &self,
        one: &mut One<'_>,
        hist: &History,
        c: &Capture,
        at: &[u8],
    ) -> Result<PreImage, RewindError> {
        // A saved range or base that is missing or corrupt stops the plan, naming where.
        let unusable_here = |e: io::Error| {
            let cp = self.g.store.checkpoint_by_seq(c.checkpoint).ok().flatten();
            let cp = cp.map_or_else(|| format!("#{}", c.checkpoint), |k| k.uuid);
            super::unusable(c.path.as_bytes(), &cp, e)
        };
        let mut reader = self.g.chain(hist, c, at, &unusable_here)?;
        // A look keeps what it puts together in memory; a rewind stores it (its plan is
        // journalled, and applied from the store).
        if one.looking() {
            let mut content = Vec::new();
            io::Read::read_to_end(&mut reader, &mut content).map_err(unusable_here)?;
            let size = content.len() as u64;
            return Ok(PreImage {
                blob: one.keep_looked(content),
                size,
                partial: false,
                ..c.pre.clone()
            });
        }
        let (hash, size) = self
            .g
            .store
            .blobs
            .put_reader(reader)
            .map_err(unusable_here)?;
        one.scratch([BlobRef::hash(hash.clone())]);
        Ok(PreImage {
            blob: Some(BlobRef::hash(hash)),
            size,
            partial: false,
            ..c.pre.clone()
        })
    }
}

impl Ground {
    /// A reader of the full pre-image of range capture `c` of the file known as `at` (see
    /// [`Rewinder::materialize`]), streamed from the chain: nothing is copied to answer it. Used
    /// by a rewind's plan (into a blob) and by `show` and `fork` (straight to their output).
    /// A blob at the chain's end that cannot be opened is an error made by `unusable`; what
    /// is read is verified as it goes (a saved range when it is loaded, the blob at the end
    /// once the reader reaches the end), so nothing read from it may be used before the read
    /// that returns 0.
    pub(super) fn chain(
        &self,
        hist: &History,
        c: &Capture,
        at: &[u8],
        unusable: &dyn Fn(io::Error) -> RewindError,
    ) -> Result<Patched<'_>, RewindError> {
        let mut layers = Vec::new();
        let mut imported = false;
        let (mut cur, mut cur_at) = (c.clone(), at.to_vec());
        let base = loop {
            imported |= cur.pre.imported;
            layers.push(Layer {
                ranges: self.store.ranges(cur.id)?,
                size: cur.pre.size,
                loaded: None,
            });
            match hist.lineage_from(&cur_at, (cur.id, 0)) {
                Lineage::Partial(next, next_at) => (cur, cur_at) = (next, next_at),
                Lineage::Pre(p) => break self.blob_base(&p).map_err(unusable)?,
                Lineage::Current(now) => {
                    let rel = crate::wspath::key_path(&now);
                    break match sys::open_beneath(
                        self.root(),
                        rel,
                        OFlags::RDONLY | OFlags::NONBLOCK,
                        0,
                    ) {
                        Ok(fd)
                            if sys::fstat(fd.as_fd())?.st_mode & libc::S_IFMT == libc::S_IFREG =>
                        {
                            Base::File(std::fs::File::from(fd))
                        }
                        _ => Base::None,
                    };
                }
            }
        };
        // Sizes from elsewhere are checked; this daemon's own captures say what the file was
        // (one changed behind the mount since is completed with zeros, as it always was).
        if imported {
            check_sizes(&layers, &base).map_err(unusable)?;
        }
        Ok(Patched {
            store: &self.store,
            layers,
            base,
            pos: 0,
        })
    }

    /// The base a chain ends on when its next state is a complete pre-image: the blob of a
    /// file, or nothing (zeros) for an absent path, a directory or the empty blob.
    fn blob_base(&self, p: &PreImage) -> io::Result<Base> {
        Ok(match (&p.kind, &p.blob) {
            (Kind::File, Some(h)) => match self.store.blobs.open_verified(h.as_str())? {
                Some(b) => Base::Blob(b),
                None => Base::None, // the empty blob
            },
            _ => Base::None,
        })
    }
}

/// Checks the sizes a chain's layers declare against what completes them: a layer larger than
/// its next state must have saved every byte past that state's end (a file cut short later had
/// its tail saved first: `capture/ranges.rs`), so a size is never made up of zeros nobody
/// wrote. A crafted bundle declaring 1 GiB for a 6-byte file is refused here, before anything
/// is read or written (issue 29). Applied to chains with imported history in them.
fn check_sizes(layers: &[Layer], base: &Base) -> io::Result<()> {
    let base_len = match base {
        Base::None => 0,
        Base::File(f) => f.metadata()?.len(),
        Base::Blob(b) => b.size()?,
    };
    for (k, layer) in layers.iter().enumerate() {
        let next = layers.get(k + 1).map_or(base_len, |l| l.size);
        let saved_to = layer.ranges.last().map_or(0, |r| r.offset + r.length);
        if layer.size > next.max(saved_to) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a range pre-image declares {} bytes, but its history holds {} (history \
                     imported from elsewhere that no rewindfs export writes)",
                    layer.size,
                    next.max(saved_to)
                ),
            ));
        }
    }
    Ok(())
}

/// Where the bytes a range pre-image did not save come from.
enum Base {
    /// No file: zeros.
    None,
    /// The file as it is now.
    File(std::fs::File),
    /// A blob, verified once read to its end (see [`crate::store::blobs::BlobReader`]).
    Blob(crate::store::blobs::BlobReader),
}

/// One range pre-image in a chain of them (see [`Patched`]): the bytes it saved and the size
/// the file had.
struct Layer {
    ranges: Vec<crate::store::Range>,
    size: u64,
    /// The range last read, with its bytes.
    loaded: Option<(usize, Vec<u8>)>,
}

/// Reads the content of the first of a chain of range pre-images of one file, earliest first,
/// each taken before the next: a byte is the one the earliest layer saved; a layer that did
/// not save it has it from the next layer, or as zero where that is past the next one's size
/// (the file grew in between); after the last layer, from the base (zero past its end). So
/// the chain costs one pass over the file, however many checkpoints it spans.
pub(super) struct Patched<'a> {
    store: &'a Store,
    layers: Vec<Layer>,
    base: Base,
    pos: u64,
}

impl Patched<'_> {
    /// Copies what range `i` of layer `k` holds from `pos` on, up to `end`.
    fn read_range(&mut self, k: usize, i: usize, end: u64, buf: &mut [u8]) -> io::Result<usize> {
        let layer = &mut self.layers[k];
        let r = &layer.ranges[i];
        if layer.loaded.as_ref().map(|l| l.0) != Some(i) {
            let data = match &r.content {
                crate::store::RangeContent::Blob(h) => {
                    self.store.blobs.read_verified(h.as_str())?
                }
                crate::store::RangeContent::Inline(d) => d.clone(),
            };
            if data.len() as u64 != r.length {
                return Err(io::Error::other(format!(
                    "a saved range at {} holds {} bytes, not {}",
                    r.offset,
                    data.len(),
                    r.length
                )));
            }
            layer.loaded = Some((i, data));
        }
        let data = &layer.loaded.as_ref().unwrap().1;
        let at = (self.pos - r.offset) as usize;
        let n = ((end - self.pos) as usize).min(data.len() - at);
        buf[..n].copy_from_slice(&data[at..at + n]);
        if at + n == data.len() {
            // Reads only go forward: a range read to its end is not needed again (a range
            // can be 16 MiB, and a chain can have a layer per checkpoint).
            layer.loaded = None;
        }
        Ok(n)
    }

    /// Reads from the base at `pos`, up to `end`; zero past its end.
    fn read_base(&mut self, end: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = (end - self.pos) as usize;
        let got = match &mut self.base {
            Base::File(f) => {
                use std::os::unix::fs::FileExt;
                let mut k = 0;
                while k < n {
                    match f.read_at(&mut buf[k..n], self.pos + k as u64) {
                        Ok(0) => break,
                        Ok(m) => k += m,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                k
            }
            Base::Blob(b) => {
                let mut k = 0;
                while k < n {
                    match b.read_at(&mut buf[k..n], self.pos + k as u64)? {
                        0 => break,
                        m => k += m,
                    }
                }
                k
            }
            Base::None => 0,
        };
        buf[got..n].fill(0);
        Ok(n)
    }
}

impl io::Read for Patched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = self.layers.first().map_or(0, |l| l.size);
        if self.pos >= size || buf.is_empty() {
            if let Base::Blob(b) = &mut self.base {
                // Not a byte of it is used unless all of it hashes to its name.
                b.finish()?;
            }
            return Ok(0);
        }
        // This read stops before the first place where the layer that answers changes.
        let mut end = self.pos + (buf.len() as u64).min(size - self.pos);
        let mut answer = None; // Some(Some((layer, range))), or Some(None) for zeros
        for k in 0..self.layers.len() {
            let pos = self.pos;
            let layer = &mut self.layers[k];
            // A range the position has passed (earlier layers answered its tail) is done.
            if let Some((li, _)) = &layer.loaded {
                let r = &layer.ranges[*li];
                if r.offset + r.length <= pos {
                    layer.loaded = None;
                }
            }
            let layer = &self.layers[k];
            let i = layer.ranges.partition_point(|r| r.offset + r.length <= pos);
            if let Some(r) = layer.ranges.get(i) {
                if r.offset <= pos {
                    end = end.min(r.offset + r.length);
                    answer = Some(Some((k, i)));
                    break;
                }
                end = end.min(r.offset);
            }
            if let Some(next) = self.layers.get(k + 1) {
                if pos >= next.size {
                    answer = Some(None);
                    break;
                }
                end = end.min(next.size);
            }
        }
        let n = match answer {
            Some(Some((k, i))) => self.read_range(k, i, end, buf)?,
            Some(None) => {
                let n = (end - self.pos) as usize;
                buf[..n].fill(0);
                n
            }
            None => self.read_base(end, buf)?,
        };
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Range, RangeContent};

    fn layer(size: u64, ranges: &[(u64, u64)]) -> Layer {
        Layer {
            ranges: ranges
                .iter()
                .map(|&(offset, length)| Range {
                    offset,
                    length,
                    content: RangeContent::Inline(vec![0; length as usize]),
                })
                .collect(),
            size,
            loaded: None,
        }
    }

    /// A range capture's size stands only on what completes it: the next state, or the bytes it
    /// saved itself (a file cut short later had its tail saved first). A size made of zeros
    /// nobody wrote is refused (issue 29: 1 GiB declared for a 6-byte file).
    #[test]
    fn a_declared_size_must_stand_on_the_history_that_completes_it() {
        // Grown since (the next state is larger), or cut since with its tail saved: honest.
        let grown = [layer(8192, &[(0, 4096)]), layer(16384, &[(0, 16384)])];
        assert!(check_sizes(&grown, &Base::None).is_ok());
        assert!(check_sizes(&[layer(8192, &[(0, 4096), (4096, 4096)])], &Base::None).is_ok());
        // More than the next state and its own saved bytes hold: refused, saying both.
        let e = check_sizes(&[layer(1 << 30, &[(0, 4096)])], &Base::None).unwrap_err();
        assert!(e.to_string().contains("declares 1073741824 bytes"), "{e}");
        let e = check_sizes(&[layer(1 << 20, &[]), layer(10, &[])], &Base::None).unwrap_err();
        assert!(e.to_string().contains("holds 10"), "{e}");
    }

    /// The saved ranges of a file's change from `old` to `new`: every byte of `old` the change
    /// overwrote or cut off, merged into runs, plus the bytes in `extra` (a capture saves
    /// whole writes, more than what differs).
    fn saved(old: &[u8], new: &[u8], extra: &[bool]) -> Vec<Range> {
        let keep = |p: usize| p >= new.len() || old[p] != new[p] || extra[p % extra.len()];
        let mut out: Vec<Range> = Vec::new();
        for p in (0..old.len()).filter(|&p| keep(p)) {
            match out.last_mut() {
                Some(r) if r.offset + r.length == p as u64 => {
                    r.length += 1;
                    if let RangeContent::Inline(d) = &mut r.content {
                        d.push(old[p]);
                    }
                }
                _ => out.push(Range {
                    offset: p as u64,
                    length: 1,
                    content: RangeContent::Inline(vec![old[p]]),
                }),
            }
        }
        out
    }

    /// One change to a file: bytes written at an offset (growing it if past its end), or the
    /// file cut or extended to a length.
    #[derive(Debug, Clone)]
    enum Change {
        Write(usize, Vec<u8>),
        SetLen(usize),
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        prop_oneof![
            (0usize..300, proptest::collection::vec(any::<u8>(), 1..80))
                .prop_map(|(o, d)| Change::Write(o, d)),
            (0usize..400).prop_map(Change::SetLen),
        ]
    }

    fn apply(mut f: Vec<u8>, c: &Change) -> Vec<u8> {
        match c {
            Change::Write(o, d) => {
                if f.len() < o + d.len() {
                    f.resize(o + d.len(), 0);
                }
                f[*o..o + d.len()].copy_from_slice(d);
            }
            Change::SetLen(n) => f.resize(*n, 0),
        }
        f
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A chain of range pre-images, one per checkpoint, read over the file as it is now,
        /// gives back the file exactly as it was when each checkpoint began — in one pass,
        /// whatever sizes it went through — and the honest chain passes the size check.
        #[test]
        fn a_chain_of_range_pre_images_gives_back_every_earlier_state(
            first in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            steps in proptest::collection::vec(change(), 1..6),
            extra in proptest::collection::vec(proptest::prelude::any::<bool>(), 1..7),
            chunk in 1usize..97,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&dir.path().join("store"), false).unwrap();
            let mut states = vec![first];
            for c in &steps {
                let next = apply(states.last().unwrap().clone(), c);
                states.push(next);
            }
            let now = states.last().unwrap().clone();
            let layers_from = |k: usize| -> Vec<Layer> {
                (k..states.len() - 1)
                    .map(|i| Layer {
                        ranges: saved(&states[i], &states[i + 1], &extra),
                        size: states[i].len() as u64,
                        loaded: None,
                    })
                    .collect()
            };
            let file_now = dir.path().join("now");
            std::fs::write(&file_now, &now).unwrap();
            for (k, want) in states.iter().enumerate().take(states.len() - 1) {
                let base = Base::File(std::fs::File::open(&file_now).unwrap());
                let layers = layers_from(k);
                proptest::prop_assert!(check_sizes(&layers, &base).is_ok());
                let mut p = Patched { store: &store, layers, base, pos: 0 };
                // Read in small pieces: every boundary between layers and ranges is crossed.
                let mut got = Vec::new();
                let mut buf = vec![0u8; chunk];
                loop {
                    let n = io::Read::read(&mut p, &mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                proptest::prop_assert_eq!(&got, want, "state at checkpoint {}", k);
            }
        }
    }
}
