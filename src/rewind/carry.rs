//! Carrying history to another store: export a run of checkpoints as a bundle, import one.
//!
//! A bundle (`store/bundle/`, `schema/bundle.md`) holds the rows of every checkpoint from
//! the first one asked for to the newest — of every session: the state at a checkpoint depends
//! on every capture after it — and every blob they name. It also holds one checkpoint of its
//! own, the *export* checkpoint (uuid = the export's id, kind `mount`), whose captures are the
//! state at export of every path a rewind to the first checkpoint would look at
//! ([`Ground::candidates`]). On the other side, a path's history then ends in a capture, not
//! in that store's present tree: every exported checkpoint rewinds to exactly what it did here
//! (a range pre-image's chain ends on a complete one), whatever the other tree holds; a rewind
//! to the export checkpoint gives the tree as it was at export.
//!
//! Invariants:
//! - An export reads the rows (the change log's buffer flushed first) and the present tree
//!   under the capture gate (one instant's history); the blobs, which never change, are
//!   copied after it is released, under the `apply` lock (gc cannot remove one meanwhile).
//!   The bundle is written beside its name and renamed into place when complete.
//! - An import stages the bundle (every frame checked, blobs stored) under the `apply` lock,
//!   then, under the capture gate, records the present state of every path the imported
//!   history touches (the *splice*, a checkpoint before the imported ones: a rewind to one of
//!   this store's earlier checkpoints meets it before another tree's pre-images), inserts the
//!   rows in one transaction, and begins a new checkpoint: what happens after lands after the
//!   imported history. A failure removes what it stored.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::OFlags;
use serde_json::{Map, Value};

use super::history::History;
use super::{Request, RewindError, Scope, Views};
use crate::capture::snapshot;
use crate::store::bundle::{
    BundleError, BundleWriter, ImportPlan, ImportReport, Manifest, Row, blob_value,
};
use crate::store::{
    Actor, BlobRef, CheckpointKind, Kind, Op, Origin, OriginKind, PreImage, Purpose, Xattrs, now_ms,
};
use crate::sys;

/// Which checkpoints an export carries: from the first of `session` at or after `since` (or
/// the first one kept) to the newest.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub session: Option<String>,
    pub since: Option<String>,
}

impl From<BundleError> for RewindError {
    fn from(e: BundleError) -> Self {
        RewindError::Refused(e.to_string())
    }
}

/// Files up to this size are hashed and copied from one read.
const IN_MEMORY: u64 = 64 << 20;

/// A capture row of the tree as it is at export (the export's own checkpoint), and the blob
/// it names with its size (a regular file's content; the bundle's `blobs` table gets a row for
/// it), kept beside the row rather than read back out of it.
struct NowRow {
    row: Map<String, Value>,
    blob: Option<(String, u64)>,
}

impl Views {
    /// The seq an export starts at.
    fn export_start(&self, sel: &Selection) -> Result<i64, RewindError> {
        let from = match &sel.since {
            Some(u) => {
                let req = Request {
                    user_message_id: u.clone(),
                    dry_run: true,
                    scope: Scope::All,
                    force: true,
                    paths: Vec::new(),
                    session_id: None,
                    trust_imported: false,
                };
                self.g
                    .checked(&req)
                    .map_err(|e| match e {
                        RewindError::NoCheckpoint => RewindError::Unknown(u.clone()),
                        e => e,
                    })?
                    .1
                    .seq
            }
            None => 0,
        };
        let kept = self.g.store.checkpoints(sel.session.as_deref())?;
        kept.iter()
            .map(|c| c.checkpoint.seq)
            .find(|s| *s >= from)
            .ok_or_else(|| {
                RewindError::Refused(match &sel.session {
                    Some(s) => format!("session {s:?} has no checkpoint to export here"),
                    None => "no checkpoint to export".into(),
                })
            })
    }

    /// Writes a bundle of the checkpoints `sel` names to `out` (replaced if it exists);
    /// `workspace` and `store` are recorded as where it came from.
    ///
    /// # Errors
    /// `Unknown` for an unknown `since`; `Refused` when nothing is selected or a blob of the
    /// store is damaged; I/O errors writing the bundle (which is then not left behind).
    pub fn export(
        &self,
        sel: &Selection,
        out: &Path,
        workspace: &Path,
        store: &Path,
    ) -> Result<Manifest, RewindError> {
        let _one = self.g.one();
        let start = self.export_start(sel)?;
        // Private (0600) and made beside its name through the directory's fd, never through
        // a name another user could plant (`outside.rs`); renamed into place when complete.
        let mut file = super::outside::NewFile::create(out)?;
        let f = file
            .file
            .take()
            .ok_or_else(|| RewindError::Failed("export".into()))?;
        let m = self.write_bundle(
            start,
            sel,
            io::BufWriter::with_capacity(1 << 20, f),
            workspace,
            store,
        )?;
        file.commit()?;
        Ok(m)
    }

    fn write_bundle(
        &self,
        start: i64,
        sel: &Selection,
        file: io::BufWriter<std::fs::File>,
        workspace: &Path,
        store: &Path,
    ) -> Result<Manifest, RewindError> {
        let mut w = BundleWriter::new(file)?;
        let export_id = uuid::Uuid::new_v4().to_string();
        self.g.kernel.flush();
        let (mut rows, now_rows) = {
            let _gate = self.g.recorder.exclusive();
            // The change log's newest entries are still buffered: all of it goes.
            self.g.recorder.flush_log();
            let rows = self.g.store.export_rows(start)?;
            let hist = History::load(&self.g.store, start)?;
            let mut names: Vec<Vec<u8>> = self
                .g
                .candidates(&hist, super::inside(Scope::All))
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect();
            names.sort();
            let now_rows = self.snapshot_into(&names, &mut w)?;
            (rows, now_rows)
        };
        // The store's blobs, each once (those the present tree shares are written already).
        for r in rows.iter().filter(|r| r.t == "blobs") {
            let (Some(h), Some(size)) = (r.text("hash"), r.int("size")) else {
                continue;
            };
            if w.has_blob(h) {
                continue;
            }
            // The writer reads the blob's `size` bytes and checks them against its name itself
            // (a mismatch fails the export, which leaves no bundle behind).
            let mut src =
                self.g.store.blobs.stream_verified(h).map_err(|e| {
                    RewindError::Refused(format!("export: blob {h} of the store: {e}"))
                })?;
            w.blob(h, size as u64, &mut src)
                .map_err(|e| RewindError::Refused(format!("export: blob {h} of the store: {e}")))?;
        }
        // The export's own checkpoint, after every exported one, holding the present.
        let max_seq = rows
            .iter()
            .filter(|r| r.t == "checkpoints")
            .filter_map(|r| r.int("seq"))
            .max()
            .unwrap_or(0);
        let max_id = rows
            .iter()
            .filter(|r| r.t == "captures")
            .filter_map(|r| r.int("id"))
            .max()
            .unwrap_or(0);
        let at = now_ms();
        let mut cp = Map::new();
        cp.insert("seq".into(), Value::from(max_seq + 1));
        cp.insert("uuid".into(), Value::from(export_id.clone()));
        cp.insert("session_id".into(), Value::Null);
        cp.insert("kind".into(), Value::from(CheckpointKind::Mount.as_str()));
        cp.insert("began_at".into(), Value::from(at));
        rows.push(Row {
            t: "checkpoints".into(),
            r: cp,
        });
        for (i, NowRow { row: mut c, blob }) in now_rows.into_iter().enumerate() {
            c.insert("id".into(), Value::from(max_id + 1 + i as i64));
            c.insert("checkpoint".into(), Value::from(max_seq + 1));
            c.insert("created_at".into(), Value::from(at));
            if let Some((h, size)) = blob {
                let mut b = Map::new();
                b.insert("hash".into(), Value::from(h));
                b.insert("size".into(), Value::from(size));
                rows.push(Row {
                    t: "blobs".into(),
                    r: b,
                });
            }
            rows.push(Row {
                t: "captures".into(),
                r: c,
            });
        }
        let mut checkpoints = Vec::new();
        for r in &rows {
            if r.t == "checkpoints" {
                checkpoints.extend(r.text("uuid").map(str::to_string));
            }
            w.row(r)?;
        }
        let (mut file, m) = w.finish(Manifest {
            schema: 0,
            export_id,
            created_at: at,
            workspace: workspace.to_string_lossy().into_owned(),
            store: store.to_string_lossy().into_owned(),
            session: sel.session.clone(),
            since: sel.since.clone(),
            checkpoints,
            ..Manifest::default()
        })?;
        io::Write::flush(&mut file)?;
        file.get_ref().sync_all()?;
        Ok(m)
    }

    /// The present state of each of `names`, as capture rows (without id, checkpoint and
    /// time), each file's content written to the bundle as a blob.
    fn snapshot_into(
        &self,
        names: &[Vec<u8>],
        w: &mut BundleWriter<io::BufWriter<std::fs::File>>,
    ) -> Result<Vec<NowRow>, RewindError> {
        let mut out = Vec::with_capacity(names.len());
        for p in names {
            let rel = crate::wspath::key_path(p);
            let mut c = Map::new();
            c.insert("path".into(), blob_value(p));
            // No change caused it: its op is `write`, as a rewind's own captures record theirs.
            c.insert("purpose".into(), Value::from(Purpose::Checkpoint.as_str()));
            c.insert("actor".into(), Value::from(Actor::External.as_str()));
            c.insert("actors".into(), Value::from(Actor::External.bit()));
            c.insert("op".into(), Value::from(Op::Write.as_str()));
            c.insert("partial".into(), Value::from(0));
            c.insert("blob".into(), Value::Null);
            c.insert("target".into(), Value::Null);
            // Not recorded (an absent path, a symlink) unless read below, as capture does.
            c.insert("xattrs".into(), Value::Null);
            let st = sys::lstat_beneath_opt(self.g.root(), rel)?;
            let Some(st) = st else {
                c.insert("kind".into(), Value::from(Kind::Absent.as_str()));
                for k in ["mode", "uid", "gid", "size"] {
                    c.insert(k.into(), Value::from(0));
                }
                out.push(NowRow { row: c, blob: None });
                continue;
            };
            c.insert("mode".into(), Value::from(st.st_mode));
            c.insert("uid".into(), Value::from(st.st_uid));
            c.insert("gid".into(), Value::from(st.st_gid));
            c.insert("size".into(), Value::from(st.st_size as u64));
            let mut blob = None;
            let kind = match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {
                    let fd = sys::open_beneath(
                        self.g.root(),
                        rel,
                        OFlags::RDONLY | OFlags::NONBLOCK,
                        0,
                    )?;
                    let size = sys::fstat(fd.as_fd())?.st_size as u64;
                    let mut f = std::fs::File::from(fd);
                    let (hash, size) = if size <= IN_MEMORY {
                        let mut buf = Vec::with_capacity(size as usize);
                        (&mut f).take(size).read_to_end(&mut buf)?;
                        let h = crate::store::blobs::content_hash(&buf);
                        w.blob(&h, buf.len() as u64, &mut &buf[..])?;
                        c.insert("size".into(), Value::from(buf.len() as u64));
                        (h, buf.len() as u64)
                    } else {
                        let mut hasher = crate::store::blobs::ContentHasher::default();
                        io::copy(&mut (&mut f).take(size), &mut hasher)?;
                        let h = hasher.finish();
                        if !w.has_blob(&h) {
                            io::Seek::seek(&mut f, io::SeekFrom::Start(0))?;
                            w.blob(&h, size, &mut f)?;
                        }
                        (h, size)
                    };
                    c.insert("blob".into(), Value::from(hash.clone()));
                    blob = Some((hash, size));
                    c.insert("xattrs".into(), xattrs_value(super::attrs::read(f.as_fd())));
                    Kind::File
                }
                libc::S_IFDIR => {
                    let x = super::attrs::read_at(self.g.root(), rel);
                    c.insert("xattrs".into(), xattrs_value(x));
                    Kind::Dir
                }
                libc::S_IFLNK => {
                    let t = sys::readlinkat(self.g.root(), rel)?;
                    c.insert("target".into(), blob_value(t.as_bytes()));
                    Kind::Symlink
                }
                _ => {
                    c.insert("size".into(), Value::from(st.st_rdev));
                    let x = super::attrs::read_at(self.g.root(), rel);
                    c.insert("xattrs".into(), xattrs_value(x));
                    Kind::Other
                }
            };
            c.insert("kind".into(), Value::from(kind.as_str()));
            out.push(NowRow { row: c, blob });
        }
        Ok(out)
    }

    /// Opens the file at workspace-relative `rel` for reading, beneath the mount (a bundle
    /// kept in the workspace is read from the directory underneath, not through the mount,
    /// where reading it would be a change to record).
    ///
    /// # Errors
    /// The file cannot be opened (with its path).
    pub fn open_in_workspace(&self, rel: &Path) -> io::Result<std::fs::File> {
        sys::open_beneath(self.g.root(), rel, OFlags::RDONLY, 0)
            .map(std::fs::File::from)
            .map_err(|e| sys::ctx(e, format!("opening {}", rel.display())))
    }

    /// Imports a bundle read from `src`: its checkpoints become listable, showable and
    /// rewindable here. Importing the same bundle again does nothing (`already`).
    ///
    /// Before the imported history, a checkpoint of the present state of every path it
    /// touches is spliced in (see the module doc), and a new checkpoint begins after it.
    ///
    /// # Errors
    /// `Refused` for a damaged or cut bundle (naming the byte offset), or one whose history
    /// diverges from this store's; store and file-system errors. Nothing is imported then.
    pub fn import(
        &self,
        src: impl Read,
        trust: &crate::store::bundle::Trust,
    ) -> Result<(ImportReport, Option<String>), RewindError> {
        let _one = self.g.one();
        let t0 = std::time::Instant::now();
        let staged = self
            .g
            .store
            .stage_bundle(src, Some(self.g.recorder.capture_lock()), trust)?;
        let signed_by = staged.signed_by.clone();
        let staged_in = t0.elapsed();
        self.g.kernel.flush();
        let mut stored: Vec<BlobRef> = Vec::new();
        let res: Result<ImportReport, RewindError> = (|| {
            let _gate = self.g.recorder.exclusive();
            // The message uuids the bundle knows for prompts not bound here yet (true whether
            // or not the rest is imported).
            for (prompt_id, uuid) in self.g.store.bundle_bindings(&staged)? {
                self.g.turns.bind_prompt(&prompt_id, &uuid)?;
            }
            if let ImportPlan::Already(r) = self.g.store.import_plan(&staged)? {
                return Ok(r);
            }
            let planned_in = t0.elapsed();
            self.splice_names(&staged)?;
            let named_in = t0.elapsed();
            let root = self.g.root();
            let store = &self.g.store;
            let mut read = |p: &[u8]| -> io::Result<PreImage> {
                let pre = snapshot(root, crate::wspath::key_path(p), store)?;
                stored.extend(pre.blob.clone());
                Ok(pre)
            };
            let r = self.g.store.import_rows(
                &staged,
                Some(import_origin(&staged.manifest)),
                Some(&mut read),
            )?;
            tracing::info!(
                "import: {} rows in {:?} (read and checked {staged_in:?}, planned {:?}, splice \
                 named {:?}, inserted {:?})",
                r.rows,
                t0.elapsed(),
                planned_in - staged_in,
                named_in - planned_in,
                t0.elapsed() - named_in
            );
            // What happens from now on lands after the imported history.
            let uuid = uuid::Uuid::new_v4().to_string();
            self.g.recorder.begin(&uuid, None, CheckpointKind::Mount)?;
            Ok(r)
        })();
        if !matches!(&res, Ok(r) if !r.already) {
            if let Err(e) = staged.discard(&self.g.store, Some(self.g.recorder.capture_lock())) {
                tracing::warn!("import: removing the blobs it stored: {e}");
            }
            if let Err(e) = self.g.recorder.discard_unreferenced(&stored) {
                tracing::warn!("import: removing the blobs it stored: {e}");
            }
        }
        res.map(|r| (r, signed_by))
    }

    /// Every path the imported history touches — every name a rewind through it would look at
    /// ([`Ground::candidates`], over the present tree) — into the staging file, whose present
    /// state is then spliced in before the imported history: it keeps a rewind to one of this
    /// store's own earlier checkpoints from meeting another tree's pre-images (it meets the
    /// present first, which is what those paths were since). Streamed: a name at a time.
    fn splice_names(&self, staged: &crate::store::bundle::Staged) -> Result<(), RewindError> {
        let hist = History {
            by_path: HashMap::new(),
            moves: staged.new_moves()?,
        };
        // Beneath the renamed directories, as the present tree has them.
        for p in self.g.candidates(&hist, super::inside(Scope::All)) {
            if !p.is_empty() {
                staged.add_splice_name(&p)?;
            }
        }
        // Each captured path, by its name before and after every rename.
        staged.each_new_capture(|p, id| {
            for name in [
                hist.name_at_start(&p, (id, 0)),
                hist.name_now(&p, (id, 0)),
                p,
            ] {
                if !name.is_empty() {
                    staged.add_splice_name(&name)?;
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// `captures.xattrs` in a bundle row: its stored form as a BLOB, or NULL (not recorded).
fn xattrs_value(x: Option<Xattrs>) -> Value {
    x.map_or(Value::Null, |x| blob_value(&x.encode()))
}

/// The origin an import records on the first checkpoint it adds.
pub fn import_origin(m: &Manifest) -> Origin {
    Origin {
        kind: OriginKind::Import,
        workspace: m.workspace.clone(),
        store: Some(m.store.clone()),
        uuid: m.checkpoints.first().cloned().unwrap_or_default(),
        session_id: m.session.clone(),
        at: now_ms(),
    }
}
