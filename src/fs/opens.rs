//! Opens under `--passthrough`: which of a node's opens the kernel serves straight from the
//! backing file (FUSE passthrough, Linux >= 6.9), and which come to the daemon as today.
//!
//! Without `--passthrough` the daemon declines OPEN (see `RewindFs::open`) and none of this
//! runs. With it, every open is answered here, in one of two modes:
//!
//! - **cached**: the kernel's page cache in front of the daemon, as every open is without
//!   `--passthrough` (`FOPEN_KEEP_CACHE`); every write comes to the daemon, which saves the
//!   pre-image its first change of the file in a checkpoint needs, as always.
//! - **passthrough**: the kernel reads (and writes) the backing file itself.
//!
//! The kernel refuses with EIO an open whose mode conflicts with the node's other opens
//! (fs/fuse/iomode.c): a passthrough open while a cached one is open, and any open that is not
//! passthrough while a passthrough one is. Hence:
//!
//! - a reader passes through, unless the node has cached opens (it is cached then);
//! - a writer is cached, unless the node has passthrough opens: then it must pass through too,
//!   and the daemon never sees its writes. So before granting it, the daemon saves the file's
//!   whole pre-image in the current checkpoint (`Core::capture_whole`), and it does so again at
//!   every message boundary for each such writer still open (`Core::capture_open_writers`),
//!   before `begin_message` answers. This is the invariant: **a file open for writing through
//!   passthrough has its whole pre-image saved in the current message's checkpoint**, so a
//!   write the daemon does not see never needs one. Such a writer is rare (it needs a reader
//!   open at the moment it opens) and costs a copy of the file per boundary it stays open
//!   across; a capture taken while it writes may include part of a write in progress, as a
//!   boundary flushing a shared mapping may.
//!
//! A file held open only for reading can change nothing, so no pre-image is ever owed for it:
//! nothing needs revoking at a boundary, a rewind or an undo.
//!
//! The counts here never fall below the kernel's: the kernel drops an open from the node's
//! mode before it sends the RELEASE that decrements it here. So a mode granted here never
//! conflicts; at worst a reader is cached, or a writer passes through, for a moment longer
//! than needed.
//!
//! Coherence: a passthrough writer changes the file behind the node's page cache. The first
//! cached open after one is sent without `FOPEN_KEEP_CACHE`, so the kernel drops the node's
//! cached pages then (no cached open can exist while a passthrough one does).
//!
//! All opens of a node share one backing id (the kernel refuses a second), held from its first
//! passthrough open to its last release.

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

use fuser::BackingId;

use super::Ctx;

/// How the kernel serves one open; its file handle says which, for the RELEASE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Cached,
    /// Passthrough, for reading only.
    Reader,
    /// Passthrough, with write access.
    Writer,
}

impl Mode {
    /// The file handle that carries the mode to the open's RELEASE.
    pub fn fh(self) -> u64 {
        match self {
            Mode::Cached => 1,
            Mode::Reader => 2,
            Mode::Writer => 3,
        }
    }

    fn of_fh(fh: u64) -> Option<Mode> {
        match fh {
            1 => Some(Mode::Cached),
            2 => Some(Mode::Reader),
            3 => Some(Mode::Writer),
            _ => None,
        }
    }
}

/// What an OPEN is answered with (`B`: the backing id; a stand-in in the unit tests).
pub enum Grant<'a, B = BackingId> {
    /// Cached; `keep_cache` false when a passthrough writer may have left the node's pages
    /// stale.
    Cached { keep_cache: bool },
    /// Passthrough (`Mode::Reader` or `Mode::Writer`) with the node's backing id.
    Passthrough(Mode, &'a B),
}

impl<B> Grant<'_, B> {
    pub fn mode(&self) -> Mode {
        match self {
            Grant::Cached { .. } => Mode::Cached,
            Grant::Passthrough(m, _) => *m,
        }
    }
}

/// One node's open files, as granted and not yet released.
struct Node<B> {
    cached: u32,
    readers: u32,
    /// Passthrough writers, with the caller of the latest (whose actor the boundary's capture
    /// is taken for).
    writers: u32,
    writer_ctx: Option<Ctx>,
    /// Shared by the node's passthrough opens; dropped (closed) with the last.
    backing: Option<B>,
    /// A passthrough writer was granted since the last cached open: the pages may be stale.
    stale_pages: bool,
}

impl<B> Default for Node<B> {
    fn default() -> Self {
        Node {
            cached: 0,
            readers: 0,
            writers: 0,
            writer_ctx: None,
            backing: None,
            stale_pages: false,
        }
    }
}

impl<B> Node<B> {
    fn passthrough(&self) -> u32 {
        self.readers + self.writers
    }

    fn idle(&self) -> bool {
        self.cached == 0 && self.passthrough() == 0 && !self.stale_pages
    }
}

/// Whether the kernel serves reads from the backing files, as the mount's INIT settled it
/// (`rewindfs status` shows it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Passthrough {
    /// Not asked for (no `--passthrough`): every read and write goes through the daemon.
    #[default]
    Off = 0,
    /// In effect: opens for reading, and writers whose pre-image is saved, pass through.
    On = 1,
    /// Asked for, but the kernel does not offer it or the daemon is not root (the daemon's log
    /// says which): every read and write goes through the daemon.
    Unavailable = 2,
}

/// Where the mount's [`Passthrough`] is kept: set once at INIT, read by `status` (as its
/// discriminant, which `get` maps back).
#[derive(Debug, Default)]
pub struct PassthroughState(std::sync::atomic::AtomicU8);

impl PassthroughState {
    pub fn set(&self, p: Passthrough) {
        self.0.store(p as u8, std::sync::atomic::Ordering::Release);
    }

    pub fn get(&self) -> Passthrough {
        match self.0.load(std::sync::atomic::Ordering::Acquire) {
            1 => Passthrough::On,
            2 => Passthrough::Unavailable,
            _ => Passthrough::Off,
        }
    }
}

/// The open-mode table (see the module doc). `B`: the backing id (a stand-in in the unit
/// tests).
pub struct Opens<B = BackingId> {
    nodes: Mutex<HashMap<u64, Node<B>>>,
}

impl<B> Default for Opens<B> {
    fn default() -> Self {
        Opens {
            nodes: Mutex::new(HashMap::new()),
        }
    }
}

impl<B> Opens<B> {
    /// A reader of node `ino`: counts it, and calls `answer` with `reply` and the grant while
    /// the table is locked, so a concurrent RELEASE cannot close the backing id before the
    /// reply carrying it is sent. `backing` registers the node's backing file; if it fails (no
    /// CAP_SYS_ADMIN, a backing filesystem stacked too deep), the reader is cached instead.
    pub fn open_reader<C, R>(
        &self,
        ino: u64,
        reply: C,
        backing: impl FnOnce(&C) -> io::Result<B>,
        answer: impl FnOnce(C, Grant<'_, B>) -> R,
    ) -> R {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let n = nodes.entry(ino).or_default();
        if n.cached > 0 {
            return answer(reply, Self::cached(n));
        }
        if n.backing.is_none() {
            match backing(&reply) {
                Ok(b) => n.backing = Some(b),
                Err(e) => {
                    tracing::debug!("node {ino}: no passthrough ({e}); read through the daemon");
                    return answer(reply, Self::cached(n));
                }
            }
        }
        n.readers += 1;
        let Some(b) = n.backing.as_ref() else {
            unreachable!("set above")
        };
        answer(reply, Grant::Passthrough(Mode::Reader, b))
    }

    /// A writer of node `ino`, by `ctx`: cached (counted, the grant returned) unless the node
    /// has passthrough opens. Otherwise it must pass through: it is counted now, as a writer
    /// whose pre-image is being saved (so a removal does not adopt the file meanwhile, and the
    /// backing id stays), and `None` is returned; the caller saves the whole pre-image, without
    /// this table locked, then answers with [`Opens::writer_captured`].
    pub fn open_writer<'a>(&self, ino: u64, ctx: Ctx) -> Option<Grant<'a, B>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let n = nodes.entry(ino).or_default();
        if n.passthrough() == 0 {
            return Some(Self::cached(n));
        }
        n.writers += 1;
        n.writer_ctx = Some(ctx);
        n.stale_pages = true;
        None
    }

    /// The pre-image of a writer [`Opens::open_writer`] counted was saved (`Ok`), or could
    /// not be (the open fails, and is no longer counted). Calls `answer` with `reply` and the
    /// outcome while the table is locked.
    pub fn writer_captured<C, R>(
        &self,
        ino: u64,
        captured: io::Result<()>,
        reply: C,
        answer: impl FnOnce(C, io::Result<Grant<'_, B>>) -> R,
    ) -> R {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = captured {
            drop(nodes);
            self.release(ino, Mode::Writer.fh());
            return answer(reply, Err(e));
        }
        match nodes.get(&ino).and_then(|n| n.backing.as_ref()) {
            Some(b) => answer(reply, Ok(Grant::Passthrough(Mode::Writer, b))),
            None => unreachable!("a counted passthrough writer keeps the node's backing id"),
        }
    }

    /// Whether node `ino` is open for writing through passthrough (or about to be): a removal
    /// must then copy its pre-image rather than adopt the inode, which the writer still writes.
    pub fn has_writers(&self, ino: u64) -> bool {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.get(&ino).is_some_and(|n| n.writers > 0)
    }

    fn cached<'a>(n: &mut Node<B>) -> Grant<'a, B> {
        n.cached += 1;
        let keep_cache = !std::mem::take(&mut n.stale_pages);
        Grant::Cached { keep_cache }
    }

    /// An open of node `ino` whose handle was `fh` was released.
    pub fn release(&self, ino: u64, fh: u64) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(n) = nodes.get_mut(&ino) else {
            return;
        };
        match Mode::of_fh(fh) {
            Some(Mode::Cached) => n.cached = n.cached.saturating_sub(1),
            Some(Mode::Reader) => n.readers = n.readers.saturating_sub(1),
            Some(Mode::Writer) => {
                n.writers = n.writers.saturating_sub(1);
                if n.writers == 0 {
                    n.writer_ctx = None;
                }
            }
            None => tracing::warn!("node {ino}: released an unknown handle {fh}"),
        }
        if n.passthrough() == 0 {
            n.backing = None;
        }
        if n.idle() {
            nodes.remove(&ino);
        }
    }

    /// The nodes open for writing through passthrough, each with the caller of its latest such
    /// open: what a boundary captures.
    pub fn writers(&self) -> Vec<(u64, Ctx)> {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes
            .iter()
            .filter_map(|(ino, n)| n.writer_ctx.map(|c| (*ino, c)))
            .collect()
    }

    /// The kernel forgot node `ino` (its inode, and so its pages and opens, are gone).
    pub fn forget(&self, ino: u64) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.remove(&ino);
    }

    /// Nodes with an entry (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.nodes.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backing id stand-in: which registration it was.
    type Backing = u32;

    const CTX: Ctx = Ctx {
        uid: 0,
        gid: 0,
        pid: 1,
    };

    /// How an open was granted: its mode, whether its pages are kept, its backing.
    type Got = (Mode, bool, Option<Backing>);

    fn got(g: Grant<'_, Backing>) -> Got {
        match g {
            Grant::Cached { keep_cache } => (Mode::Cached, keep_cache, None),
            Grant::Passthrough(m, b) => (m, false, Some(*b)),
        }
    }

    /// Opens `ino` for reading; `backing` is what registering its backing file gives.
    fn read(o: &Opens<Backing>, ino: u64, backing: io::Result<Backing>) -> Got {
        o.open_reader(ino, (), |_| backing, |_, g| got(g))
    }

    /// Opens `ino` for writing; a passthrough writer's capture gives `captured`.
    fn write(o: &Opens<Backing>, ino: u64, captured: io::Result<()>) -> io::Result<Got> {
        match o.open_writer(ino, CTX) {
            Some(g) => Ok(got(g)),
            None => o.writer_captured(ino, captured, (), |_, g| g.map(got)),
        }
    }

    fn eperm() -> io::Error {
        io::Error::from_raw_os_error(libc::EPERM)
    }

    #[test]
    fn without_a_backing_file_everything_is_cached_and_the_table_empties() {
        let o = Opens::default();
        assert_eq!(read(&o, 5, Err(eperm())), (Mode::Cached, true, None));
        assert_eq!(write(&o, 5, Ok(())).unwrap(), (Mode::Cached, true, None));
        o.release(5, Mode::Cached.fh());
        o.release(5, Mode::Cached.fh());
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn a_reader_of_a_node_open_cached_is_cached_else_it_passes_through() {
        let o = Opens::default();
        assert_eq!(write(&o, 7, Ok(())).unwrap(), (Mode::Cached, true, None));
        // Passing through now would be refused by the kernel (EIO).
        assert_eq!(read(&o, 7, Ok(1)), (Mode::Cached, true, None));
        o.release(7, Mode::Cached.fh());
        o.release(7, Mode::Cached.fh());
        assert_eq!(read(&o, 7, Ok(2)), (Mode::Reader, false, Some(2)));
    }

    #[test]
    fn readers_share_one_backing_id_until_the_last_is_released() {
        let o = Opens::default();
        assert_eq!(read(&o, 3, Ok(1)), (Mode::Reader, false, Some(1)));
        assert_eq!(read(&o, 3, Ok(9)), (Mode::Reader, false, Some(1)));
        o.release(3, Mode::Reader.fh());
        assert_eq!(read(&o, 3, Ok(9)), (Mode::Reader, false, Some(1)));
        o.release(3, Mode::Reader.fh());
        o.release(3, Mode::Reader.fh());
        assert_eq!(o.len(), 0, "the backing id is dropped with the last reader");
        assert_eq!(read(&o, 3, Ok(4)), (Mode::Reader, false, Some(4)));
    }

    #[test]
    fn a_writer_beside_a_reader_passes_through_once_captured_and_a_boundary_sees_it() {
        let o = Opens::default();
        read(&o, 8, Ok(1));
        assert_eq!(
            write(&o, 8, Ok(())).unwrap(),
            (Mode::Writer, false, Some(1))
        );
        assert!(o.has_writers(8));
        assert_eq!(o.writers().iter().map(|w| w.0).collect::<Vec<_>>(), [8]);
        // The reader goes; the writer still holds the backing id.
        o.release(8, Mode::Reader.fh());
        assert_eq!(read(&o, 8, Ok(5)), (Mode::Reader, false, Some(1)));
        o.release(8, Mode::Reader.fh());
        o.release(8, Mode::Writer.fh());
        assert!(!o.has_writers(8) && o.writers().is_empty());
        // Its writes passed the node's page cache: the next cached open drops the pages.
        assert_eq!(write(&o, 8, Ok(())).unwrap(), (Mode::Cached, false, None));
        assert_eq!(write(&o, 8, Ok(())).unwrap(), (Mode::Cached, true, None));
    }

    #[test]
    fn a_writer_whose_capture_fails_is_refused_and_not_counted() {
        let o = Opens::default();
        read(&o, 2, Ok(1));
        let e = write(&o, 2, Err(io::Error::from_raw_os_error(libc::ENOSPC))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert!(!o.has_writers(2) && o.writers().is_empty());
        o.release(2, Mode::Reader.fh());
        assert_eq!(o.len(), 1, "the stale-pages mark stays until a cached open");
        assert_eq!(write(&o, 2, Ok(())).unwrap(), (Mode::Cached, false, None));
    }

    #[test]
    fn while_a_writer_is_being_captured_a_removal_sees_it() {
        let o = Opens::default();
        read(&o, 6, Ok(1));
        assert!(o.open_writer(6, CTX).is_none(), "must pass through");
        assert!(o.has_writers(6), "counted before its capture runs");
        o.writer_captured(6, Ok(()), (), |_, g| assert!(g.is_ok()));
    }

    #[test]
    fn an_unknown_handle_or_node_changes_nothing() {
        let o = Opens::default();
        o.release(9, Mode::Reader.fh());
        assert_eq!(write(&o, 9, Ok(())).unwrap().0, Mode::Cached);
        o.release(9, 77);
        assert_eq!(o.len(), 1);
        o.forget(9);
        assert_eq!(o.len(), 0);
    }
}
