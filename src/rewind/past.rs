//! The tree as it was when a checkpoint began, looked at without rewinding: one path
//! (`show`), a directory's entries (`ls`), and the differences between two checkpoints
//! (`diff A B`). `fork.rs` writes a whole such tree out.
//!
//! **Exactly what a rewind would produce.** The state of path `q` at checkpoint `C` is what a
//! rewind to `C` with scope `all` would make of it, found by the rewind's own code: the
//! lineage of `q` since `C` ([`History::lineage`]), and, for a directory's entries, the names
//! such a rewind looks at ([`Ground::candidates`]) together with the entries the directory
//! has now. A name outside the rewind's set is unchanged since `C`, so it is as it is now.
//!
//! **Nothing is copied to answer.** Where the rewind's plan stores content as a blob (a file
//! completed from range pre-images, a file moved since), a [`Past`] only says where the bytes
//! are ([`Source`]) and streams them from there: a blob, the range chain (`patched.rs`), or
//! the file as it is now.
//!
//! Invariants:
//! - Read-only: nothing here changes the tree or the store (no blob is written).
//! - A look holds the one-at-a-time guard (`one.rs`) (no rewind or gc meanwhile: gc could remove a blob
//!   being read, a rewind change the present being compared with) after the kernel's dirty
//!   data is flushed, so what the kernel holds counts as the present.
//! - Every blob is read verified (`store/blobs/verify.rs`): a complete pre-image is streamed by
//!   [`BlobStream`](crate::store::blobs::BlobStream), and a range chain's base blob by the
//!   chain reader, each reporting its end only once the whole blob hashes to its name; what
//!   was read is used (shown, compared, written out) only after that end, so a damaged or
//!   missing blob is an error naming the path and the checkpoint, never shown as the past.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;

use super::diff::{DiffOut, Side, file_diff};
use super::filter::Filter;
use super::history::{History, Lineage};
use super::{Request, RewindError, Scope, Views};
use crate::store::blobs::ContentHasher;
use crate::store::{BlobRef, Capture, Kind, PreImage, Xattrs};
use crate::sys;
use crate::wspath::{self, Node};

/// Where the content of a path at a checkpoint is, now.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// No content of its own: a directory, symlink or special file the store saved.
    Saved,
    /// A complete pre-image: this blob (the empty blob for an empty file).
    Blob(BlobRef),
    /// A range pre-image, completed from its chain (`patched.rs`): the capture, and the name
    /// the file had when it was taken.
    Chain(Capture, Vec<u8>),
    /// Unchanged since the checkpoint, now found at this path (its own, or where a directory
    /// rename took it).
    Tree(Vec<u8>),
}

/// One path as it was when a checkpoint began.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Workspace-relative path, as bytes (empty for the workspace itself).
    pub path: Vec<u8>,
    /// What it was (never [`Kind::Absent`]: an absent path has no entry).
    pub kind: Kind,
    /// `st_mode`, type bits included.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// A file's size; a special file's device number (as the store keeps it).
    pub size: u64,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
    /// The extended attributes the store recorded (`None`: not recorded, or the path is
    /// unchanged since: see [`Views::xattrs_then`]).
    pub(super) xattrs: Option<Xattrs>,
    /// Where its content is.
    pub(super) source: Source,
    /// Its state came from elsewhere (an import or pull: see `privileges.rs`).
    pub(super) imported: bool,
}

impl Entry {
    /// The content's BLAKE3 hash when the store knows it without reading (a complete
    /// pre-image whose blob is named by its hash, not an adopted file still pending).
    pub fn known_hash(&self) -> Option<&str> {
        match &self.source {
            Source::Blob(h) if !h.is_pending() => Some(h.as_str()),
            _ => None,
        }
    }

    /// Whether the path is as it is now, at the same name (its content can be copied from
    /// the present tree).
    pub fn unchanged(&self) -> bool {
        matches!(&self.source, Source::Tree(at) if *at == self.path)
    }

    /// The path for the `*at` calls (`.` for the workspace itself).
    pub fn rel(&self) -> &Path {
        crate::wspath::key_path(&self.path)
    }

    /// The entry a complete pre-image gives (`None` for absent).
    fn of_pre(q: &[u8], p: &PreImage) -> Option<Entry> {
        let source = match p.kind {
            Kind::Absent => return None,
            Kind::File => Source::Blob(
                p.blob
                    .clone()
                    .unwrap_or_else(|| BlobRef::hash(crate::store::blobs::empty_hash())),
            ),
            _ => Source::Saved,
        };
        Some(Entry {
            path: q.to_vec(),
            kind: p.kind,
            mode: p.mode,
            uid: p.uid,
            gid: p.gid,
            size: p.size,
            target: p.target.clone(),
            xattrs: p.xattrs.clone(),
            source,
            imported: p.imported,
        })
    }
}

/// A checkpoint, opened for looking at the tree as it was when it began.
pub(super) struct Past {
    /// The checkpoint's uuid (lowercase, hyphenated).
    pub(super) uuid: String,
    /// The events recorded since it began.
    pub(super) hist: History,
    /// The names a rewind to it looks at (see the module doc), by parent directory.
    by_parent: HashMap<Vec<u8>, BTreeSet<Vec<u8>>>,
    /// The same names, in path order.
    pub(super) names: BTreeSet<Vec<u8>>,
}

/// What `show` answers.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The path as it was.
    pub entry: Entry,
    /// A file's BLAKE3 hash (the whole content's), when the content was read whole or the
    /// store knows it.
    pub hash: Option<String>,
    /// The bytes asked for (a file's, from the offset asked for).
    pub content: Option<Vec<u8>>,
}

/// How much of a file `show` returns.
#[derive(Debug, Clone, Copy)]
pub enum Want {
    /// Nothing: only what the path was (its hash read if the store does not know it).
    Meta,
    /// From `offset`, at most `length` bytes (`None`: to the end).
    Bytes { offset: u64, length: Option<u64> },
}

impl Views {
    /// Opens checkpoint `uuid` for looking at (the caller holds the one-at-a-time guard).
    ///
    /// # Errors
    /// [`RewindError::Unknown`] for a uuid that is not a checkpoint here; `Refused` for one gc
    /// removed; store errors.
    pub(super) fn past(&self, uuid: &str) -> Result<Past, RewindError> {
        let req = Request {
            user_message_id: uuid.to_string(),
            dry_run: true,
            scope: Scope::All,
            force: true,
            paths: Vec::new(),
            session_id: None,
            trust_imported: false,
        };
        let (uuid, cp, _) = self.g.checked(&req).map_err(|e| match e {
            RewindError::NoCheckpoint => RewindError::Unknown(uuid.to_string()),
            RewindError::Dropped { at, why } => RewindError::Refused(format!(
                "checkpoint {uuid} was removed by gc at {at}: {why}"
            )),
            e => e,
        })?;
        let hist = History::load(&self.g.store, cp.seq)?;
        let names: BTreeSet<Vec<u8>> = self
            .g
            .candidates(&hist, super::inside(Scope::All))
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let mut by_parent: HashMap<Vec<u8>, BTreeSet<Vec<u8>>> = HashMap::new();
        for p in &names {
            // Every ancestor of a name is a name to look at beneath its own parent too (a
            // directory that held it may be gone now).
            let mut cur: &[u8] = p;
            loop {
                let (dir, name) = (wspath::parent(cur), wspath::name(cur));
                if !by_parent
                    .entry(dir.to_vec())
                    .or_default()
                    .insert(name.to_vec())
                {
                    break;
                }
                if dir.is_empty() {
                    break;
                }
                cur = dir;
            }
        }
        Ok(Past {
            uuid,
            hist,
            by_parent,
            names,
        })
    }

    /// What `q` was when the checkpoint began (`None`: it did not exist).
    ///
    /// # Errors
    /// File-system errors reading the present.
    pub(super) fn entry(&self, past: &Past, q: &[u8]) -> Result<Option<Entry>, RewindError> {
        Ok(match past.hist.lineage(q) {
            Lineage::Pre(p) => Entry::of_pre(q, &p),
            Lineage::Partial(c, at) => Some(Entry {
                path: q.to_vec(),
                kind: Kind::File,
                mode: c.pre.mode,
                uid: c.pre.uid,
                gid: c.pre.gid,
                size: c.pre.size,
                target: None,
                xattrs: c.pre.xattrs.clone(),
                imported: c.pre.imported,
                source: Source::Chain(c, at),
            }),
            Lineage::Current(at) => self.entry_now(q, at)?,
        })
    }

    /// `q`, unchanged since the checkpoint, as the present tree has it at `at`.
    fn entry_now(&self, q: &[u8], at: Vec<u8>) -> io::Result<Option<Entry>> {
        let rel = crate::wspath::key_path(&at);
        let Some(st) = sys::lstat_beneath_opt(self.g.root(), rel)? else {
            return Ok(None);
        };
        let (kind, size, target) = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => (Kind::File, st.st_size as u64, None),
            libc::S_IFDIR => (Kind::Dir, st.st_size as u64, None),
            libc::S_IFLNK => (
                Kind::Symlink,
                st.st_size as u64,
                Some(sys::readlinkat(self.g.root(), rel)?.as_bytes().to_vec()),
            ),
            _ => (Kind::Other, st.st_rdev, None),
        };
        Ok(Some(Entry {
            path: q.to_vec(),
            kind,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            size,
            target,
            xattrs: None,
            source: Source::Tree(at),
            imported: false,
        }))
    }

    /// The extended attributes `e` had when the checkpoint began: those the store recorded,
    /// or for a path unchanged since, those it has now (read as a capture reads them). `None`:
    /// not known (a symlink, a capture by an older rewindfs, attributes that cannot be read).
    pub(super) fn xattrs_then(&self, e: &Entry) -> Option<Xattrs> {
        match &e.source {
            Source::Tree(_) if e.kind == Kind::Symlink => None,
            Source::Tree(at) if at.is_empty() => {
                super::attrs::read_at(self.g.root(), Path::new("."))
            }
            Source::Tree(at) => super::attrs::read_at(self.g.root(), crate::wspath::key_path(at)),
            _ => e.xattrs.clone(),
        }
    }

    /// The entries of directory `dir` when the checkpoint began, by name: the names a rewind
    /// looks at beneath it, and those the directory has now (and where a rename took it), each
    /// as its lineage says.
    ///
    /// # Errors
    /// File-system errors reading the present.
    pub(super) fn children(&self, past: &Past, dir: &Entry) -> Result<Vec<Entry>, RewindError> {
        let mut names: BTreeSet<Vec<u8>> =
            past.by_parent.get(&dir.path).cloned().unwrap_or_default();
        let mut list = |at: &[u8]| -> io::Result<()> {
            let rel = crate::wspath::key_path(at);
            let fd = match sys::open_beneath(
                self.g.root(),
                rel,
                OFlags::RDONLY | OFlags::DIRECTORY,
                0,
            ) {
                Ok(fd) => fd,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            for (name, _, _) in sys::read_dir_all(fd)? {
                names.insert(name.as_bytes().to_vec());
            }
            Ok(())
        };
        list(&dir.path)?;
        if let Source::Tree(at) = &dir.source {
            if *at != dir.path {
                list(at)?;
            }
        }
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            if let Some(e) = self.entry(past, &wspath::join(&dir.path, &n))? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// A reader of a file entry's content, from where it is (nothing is copied). Blobs are
    /// verified as they are read (see the module doc): nothing read may be used before the
    /// read that returns 0, and a read error is one to report with [`unreadable`].
    ///
    /// # Errors
    /// The blob or file cannot be opened; a range chain cannot be read.
    pub(super) fn content<'a>(
        &'a self,
        past: &'a Past,
        e: &Entry,
    ) -> Result<Box<dyn Read + 'a>, RewindError> {
        let unreadable = |err: io::Error| unreadable(&e.path, &past.uuid, err);
        Ok(match &e.source {
            Source::Saved => Box::new(io::empty()),
            Source::Blob(h) => Box::new(
                self.g
                    .store
                    .blobs
                    .stream_verified(h.as_str())
                    .map_err(unreadable)?,
            ),
            Source::Chain(c, at) => Box::new(self.g.chain(&past.hist, c, at, &unreadable)?),
            Source::Tree(at) if e.kind == Kind::File => {
                let rel = crate::wspath::key_path(at);
                let fd =
                    sys::open_beneath(self.g.root(), rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)
                        .map_err(|err| sys::ctx(err, format!("opening {}", rel.display())))?;
                Box::new(std::fs::File::from(fd))
            }
            Source::Tree(_) => Box::new(io::empty()),
        })
    }

    /// Reads a file entry whole (its blobs verified).
    fn read_whole(&self, past: &Past, e: &Entry) -> Result<Vec<u8>, RewindError> {
        let mut buf = Vec::with_capacity(e.size.min(1 << 26) as usize);
        self.content(past, e)?
            .read_to_end(&mut buf)
            .map_err(|err| unreadable(&e.path, &past.uuid, err))?;
        Ok(buf)
    }

    /// Looks at one path as it was when checkpoint `uuid` began: what it was, and for a file
    /// its hash and (as `read` asks) its bytes.
    ///
    /// # Errors
    /// `Unknown` for an unknown checkpoint, `NotThen` for a path that did not exist then;
    /// store and file-system errors.
    pub fn show(&self, uuid: &str, path: &Node, read: Want) -> Result<Shown, RewindError> {
        let _one = self.g.one();
        self.g.kernel.flush();
        let past = self.past(uuid)?;
        let q = path.as_bytes();
        let Some(entry) = self.entry(&past, q)? else {
            return Err(RewindError::NotThen {
                path: crate::wire_path::encode(q),
                checkpoint: past.uuid,
            });
        };
        if entry.kind != Kind::File {
            return Ok(Shown {
                entry,
                hash: None,
                content: None,
            });
        }
        let (hash, content) = match read {
            Want::Meta => match entry.known_hash() {
                Some(h) => (Some(h.to_string()), None),
                None => {
                    let mut h = ContentHasher::default();
                    io::copy(&mut self.content(&past, &entry)?, &mut h)
                        .map_err(|err| unreadable(q, &past.uuid, err))?;
                    (Some(h.finish()), None)
                }
            },
            Want::Bytes { offset, length } => {
                // One pass, to the end (which verifies a blob): the whole content is hashed
                // (unless the store knows the hash), the part asked for kept.
                let mut src = self.content(&past, &entry)?;
                let mut h = entry.known_hash().is_none().then(ContentHasher::default);
                let mut kept = Vec::new();
                let end = length.map_or(u64::MAX, |l| offset.saturating_add(l));
                let mut pos = 0u64;
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let n = match src.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(unreadable(q, &past.uuid, e)),
                    };
                    if let Some(h) = &mut h {
                        h.update(&buf[..n]);
                    }
                    let (lo, hi) = (pos.max(offset), (pos + n as u64).min(end));
                    if lo < hi {
                        kept.extend_from_slice(&buf[(lo - pos) as usize..(hi - pos) as usize]);
                    }
                    pos += n as u64;
                }
                let hash = h.map_or_else(
                    || entry.known_hash().map(str::to_string),
                    |h| Some(h.finish()),
                );
                (hash, Some(kept))
            }
        };
        Ok(Shown {
            entry,
            hash,
            content,
        })
    }

    /// The entries of directory `dir` as they were when checkpoint `uuid` began, by name, with
    /// the directory's own entry.
    ///
    /// # Errors
    /// `Unknown`, `NotThen`, `NotADirectory`; store and file-system errors.
    pub fn list_at(&self, uuid: &str, dir: &Node) -> Result<(Entry, Vec<Entry>), RewindError> {
        let _one = self.g.one();
        self.g.kernel.flush();
        let past = self.past(uuid)?;
        let q = dir.as_bytes();
        let Some(d) = self.entry(&past, q)? else {
            return Err(RewindError::NotThen {
                path: shown_name(dir),
                checkpoint: past.uuid,
            });
        };
        if d.kind != Kind::Dir {
            return Err(RewindError::NotADirectory {
                path: shown_name(dir),
                checkpoint: past.uuid,
                kind: d.kind.as_str(),
            });
        }
        let entries = self.children(&past, &d)?;
        Ok((d, entries))
    }

    /// Unified diff from the tree when checkpoint `a` began to the tree when `b` began (`path`:
    /// only that path or glob), with the paths that differ and their line counts.
    ///
    /// # Errors
    /// `Unknown` for either checkpoint; store and file-system errors.
    pub fn diff_between(
        &self,
        a: &str,
        b: &str,
        path: Option<&str>,
    ) -> Result<DiffOut, RewindError> {
        let _one = self.g.one();
        self.g.kernel.flush();
        let filter = Filter::new(&path.map(|p| vec![p.to_string()]).unwrap_or_default())?;
        let (pa, pb) = (self.past(a)?, self.past(b)?);
        // A path outside both rewinds' sets is unchanged since the earlier checkpoint, so the
        // same in both.
        let paths: BTreeSet<&Vec<u8>> = pa.names.iter().chain(pb.names.iter()).collect();
        let mut out = DiffOut::default();
        for p in paths {
            if !filter.matches(p) {
                continue;
            }
            let (ea, eb) = (self.entry(&pa, p)?, self.entry(&pb, p)?);
            let side = |past: &Past, e: &Option<Entry>| -> Result<Side, RewindError> {
                Ok(match e {
                    None => Side::absent(),
                    Some(e) if e.kind == Kind::File => Side {
                        kind: Kind::File,
                        mode: e.mode,
                        content: self.read_whole(past, e)?,
                        target: None,
                    },
                    Some(e) => Side {
                        kind: e.kind,
                        mode: e.mode,
                        content: Vec::new(),
                        target: e.target.clone(),
                    },
                })
            };
            // Equal complete pre-images, or the same present file, need no reading.
            if let (Some(x), Some(y)) = (&ea, &eb) {
                let same_content = match (&x.source, &y.source) {
                    (Source::Blob(h), Source::Blob(k)) => h == k,
                    (Source::Tree(p), Source::Tree(q)) => p == q,
                    _ => false,
                };
                if x.kind == y.kind
                    && x.mode == y.mode
                    && x.target == y.target
                    && (x.kind != Kind::File || same_content)
                {
                    continue;
                }
            }
            // A directory that comes or goes is seen in its entries (as `git diff` does).
            let kinds = (
                ea.as_ref().map_or(Kind::Absent, |e| e.kind),
                eb.as_ref().map_or(Kind::Absent, |e| e.kind),
            );
            if matches!(kinds, (Kind::Dir, Kind::Absent) | (Kind::Absent, Kind::Dir)) {
                continue;
            }
            let (sa, sb) = (side(&pa, &ea)?, side(&pb, &eb)?);
            if !sa.differs(&sb) {
                continue;
            }
            let name = crate::wire_path::encode(p);
            let (text, stat) = file_diff(&name, &sa, &sb);
            out.text.push_str(&text);
            out.files_changed.push(name);
            out.stats.push(stat);
        }
        Ok(out)
    }
}

/// A file's content at a checkpoint that cannot be read (a blob missing or damaged, a range
/// chain that cannot be completed): which path, which checkpoint, and (in `e`) which blob.
pub(super) fn unreadable(path: &[u8], checkpoint: &str, e: io::Error) -> RewindError {
    RewindError::Refused(format!(
        "{}: its content at checkpoint {checkpoint} cannot be read: {e} (`rewindfs fsck` checks the whole store)",
        crate::wire_path::encode(path)
    ))
}

/// A directory's name in a message (`.` for the workspace itself).
fn shown_name(p: &Node) -> String {
    match p {
        Node::Root => ".".into(),
        Node::Path(p) => crate::wire_path::encode(p),
    }
}
