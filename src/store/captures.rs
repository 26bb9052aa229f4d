//! Captures and what goes with them: the pre-image of each path (`captures`), the old bytes of
//! a partial capture (`capture_ranges`), the actors that changed a captured path, the paths a
//! tool changed in a session (`tracked`), and directory renames (`moves`).
//!
//! Invariants:
//! - every write here is a journal record, appended before the change it protects is applied
//!   (the write-ahead rule; see [`apply`](super::apply)); an append that fails fails the write,
//!   and the caller refuses the change;
//! - ids come from the journal in the order changes happened, so `captures.id` orders captures
//!   and a move's `after_capture` splits them into before and after the rename;
//! - every read applies the journal first, so it sees every change recorded so far;
//! - the caller captures a path at most once per checkpoint (the recorder's in-memory map);
//!   this file does not check it.
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use rusqlite::OptionalExtension;

use super::journal::Record;
use super::{
    Actor, Capture, Kind, Move, PreImage, Range, RangeContent, Result, Store, Tracked, Xattrs,
    now_ms,
};
use super::{BlobRef, Op, Purpose};
use crate::wspath::{Node, WsPath};

/// The columns [`row_capture`] reads, in its order.
const CAPTURE_COLS: &str = "id, checkpoint, path, purpose, kind, blob, mode, uid, gid, size, target, actor, actors, op, partial, xattrs, \
     (SELECT imported FROM checkpoints k WHERE k.seq = captures.checkpoint)";

/// A capture from a row of [`CAPTURE_COLS`]; the schema lets mode, uid, gid and size be NULL,
/// which reads as 0, and xattrs that do not decode read as not recorded.
fn row_capture(r: &rusqlite::Row<'_>) -> rusqlite::Result<Capture> {
    Ok(Capture {
        id: r.get(0)?,
        checkpoint: r.get(1)?,
        path: r.get(2)?,
        purpose: r.get(3)?,
        pre: PreImage {
            imported: r.get::<_, Option<i64>>(16)?.unwrap_or(0) != 0,
            kind: Kind::parse(&r.get::<_, String>(4)?),
            blob: r.get(5)?,
            mode: r.get::<_, Option<i64>>(6)?.unwrap_or(0) as u32,
            uid: r.get::<_, Option<i64>>(7)?.unwrap_or(0) as u32,
            gid: r.get::<_, Option<i64>>(8)?.unwrap_or(0) as u32,
            size: r.get::<_, Option<i64>>(9)?.unwrap_or(0) as u64,
            target: r.get(10)?,
            partial: r.get::<_, i64>(14)? != 0,
            xattrs: r
                .get::<_, Option<Vec<u8>>>(15)?
                .and_then(|b| Xattrs::decode(&b)),
        },
        actor: Actor::parse(&r.get::<_, String>(11)?),
        actors: r.get::<_, i64>(12)? as u8,
        op: r.get(13)?,
    })
}

impl Store {
    /// Saves a pre-image (blob already stored) and returns the capture id. The caller makes
    /// sure a path is captured once per checkpoint (the recorder's in-memory map).
    #[allow(clippy::too_many_arguments)]
    pub fn insert_capture(
        &self,
        checkpoint: i64,
        path: &Node,
        purpose: Purpose,
        pre: &PreImage,
        actor: Actor,
        op: Op,
    ) -> Result<i64> {
        let r = self.journal(|p| {
            let id = p.next_capture;
            p.next_capture += 1;
            Record::Capture {
                id,
                checkpoint,
                path: path.clone(),
                tool: purpose == Purpose::Tool,
                pre: pre.clone(),
                actor,
                op: op.as_str().to_string(),
                at: now_ms(),
            }
        })?;
        match r {
            Record::Capture { id, .. } => Ok(id),
            _ => unreachable!("journal() returns the record it was given"),
        }
    }

    /// Adds old bytes to a partial capture (the blob is already stored).
    ///
    /// # Errors
    /// The journal cannot be written: the change the bytes protect must not go ahead.
    pub fn insert_range(&self, capture: i64, range: &Range) -> Result<()> {
        self.journal(|_| Record::Range {
            capture,
            range: range.clone(),
        })
        .map(|_| ())
    }

    /// The ranges of a partial capture, by offset.
    pub fn ranges(&self, capture: i64) -> Result<Vec<Range>> {
        self.with(|c| {
            let mut st = c.prepare_cached(
                "SELECT offset, length, blob, data FROM capture_ranges WHERE capture = ?1 ORDER BY offset",
            )?;
            let rows = st.query_map([capture], |r| {
                let content = match r.get::<_, Option<BlobRef>>(2)? {
                    Some(h) => RangeContent::Blob(h),
                    None => RangeContent::Inline(r.get(3)?),
                };
                Ok(Range {
                    offset: r.get::<_, i64>(0)? as u64,
                    length: r.get::<_, i64>(1)? as u64,
                    content,
                })
            })?;
            rows.collect()
        })
    }

    /// Records that another actor changed a path already captured in a checkpoint.
    pub fn add_actor(&self, checkpoint: i64, path: &Node, bits: u8) -> Result<()> {
        self.journal(|_| Record::Actors {
            checkpoint,
            path: path.clone(),
            bits,
        })
        .map(|_| ())
    }

    /// Marks a path as tracked (tool-changed) in a session, if it is not already.
    pub fn track(&self, session: &str, path: &WsPath, checkpoint: i64, capture: i64) -> Result<()> {
        self.journal(|_| Record::Track {
            session: session.to_string(),
            path: path.clone(),
            checkpoint,
            capture,
        })
        .map(|_| ())
    }

    /// Every tracked path of a session, in the order a tool first changed each (the order the
    /// SDK's `trackedFiles` keeps, which its rewind answers in): by the capture taken at that
    /// change (ids are handed out in the order changes happen), then by row for a row whose
    /// capture is gone.
    pub fn tracked(&self, session: &str) -> Result<Vec<Tracked>> {
        self.with(|c| {
            let mut st = c.prepare(
                // A row for the workspace root itself (an older build tracked a tool's chmod of
                // it) names no file the SDK restores.
                "SELECT path, checkpoint, capture FROM tracked WHERE session_id = ?1 AND length(path) > 0
                 ORDER BY capture IS NULL, capture, rowid",
            )?;
            let rows = st.query_map([session], |r| {
                Ok(Tracked {
                    path: r.get(0)?,
                    checkpoint: r.get(1)?,
                    capture: r.get(2)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The last checkpoint before `before` in which `path` was captured (changed), if any.
    pub fn last_captured_before(&self, path: &WsPath, before: i64) -> Result<Option<i64>> {
        self.with(|c| {
            c.query_row(
                "SELECT max(checkpoint) FROM captures WHERE path = ?1 AND checkpoint < ?2",
                rusqlite::params![path, before],
                |r| r.get(0),
            )
        })
    }

    /// One capture, by its id.
    pub fn capture_by_id(&self, id: i64) -> Result<Option<Capture>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {CAPTURE_COLS} FROM captures WHERE id = ?1"),
                [id],
                row_capture,
            )
            .optional()
        })
    }

    /// All checkpoint-purpose captures in checkpoints with `seq >= from`, oldest checkpoint first.
    pub fn captures_from(&self, from: i64) -> Result<Vec<Capture>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {CAPTURE_COLS} FROM captures WHERE checkpoint >= ?1 AND purpose = 'checkpoint' ORDER BY checkpoint, id"
            ))?;
            let rows = st.query_map([from], row_capture)?;
            rows.collect()
        })
    }

    /// Captures of one checkpoint (checkpoint purpose).
    pub fn captures_in(&self, checkpoint: i64) -> Result<Vec<Capture>> {
        self.with(|c| {
            let mut st = c.prepare(&format!(
                "SELECT {CAPTURE_COLS} FROM captures WHERE checkpoint = ?1 AND purpose = 'checkpoint' ORDER BY id"
            ))?;
            let rows = st.query_map([checkpoint], row_capture)?;
            rows.collect()
        })
    }

    /// Records a directory rename before it is applied.
    pub fn insert_move(
        &self,
        checkpoint: i64,
        src: &WsPath,
        dst: &WsPath,
        exchange: bool,
        actor: Actor,
    ) -> Result<()> {
        self.journal(|p| {
            let seq = p.next_move;
            p.next_move += 1;
            Record::Move {
                seq,
                checkpoint,
                src: src.clone(),
                dst: dst.clone(),
                exchange,
                // Every capture id handed out so far happened before this rename.
                after_capture: p.next_capture - 1,
                actor,
                at: now_ms(),
            }
        })
        .map(|_| ())
    }

    pub fn moves_from(&self, from: i64) -> Result<Vec<Move>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT seq, checkpoint, src, dst, exchange, after_capture, actor FROM moves WHERE checkpoint >= ?1 ORDER BY seq",
            )?;
            let rows = st.query_map([from], |r| {
                Ok(Move {
                    seq: r.get(0)?,
                    checkpoint: r.get(1)?,
                    src: r.get(2)?,
                    dst: r.get(3)?,
                    exchange: r.get::<_, i64>(4)? != 0,
                    after_capture: r.get(5)?,
                    actor: Actor::parse(&r.get::<_, String>(6)?),
                })
            })?;
            rows.collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::{Actor, Kind, PreImage, Store};

    #[test]
    fn a_capture_round_trips_with_its_actors() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let k = s
            .begin_checkpoint(
                "22222222-2222-4222-8222-222222222222",
                None,
                crate::store::CheckpointKind::Mount,
            )
            .unwrap();
        let (h, n) = s.blobs.put_bytes(b"old").unwrap();
        let pre = PreImage {
            imported: false,
            kind: Kind::File,
            blob: Some(crate::store::BlobRef::hash(h)),
            mode: 0o100644,
            uid: 0,
            gid: 0,
            size: n,
            target: None,
            partial: false,
            xattrs: Some(crate::store::Xattrs::new(vec![(
                b"user.k".to_vec(),
                b"v".to_vec(),
            )])),
        };
        s.insert_capture(
            k,
            &crate::wspath::node("a.txt"),
            crate::store::Purpose::Checkpoint,
            &pre,
            Actor::Shell,
            crate::store::Op::Write,
        )
        .unwrap();
        s.add_actor(k, &crate::wspath::node("a.txt"), Actor::Tool.bit())
            .unwrap();
        let caps = s.captures_from(k).unwrap();
        assert_eq!(caps.len(), 1);
        assert_eq!(caps[0].pre, pre);
        assert_eq!(caps[0].actors, Actor::Shell.bit() | Actor::Tool.bit());
    }
}
