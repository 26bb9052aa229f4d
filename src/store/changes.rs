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
                    "INSERT INTO changes (at, checkpoint, op, path, path2, actor, pid, process, tool_use_id, session)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )?;
                for e in entries {
                    st.execute(params![e.at, e.checkpoint, e.op, e.path, e.path2, e.actor, e.pid, e.process, e.tool_use_id, e.session])?;
                }
            }
            tx.commit()
        })
    }

    /// The change-log entries `q` selects, oldest first, and how many match its filter in
    /// all (without its limit and cursor).
    pub fn log(&self, q: &LogQuery<'_>) -> Result<(Vec<LogEntry>, i64)> {
        const FILTER: &str = "(?1 IS NULL OR path = ?1 OR path2 = ?1
                OR substr(path, 1, length(?1) + 1) = CAST(?1 AS BLOB) || X'2F')
             AND checkpoint >= ?2 AND (?5 IS NULL OR session = ?5)";
        let since = q.since_checkpoint.unwrap_or(i64::MIN);
        self.with(|c| {
            let total: i64 = c.query_row(
                &format!("SELECT count(*) FROM changes WHERE {FILTER}"),
                params![q.path, since, None::<i64>, None::<i64>, q.session],
                |r| r.get(0),
            )?;
            let sql = match q.after {
                // The oldest `limit` after the cursor.
                Some(_) => format!(
                    "SELECT {LOG_COLS} FROM changes WHERE {FILTER} AND seq > ?3 ORDER BY seq LIMIT ?4"
                ),
                // The newest `limit`, oldest first.
                None => format!(
                    "SELECT {LOG_COLS} FROM (SELECT * FROM changes WHERE {FILTER} AND ?3 IS NULL
                     ORDER BY seq DESC LIMIT ?4) ORDER BY seq"
                ),
            };
            let mut st = c.prepare(&sql)?;
            let rows = st.query_map(
                params![q.path, since, q.after, q.limit, q.session],
                row_entry,
            )?;
            Ok((rows.collect::<rusqlite::Result<Vec<_>>>()?, total))
        })
    }
}

impl Store {
    /// Who changed what since checkpoint `seq` began: each path (and a rename's other name)
    /// with the sessions whose actors changed it (`None`: an actor of no session).
    pub fn sessions_since(
        &self,
        seq: i64,
    ) -> Result<std::collections::HashMap<Vec<u8>, std::collections::HashSet<Option<String>>>> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT path, path2, session FROM changes WHERE checkpoint >= ?1",
            )?;
            let mut out: std::collections::HashMap<_, std::collections::HashSet<_>> =
                Default::default();
            let rows = st.query_map([seq], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, Option<Vec<u8>>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })?;
            for row in rows {
                let (p, p2, s) = row?;
                if let Some(p2) = p2 {
                    out.entry(p2).or_default().insert(s.clone());
                }
                out.entry(p).or_default().insert(s);
            }
            Ok(out)
        })
    }
}

/// Which change-log entries to read.
#[derive(Debug, Clone, Copy)]
pub struct LogQuery<'a> {
    /// Only this path, a rename's other name, and paths beneath it.
    pub path: Option<&'a [u8]>,
    /// Only entries of this checkpoint (seq) and later ones.
    pub since_checkpoint: Option<i64>,
    /// A cursor: the oldest `limit` entries after this seq (`None`: the newest `limit`).
    pub after: Option<i64>,
    pub limit: i64,
    /// Only changes by this session's actors.
    pub session: Option<&'a str>,
}

/// The columns [`row_entry`] reads, in its order.
const LOG_COLS: &str =
    "seq, at, checkpoint, op, path, path2, actor, pid, process, tool_use_id, session";

fn row_entry(r: &rusqlite::Row<'_>) -> rusqlite::Result<LogEntry> {
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
        session: r.get(10)?,
    })
}
