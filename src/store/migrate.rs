//! The schema migrator: `schema/00N_*.sql`, applied in order, counted by `PRAGMA user_version`.
//!
//! Invariants:
//! - `user_version` is the number of migrations applied, and all that are missing are applied
//!   in one exclusive transaction, so a crash or a second opener never sees a half-migrated
//!   database;
//! - a database with a higher version than [`SCHEMA_VERSION`] was written by a newer rewindfs
//!   and is refused ([`StoreError::TooNew`]) rather than misread;
//! - a shipped migration is never edited (stores in the field have run it); a change to the
//!   schema is a new file appended to [`MIGRATIONS`], and `schema/store.md` says what it did.
//!
//! Pragmas (`journal_mode`, `synchronous`, `foreign_keys`) belong to the connection, not the
//! schema, and are set by [`Store::open`](super::Store::open) outside this transaction.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{Result, StoreError};

/// Migrations, in order; `PRAGMA user_version` is the number applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../schema/001_init.sql"),
    include_str!("../../schema/002_retention.sql"),
    include_str!("../../schema/003_ranges.sql"),
    include_str!("../../schema/004_changes_index.sql"),
    include_str!("../../schema/005_prompts.sql"),
    include_str!("../../schema/006_sessions.sql"),
    include_str!("../../schema/007_xattrs.sql"),
    include_str!("../../schema/008_origins.sql"),
    include_str!("../../schema/009_imported.sql"),
];

/// The schema version this build writes and reads: the number of [`MIGRATIONS`].
pub(super) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Applies pending migrations inside an exclusive transaction; refuses a newer database.
pub(super) fn migrate(conn: &mut Connection, db: &Path) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            path: db.display().to_string(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use crate::store::Store;

    #[test]
    fn migrations_apply_once_and_a_newer_store_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), false).unwrap();
        let seq = s
            .begin_checkpoint(
                "11111111-1111-4111-8111-111111111111",
                Some("s1"),
                crate::store::CheckpointKind::Message,
            )
            .unwrap();
        drop(s);
        let s = Store::open(d.path(), false).unwrap();
        assert_eq!(
            s.checkpoint("11111111-1111-4111-8111-111111111111")
                .unwrap()
                .unwrap()
                .seq,
            seq
        );
        drop(s);
        let c = Connection::open(d.path().join("rewindfs.db")).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        let err = Store::open(d.path(), false)
            .err()
            .expect("newer store must be refused");
        assert!(
            err.to_string()
                .contains("newer than this rewindfs supports"),
            "{err}"
        );
    }
}
