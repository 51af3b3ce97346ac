-- The generated tokens' log-probabilities and their likeliest alternatives, as a JSON array,
-- kept only for runs that asked for them. NULL otherwise and for runs recorded before.
ALTER TABLE runs ADD COLUMN logprobs TEXT;
