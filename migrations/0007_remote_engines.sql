-- Runs on a remote engine name it (NULL: the playground's own model), and every run keeps its
-- drafted and accepted draft tokens, the figures remote engines report without per-step detail.
ALTER TABLE runs ADD COLUMN engine TEXT;
ALTER TABLE runs ADD COLUMN draft_tokens INTEGER;
ALTER TABLE runs ADD COLUMN accepted_draft_tokens INTEGER;
