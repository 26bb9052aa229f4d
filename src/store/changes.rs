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
//!   consecutive writes to one file by one process in one checkpoint are one entry (with the
//!   cut to length right after them: a file rewritten in place, as a rewind does), and so is
//!   what a process does to a file right after it made it (its content, mode, owner and
//!   times: what `tar` or `npm` sets on every file it extracts) with the create ([`folds_into`];
//!   same tool call and session too);
//! - a path filter matches the path, a rename's other name, and every path beneath it.
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use rusqlite::params;

use super::journal::Record;
use super::{LogEntry, Op, Result, Store};
use crate::locks::Locked;

/// Paths, each with the sessions that changed it (`None`: an actor of no session).
pub type SessionsByPath =
    std::collections::HashMap<Vec<u8>, std::collections::HashSet<Option<String>>>;

impl Store {
    /// Journals a change-log entry (its `seq` is given here), unless the last entry journalled
    /// already stands for it (same process, file, checkpoint, tool call, session and actor; see
    /// `folds_into`). Returns the number of journal records waiting for the database, for the
    /// caller's flush policy.
    ///
    /// # Errors
    /// The journal could not be written (e.g. `ENOSPC`); the entry is lost, not the change.
    pub fn log_change(&self, mut e: LogEntry) -> Result<usize> {
        let mut p = self.pending.locked();
        let same = |l: &LogEntry| {
            l.path == e.path
                && l.pid == e.pid
                && l.checkpoint == e.checkpoint
                && l.tool_use_id == e.tool_use_id
                && l.session == e.session
                && l.actor == e.actor
                && l.process == e.process
        };
        if p.last
            .as_ref()
            .is_some_and(|l| same(l) && folds_into(l.op, e.op))
        {
            return Ok(p.journal.pending_len());
        }
        e.seq = p.next_change;
        let last = absorbs(e.op).then(|| e.clone());
        p.journal.append_unsynced(Record::Log(e))?;
        p.next_change += 1;
        p.last = last;
        Ok(p.journal.pending_len())
    }

    /// The change-log entries `q` selects, oldest first, and how many match its filter in
    /// all (without its limit and cursor).
    pub fn log(&self, q: &LogQuery<'_>) -> Result<(Vec<LogEntry>, i64)> {
        // Without `--since`, the checkpoint term is written `+checkpoint` so that SQLite cannot
        // choose its index: it would then sort the whole log to return the newest entry (50 ms
        // for 62k entries, at every reading of a rewind's meter) where walking the table from
        // its end stops at the first.
        let filter = format!(
            "(?1 IS NULL OR path = ?1 OR path2 = ?1
                OR substr(path, 1, length(?1) + 1) = CAST(?1 AS BLOB) || X'2F')
             AND {}checkpoint >= ?2 AND (?5 IS NULL OR session = ?5)",
            if q.since_checkpoint.is_some() {
                ""
            } else {
                "+"
            }
        );
        let filter = filter.as_str();
        let since = q.since_checkpoint.unwrap_or(i64::MIN);
        self.with(|c| {
            // Unfiltered, SQLite counts the table's b-tree without reading its rows (the filter
            // would be evaluated row by row: 125 ms for 62k entries, asked by every meter).
            let total: i64 = if q.path.is_none() && q.since_checkpoint.is_none() && q.session.is_none() {
                c.query_row("SELECT count(*) FROM changes", [], |r| r.get(0))?
            } else {
                c.query_row(
                    &format!("SELECT count(*) FROM changes WHERE {filter}"),
                    params![q.path, since, None::<i64>, None::<i64>, q.session],
                    |r| r.get(0),
                )?
            };
            let sql = match q.after {
                // The oldest `limit` after the cursor.
                Some(_) => format!(
                    "SELECT {LOG_COLS} FROM changes WHERE {filter} AND seq > ?3 ORDER BY seq LIMIT ?4"
                ),
                // The newest `limit`, oldest first.
                None => format!(
                    "SELECT {LOG_COLS} FROM (SELECT * FROM changes WHERE {filter} AND ?3 IS NULL
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
    /// with the sessions whose actors changed it (`None`: an actor of no session), and apart,
    /// both names of each rename or exchange with the sessions that made it (what is beneath a
    /// renamed directory changed with it). A rewind's own changes are the work of the session
    /// whose checkpoint it went back to; those of no session's rewind (an older store's, or a
    /// rewind to the mount's own checkpoint) are left out: a session's rewind over them
    /// restores them as before rewinds were logged.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn sessions_since(&self, seq: i64) -> Result<(SessionsByPath, SessionsByPath)> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT path, path2, session, op FROM changes WHERE checkpoint >= ?1 AND (actor != 'rewind' OR session IS NOT NULL)",
            )?;
            let mut by_path = SessionsByPath::default();
            let mut renamed = SessionsByPath::default();
            let rows = st.query_map([seq], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, Option<Vec<u8>>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?;
            for row in rows {
                let (p, p2, s, op) = row?;
                let moved = matches!(Op::parse(&op), Op::Rename | Op::Exchange);
                if let Some(p2) = p2 {
                    if moved {
                        renamed.entry(p2.clone()).or_default().insert(s.clone());
                        renamed.entry(p.clone()).or_default().insert(s.clone());
                    }
                    by_path.entry(p2).or_default().insert(s.clone());
                }
                by_path.entry(p).or_default().insert(s);
            }
            Ok((by_path, renamed))
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

/// Whether an entry of `op` can stand for later changes by the same process to the same path
/// in the same checkpoint (see [`folds_into`]).
fn absorbs(op: Op) -> bool {
    matches!(op, Op::Write | Op::Create | Op::Mkdir | Op::Symlink)
}

/// Whether a change `next`, right after an entry `prev` by the same process to the same path
/// in the same checkpoint, is that entry: a write after a write, a cut to length after a write
/// (a file rewritten in place: written over from the start, then cut, as a rewind writes each
/// file), and what a process does to a file it has just made (its content, mode, owner, times:
/// what `tar` or `npm` sets on every file it extracts) after the create. A write after a cut
/// stays an entry of its own: "truncate" would not say that the file has new content.
fn folds_into(prev: Op, next: Op) -> bool {
    match prev {
        Op::Write => matches!(next, Op::Write | Op::Truncate),
        Op::Create | Op::Mkdir | Op::Symlink => matches!(
            next,
            Op::Write
                | Op::Truncate
                | Op::Fallocate
                | Op::Chmod
                | Op::Chown
                | Op::Utimes
                | Op::Setxattr
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: &str, path: &str, pid: u32, checkpoint: i64) -> LogEntry {
        LogEntry {
            at: 1,
            checkpoint,
            op: crate::store::Op::parse(op),
            path: crate::wspath::node(path),
            actor: crate::store::Actor::Shell,
            pid,
            process: "sh".into(),
            ..LogEntry::default()
        }
    }

    fn ops(s: &Store) -> Vec<(i64, String, String)> {
        s.log(&LogQuery {
            path: None,
            since_checkpoint: None,
            after: None,
            limit: 100,
            session: None,
        })
        .unwrap()
        .0
        .into_iter()
        .map(|e| {
            (
                e.seq,
                e.op.as_str().to_string(),
                String::from_utf8(e.path.into_bytes()).unwrap(),
            )
        })
        .collect()
    }

    /// Entries are in the journal once `log_change` returns: a crash before the flusher ran
    /// loses none, and `seq` goes on from where it was (an entry replayed twice is one row).
    #[test]
    fn entries_survive_a_crash_before_they_reach_the_database() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let k = s
            .begin_checkpoint(
                "44444444-4444-4444-8444-444444444444",
                None,
                crate::store::CheckpointKind::Message,
            )
            .unwrap();
        s.log_change(entry("create", "a", 7, k)).unwrap();
        s.flush_journal().unwrap();
        for e in [
            entry("write", "a", 7, k), // what the creator does next is its create
            entry("write", "a", 8, k), // another process
            entry("write", "a", 8, k), // the same entry
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
            (3, "unlink", "b"),
            (4, "write", "a"),
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
            &(5, "mkdir".to_string(), "d".to_string())
        );
        assert_eq!(all.len(), 5);
    }

    /// What a process does to a file right after it made it is the create's entry, as long as
    /// nothing else is logged between, and so is a cut right after a write; another checkpoint,
    /// tool call, or a write after a cut are entries of their own. Without the folding, the
    /// first assertion fails; without the tool call in the comparison, the second.
    #[test]
    fn what_a_creator_does_next_is_its_create() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let cp = |u: &str| {
            s.begin_checkpoint(u, None, crate::store::CheckpointKind::Message)
                .unwrap()
        };
        let k = cp("55555555-5555-4555-8555-555555555555");
        for op in [
            "create", "write", "write", "chown", "chmod", "utimes", "setxattr",
        ] {
            s.log_change(entry(op, "t/f", 7, k)).unwrap();
        }
        assert_eq!(ops(&s).len(), 1, "{:?}", ops(&s));
        let spanned = |op: &str, span: &str| LogEntry {
            tool_use_id: Some(span.into()),
            ..entry(op, "g", 7, k)
        };
        s.log_change(spanned("create", "toolu_1")).unwrap();
        s.log_change(spanned("write", "toolu_2")).unwrap();
        s.log_change(entry("write", "h", 7, k)).unwrap();
        s.log_change(entry("truncate", "h", 7, k)).unwrap(); // the write's entry
        s.log_change(entry("truncate", "i", 7, k)).unwrap();
        s.log_change(entry("write", "i", 7, k)).unwrap();
        s.log_change(entry("mkdir", "d", 7, k)).unwrap();
        let k2 = cp("66666666-6666-4666-8666-666666666666");
        s.log_change(entry("chmod", "d", 7, k2)).unwrap();
        let got: Vec<(String, String)> = ops(&s).into_iter().map(|(_, o, p)| (o, p)).collect();
        let want = [
            ("create", "t/f"),
            ("create", "g"),
            ("write", "g"),
            ("write", "h"),
            ("truncate", "i"),
            ("write", "i"),
            ("mkdir", "d"),
            ("chmod", "d"),
        ];
        assert_eq!(
            got,
            want.map(|(o, p)| (o.to_string(), p.to_string())).to_vec()
        );
    }
}
