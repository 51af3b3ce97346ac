-- Runs stored before this counted reading the prompt as a step. A run's steps now count the
-- decode steps after it, as its step rows do, and its tokens per step what those steps yielded:
-- one step and one token fewer (1.0 where no step is left, as plain decoding reads).
UPDATE runs
SET mean_accepted = CASE
        WHEN mean_accepted IS NULL THEN NULL
        WHEN steps > 1 THEN (mean_accepted * steps - 1) / (steps - 1)
        ELSE 1.0
    END,
    steps = steps - 1
WHERE steps >= 1;
