//! The change log (`changes`): one entry per change through the mount, for `rewindfs log` and
//! the `log` request.
//!
//! Invariants:
//! - append-only; the only deletion is gc dropping a checkpoint's entries with it;
//! - an entry survives any crash of the daemon once the change it records is done: it goes
//!   through the journal like a pre-image ([`Store::log_change`]: one `write(2)`, no SQLite, no
//!   fsync even with `--sync`), and reaches SQLite with the journal's next batch, in the same
//!   transaction as the captures around it; the journal left by a crash is applied at open;
//! - `seq` orders entries, and is handed out with the record (so replaying it is idempotent);
//!   consecutive writes to one file by one process in one checkpoint are one entry;
//! - a path filter matches the path, a rename's other name, and every path beneath it.

use rusqlite::params;

use super::journal::Record;
use super::{LogEntry, Result, Store};

impl Store {
    /// Journals a change-log entry (its `seq` is given here), unless it is a write that the
    /// last entry journalled already stands for (same process, file and checkpoint). Returns
    /// the number of journal records waiting for the database, for the caller's flush policy.
    ///
    /// # Errors
    /// The journal could not be written (e.g. `ENOSPC`); the entry is lost, not the change.
    pub fn log_change(&self, mut e: LogEntry) -> Result<usize> {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let same =
            |l: &LogEntry| l.path == e.path && l.pid == e.pid && l.checkpoint == e.checkpoint;
        if e.op == "write" && p.last_write.as_ref().is_some_and(same) {
            return Ok(p.journal.pending.len());
        }
        e.seq = p.next_change;
        let write = (e.op == "write").then(|| e.clone());
        p.journal.append_unsynced(Record::Log(e))?;
        p.next_change += 1;
        p.last_write = write;
        Ok(p.journal.pending.len())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: &str, path: &str, pid: u32, checkpoint: i64) -> LogEntry {
        LogEntry {
            at: 1,
            checkpoint,
            op: op.into(),
            path: path.as_bytes().to_vec(),
            actor: "shell".into(),
            pid,
            process: "sh".into(),
            ..LogEntry::default()
        }
    }

    fn ops(s: &Store) -> Vec<(i64, String, String)> {
        s.log(None, 100)
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.op, String::from_utf8(e.path).unwrap()))
            .collect()
    }

    /// Entries are in the journal once `log_change` returns: a crash before the flusher ran
    /// loses none, and `seq` goes on from where it was (an entry replayed twice is one row).
    #[test]
    fn entries_survive_a_crash_before_they_reach_the_database() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let k = s
            .begin_checkpoint("44444444-4444-4444-8444-444444444444", None, "message")
            .unwrap();
        s.log_change(entry("create", "a", 7, k)).unwrap();
        s.flush_journal().unwrap();
        for e in [
            entry("write", "a", 7, k),
            entry("write", "a", 7, k), // the same entry
            entry("write", "a", 8, k), // another process
            entry("write", "a", 8, k),
            entry("unlink", "b", 7, k),
            entry("write", "a", 8, k), // not consecutive any more
        ] {
            s.log_change(e).unwrap();
        }
        std::mem::forget(s); // killed: nothing applied, nothing flushed
        let s = Store::open(d.path(), false).unwrap();
        let want = [
            (1, "create", "a"),
            (2, "write", "a"),
            (3, "write", "a"),
            (4, "unlink", "b"),
            (5, "write", "a"),
        ];
        let want: Vec<(i64, String, String)> = want
            .iter()
            .map(|(n, o, p)| (*n, o.to_string(), p.to_string()))
            .collect();
        assert_eq!(ops(&s), want);
        s.log_change(entry("mkdir", "d", 9, k)).unwrap();
        let all = ops(&s);
        assert_eq!(
            all.last().unwrap(),
            &(6, "mkdir".to_string(), "d".to_string())
        );
        assert_eq!(all.len(), 6);
    }
}
