-- Full-text search over what runs were asked and what they answered: an FTS5 index over
-- runs.prompt_text and runs.output, kept by triggers, built for the rows already stored.
CREATE VIRTUAL TABLE runs_search USING fts5(
    prompt_text,
    output,
    content = 'runs',
    content_rowid = 'id'
);

CREATE TRIGGER runs_search_insert AFTER INSERT ON runs BEGIN
    INSERT INTO runs_search (rowid, prompt_text, output)
    VALUES (new.id, new.prompt_text, coalesce(new.output, ''));
END;

CREATE TRIGGER runs_search_delete AFTER DELETE ON runs BEGIN
    INSERT INTO runs_search (runs_search, rowid, prompt_text, output)
    VALUES ('delete', old.id, old.prompt_text, coalesce(old.output, ''));
END;

CREATE TRIGGER runs_search_update AFTER UPDATE OF prompt_text, output ON runs BEGIN
    INSERT INTO runs_search (runs_search, rowid, prompt_text, output)
    VALUES ('delete', old.id, old.prompt_text, coalesce(old.output, ''));
    INSERT INTO runs_search (rowid, prompt_text, output)
    VALUES (new.id, new.prompt_text, coalesce(new.output, ''));
END;

INSERT INTO runs_search (runs_search) VALUES ('rebuild');
