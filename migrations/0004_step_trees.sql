-- What each speculative step drafted (its tree: tokens, texts, proposers, verdicts) and why a
-- step drafted nothing; NULL for steps recorded before trees were kept.
ALTER TABLE steps ADD COLUMN tree TEXT;
ALTER TABLE steps ADD COLUMN skip TEXT;

-- Decode speed (tokens after the first over the time after the first) beside the end-to-end
-- speed; derived for runs recorded before it was kept.
ALTER TABLE runs ADD COLUMN decode_tokens_per_second REAL;
UPDATE runs
   SET decode_tokens_per_second = (tokens_generated - 1) * 1000.0 / (total_ms - ttft_ms)
 WHERE tokens_generated > 1 AND total_ms > ttft_ms;
