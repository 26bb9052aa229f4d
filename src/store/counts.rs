//! `store_counts` (`schema/011_counts.sql`): the captures and the bytes of blobs that `status`
//! reports, kept as the rows change instead of counted at each request (two full scans, 17 ms
//! at 336k captures). Deletes and size changes are counted by triggers (gc's, rare); rows added
//! are counted here, by the two writers that add them: the journal's applier once a batch
//! ([`Added`]; a trigger on every row cost the flusher 2 µs a capture), and an import, which
//! counts again after its rows ([`recount`]), whatever tables its bundle filled.

use rusqlite::{Transaction, params};

/// What a batch of journal records added to the rows `store_counts` counts.
#[derive(Debug, Default)]
pub(super) struct Added {
    captures: i64,
    blob_bytes: i64,
}

impl Added {
    /// A capture row insert changed `inserted` rows (0: it was there already).
    pub(super) fn capture(&mut self, inserted: usize) {
        self.captures += inserted as i64;
    }

    /// A blob row insert changed `inserted` rows, for a blob of `size` bytes.
    pub(super) fn blob(&mut self, inserted: usize, size: i64) {
        self.blob_bytes += inserted as i64 * size;
    }

    /// Adds what the batch added, in its transaction.
    ///
    /// # Errors
    /// SQLite errors.
    pub(super) fn record(self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        if self.captures == 0 && self.blob_bytes == 0 {
            return Ok(());
        }
        tx.prepare_cached(
            "UPDATE store_counts SET captures = captures + ?1, blob_bytes = blob_bytes + ?2 WHERE id = 1",
        )?
        .execute(params![self.captures, self.blob_bytes])?;
        Ok(())
    }
}

/// Counts the rows again, in `tx` (an import's, after its rows).
///
/// # Errors
/// SQLite errors.
pub(super) fn recount(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE store_counts SET captures = (SELECT count(*) FROM captures),
                                 blob_bytes = (SELECT coalesce(sum(size), 0) FROM blobs)
         WHERE id = 1",
        [],
    )?;
    Ok(())
}
