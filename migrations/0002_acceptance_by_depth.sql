-- The per-depth acceptance of a run's draft trees: named for what it measures (tree depth), as
-- lookup runs have no heads.
ALTER TABLE runs RENAME COLUMN acceptance_by_head TO acceptance_by_depth;
