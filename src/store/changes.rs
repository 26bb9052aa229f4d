//! The change log (`changes`): one entry per change through the mount, for `rewindfs log` and
//! the `log` request.
//!
//! Invariants:
//! - append-only; the only deletion is gc dropping a checkpoint's entries with it;
//! - unlike captures, entries do not go through the journal: they record what happened and
//!   protect nothing, so the recorder buffers them and appends them in one transaction per
//!   flush (with the next capture, at checkpoint boundaries, and on its timer);
//! - `seq` orders entries; a path filter matches the path, a rename's other name, and every
//!   path beneath it.

use rusqlite::{TransactionBehavior, params};

use super::{LogEntry, Result, Store};

impl Store {
    /// Appends change-log entries in one transaction.
    pub fn append_log(&self, entries: &[LogEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut st = tx.prepare_cached(
                    "INSERT INTO changes (at, checkpoint, op, path, path2, actor, pid, process, tool_use_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?;
                for e in entries {
                    st.execute(params![e.at, e.checkpoint, e.op, e.path, e.path2, e.actor, e.pid, e.process, e.tool_use_id])?;
                }
            }
            tx.commit()
        })
    }

    /// The change log, newest last, optionally for one path (or paths beneath it).
    pub fn log(&self, path: Option<&[u8]>, limit: i64) -> Result<Vec<LogEntry>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT seq, at, checkpoint, op, path, path2, actor, pid, process, tool_use_id FROM (
                   SELECT * FROM changes
                   WHERE ?1 IS NULL OR path = ?1 OR path2 = ?1
                      OR substr(path, 1, length(?1) + 1) = CAST(?1 AS BLOB) || X'2F'
                   ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
            )?;
            let rows = st.query_map(params![path, limit], |r| {
                Ok(LogEntry {
                    seq: r.get(0)?,
                    at: r.get(1)?,
                    checkpoint: r.get(2)?,
                    op: r.get(3)?,
                    path: r.get(4)?,
                    path2: r.get(5)?,
                    actor: r.get(6)?,
                    pid: r.get::<_, Option<i64>>(7)?.unwrap_or(0) as u32,
                    process: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
                    tool_use_id: r.get(9)?,
                })
            })?;
            rows.collect()
        })
    }
}
