//! Where a history came from (schema 007): the checkpoint a fork's store begins with records
//! the workspace and checkpoint its tree was written from; an import records the bundle's.
//!
//! Invariants:
//! - an origin belongs to one checkpoint of this store, written in the same transaction as
//!   that checkpoint's row (so a store never has a fork checkpoint without its origin);
//! - [`first_origin`] reads a store some daemon may be serving: read-only, without the
//!   journal, which holds captures only (an origin is never journalled).
//!
//! Methods of `Store` (the store; its state and lock are in `mod.rs`).

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::model::{CheckpointKind, Origin};
use super::{Result, Store, now_ms};

fn row_origin(r: &rusqlite::Row<'_>) -> rusqlite::Result<Origin> {
    Ok(Origin {
        kind: r.get(0)?,
        workspace: r.get(1)?,
        store: r.get(2)?,
        uuid: r.get(3)?,
        session_id: r.get(4)?,
        at: r.get(5)?,
    })
}

impl Store {
    /// Begins a checkpoint (kind `mount`, no session) that records where the history comes
    /// from; returns its sequence number.
    ///
    /// # Errors
    /// SQLite errors (a uuid that exists already).
    pub fn begin_with_origin(&self, uuid: &str, origin: &Origin) -> Result<i64> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO checkpoints (uuid, session_id, kind, began_at) VALUES (?1, NULL, ?2, ?3)",
                params![uuid, CheckpointKind::Mount, origin.at],
            )?;
            let seq = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO origins (checkpoint, kind, workspace, store, uuid, session_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    seq,
                    origin.kind,
                    origin.workspace,
                    origin.store,
                    origin.uuid,
                    origin.session_id,
                    origin.at
                ],
            )?;
            tx.commit()?;
            Ok(seq)
        })
    }

    /// Every origin, by the checkpoint it belongs to.
    pub fn origins(&self) -> Result<HashMap<i64, Origin>> {
        self.conn_only(|c| {
            let mut st = c.prepare(
                "SELECT kind, workspace, store, uuid, session_id, at, checkpoint FROM origins",
            )?;
            let rows = st.query_map([], |r| Ok((r.get::<_, i64>(6)?, row_origin(r)?)))?;
            rows.collect()
        })
    }
}

/// The origin of the first checkpoint of the store in `dir` (`None`: it has none, or there is
/// no store), read without opening the store for writing.
///
/// # Errors
/// SQLite errors reading an existing database.
pub fn first_origin(dir: &Path) -> Result<Option<Origin>> {
    let db = dir.join("rewindfs.db");
    if !db.exists() {
        return Ok(None);
    }
    let c = Connection::open_with_flags(
        &db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    let has: bool = c
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'origins'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !has {
        return Ok(None);
    }
    Ok(c.query_row(
        "SELECT o.kind, o.workspace, o.store, o.uuid, o.session_id, o.at FROM origins o
         WHERE o.checkpoint = (SELECT min(seq) FROM checkpoints)",
        [],
        row_origin,
    )
    .optional()?)
}

/// The time an origin is recorded with, now.
pub fn origin_now() -> i64 {
    now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OriginKind;

    #[test]
    fn a_store_begun_with_an_origin_reads_it_back_and_keeps_it_first() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let o = Origin {
            kind: OriginKind::Fork,
            workspace: "/w/proj".into(),
            store: Some("/s/proj".into()),
            uuid: "55555555-5555-4555-8555-555555555555".into(),
            session_id: Some("sess".into()),
            at: 1234,
        };
        let seq = s
            .begin_with_origin("66666666-6666-4666-8666-666666666666", &o)
            .unwrap();
        s.begin_checkpoint(
            "77777777-7777-4777-8777-777777777777",
            None,
            crate::store::CheckpointKind::Mount,
        )
        .unwrap();
        assert_eq!(s.origins().unwrap().get(&seq), Some(&o));
        assert_eq!(first_origin(d.path()).unwrap(), Some(o));
        let e = tempfile::tempdir().unwrap();
        assert_eq!(first_origin(e.path()).unwrap(), None);
    }
}
