-- rewindfs store, version 5: checkpoints begun by the plain Claude Code CLI's hooks.
--
-- The CLI writes a typed prompt's user message (with its uuid) to the session transcript only
-- after the UserPromptSubmit hooks have returned, so `rewindfs hook` begins the prompt's
-- checkpoint under the hooks' `prompt_id` and binds the message uuid later, when the
-- transcript shows the entry whose `promptId` is that id.

-- The hooks' prompt_id the checkpoint began under; NULL for checkpoints begun by uuid.
ALTER TABLE checkpoints ADD COLUMN prompt_id TEXT;
-- The prompt's text, as the UserPromptSubmit hook received it (for `list`).
ALTER TABLE checkpoints ADD COLUMN prompt TEXT;
-- The session transcript that will show the prompt's uuid.
ALTER TABLE checkpoints ADD COLUMN transcript TEXT;
-- 0 while `uuid` is still the prompt_id (the message uuid is not known yet), else 1.
ALTER TABLE checkpoints ADD COLUMN bound INTEGER NOT NULL DEFAULT 1;

CREATE UNIQUE INDEX checkpoints_prompt_id ON checkpoints (prompt_id) WHERE prompt_id IS NOT NULL;
CREATE INDEX checkpoints_unbound ON checkpoints (session_id) WHERE bound = 0;
