-- rewindfs store, version 1. Shipped migrations are never edited; add 002_*.sql instead.

-- Agent sessions. Checkpoints of kind 'message' belong to exactly one.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    created_at  INTEGER NOT NULL              -- unix ms
);

-- Checkpoints, in the order they began. 'mount': opened implicitly by each mount;
-- 'message': a user message (begin_message); 'rewind': opened by a rewind for its own captures.
CREATE TABLE checkpoints (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid        TEXT NOT NULL UNIQUE,
    session_id  TEXT,                         -- NULL for 'mount' and 'rewind'
    kind        TEXT NOT NULL CHECK (kind IN ('mount', 'message', 'rewind')),
    began_at    INTEGER NOT NULL
);

-- Content-addressed blobs (files under blobs/ab/cdef…, named by BLAKE3).
CREATE TABLE blobs (
    hash        TEXT PRIMARY KEY,
    size        INTEGER NOT NULL
);

-- Pre-images. purpose 'checkpoint': the state of `path` just before its first change in
-- `checkpoint`; purpose 'tool': the state just before the first tool change of `path` in
-- the checkpoint's session, when that differs from the checkpoint capture.
CREATE TABLE captures (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    checkpoint  INTEGER NOT NULL REFERENCES checkpoints(seq) ON DELETE CASCADE,
    path        BLOB NOT NULL,                -- workspace-relative, '/'-separated, no leading '/'
    purpose     TEXT NOT NULL CHECK (purpose IN ('checkpoint', 'tool')),
    kind        TEXT NOT NULL CHECK (kind IN ('file', 'dir', 'symlink', 'absent', 'other')),
    blob        TEXT REFERENCES blobs(hash),  -- content, for kind 'file'
    mode        INTEGER,                      -- st_mode (type and permission bits)
    uid         INTEGER,
    gid         INTEGER,
    size        INTEGER,
    target      BLOB,                         -- symlink target, for kind 'symlink'
    actor       TEXT NOT NULL CHECK (actor IN ('tool', 'shell', 'external', 'rewind')),
    actors      INTEGER NOT NULL DEFAULT 0,   -- bit set of every actor that changed the path in the checkpoint
    op          TEXT NOT NULL,                -- the change that caused the capture
    created_at  INTEGER NOT NULL
);
-- At most one 'checkpoint' capture per (checkpoint, path) between two directory renames that
-- touch the path (the daemon's in-memory map enforces it; a rename re-arms capture).
CREATE INDEX captures_cp_path ON captures(checkpoint, path);
CREATE INDEX captures_path ON captures(path);

-- Files a tool changed in a session ("tracked", for the tool scope), with the checkpoint of
-- the first tool change and the capture holding the state just before it.
CREATE TABLE tracked (
    session_id  TEXT NOT NULL,
    path        BLOB NOT NULL,
    checkpoint  INTEGER NOT NULL REFERENCES checkpoints(seq) ON DELETE CASCADE,
    capture     INTEGER REFERENCES captures(id) ON DELETE SET NULL,
    PRIMARY KEY (session_id, path)
);

-- Directory renames, written before the rename is applied: a rewind maps paths beneath a
-- moved directory through them instead of copying the directory's contents.
CREATE TABLE moves (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    checkpoint  INTEGER NOT NULL REFERENCES checkpoints(seq) ON DELETE CASCADE,
    src         BLOB NOT NULL,
    dst         BLOB NOT NULL,
    exchange    INTEGER NOT NULL DEFAULT 0,
    after_capture INTEGER NOT NULL,           -- captures with id <= this happened before the rename
    actor       TEXT NOT NULL,
    at          INTEGER NOT NULL
);

-- The append-only change log.
CREATE TABLE changes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    checkpoint  INTEGER NOT NULL,
    op          TEXT NOT NULL,
    path        BLOB NOT NULL,
    path2       BLOB,
    actor       TEXT NOT NULL,
    pid         INTEGER,
    process     TEXT,
    tool_use_id TEXT
);
CREATE INDEX changes_path ON changes(path);

-- Rewinds: the journal that makes a rewind all-or-nothing across a crash, and the undo list.
CREATE TABLE rewinds (
    id          TEXT PRIMARY KEY,             -- uuid
    checkpoint  INTEGER NOT NULL REFERENCES checkpoints(seq),  -- the rewind's own checkpoint
    target      TEXT NOT NULL,                -- uuid rewound to (or the rewind undone)
    scope       TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('applying', 'done', 'rolled_back', 'undone')),
    plan        TEXT NOT NULL,                -- JSON: the per-path target states
    created_at  INTEGER NOT NULL
);
