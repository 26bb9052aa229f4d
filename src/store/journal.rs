//! The capture journal: pre-image records appended to a file before the change they protect,
//! and change-log entries appended once a change is done, applied to SQLite in batches (group
//! commit).
//!
//! A SQLite transaction per first change of a path (about 14 page writes and 6 lock calls in
//! WAL mode) dominated the cost of creating or deleting many files. Instead, [`Journal::append`]
//! writes one framed record with one `write(2)` to the active journal file — once it returns
//! the record is in the kernel's page cache, which survives any crash of the daemon (with
//! `--sync` it is also `fdatasync`ed, for power loss) — and the store applies the pending
//! records to SQLite in one transaction when anything reads the database, on the daemon's
//! timer, and at shutdown; a journal left by a crash is applied when the store is next opened.
//!
//! There are two files, so that applying never holds up an append: the applier takes the
//! pending records and switches appends to the other (empty) file in one step
//! ([`Journal::take_batch`]), applies the batch to SQLite with no lock that appends need, then
//! empties the file the batch came from ([`Journal::batch_done`]). (With one file, every change
//! waited for the whole SQLite transaction: 5-60 ms stalls, a third of an `rm -rf`.)
//!
//! ```text
//! <store>/journal, <store>/journal.1
//!     frames, back to back:  len: u32 LE | checksum(payload): u64 LE | payload
//!     len's top bit set: the checksum is CRC-64/NVME (this build writes only these);
//!     clear: FNV-1a-64 (frames an older rewindfs left after a crash, still read)
//!     the first frame of each is an epoch record; a crash's leftovers replay in epoch order
//!     (a file without one, written by an older rewindfs, comes first)
//! ```
//!
//! Invariants:
//! - records are appended in the order their ids were allocated (one lock), so capture ids and
//!   `moves.after_capture` keep the order in which changes happened;
//! - applying is idempotent (rows carry their ids; `INSERT OR IGNORE`, `actors | bits`), so a
//!   crash between the SQLite commit and the truncation of the journal replays harmlessly;
//! - a torn last frame (a crash inside `write`) belongs to a change that was never applied, and
//!   is ignored.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::BlobRef;
use super::{Actor, Kind, LogEntry, PreImage, Range, RangeContent, Xattrs};
use crate::wspath::{Node, WsPath};

/// The journal's file names in the store directory (`FILES[0]` is the one older versions
/// wrote alone).
pub const FILES: [&str; 2] = ["journal", "journal.1"];

/// One journalled write to the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A pre-image (`captures` row, and its `blobs` row).
    Capture {
        id: i64,
        checkpoint: i64,
        path: Node,
        /// `true`: purpose 'tool'; `false`: purpose 'checkpoint'.
        tool: bool,
        pre: PreImage,
        actor: Actor,
        op: String,
        at: i64,
    },
    /// Another actor changed a path already captured in a checkpoint.
    Actors {
        checkpoint: i64,
        path: Node,
        bits: u8,
    },
    /// A tool's first change of a path in a session.
    Track {
        session: String,
        path: WsPath,
        checkpoint: i64,
        capture: i64,
    },
    /// Old bytes of a partial capture.
    Range { capture: i64, range: Range },
    /// A directory rename, before it is applied.
    Move {
        seq: i64,
        checkpoint: i64,
        src: WsPath,
        dst: WsPath,
        exchange: bool,
        after_capture: i64,
        actor: Actor,
        at: i64,
    },
    /// The first frame of a journal file: orders the files' records when both survive a crash.
    Epoch(u64),
    /// A change-log entry (`changes` row, with its `seq`), written once the change is done:
    /// the log survives a crash of the daemon like the pre-images do.
    Log(LogEntry),
}

/// A frame's length word and checksum, before its payload.
const FRAME_HEADER: usize = 12;

/// Set in a frame's length word when its checksum is CRC-64/NVME. FNV-1a, one byte at a time,
/// was 6-10% of the request threads' time under 4 KiB random writes, whose range captures
/// carry the 4 KiB; the CRC runs on the CPU's carry-less multiply (a 4 KiB record: 86 ns
/// against 4.6 µs; a 150-byte one: 28 ns against 120 ns, on the benchmark VM). A
/// store whose journal may hold such frames is schema 10 (`schema/010_journal_crc.sql`), so an
/// older rewindfs, which would take them for a torn tail and drop them, refuses it instead.
const CRC64_FRAME: u32 = 1 << 31;

/// The checksum of a frame this build writes.
fn crc64(b: &[u8]) -> u64 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, b)
}

/// The checksum of frames written before [`CRC64_FRAME`].
fn fnv1a64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Little-endian field writer.
struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: impl AsRef<[u8]>) {
        let v = v.as_ref();
        self.0.extend_from_slice(&(v.len() as u32).to_le_bytes());
        self.0.extend_from_slice(v);
    }
    fn opt(&mut self, v: Option<&[u8]>) {
        match v {
            Some(b) => {
                self.u8(1);
                self.bytes(b);
            }
            None => self.u8(0),
        }
    }
}

/// Little-endian field reader; `None` on a short or malformed payload.
struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    /// A path that may name the root; `None` (malformed) for one that names no place inside
    /// the workspace.
    fn node(&mut self) -> Option<Node> {
        Node::parse(self.bytes()?).ok()
    }
    /// A path inside the workspace; `None` (malformed) otherwise.
    fn ws(&mut self) -> Option<WsPath> {
        WsPath::parse(self.bytes()?).ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn i64(&mut self) -> Option<i64> {
        self.take(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().unwrap()) as usize;
        self.take(n).map(<[u8]>::to_vec)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?).ok()
    }
    fn opt(&mut self) -> Option<Option<Vec<u8>>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.bytes()?)),
            _ => None,
        }
    }
}

fn kind_code(k: Kind) -> u8 {
    match k {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::Symlink => 2,
        Kind::Absent => 3,
        Kind::Other => 4,
    }
}

fn kind_of(c: u8) -> Option<Kind> {
    Some(match c {
        0 => Kind::File,
        1 => Kind::Dir,
        2 => Kind::Symlink,
        3 => Kind::Absent,
        4 => Kind::Other,
        _ => return None,
    })
}

fn actor_of(bit: u8) -> Option<Actor> {
    Some(match bit {
        1 => Actor::Tool,
        2 => Actor::Shell,
        4 => Actor::External,
        8 => Actor::Rewind,
        _ => return None,
    })
}

impl Record {
    /// The record as one frame (length, checksum, payload).
    pub fn encode(&self) -> Vec<u8> {
        // The frame's header goes first and is filled in at the end, so the payload is
        // written once, where it stays; a range's inline bytes are reserved for up front.
        let inline = match self {
            Record::Range {
                range:
                    Range {
                        content: RangeContent::Inline(d),
                        ..
                    },
                ..
            } => d.len(),
            _ => 0,
        };
        let mut e = Enc(Vec::with_capacity(FRAME_HEADER + 128 + inline));
        e.0.resize(FRAME_HEADER, 0);
        match self {
            Record::Capture {
                id,
                checkpoint,
                path,
                tool,
                pre,
                actor,
                op,
                at,
            } => {
                e.u8(1);
                e.i64(*id);
                e.i64(*checkpoint);
                e.bytes(path);
                e.u8(*tool as u8);
                e.u8(kind_code(pre.kind));
                e.opt(pre.blob.as_ref().map(|b| b.as_str().as_bytes()));
                e.i64(pre.mode as i64);
                e.i64(pre.uid as i64);
                e.i64(pre.gid as i64);
                e.i64(pre.size as i64);
                e.opt(pre.target.as_deref());
                e.u8(actor.bit());
                e.bytes(op.as_bytes());
                e.i64(*at);
                e.u8(pre.partial as u8);
                // Last, and only when recorded: a record without it (or from an older
                // rewindfs) reads as "not recorded".
                if let Some(x) = &pre.xattrs {
                    e.bytes(x.encode());
                }
            }
            Record::Range { capture, range } => {
                e.u8(5);
                e.i64(*capture);
                e.i64(range.offset as i64);
                e.i64(range.length as i64);
                match &range.content {
                    RangeContent::Blob(h) => {
                        e.u8(0);
                        e.bytes(h.as_str().as_bytes());
                    }
                    RangeContent::Inline(d) => {
                        e.u8(1);
                        e.bytes(d);
                    }
                }
            }
            Record::Actors {
                checkpoint,
                path,
                bits,
            } => {
                e.u8(2);
                e.i64(*checkpoint);
                e.bytes(path);
                e.u8(*bits);
            }
            Record::Track {
                session,
                path,
                checkpoint,
                capture,
            } => {
                e.u8(3);
                e.bytes(session.as_bytes());
                e.bytes(path);
                e.i64(*checkpoint);
                e.i64(*capture);
            }
            Record::Move {
                seq,
                checkpoint,
                src,
                dst,
                exchange,
                after_capture,
                actor,
                at,
            } => {
                e.u8(4);
                e.i64(*seq);
                e.i64(*checkpoint);
                e.bytes(src);
                e.bytes(dst);
                e.u8(*exchange as u8);
                e.i64(*after_capture);
                e.u8(actor.bit());
                e.i64(*at);
            }
            Record::Epoch(n) => {
                e.u8(6);
                e.i64(*n as i64);
            }
            Record::Log(l) => {
                e.u8(7);
                e.i64(l.seq);
                e.i64(l.at);
                e.i64(l.checkpoint);
                e.bytes(l.op.as_str().as_bytes());
                e.bytes(l.path.as_bytes());
                e.opt(l.path2.as_ref().map(WsPath::as_bytes));
                e.bytes(l.actor.as_str().as_bytes());
                e.i64(l.pid as i64);
                e.bytes(l.process.as_bytes());
                e.opt(l.tool_use_id.as_deref().map(str::as_bytes));
                e.opt(l.session.as_deref().map(str::as_bytes));
            }
        }
        let mut frame = e.0;
        let len = frame.len() - FRAME_HEADER;
        // A record is a few paths and at most a range's bytes: far below the flag bit.
        assert!(len < CRC64_FRAME as usize, "journal record of {len} bytes");
        let sum = crc64(&frame[FRAME_HEADER..]);
        frame[..4].copy_from_slice(&(len as u32 | CRC64_FRAME).to_le_bytes());
        frame[4..FRAME_HEADER].copy_from_slice(&sum.to_le_bytes());
        frame
    }

    fn decode(payload: &[u8]) -> Option<Record> {
        let mut d = Dec(payload);
        let r = match d.u8()? {
            1 => {
                let id = d.i64()?;
                let checkpoint = d.i64()?;
                let path = d.node()?;
                let tool = d.u8()? != 0;
                let mut pre = PreImage {
                    imported: false,
                    kind: kind_of(d.u8()?)?,
                    blob: match d.opt()? {
                        Some(b) => Some(BlobRef::from_stored(String::from_utf8(b).ok()?)),
                        None => None,
                    },
                    mode: d.i64()? as u32,
                    uid: d.i64()? as u32,
                    gid: d.i64()? as u32,
                    size: d.i64()? as u64,
                    target: d.opt()?,
                    partial: false,
                    xattrs: None,
                };
                let actor = actor_of(d.u8()?)?;
                let op = d.string()?;
                let at = d.i64()?;
                pre.partial = d.u8()? != 0;
                if !d.0.is_empty() {
                    pre.xattrs = Some(Xattrs::decode(&d.bytes()?)?);
                }
                Record::Capture {
                    id,
                    checkpoint,
                    path,
                    tool,
                    pre,
                    actor,
                    op,
                    at,
                }
            }
            5 => Record::Range {
                capture: d.i64()?,
                range: Range {
                    offset: d.i64()? as u64,
                    length: d.i64()? as u64,
                    content: match d.u8()? {
                        0 => RangeContent::Blob(BlobRef::from_stored(d.string()?)),
                        1 => RangeContent::Inline(d.bytes()?),
                        _ => return None,
                    },
                },
            },
            2 => Record::Actors {
                checkpoint: d.i64()?,
                path: d.node()?,
                bits: d.u8()?,
            },
            3 => Record::Track {
                session: d.string()?,
                path: d.ws()?,
                checkpoint: d.i64()?,
                capture: d.i64()?,
            },
            4 => Record::Move {
                seq: d.i64()?,
                checkpoint: d.i64()?,
                src: d.ws()?,
                dst: d.ws()?,
                exchange: d.u8()? != 0,
                after_capture: d.i64()?,
                actor: actor_of(d.u8()?)?,
                at: d.i64()?,
            },
            6 => Record::Epoch(d.i64()? as u64),
            7 => Record::Log(LogEntry {
                seq: d.i64()?,
                at: d.i64()?,
                checkpoint: d.i64()?,
                op: super::Op::parse(&d.string()?),
                path: d.node()?,
                path2: match d.opt()? {
                    Some(b) => Some(WsPath::parse(b).ok()?),
                    None => None,
                },
                actor: Actor::parse(&d.string()?),
                pid: d.i64()? as u32,
                process: d.string()?,
                tool_use_id: match d.opt()? {
                    Some(b) => Some(String::from_utf8(b).ok()?),
                    None => None,
                },
                session: match d.opt()? {
                    Some(b) => Some(String::from_utf8(b).ok()?),
                    None => None,
                },
            }),
            _ => return None,
        };
        d.0.is_empty().then_some(r)
    }
}

/// What reading a journal file found.
#[derive(Debug, Default)]
pub struct Contents {
    pub records: Vec<Record>,
    /// Bytes after the last whole record (a torn frame from a crash inside `write`).
    pub torn_bytes: usize,
    /// Whole frames (their checksum holds) that are not a record this build reads: one naming
    /// a path that is not a workspace path (an older build tracked a tool's change of the
    /// workspace root itself), or of a kind it does not know. Left out; what follows is read.
    pub unreadable: usize,
}

/// Parses a journal file's bytes: whole, checksummed frames up to the first bad one (a torn
/// tail). A whole frame that does not decode is counted and left out, not taken for the end:
/// the records after it are intact, and each protects a change that happened.
pub fn parse(bytes: &[u8]) -> Contents {
    let mut records = Vec::new();
    let mut unreadable = 0;
    let mut rest = bytes;
    while rest.len() >= FRAME_HEADER {
        let word = u32::from_le_bytes(rest[..4].try_into().unwrap());
        let len = (word & !CRC64_FRAME) as usize;
        let sum = u64::from_le_bytes(rest[4..FRAME_HEADER].try_into().unwrap());
        let Some(payload) = rest.get(FRAME_HEADER..FRAME_HEADER + len) else {
            break;
        };
        let found = if word & CRC64_FRAME != 0 {
            crc64(payload)
        } else {
            fnv1a64(payload)
        };
        if found != sum {
            break;
        }
        match Record::decode(payload) {
            Some(r) => records.push(r),
            None => unreadable += 1,
        }
        rest = &rest[FRAME_HEADER + len..];
    }
    Contents {
        records,
        torn_bytes: rest.len(),
        unreadable,
    }
}

/// Reads the journal files in a store directory, oldest epoch first (an absent file is an
/// empty one); epoch records are left out.
///
/// # Errors
/// I/O errors other than a file being absent.
pub fn read(dir: &Path) -> io::Result<Contents> {
    let mut files = Vec::new();
    for name in FILES {
        let mut bytes = Vec::new();
        match File::open(dir.join(name)) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let c = parse(&bytes);
        if c.unreadable > 0 {
            tracing::error!(
                "capture journal {name}: {} whole record(s) this build cannot read (a path that \
                 is not a path inside the workspace, or a kind it does not know) were left out",
                c.unreadable
            );
        }
        let epoch = match c.records.first() {
            Some(Record::Epoch(n)) => *n,
            _ => 0,
        };
        files.push((epoch, c));
    }
    files.sort_by_key(|(epoch, _)| *epoch);
    let mut all = Contents::default();
    for (_, c) in files {
        all.torn_bytes += c.torn_bytes;
        all.unreadable += c.unreadable;
        all.records.extend(
            c.records
                .into_iter()
                .filter(|r| !matches!(r, Record::Epoch(_))),
        );
    }
    Ok(all)
}

/// Records taken to be applied together ([`Journal::take_batch`]), as the frames written for
/// them.
#[derive(Debug, PartialEq)]
pub struct Batch {
    frames: Vec<u8>,
    records: usize,
}

impl Batch {
    /// The batch's records, decoded from its frames as a replay after a crash would decode
    /// them. Call it without the journal's lock: 10,000 records take milliseconds.
    pub fn records(&self) -> Vec<Record> {
        let c = parse(&self.frames);
        if c.records.len() != self.records || c.torn_bytes != 0 {
            // Every frame here was encoded by this build from a typed record, so this is a bug;
            // what decodes is applied, as a replay would.
            tracing::error!(
                "capture journal: {} of a batch's {} records decode ({} bytes left over)",
                c.records.len(),
                self.records,
                c.torn_bytes
            );
        }
        c.records
    }

    /// How many records the batch holds.
    pub fn len(&self) -> usize {
        self.records
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }
}

/// The open journal: two files, one taking appends, the other holding the batch being applied.
#[derive(Debug)]
pub struct Journal {
    files: [File; 2],
    paths: [PathBuf; 2],
    /// The file appends go to.
    active: usize,
    /// Bytes of whole frames in the active file.
    len: u64,
    /// The active file's epoch.
    epoch: u64,
    /// fdatasync each record (power-loss durability).
    sync: bool,
    /// The frames written to the active file and not yet applied to the database, in order,
    /// as written. The batch is decoded from them by whoever applies it ([`Batch::records`]):
    /// a record is made and dropped by the thread whose change it protects, so glibc's
    /// per-thread cache serves both. When the flusher dropped the records instead, every free
    /// went to the arena of the request thread that made them, under its lock, and that
    /// thread's cache stayed empty: its next allocations took the arena's slow path.
    pending: Vec<u8>,
    /// How many records `pending` holds.
    pending_records: usize,
    /// The batch taken from the other file and not yet known to be in the database (handed out
    /// again until [`Journal::batch_done`] says it is).
    in_flight: Option<Arc<Batch>>,
    /// The batch in flight was taken without switching files (see `take_batch`).
    in_place: bool,
}

impl Journal {
    /// Opens the journal for appending, emptying both files: the caller has applied what they
    /// held ([`read`]).
    ///
    /// # Errors
    /// I/O errors opening or writing the files.
    pub fn open(dir: &Path, sync: bool) -> io::Result<Journal> {
        let paths = FILES.map(|n| dir.join(n));
        let open = |p: &Path| -> io::Result<File> {
            let f = super::private::open_file(p, OpenOptions::new().create(true).append(true))?;
            f.set_len(0)?;
            Ok(f)
        };
        let files = [open(&paths[0])?, open(&paths[1])?];
        let mut j = Journal {
            files,
            paths,
            active: 0,
            len: 0,
            epoch: 1,
            sync,
            pending: Vec::new(),
            pending_records: 0,
            in_flight: None,
            in_place: false,
        };
        j.start_epoch()?;
        Ok(j)
    }

    /// Writes the epoch record that opens the (empty) active file.
    fn start_epoch(&mut self) -> io::Result<()> {
        let frame = Record::Epoch(self.epoch).encode();
        let f = &mut self.files[self.active];
        if let Err(e) = f.write_all(&frame) {
            let _ = f.set_len(0);
            return Err(e);
        }
        if self.sync {
            f.sync_data()?;
        }
        self.len = frame.len() as u64;
        Ok(())
    }

    /// Appends a record; when this returns `Ok` the record survives a crash of the process
    /// (and with `sync`, of the machine).
    ///
    /// # Errors
    /// The write failed (e.g. `ENOSPC`): the change it was to protect must not be applied.
    pub fn append(&mut self, r: Record) -> io::Result<()> {
        let sync = self.sync;
        self.append_with(r, sync)
    }

    /// [`append`](Self::append) without `fdatasync`, even with `sync`: for change-log entries,
    /// which protect nothing and describe changes the daemon does not sync either (a later
    /// synced record, or the kernel's writeback, carries them to the disk).
    ///
    /// # Errors
    /// As [`append`](Self::append).
    pub fn append_unsynced(&mut self, r: Record) -> io::Result<()> {
        self.append_with(r, false)
    }

    fn append_with(&mut self, r: Record, sync: bool) -> io::Result<()> {
        let frame = r.encode();
        let f = &mut self.files[self.active];
        if let Err(e) = f.write_all(&frame) {
            // Drop a partial frame so later records are not hidden behind it.
            let _ = f.set_len(self.len);
            return Err(e);
        }
        if sync {
            f.sync_data()?;
        }
        self.len += frame.len() as u64;
        self.pending.extend_from_slice(&frame);
        self.pending_records += 1;
        Ok(())
    }

    /// How many records wait for the database (the batch in flight left out).
    pub fn pending_len(&self) -> usize {
        self.pending_records
    }

    /// The records to apply next, or `None` when there are none. A batch not yet reported done
    /// is handed out again; otherwise the pending records become the batch and appends move to
    /// the other file (empty, and opened with the next epoch).
    ///
    /// # Errors
    /// The other file could not be started: nothing changed, the records stay pending.
    pub fn take_batch(&mut self) -> io::Result<Option<Arc<Batch>>> {
        if let Some(b) = &self.in_flight {
            return Ok(Some(b.clone()));
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let (active, len, epoch) = (self.active, self.len, self.epoch);
        self.active ^= 1;
        self.epoch += 1;
        if let Err(e) = self.start_epoch() {
            // The other file cannot be started (a full disk): appends stay in this file, and
            // the batch's records stay in it after they are applied (they only replay after a
            // crash); the next batch that can move on empties it.
            tracing::warn!("capture journal: {e}; applying without switching files");
            (self.active, self.len, self.epoch) = (active, len, epoch);
            self.in_place = true;
        }
        let batch = Arc::new(Batch {
            frames: std::mem::take(&mut self.pending),
            records: std::mem::take(&mut self.pending_records),
        });
        self.in_flight = Some(batch.clone());
        Ok(Some(batch))
    }

    /// Reports whether the batch from [`take_batch`](Self::take_batch) is in the database: if
    /// so, its file is emptied; if not, it is handed out again next time.
    ///
    /// # Errors
    /// The file could not be emptied (its records would only replay after a crash; the next
    /// batch tries again).
    pub fn batch_done(&mut self, applied: bool) -> io::Result<()> {
        if !applied {
            return Ok(());
        }
        if !std::mem::take(&mut self.in_place) {
            self.files[self.active ^ 1].set_len(0)?;
        }
        self.in_flight = None;
        Ok(())
    }

    /// Whether a batch was taken and not yet reported applied.
    pub fn has_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The journal files.
    pub fn paths(&self) -> &[PathBuf; 2] {
        &self.paths
    }
}

#[cfg(test)]
mod tests;
