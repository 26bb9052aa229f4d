//! The schema migrator: `schema/00N_*.sql`, applied in order, counted by `PRAGMA user_version`.
//!
//! Invariants:
//! - `user_version` is the number of migrations applied, and all that are missing are applied
//!   in one exclusive transaction, so a crash or a second opener never sees a half-migrated
//!   database;
//! - a database with a higher version than [`SCHEMA_VERSION`] was written by a newer rewindfs
//!   and is refused ([`StoreError::TooNew`]) rather than misread;
//! - a shipped migration is never edited (stores in the field have run it); a change to the
//!   schema is a new file appended to [`MIGRATIONS`], and `schema/store.md` says what it did;
//! - each migration says whether it changes the tables' rows (`rows`): bundles carry the
//!   version of the last one that did ([`ROWS_SCHEMA_VERSION`]), so a new migration that
//!   changes rows but says it does not would let an older rewindfs misread new bundles.
//!
//! Pragmas (`journal_mode`, `synchronous`, `foreign_keys`) belong to the connection, not the
//! schema, and are set by [`Store::open`](super::Store::open) outside this transaction.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{Result, StoreError};

/// One `schema/00N_*.sql`.
struct Migration {
    sql: &'static str,
    /// It changes the tables' rows (a table or column added, rows rewritten), which is what a
    /// bundle carries; false for one that only marks a change to the store's other files (the
    /// journal's frames), which a bundle does not carry.
    rows: bool,
}

/// A migration that changes the tables' rows.
const fn rows(sql: &'static str) -> Migration {
    Migration { sql, rows: true }
}

/// A migration that marks a change to the store's other files only.
const fn files(sql: &'static str) -> Migration {
    Migration { sql, rows: false }
}

/// A migration that adds what the store derives from its rows (kept by triggers), which a
/// bundle does not carry: its rows stay readable by a rewindfs that lacks it.
const fn derived(sql: &'static str) -> Migration {
    Migration { sql, rows: false }
}

/// Migrations, in order; `PRAGMA user_version` is the number applied.
const MIGRATIONS: &[Migration] = &[
    rows(include_str!("../../schema/001_init.sql")),
    rows(include_str!("../../schema/002_retention.sql")),
    rows(include_str!("../../schema/003_ranges.sql")),
    rows(include_str!("../../schema/004_changes_index.sql")),
    rows(include_str!("../../schema/005_prompts.sql")),
    rows(include_str!("../../schema/006_sessions.sql")),
    rows(include_str!("../../schema/007_xattrs.sql")),
    rows(include_str!("../../schema/008_origins.sql")),
    rows(include_str!("../../schema/009_imported.sql")),
    files(include_str!("../../schema/010_journal_crc.sql")),
    derived(include_str!("../../schema/011_counts.sql")),
];

/// The schema version this build writes and reads: the number of [`MIGRATIONS`].
pub(super) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The version a bundle's rows follow: that of the last migration that changed rows. A bundle
/// says it (its manifest's `schema`), so that an older rewindfs refuses only bundles whose
/// rows it cannot read, not every bundle of a store whose journal changed format.
pub(crate) const ROWS_SCHEMA_VERSION: i64 = {
    let mut i = MIGRATIONS.len();
    while !MIGRATIONS[i - 1].rows {
        i -= 1;
    }
    i as i64
};

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
    for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(m.sql)?;
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

    #[test]
    fn bundles_say_the_version_of_their_rows_not_of_the_journal() {
        // 10 changed only the journal's frames, 11 added derived counts: a bundle's rows are
        // still schema 9's.
        assert_eq!(super::SCHEMA_VERSION, 11);
        assert_eq!(super::ROWS_SCHEMA_VERSION, 9);
    }
}
