-- What the draft budget weighed for each auto-drafted step: expected tokens, expected times and
-- each drafter's evidence. NULL where no budget decided (fixed trees, older steps).
ALTER TABLE steps ADD COLUMN decision TEXT;
