-- rewindfs store, version 6: several agent sessions in one workspace.
--
-- Every change knows the session of the actor that made it (an agent process registered for a
-- session and its descendants, or a tool span whose hook carried the session; NULL for an
-- external actor). A rewind of a session's checkpoint restores what that session changed and
-- treats a path another session (or someone else) also changed since as a conflict.

ALTER TABLE changes ADD COLUMN session TEXT;

CREATE INDEX changes_session ON changes (session, checkpoint) WHERE session IS NOT NULL;
