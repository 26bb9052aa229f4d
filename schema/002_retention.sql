-- rewindfs store, version 2: retention. Shipped migrations are never edited.

-- A checkpoint whose captures gc removed keeps its row (so a rewind to it can say why it is
-- gone, and `tracked` rows of live sessions keep their checkpoint), marked here.
ALTER TABLE checkpoints ADD COLUMN dropped_at INTEGER;   -- unix ms, NULL while kept
ALTER TABLE checkpoints ADD COLUMN dropped_why TEXT;     -- e.g. 'store over its 10 GiB budget'

-- gc asks "does any capture still refer to this blob?" once per blob it might free.
CREATE INDEX captures_blob ON captures(blob);
