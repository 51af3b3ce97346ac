-- Chat conversations: a title, a system prompt and the messages in order. An assistant message
-- links to the run that wrote it; while that run goes (`answering`), the run's output so far
-- follows the message's content (a continued answer keeps its earlier text there), and it is
-- folded into the content when the run ends. Deleting a run keeps the message.
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE INDEX conversations_updated ON conversations (updated_at);

CREATE TABLE conversation_messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    run_id INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    answering INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    UNIQUE (conversation_id, position)
);

CREATE INDEX conversation_messages_run ON conversation_messages (run_id);

-- Full-text search over the messages, kept by triggers like runs_search.
CREATE VIRTUAL TABLE conversation_search USING fts5(
    content,
    content = 'conversation_messages',
    content_rowid = 'id'
);

CREATE TRIGGER conversation_search_insert AFTER INSERT ON conversation_messages BEGIN
    INSERT INTO conversation_search (rowid, content) VALUES (new.id, new.content);
END;

CREATE TRIGGER conversation_search_delete AFTER DELETE ON conversation_messages BEGIN
    INSERT INTO conversation_search (conversation_search, rowid, content)
    VALUES ('delete', old.id, old.content);
END;

CREATE TRIGGER conversation_search_update AFTER UPDATE OF content ON conversation_messages BEGIN
    INSERT INTO conversation_search (conversation_search, rowid, content)
    VALUES ('delete', old.id, old.content);
    INSERT INTO conversation_search (rowid, content) VALUES (new.id, new.content);
END;
