-- rewindfs store, version 3: range pre-images. Shipped migrations are never edited.

-- A large file's first change in a checkpoint saves only the bytes its changes overwrite:
-- such a capture is `partial` (no blob; `size` is the file's size when the checkpoint began),
-- and its content is the file's next recorded state (the path's next capture, or the file as
-- it is now) cut or zero-extended to `size`, with each of its ranges laid over it.
ALTER TABLE captures ADD COLUMN partial INTEGER NOT NULL DEFAULT 0;

-- The old bytes of a partial capture, in disjoint page-aligned ranges: small ranges in the
-- row itself (`data`), large ones in a blob.
CREATE TABLE capture_ranges (
    capture     INTEGER NOT NULL REFERENCES captures(id) ON DELETE CASCADE,
    offset      INTEGER NOT NULL,
    length      INTEGER NOT NULL,
    blob        TEXT REFERENCES blobs(hash),
    data        BLOB,
    PRIMARY KEY (capture, offset),
    CHECK ((blob IS NULL) != (data IS NULL))
);
CREATE INDEX capture_ranges_blob ON capture_ranges(blob);
