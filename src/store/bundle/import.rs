//! Importing a staged bundle: which of its checkpoints are new here, and their rows added in
//! one transaction, with new ids after every id in use.

use std::collections::{BTreeSet, HashMap, HashSet};

use rusqlite::{Connection, TransactionBehavior};
use serde_json::{Map, Value};

use super::*;
use crate::locks::Locked;
use crate::store::{Actor, CheckpointKind, Op, Origin, PreImage, Purpose, Result, Store};

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

impl Store {
    /// Which of these checkpoint uuids are in the store.
    pub fn known_checkpoints(&self, uuids: &[String]) -> Result<HashSet<String>> {
        self.with(|c| {
            let mut st = c.prepare_cached("SELECT 1 FROM checkpoints WHERE uuid = ?1")?;
            let mut known = HashSet::new();
            for u in uuids {
                if st.exists([u])? {
                    known.insert(u.clone());
                }
            }
            Ok(known)
        })
    }

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
            ImportPlan::Rows(rows) => self.import_rows(staged, &rows, origin, &[]),
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
    pub fn bundle_bindings(&self, staged: &Staged) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for r in staged.rows.iter().filter(|r| r.t == "checkpoints") {
            let (Some(prompt_id), Some(uuid)) = (r.text("prompt_id"), r.text("uuid")) else {
                continue;
            };
            if r.int("bound") == Some(0) || prompt_id == uuid {
                continue;
            }
            if self
                .checkpoint_of_prompt(prompt_id)?
                .is_some_and(|c| !c.bound)
            {
                out.push((prompt_id.to_string(), uuid.to_string()));
            }
        }
        Ok(out)
    }

    /// What of a staged bundle is new here: its rows without those of the checkpoints the
    /// store has (which must begin the bundle's history), or `Already` when it has them all.
    ///
    /// # Errors
    /// `Refused` for a history that diverges from the store's, or rows naming a blob the
    /// bundle does not hold; store errors.
    pub fn import_plan(&self, staged: &Staged) -> std::result::Result<ImportPlan, BundleError> {
        let m = &staged.manifest;
        // The export's own checkpoint (the tree at export) is new to every store; the history
        // is here when every other one is (a store importing its own export, say).
        let history: Vec<String> = m
            .checkpoints
            .iter()
            .filter(|u| **u != m.export_id)
            .cloned()
            .collect();
        let mut known = self.known_checkpoints(&history)?;
        // A checkpoint begun by a prompt is here when the store has that prompt, whichever
        // uuid each side knows it by (the bundle's may not have been bound yet).
        for r in staged.rows.iter().filter(|r| r.t == "checkpoints") {
            if let (Some(prompt_id), Some(uuid)) = (r.text("prompt_id"), r.text("uuid")) {
                if !known.contains(uuid) && self.checkpoint_of_prompt(prompt_id)?.is_some() {
                    known.insert(uuid.to_string());
                }
            }
        }
        if known.len() == history.len() {
            return Ok(ImportPlan::Already(ImportReport {
                manifest_checkpoints: m.checkpoints.clone(),
                workspace: m.workspace.clone(),
                already: true,
                ..ImportReport::default()
            }));
        }
        // What is here must be where the bundle's history begins (an earlier push of the same
        // history, say): the rest goes after it. Known checkpoints and their rows are skipped.
        if let Some(i) = history.iter().position(|u| !known.contains(u)) {
            if let Some(late) = history[i..].iter().find(|u| known.contains(*u)) {
                return Err(BundleError::Refused(format!(
                    "checkpoint {late} of the bundle is in this store already, but {} before it is not: the histories have diverged",
                    history[i]
                )));
            }
        }
        let rows = new_rows(&staged.rows, &known);
        // Every blob a row names is in the bundle or here.
        for row in &rows {
            let named = match row.t.as_str() {
                "captures" | "capture_ranges" => row.text("blob"),
                _ => None,
            };
            if let Some(h) = named {
                if !staged.blobs.contains(h) && !self.blobs.exists(h) {
                    return Err(BundleError::Refused(format!(
                        "the bundle's rows name blob {h}, which it does not hold"
                    )));
                }
            }
        }
        Ok(ImportPlan::Rows(rows))
    }

    /// Inserts the rows of [`Store::import_plan`] in one transaction, renumbered. With a
    /// `splice` (a daemon's import: the present state of every path the imported history
    /// touches, blobs stored), a checkpoint holding it goes first: a rewind to one of the
    /// store's own earlier checkpoints then meets the present of those paths before the
    /// imported history, which is another tree's. The caller holds off captures.
    ///
    /// # Errors
    /// Store errors, and rows that do not fit the schema; nothing is inserted then.
    pub fn import_rows(
        &self,
        staged: &Staged,
        rows: &[Row],
        origin: Option<Origin>,
        splice: &[(Vec<u8>, PreImage)],
    ) -> std::result::Result<ImportReport, BundleError> {
        let m = &staged.manifest;
        self.flush_journal()?;
        let (cap_ids, move_ids) = {
            let caps = rows.iter().filter(|r| r.t == "captures").count() + splice.len();
            let moves = rows.iter().filter(|r| r.t == "moves").count() as i64;
            let mut p = self.pending.locked();
            let ids = (p.next_capture, p.next_move);
            p.next_capture += caps as i64;
            p.next_move += moves;
            ids
        };
        let n = self.with(|c| insert_rows(c, rows, cap_ids, move_ids, origin.as_ref(), splice))?;
        Ok(ImportReport {
            manifest_checkpoints: m.checkpoints.clone(),
            workspace: m.workspace.clone(),
            checkpoints: n.0,
            rows: n.1,
            blobs: staged.blobs.len() as u64,
            blob_bytes: m.blob_bytes,
            already: false,
        })
    }
}

/// What an import would add.
#[derive(Debug)]
pub enum ImportPlan {
    /// Every checkpoint of the bundle is here: nothing to do.
    Already(ImportReport),
    /// The rows to insert.
    Rows(Vec<Row>),
}

/// The rows of the checkpoints not in `known`: a known checkpoint's row, its captures (and
/// their ranges), moves, tracked rows, change-log entries and origins are left out.
fn new_rows(rows: &[Row], known: &HashSet<String>) -> Vec<Row> {
    let skip: HashSet<i64> = rows
        .iter()
        .filter(|r| r.t == "checkpoints" && r.text("uuid").is_some_and(|u| known.contains(u)))
        .filter_map(|r| r.int("seq"))
        .collect();
    let skip_caps: HashSet<i64> = rows
        .iter()
        .filter(|r| r.t == "captures" && r.int("checkpoint").is_some_and(|c| skip.contains(&c)))
        .filter_map(|r| r.int("id"))
        .collect();
    rows.iter()
        .filter(|r| match r.t.as_str() {
            "checkpoints" => !r.int("seq").is_some_and(|s| skip.contains(&s)),
            "capture_ranges" => !r.int("capture").is_some_and(|c| skip_caps.contains(&c)),
            "sessions" | "blobs" => true,
            _ => !r.int("checkpoint").is_some_and(|c| skip.contains(&c)),
        })
        .cloned()
        .collect()
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

/// Inserts the rows, renumbered, in one transaction: (checkpoints inserted, rows inserted).
fn insert_rows(
    c: &mut Connection,
    rows: &[Row],
    splice_base: i64,
    move_base: i64,
    origin: Option<&Origin>,
    splice: &[(Vec<u8>, PreImage)],
) -> rusqlite::Result<(u64, u64)> {
    let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !splice.is_empty() {
        insert_splice(&tx, splice, splice_base)?;
    }
    let columns = table_columns(&tx)?;
    let mut ids = Renumber::new(rows, splice_base + splice.len() as i64, move_base);
    let mut first_checkpoint: Option<i64> = None;
    let mut origin_rows: BTreeSet<i64> = BTreeSet::new();
    let mut inserted = 0u64;
    for t in TABLES {
        for row in rows.iter().filter(|r| r.t == *t) {
            let (m, or_ignore) = ids.renumber(t, row)?;
            if *t == "origins" {
                if let Some(s) = m.get("checkpoint").and_then(Value::as_i64) {
                    origin_rows.insert(s);
                }
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
        }
    }
    if let (Some(o), Some(first)) = (origin, first_checkpoint) {
        if !origin_rows.contains(&first) {
            tx.execute(
                "INSERT INTO origins (checkpoint, kind, workspace, store, uuid, session_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![first, o.kind, o.workspace, o.store, o.uuid, o.session_id, o.at],
            )?;
        }
    }
    let n = ids.seqs.len() as u64;
    tx.commit()?;
    Ok((n, inserted))
}

/// The checkpoint a bundle's history is spliced onto: what its first checkpoint's captures
/// say of paths this store changed since (the present's state of them, taken by rewindfs),
/// with ids from `splice_base` on.
fn insert_splice(
    tx: &rusqlite::Transaction<'_>,
    splice: &[(Vec<u8>, PreImage)],
    splice_base: i64,
) -> rusqlite::Result<()> {
    let at = crate::store::now_ms();
    tx.execute(
        "INSERT INTO checkpoints (uuid, session_id, kind, began_at) VALUES (?1, NULL, ?2, ?3)",
        rusqlite::params![uuid::Uuid::new_v4().to_string(), CheckpointKind::Mount, at],
    )?;
    let seq = tx.last_insert_rowid();
    for (i, (path, pre)) in splice.iter().enumerate() {
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
                splice_base + i as i64,
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
                pre.xattrs
            ],
        )?;
    }
    Ok(())
}

/// The store's own columns of every table a bundle may fill: a bundle's names are checked
/// against these before they reach SQL.
fn table_columns(
    tx: &rusqlite::Transaction<'_>,
) -> rusqlite::Result<HashMap<&'static str, HashSet<String>>> {
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
fn bad(what: String) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(what.into())
}

/// Old ids to new: captures and moves in their order after every id in use, checkpoints as
/// they are inserted.
struct Renumber {
    /// The bundle's capture ids, sorted; the i-th becomes `cap_base + i`.
    old_caps: Vec<i64>,
    cap_base: i64,
    /// The bundle's move seqs, sorted; the i-th becomes `move_base + i`.
    old_moves: Vec<i64>,
    move_base: i64,
    /// Checkpoint seqs, old to new, filled as checkpoints are inserted (they come first).
    seqs: HashMap<i64, i64>,
}

impl Renumber {
    fn new(rows: &[Row], cap_base: i64, move_base: i64) -> Renumber {
        let sorted = |table: &str, col: &str| -> Vec<i64> {
            let mut v: Vec<i64> = rows
                .iter()
                .filter(|r| r.t == table)
                .filter_map(|r| r.int(col))
                .collect();
            v.sort_unstable();
            v
        };
        Renumber {
            old_caps: sorted("captures", "id"),
            cap_base,
            old_moves: sorted("moves", "seq"),
            move_base,
            seqs: HashMap::new(),
        }
    }

    fn cap(&self, old: i64) -> Option<i64> {
        self.old_caps
            .binary_search(&old)
            .ok()
            .map(|i| self.cap_base + i as i64)
    }

    /// For `after_capture`: the new id of the last exported capture at or before `old`.
    fn after(&self, old: i64) -> i64 {
        let i = self.old_caps.partition_point(|x| *x <= old);
        self.cap_base + i as i64 - 1
    }

    /// The new seq of the checkpoint the row's `col` names.
    fn seq_of(&self, t: &str, m: &Map<String, Value>, col: &str) -> rusqlite::Result<Option<i64>> {
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
    fn checkpoint(&self, t: &str, m: &mut Map<String, Value>, col: &str) -> rusqlite::Result<()> {
        let s = self.seq_of(t, m, col)?;
        m.insert(col.into(), Value::from(s));
        Ok(())
    }

    /// The row of table `t` with its ids renumbered, and whether it is inserted `OR IGNORE`
    /// (rows the store may have already: sessions, blobs, tracked files).
    fn renumber(&self, t: &str, row: &Row) -> rusqlite::Result<(Map<String, Value>, bool)> {
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
                m.insert(
                    "id".into(),
                    Value::from(self.cap(old).unwrap_or(self.cap_base)),
                );
                self.checkpoint(t, &mut m, "checkpoint")?;
            }
            "capture_ranges" => {
                let old = row
                    .int("capture")
                    .ok_or_else(|| bad("a range without its capture".into()))?;
                let new = self
                    .cap(old)
                    .ok_or_else(|| bad(format!("a range of capture {old}, not in the bundle")))?;
                m.insert("capture".into(), Value::from(new));
            }
            "moves" => {
                let old = row.int("seq").unwrap_or(0);
                let i = self.old_moves.binary_search(&old).unwrap_or(0);
                m.insert("seq".into(), Value::from(self.move_base + i as i64));
                self.checkpoint(t, &mut m, "checkpoint")?;
                let a = row.int("after_capture").unwrap_or(0);
                m.insert("after_capture".into(), Value::from(self.after(a)));
            }
            "tracked" => {
                self.checkpoint(t, &mut m, "checkpoint")?;
                let c = row.int("capture").and_then(|c| self.cap(c));
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
    known: &HashSet<String>,
    or_ignore: bool,
) -> rusqlite::Result<()> {
    let mut cols = Vec::new();
    let mut vals = Vec::new();
    for (k, v) in m {
        if !known.contains(k) {
            return Err(bad(format!("{t} has no column {k:?}")));
        }
        cols.push(format!("\"{k}\""));
        vals.push(to_sql(v).map_err(|e| bad(format!("{t}.{k}: {e}")))?);
    }
    let sql = format!(
        "INSERT {}INTO {t} ({}) VALUES ({})",
        if or_ignore { "OR IGNORE " } else { "" },
        cols.join(", "),
        vec!["?"; cols.len()].join(", ")
    );
    tx.execute(&sql, rusqlite::params_from_iter(vals))?;
    Ok(())
}
