-- rewindfs store: what `status` counts, kept as the rows change. Shipped migrations are never
-- edited.

-- `status` (which every command that needs the workspace's path asks, a rewind's among them)
-- counted the captures and summed the blobs' sizes at each request: two full scans, 17 ms at
-- 336k captures and growing with the store. These triggers keep the two figures in one row
-- instead, in the same transaction as the rows they count; `rewindfs fsck` checks them.
-- Derived from the rows, so a bundle does not carry it (bundles still say schema 9).
CREATE TABLE store_counts (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    captures    INTEGER NOT NULL,             -- rows of `captures`
    blob_bytes  INTEGER NOT NULL              -- sum of `blobs.size`
);
INSERT INTO store_counts (id, captures, blob_bytes)
VALUES (1, (SELECT count(*) FROM captures), (SELECT coalesce(sum(size), 0) FROM blobs));

-- An `INSERT OR IGNORE` that inserts nothing fires no trigger; a foreign key's cascade does.
CREATE TRIGGER store_counts_capture_in AFTER INSERT ON captures
BEGIN UPDATE store_counts SET captures = captures + 1 WHERE id = 1; END;
CREATE TRIGGER store_counts_capture_out AFTER DELETE ON captures
BEGIN UPDATE store_counts SET captures = captures - 1 WHERE id = 1; END;
CREATE TRIGGER store_counts_blob_in AFTER INSERT ON blobs
BEGIN UPDATE store_counts SET blob_bytes = blob_bytes + new.size WHERE id = 1; END;
CREATE TRIGGER store_counts_blob_out AFTER DELETE ON blobs
BEGIN UPDATE store_counts SET blob_bytes = blob_bytes - old.size WHERE id = 1; END;
CREATE TRIGGER store_counts_blob_size AFTER UPDATE OF size ON blobs
BEGIN UPDATE store_counts SET blob_bytes = blob_bytes - old.size + new.size WHERE id = 1; END;
