-- rewindfs store, version 4: the change log's index. Shipped migrations are never edited.

-- The log is read whole or by path prefix (a scan either way: `rewindfs log PATH` matches the
-- path, path2 and everything beneath), and cut by checkpoint when gc drops one. An index on
-- path cost every logged change a random B-tree insert (a page written per change at each
-- commit); one on checkpoint grows at its end, and serves gc.
DROP INDEX changes_path;
CREATE INDEX changes_checkpoint ON changes(checkpoint);
