//! Importing a staged bundle: which of its checkpoints are new here, whether what its rows
//! declare agrees with the bytes it holds, and its rows added in one transaction, with new ids
//! after every id in use. Rows are streamed from the staging file (`staging.rs`), one at a
//! time: memory does not grow with the bundle.
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use std::collections::HashMap;

use rusqlite::{Connection, TransactionBehavior};
use serde_json::{Map, Value};

use super::staging::Staging;
use super::*;
use crate::locks::Locked;
use crate::store::{Actor, CheckpointKind, Op, Origin, PreImage, Purpose, Store};

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub manifest_checkpoints: Vec<String>,
    /// Checkpoints added (0 when they were all here already).
    pub checkpoints: u64,
    pub rows: u64,
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Every checkpoint of the bundle was here already: nothing was done.
    pub already: bool,
    /// The exporting workspace.
    pub workspace: String,
}

/// What an import would add.
#[derive(Debug)]
pub enum ImportPlan {
    /// Every checkpoint of the bundle is here: nothing to do.
    Already(ImportReport),
    /// The rows of the other checkpoints go in (those of the known ones are left out in the
    /// staging file).
    Rows,
}

/// The present state of a path, taken while an import splices it in (see
/// [`Store::import_rows`]).
pub type SpliceFn<'a> = &'a mut dyn FnMut(&[u8]) -> std::io::Result<PreImage>;

impl Store {
    /// Inserts a staged bundle's rows in one transaction, renumbered (see the module doc),
    /// with no splice (see [`Store::import_rows`]): for a store no daemon serves.
    ///
    /// # Errors
    /// As [`Store::import_plan`] and [`Store::import_rows`].
    pub fn import_staged(
        &self,
        staged: &Staged,
        origin: Option<Origin>,
    ) -> std::result::Result<ImportReport, BundleError> {
        for (prompt_id, uuid) in self.bundle_bindings(staged)? {
            self.bind_prompt(&prompt_id, &uuid)?;
        }
        match self.import_plan(staged)? {
            ImportPlan::Already(r) => Ok(r),
            ImportPlan::Rows => self.import_rows(staged, origin, None),
        }
    }

    /// The message uuids a staged bundle knows for this store's prompts not bound yet:
    /// (prompt_id, uuid) for each checkpoint the bundle has bound to its message whose prompt
    /// this store began under the same prompt_id and has not bound (the bundle was exported
    /// after the transcript showed the uuid; an earlier one, imported here, before). Binding
    /// them first lets the bundle's history meet the store's under the same uuids.
    ///
    /// # Errors
    /// Store errors.
    pub fn bundle_bindings(
        &self,
        staged: &Staged,
    ) -> std::result::Result<Vec<(String, String)>, BundleError> {
        let mut out = Vec::new();
        staged.db.each("checkpoints", false, |r| {
            let (Some(prompt_id), Some(uuid)) = (r.text("prompt_id"), r.text("uuid")) else {
                return Ok(());
            };
            if r.int("bound") == Some(0) || prompt_id == uuid {
                return Ok(());
            }
            if self
                .checkpoint_of_prompt(prompt_id)?
                .is_some_and(|c| !c.bound)
            {
                out.push((prompt_id.to_string(), uuid.to_string()));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// What of a staged bundle is new here: the checkpoints the store has (which must begin
    /// the bundle's history) are left out, or `Already` when it has them all. Checks that every
    /// blob a new row names is in the bundle or here, and that the sizes the rows declare are
    /// the blobs' own.
    ///
    /// # Errors
    /// `Refused` for a history that diverges from the store's, a row naming a blob the bundle
    /// does not hold, or a declared size that does not match; store errors.
    pub fn import_plan(&self, staged: &Staged) -> std::result::Result<ImportPlan, BundleError> {
        let m = &staged.manifest;
        let db = &staged.db;
        // The export's own checkpoint (the tree at export) is new to every store; the history
        // is here when every other one is (a store importing its own export, say). What is
        // here must be where the bundle's history begins (an earlier push of the same
        // history): the rest goes after it.
        let mut history = 0u64;
        let mut known = 0u64;
        let mut first_new: Option<String> = None;
        db.each("checkpoints", false, |r| {
            let uuid = r.text("uuid").unwrap_or_default().to_string();
            if uuid == m.export_id {
                return Ok(());
            }
            history += 1;
            // A checkpoint begun by a prompt is here when the store has that prompt, whichever
            // uuid each side knows it by (the bundle's may not have been bound yet).
            let here = self.checkpoint(&uuid)?.is_some()
                || match r.text("prompt_id") {
                    Some(p) => self.checkpoint_of_prompt(p)?.is_some(),
                    None => false,
                };
            if !here {
                first_new.get_or_insert(uuid);
                return Ok(());
            }
            if let Some(before) = &first_new {
                return Err(BundleError::Refused(format!(
                    "checkpoint {uuid} of the bundle is in this store already, but {before} before it is not: the histories have diverged"
                )));
            }
            known += 1;
            if let Some(seq) = r.int("seq") {
                db.skip(seq)?;
            }
            Ok(())
        })?;
        if known == history {
            return Ok(ImportPlan::Already(ImportReport {
                manifest_checkpoints: m.checkpoints.clone(),
                workspace: m.workspace.clone(),
                already: true,
                ..ImportReport::default()
            }));
        }
        self.check_declared(db)?;
        Ok(ImportPlan::Rows)
    }

    /// Every blob a new row names is in the bundle or here, and is as long as the row says: a
    /// `blobs` row's size, a complete file capture's size (0 with no blob), a saved range's
    /// length. (A range capture's size is checked where its content is put together, against
    /// the history that completes it: `rewind/patched.rs`.)
    fn check_declared(&self, db: &Staging) -> std::result::Result<(), BundleError> {
        let size_of = |h: &str| -> std::result::Result<u64, BundleError> {
            match db.blob_size(h)? {
                Some(n) => Ok(n),
                None if self.blobs.exists(h) => Ok(std::fs::metadata(self.blobs.path(h))?.len()),
                None => Err(BundleError::Refused(format!(
                    "the bundle's rows name blob {h}, which it does not hold"
                ))),
            }
        };
        let wrong = |what: String| {
            BundleError::Refused(format!(
                "{what}: the bundle declares sizes its content does not have; nothing was \
                 imported (a rewindfs export never does: it was made or altered by someone else)"
            ))
        };
        db.each("blobs", true, |r| {
            let (Some(h), Some(size)) = (r.text("hash"), r.int("size")) else {
                return Ok(());
            };
            if db.blob_size(h)?.is_some() || self.blobs.exists(h) {
                let have = size_of(h)?;
                if have != size as u64 {
                    return Err(wrong(format!("blob {h} is {have} bytes, not {size}")));
                }
            }
            Ok(())
        })?;
        db.each("captures", true, |r| {
            let path = String::from_utf8_lossy(&r.bytes("path").unwrap_or_default()).into_owned();
            let size = r.int("size").unwrap_or(0) as u64;
            let complete_file = r.text("kind") == Some("file") && r.int("partial") != Some(1);
            match r.text("blob") {
                Some(h) => {
                    let have = size_of(h)?;
                    if complete_file && have != size {
                        return Err(wrong(format!(
                            "the capture of {path:?} declares {size} bytes; its blob {h} has {have}"
                        )));
                    }
                }
                None if complete_file && size != 0 => {
                    return Err(wrong(format!(
                        "the capture of {path:?} declares {size} bytes and holds none"
                    )));
                }
                None => {}
            }
            Ok(())
        })?;
        db.each("capture_ranges", true, |r| {
            if let Some(h) = r.text("blob") {
                let (have, len) = (size_of(h)?, r.int("length").unwrap_or(0) as u64);
                if have != len {
                    return Err(wrong(format!(
                        "a saved range of {len} bytes names blob {h} of {have}"
                    )));
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Inserts the new rows of a planned import ([`Store::import_plan`]) in one transaction,
    /// renumbered. With `splice` (a daemon's import), a checkpoint holding the present state
    /// of every path in the staging file's `names` (what the imported history touches, each
    /// read by `splice` while the transaction is open) goes first: a rewind to one of the
    /// store's own earlier checkpoints then meets the present of those paths before the
    /// imported history, which is another tree's. The caller holds off captures.
    ///
    /// # Errors
    /// Store errors, and rows that do not fit the schema; nothing is inserted then.
    pub fn import_rows(
        &self,
        staged: &Staged,
        origin: Option<Origin>,
        splice: Option<SpliceFn<'_>>,
    ) -> std::result::Result<ImportReport, BundleError> {
        let m = &staged.manifest;
        let db = &staged.db;
        self.flush_journal()?;
        let spliced = if splice.is_some() {
            db.names_count()?
        } else {
            0
        };
        // Ids for the splice's captures, then the bundle's, after every id in use (the
        // journal's too), handed out under the lock that hands out every id.
        let cap_base = {
            let mut p = self.pending.locked();
            let (cap_base, move_base) = (p.next_capture, p.next_move);
            let (caps, moves) = db.number(cap_base + spliced as i64, move_base)?;
            p.next_capture += (spliced + caps) as i64;
            p.next_move += moves as i64;
            cap_base
        };
        // Whatever fails, the transaction is rolled back; the failure is returned as it was.
        let mut failed = None;
        let done = self.with(|c| {
            match insert_all(c, db, cap_base, spliced as i64, origin.as_ref(), splice) {
                Ok(n) => Ok(Some(n)),
                Err(BundleError::Store(crate::store::StoreError::Sql(e))) => Err(e),
                Err(e) => {
                    failed = Some(e);
                    Ok(None)
                }
            }
        })?;
        let n = match (done, failed) {
            (Some(n), _) => n,
            (None, Some(e)) => return Err(e),
            (None, None) => return Err(BundleError::Refused("the import stopped".into())),
        };
        Ok(ImportReport {
            manifest_checkpoints: m.checkpoints.clone(),
            workspace: m.workspace.clone(),
            checkpoints: n.0,
            rows: n.1,
            blobs: staged.blobs,
            blob_bytes: m.blob_bytes,
            already: false,
        })
    }
}

/// Tables an import writes, in order.
const TABLES: &[&str] = &[
    "checkpoints",
    "sessions",
    "blobs",
    "captures",
    "capture_ranges",
    "moves",
    "tracked",
    "changes",
    "origins",
];

/// Inserts the splice and the new rows, renumbered, in one transaction: (checkpoints inserted,
/// rows inserted).
fn insert_all(
    c: &mut Connection,
    db: &Staging,
    cap_base: i64,
    spliced: i64,
    origin: Option<&Origin>,
    splice: Option<SpliceFn<'_>>,
) -> std::result::Result<(u64, u64), BundleError> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(read) = splice {
        insert_splice(&tx, db, cap_base, read)?;
    }
    let columns = table_columns(&tx)?;
    let mut ids = Renumber {
        db,
        cap_base: cap_base + spliced,
        seqs: HashMap::new(),
    };
    let mut first_checkpoint: Option<i64> = None;
    let mut origin_for_first = false;
    let mut inserted = 0u64;
    for t in TABLES {
        db.each(t, true, |row| {
            let (m, or_ignore) = ids.renumber(t, &row)?;
            if *t == "origins" && m.get("checkpoint").and_then(Value::as_i64) == first_checkpoint {
                origin_for_first = true;
            }
            insert_row(&tx, t, &m, &columns[t], or_ignore)?;
            inserted += 1;
            if *t == "checkpoints" {
                let new = tx.last_insert_rowid();
                if let Some(old) = row.int("seq") {
                    ids.seqs.insert(old, new);
                }
                first_checkpoint.get_or_insert(new);
            }
            Ok(())
        })?;
    }
    if let (Some(o), Some(first)) = (origin, first_checkpoint) {
        if !origin_for_first {
            tx.execute(
                "INSERT INTO origins (checkpoint, kind, workspace, store, uuid, session_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![first, o.kind, o.workspace, o.store, o.uuid, o.session_id, o.at],
            )?;
        }
    }
    // Whatever the bundle's rows added (and the splice's), `status` counts them.
    crate::store::counts::recount(&tx)?;
    let n = ids.seqs.len() as u64;
    tx.commit()?;
    Ok((n, inserted))
}

/// The checkpoint a bundle's history is spliced onto: the present state of each of the staging
/// file's names (taken by rewindfs itself), with ids from `cap_base` on.
fn insert_splice(
    tx: &rusqlite::Transaction<'_>,
    db: &Staging,
    cap_base: i64,
    read: SpliceFn<'_>,
) -> std::result::Result<(), BundleError> {
    let at = crate::store::now_ms();
    tx.execute(
        "INSERT INTO checkpoints (uuid, session_id, kind, began_at) VALUES (?1, NULL, ?2, ?3)",
        rusqlite::params![uuid::Uuid::new_v4().to_string(), CheckpointKind::Mount, at],
    )?;
    let seq = tx.last_insert_rowid();
    let mut i = 0i64;
    db.each_name(|path| {
        let pre = read(&path)?;
        if let Some(b) = &pre.blob {
            tx.execute(
                "INSERT OR IGNORE INTO blobs (hash, size) VALUES (?1, ?2)",
                rusqlite::params![b, pre.size as i64],
            )?;
        }
        tx.execute(
            "INSERT INTO captures (id, checkpoint, path, purpose, kind, blob, mode, uid, gid, size, target, actor, actors, op, created_at, partial, xattrs)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 0, ?16)",
            rusqlite::params![
                cap_base + i,
                seq,
                path,
                Purpose::Checkpoint,
                pre.kind,
                pre.blob,
                pre.mode as i64,
                pre.uid as i64,
                pre.gid as i64,
                pre.size as i64,
                pre.target,
                // Taken by rewindfs itself, as a rewind's own captures are.
                Actor::Rewind,
                Actor::Rewind.bit(),
                Op::Write,
                at,
                pre.xattrs.as_ref().map(crate::store::Xattrs::encode)
            ],
        )?;
        i += 1;
        Ok(())
    })
}

/// The store's own columns of every table a bundle may fill: a bundle's names are checked
/// against these before they reach SQL.
fn table_columns(
    tx: &rusqlite::Transaction<'_>,
) -> rusqlite::Result<HashMap<&'static str, std::collections::HashSet<String>>> {
    let mut columns = HashMap::new();
    for t in TABLES {
        let mut st = tx.prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))?;
        let names = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<_>>()?;
        columns.insert(*t, names);
    }
    Ok(columns)
}

/// A row refused: what is wrong with it.
fn bad(what: String) -> BundleError {
    BundleError::Refused(format!("a row of the bundle does not fit: {what}"))
}

/// Old ids to new: captures and moves as the staging file numbered them, checkpoints as they
/// are inserted.
struct Renumber<'a> {
    db: &'a Staging,
    /// The first id of the bundle's captures.
    cap_base: i64,
    /// Checkpoint seqs, old to new, filled as checkpoints are inserted (they come first; at
    /// most a million, `read.rs`).
    seqs: HashMap<i64, i64>,
}

impl Renumber<'_> {
    /// The new seq of the checkpoint the row's `col` names.
    fn seq_of(
        &self,
        t: &str,
        m: &Map<String, Value>,
        col: &str,
    ) -> std::result::Result<Option<i64>, BundleError> {
        match m.get(col).and_then(Value::as_i64) {
            None => Ok(None),
            Some(old) => self.seqs.get(&old).copied().map(Some).ok_or_else(|| {
                bad(format!(
                    "{t}.{col} names checkpoint {old}, not in the bundle"
                ))
            }),
        }
    }

    /// Replaces `col`, a checkpoint's seq, by its new one.
    fn checkpoint(
        &self,
        t: &str,
        m: &mut Map<String, Value>,
        col: &str,
    ) -> std::result::Result<(), BundleError> {
        let s = self.seq_of(t, m, col)?;
        m.insert(col.into(), Value::from(s));
        Ok(())
    }

    /// The row of table `t` with its ids renumbered, and whether it is inserted `OR IGNORE`
    /// (rows the store may have already: sessions, blobs, tracked files).
    fn renumber(
        &self,
        t: &str,
        row: &Row,
    ) -> std::result::Result<(Map<String, Value>, bool), BundleError> {
        let mut m = row.r.clone();
        let mut or_ignore = false;
        match t {
            "checkpoints" => {
                m.remove("seq");
                // History from elsewhere, whatever the bundle says (`rewind/privileges.rs`).
                m.insert("imported".into(), Value::from(1));
            }
            "sessions" | "blobs" => or_ignore = true,
            "captures" => {
                let old = row
                    .int("id")
                    .ok_or_else(|| bad("a capture without an id".into()))?;
                let new = self
                    .db
                    .cap(old)?
                    .ok_or_else(|| bad(format!("capture {old} is numbered twice")))?;
                m.insert("id".into(), Value::from(new));
                self.checkpoint(t, &mut m, "checkpoint")?;
            }
            "capture_ranges" => {
                let old = row
                    .int("capture")
                    .ok_or_else(|| bad("a range without its capture".into()))?;
                let new = self
                    .db
                    .cap(old)?
                    .ok_or_else(|| bad(format!("a range of capture {old}, not in the bundle")))?;
                m.insert("capture".into(), Value::from(new));
            }
            "moves" => {
                let old = row.int("seq").unwrap_or(0);
                let new = self
                    .db
                    .move_seq(old)?
                    .ok_or_else(|| bad(format!("move {old} is numbered twice")))?;
                m.insert("seq".into(), Value::from(new));
                self.checkpoint(t, &mut m, "checkpoint")?;
                let a = row.int("after_capture").unwrap_or(0);
                m.insert(
                    "after_capture".into(),
                    Value::from(self.db.cap_at_or_before(a, self.cap_base)?),
                );
            }
            "tracked" => {
                self.checkpoint(t, &mut m, "checkpoint")?;
                let c = match row.int("capture") {
                    Some(c) => self.db.cap(c)?,
                    None => None,
                };
                m.insert("capture".into(), c.map_or(Value::Null, Value::from));
                or_ignore = true;
            }
            "changes" => {
                m.remove("seq");
                self.checkpoint(t, &mut m, "checkpoint")?;
            }
            "origins" => self.checkpoint(t, &mut m, "checkpoint")?,
            _ => {}
        }
        Ok((m, or_ignore))
    }
}

/// Inserts one row into `t`, its column names checked against the store's own (`known`).
fn insert_row(
    tx: &rusqlite::Transaction<'_>,
    t: &str,
    m: &Map<String, Value>,
    known: &std::collections::HashSet<String>,
    or_ignore: bool,
) -> std::result::Result<(), BundleError> {
    let mut cols = Vec::new();
    let mut vals = Vec::new();
    for (k, v) in m {
        if !known.contains(k) {
            return Err(bad(format!("{t} has no column {k:?}")));
        }
        cols.push(format!("\"{k}\""));
        let val = match v {
            Value::String(s) if check::holds_bytes(t, k) => SqlValue::Blob(s.as_bytes().to_vec()),
            v => to_sql(v).map_err(|e| bad(format!("{t}.{k}: {e}")))?,
        };
        vals.push(val);
    }
    let sql = format!(
        "INSERT {}INTO {t} ({}) VALUES ({})",
        if or_ignore { "OR IGNORE " } else { "" },
        cols.join(", "),
        vec!["?"; cols.len()].join(", ")
    );
    tx.prepare_cached(&sql)?
        .execute(rusqlite::params_from_iter(vals))
        .map_err(|e| bad(format!("{t}: {e}")))?;
    Ok(())
}
