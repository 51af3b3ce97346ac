-- Scratch table for the health check's write probe: rows are inserted inside a transaction that
-- is always rolled back, so the table stays empty.
CREATE TABLE write_probe (data BLOB NOT NULL);
