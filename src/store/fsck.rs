//! `rewindfs fsck`: checks a store without changing it, so it is safe while a daemon uses it.
//!
//! What it checks, each a consistency rule of `schema/store.md`: SQLite's own integrity check;
//! a schema version this build knows; the counts `status` reads (rule 8); every blob a capture
//! or capture range names, present and hashing to its name (rule 3); the blobs named by a
//! journal a crash left behind, which the next open will apply; and no rewind left `applying`
//! (rule 5).
//!
//! Invariant: it writes nothing — the database is opened read-only, the journal is read and
//! not replayed, blobs are only hashed — so running it beside a daemon cannot change the store.

use std::path::Path;

use rusqlite::Connection;

use super::apply::capture_exists;
use super::blobs::Blobs;
use super::journal::{self, Record};
use super::migrate::SCHEMA_VERSION;
use super::{PreImage, Range, RangeContent, Result, StoreError};

/// Checks a store without changing it (safe while a daemon uses it): SQLite's integrity check,
/// the schema version, and that every blob a capture refers to exists and hashes to its name.
/// Returns the problems found (empty when the store is sound) and the number of blobs checked.
///
/// # Errors
/// The database cannot be opened at all.
pub fn fsck(dir: &Path) -> Result<(Vec<String>, usize)> {
    fsck_with(dir, &mut |_, _| {})
}

/// [`fsck`], telling `progress` how many of the database's blobs were verified, of how many,
/// after each one.
///
/// # Errors
/// As [`fsck`]'s.
pub fn fsck_with(
    dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Vec<String>, usize)> {
    let db = dir.join(super::layout::DB);
    if !db.exists() {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no store database", db.display()),
        )));
    }
    let conn = Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let mut problems = Vec::new();
    check_database(&conn, &mut problems)?;
    check_counts(&conn, &mut problems)?;
    let blobs = Blobs::at(&dir.join("blobs"));
    let in_rows = check_row_blobs(&conn, &blobs, &mut problems, progress)?;
    let in_journal = check_journal_blobs(dir, &conn, &blobs, &mut problems)?;
    let unfinished: i64 = conn.query_row(
        "SELECT count(*) FROM rewinds WHERE state = 'applying'",
        [],
        |r| r.get(0),
    )?;
    if unfinished > 0 {
        problems.push(format!(
            "{unfinished} rewind(s) interrupted; the next mount finishes them"
        ));
    }
    Ok((problems, in_rows + in_journal))
}

/// SQLite's integrity check, and a schema version this build can read.
fn check_database(conn: &Connection, problems: &mut Vec<String>) -> Result<()> {
    let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    if ok != "ok" {
        problems.push(format!("database integrity: {ok}"));
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        problems.push(format!(
            "schema version {version} is newer than this rewindfs ({SCHEMA_VERSION})"
        ));
    }
    Ok(())
}

/// The figures `status` reads from `store_counts` (kept by triggers, `schema/011_counts.sql`)
/// against the rows they count. A store older than that migration has none yet: its next
/// open counts them.
fn check_counts(conn: &Connection, problems: &mut Vec<String>) -> Result<()> {
    let has: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'store_counts')",
        [],
        |r| r.get(0),
    )?;
    if !has {
        return Ok(());
    }
    let (kept, counted): ((Option<i64>, Option<i64>), (i64, i64)) = conn.query_row(
        "SELECT (SELECT captures FROM store_counts WHERE id = 1),
                (SELECT blob_bytes FROM store_counts WHERE id = 1),
                (SELECT count(*) FROM captures),
                (SELECT coalesce(sum(size), 0) FROM blobs)",
        [],
        |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))),
    )?;
    match kept {
        (Some(c), Some(b)) if (c, b) == counted => {}
        (Some(c), Some(b)) => problems.push(format!(
            "store_counts says {c} captures and {b} bytes of blobs, the tables hold {} and {}: \
             `status` reports the wrong figures and gc misjudges the store's size (the \
             database was changed outside rewindfs?)",
            counted.0, counted.1
        )),
        _ => problems.push(
            "store_counts has no row: `status` and gc count the tables at each request instead \
             (the database was changed outside rewindfs?)"
                .to_string(),
        ),
    }
    Ok(())
}

/// Every blob a capture or a capture range names; returns how many were checked.
fn check_row_blobs(
    conn: &Connection,
    blobs: &Blobs,
    problems: &mut Vec<String>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<usize> {
    let hashes: Vec<String> = {
        let mut st = conn.prepare("SELECT blob FROM captures WHERE blob IS NOT NULL UNION SELECT blob FROM capture_ranges WHERE blob IS NOT NULL")?;
        let rows = st.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (i, h) in hashes.iter().enumerate() {
        verify(blobs, h, &format!("blob {h}"), problems);
        progress(i + 1, hashes.len());
    }
    Ok(hashes.len())
}

/// The blobs a journal a crash left behind names: its records go into the database at the
/// next mount, so their blobs must be sound now. Returns how many were checked.
fn check_journal_blobs(
    dir: &Path,
    conn: &Connection,
    blobs: &Blobs,
    problems: &mut Vec<String>,
) -> Result<usize> {
    let left = journal::read(dir)?;
    if left.unreadable > 0 {
        problems.push(format!(
            "journal: {} whole record(s) this build cannot read (a path that is not a path \
             inside the workspace, or a kind it does not know); they were left out",
            left.unreadable
        ));
    }
    let mut checked = 0;
    for r in &left.records {
        let (h, path) = match r {
            Record::Capture {
                pre: PreImage { blob: Some(h), .. },
                path,
                ..
            } => (h, path.as_path().display().to_string()),
            Record::Range {
                capture,
                range:
                    Range {
                        content: RangeContent::Blob(h),
                        ..
                    },
            } => (h, format!("range of capture {capture}")),
            _ => continue,
        };
        if let Record::Capture { id, .. } = r {
            if h.is_pending() && capture_exists(conn, *id) {
                continue; // applied before a crash emptied the journal; its row has the hash
            }
        }
        checked += 1;
        verify(
            blobs,
            h.as_str(),
            &format!("journal: blob {h} of {path}"),
            problems,
        );
    }
    Ok(checked)
}

/// Records a problem under `what` if blob `h` is missing, unreadable, or does not hash to its
/// name.
fn verify(blobs: &Blobs, h: &str, what: &str, problems: &mut Vec<String>) {
    match blobs.verify(h) {
        Ok(true) => {}
        Ok(false) => problems.push(format!("{what}: content does not match its hash")),
        Err(e) => problems.push(format!("{what}: {e}")),
    }
}
