-- rewindfs store: history from elsewhere. Shipped migrations are never edited.

-- 1: the checkpoint's rows came from another store (`rewindfs import`, `rewindfs pull`), not
-- from this daemon's own captures. Its pre-images are another person's or machine's word: a
-- rewind or fork applies them without set-user/group-ID bits, file capabilities,
-- `security.*`/`trusted.*` attributes, foreign owners or device nodes unless the user trusts
-- the source (`--trust-imported`). An import always sets it, whatever the bundle says.
ALTER TABLE checkpoints ADD COLUMN imported INTEGER NOT NULL DEFAULT 0;

-- Stores that imported before this column existed: each import recorded an origin on the first
-- checkpoint it added, and began a new checkpoint of this store's own right after, at the time
-- of the import; the checkpoints in between (which began elsewhere, earlier) are the imported
-- ones.
UPDATE checkpoints SET imported = 1
WHERE EXISTS (
    SELECT 1 FROM origins o
    WHERE o.kind = 'import'
      AND checkpoints.seq >= o.checkpoint
      AND checkpoints.seq < coalesce(
          (SELECT min(c2.seq) FROM checkpoints c2
           WHERE c2.seq > o.checkpoint AND c2.began_at >= o.at AND c2.kind = 'mount'
             AND c2.session_id IS NULL),
          9223372036854775807)
);
