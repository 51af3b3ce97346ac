-- Heads training jobs: what was asked, how far each got, the figures drawn while it trained and
-- what it made. Settings, figures and the report are JSON.
CREATE TABLE training_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    status TEXT NOT NULL,
    phase TEXT NOT NULL,
    model_name TEXT NOT NULL,
    model_path TEXT NOT NULL,
    settings TEXT NOT NULL,
    data_path TEXT,
    heads_path TEXT,
    figures TEXT NOT NULL,
    report TEXT,
    error TEXT
);
CREATE INDEX training_jobs_created ON training_jobs (created_at);
