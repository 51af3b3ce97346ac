-- The generated token ids of a run of the playground's own model, as a JSON array, so two runs'
-- outputs compare token by token. NULL for remote engines' runs and runs recorded before.
ALTER TABLE runs ADD COLUMN token_ids TEXT;
