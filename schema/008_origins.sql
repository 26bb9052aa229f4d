-- rewindfs store: where a history came from. Shipped migrations are never edited.

-- A checkpoint that begins a history made elsewhere: `rewindfs fork` writes a workspace's tree
-- as it was at a checkpoint into a new directory, whose store begins with a checkpoint that
-- records it (kind 'fork'); `rewindfs import` records the bundle a batch of checkpoints came
-- from (kind 'import'). `list` shows it.
CREATE TABLE origins (
    checkpoint  INTEGER PRIMARY KEY REFERENCES checkpoints(seq) ON DELETE CASCADE,
    kind        TEXT NOT NULL CHECK (kind IN ('fork', 'import')),
    workspace   TEXT NOT NULL,                -- the parent workspace (absolute path)
    store       TEXT,                         -- the parent's store directory
    uuid        TEXT NOT NULL,                -- the parent's checkpoint (fork: the tree's state)
    session_id  TEXT,                         -- that checkpoint's session
    at          INTEGER NOT NULL              -- unix ms
);
