-- rewindfs store: what `status` counts, kept as the rows change. Shipped migrations are never
-- edited.

-- `status` (which every command that needs the workspace's path asks, a rewind's among them)
-- counted the captures and summed the blobs' sizes at each request: two full scans, 17 ms at
-- 336k captures and growing with the store. One row keeps the two figures instead, changed in
-- the transaction that changes the rows it counts:
-- - rows added: by the code that adds them (`src/store/counts.rs`): the journal's applier once
--   a batch (a trigger on each row cost the flusher 2 µs a capture), an import by counting
--   again after its rows;
-- - rows deleted (gc) or a blob's size changed: by the triggers below.
-- `rewindfs fsck` checks it. Derived from the rows, so a bundle does not carry it (bundles
-- still say schema 9).
CREATE TABLE store_counts (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    captures    INTEGER NOT NULL,             -- rows of `captures`
    blob_bytes  INTEGER NOT NULL              -- sum of `blobs.size`
);
INSERT INTO store_counts (id, captures, blob_bytes)
VALUES (1, (SELECT count(*) FROM captures), (SELECT coalesce(sum(size), 0) FROM blobs));

-- A foreign key's cascade fires these too.
CREATE TRIGGER store_counts_capture_out AFTER DELETE ON captures
BEGIN UPDATE store_counts SET captures = captures - 1 WHERE id = 1; END;
CREATE TRIGGER store_counts_blob_out AFTER DELETE ON blobs
BEGIN UPDATE store_counts SET blob_bytes = blob_bytes - old.size WHERE id = 1; END;
CREATE TRIGGER store_counts_blob_size AFTER UPDATE OF size ON blobs
BEGIN UPDATE store_counts SET blob_bytes = blob_bytes - old.size + new.size WHERE id = 1; END;
