//! Chat conversations: created empty, then kept in step with the runs that answer them. A run
//! that names a conversation ([`ConversationTurn`](crate::ConversationTurn)) makes the stored
//! messages equal to its prompt's (earlier messages that did not change keep their ids and run
//! links) and adds the answer it is writing, which follows the run's output until the run ends.
//! Those writes are in `turns`, beside runs rather than above them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

use crate::codec::{decode_time, encode_time};
use crate::db::Store;
use crate::error::{Result, StoreError};
use crate::search::{check_search_text, match_expression};

/// Longest title kept; longer ones are cut at a character boundary.
pub const MAX_TITLE_CHARS: usize = 200;
/// Most conversations one list answers.
pub const MAX_CONVERSATIONS_LISTED: i64 = 1_000;

/// A conversation as the list shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct ConversationSummary {
    pub id: i64,
    /// Empty until the first prompt names it (the UI says "New chat").
    pub title: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub message_count: i64,
    /// With a search: a piece of the first message that matched, if a message did.
    pub snippet: Option<String>,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct ConversationMessage {
    pub id: i64,
    #[ts(type = "'user' | 'assistant'")]
    pub role: String,
    pub content: String,
    /// The run that wrote this answer (null for prompts, and once that run was deleted).
    pub run_id: Option<i64>,
    /// Its run is still writing it; `content` holds what it wrote so far.
    pub answering: bool,
    pub created_at: DateTime<Utc>,
}

/// A conversation with its messages in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ts_rs::TS)]
pub struct Conversation {
    pub id: i64,
    pub title: String,
    pub system_prompt: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub messages: Vec<ConversationMessage>,
}

/// What may change in a conversation besides its messages; absent fields stay.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ts_rs::TS)]
#[ts(optional_fields)]
pub struct ConversationPatch {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
}

impl Store {
    /// A new, empty conversation.
    #[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
    pub async fn create_conversation(&self, patch: &ConversationPatch) -> Result<Conversation> {
        let title = clean_title(patch.title.as_deref().unwrap_or(""))?;
        let now = encode_time(&Utc::now());
        let write = async {
            let mut tx = self.begin_write().await?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO conversations (title, system_prompt, created_at, updated_at) \
                 VALUES (?, ?, ?, ?) RETURNING id",
            )
            .bind(&title)
            .bind(patch.system_prompt.as_deref().unwrap_or(""))
            .bind(&now)
            .bind(&now)
            .fetch_one(&mut *tx)
            .await?;
            let conversation = load_conversation(&mut tx, id).await?;
            tx.commit().await?;
            Ok(conversation)
        };
        self.health.observe(write.await)
    }

    /// Conversations, the latest changed first; with `search`, those whose title or messages
    /// hold every word of it (prefixes count, case does not).
    pub async fn list_conversations(
        &self,
        search: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<ConversationSummary>> {
        let limit = limit.unwrap_or(MAX_CONVERSATIONS_LISTED);
        if !(1..=MAX_CONVERSATIONS_LISTED).contains(&limit) {
            return Err(StoreError::invalid(format!(
                "limit must be between 1 and {MAX_CONVERSATIONS_LISTED}"
            )));
        }
        if let Some(text) = search {
            check_search_text("search", text)?;
        }
        let search = search.map(str::trim).filter(|s| !s.is_empty());
        let matched = search.and_then(match_expression);
        let words: Vec<String> = search
            .map(|s| s.split_whitespace().map(like_pattern).collect())
            .unwrap_or_default();
        let mut conn = self.pool.acquire().await?;
        let mut query = sqlx::QueryBuilder::new(
            "SELECT c.id, c.title, c.created_at, c.updated_at, \
             (SELECT count(*) FROM conversation_messages m WHERE m.conversation_id = c.id) \
             AS message_count, ",
        );
        match &matched {
            Some(expression) => {
                query
                    .push(
                        "(SELECT snippet(conversation_search, 0, '', '', '…', 12) \
                         FROM conversation_search JOIN conversation_messages m \
                         ON m.id = conversation_search.rowid \
                         WHERE conversation_search MATCH ",
                    )
                    .push_bind(expression.clone())
                    .push(" AND m.conversation_id = c.id ORDER BY m.position LIMIT 1)");
            }
            None => {
                query.push("NULL");
            }
        }
        query.push(" AS snippet FROM conversations c");
        if let Some(expression) = &matched {
            // Every word in the title, or all of them in one message.
            query.push(" WHERE (1 = 1");
            for word in &words {
                query
                    .push(" AND c.title LIKE ")
                    .push_bind(word.clone())
                    .push(" ESCAPE '\\'");
            }
            query
                .push(
                    ") OR c.id IN (SELECT m.conversation_id FROM conversation_messages m \
                     JOIN conversation_search ON conversation_search.rowid = m.id \
                     WHERE conversation_search MATCH ",
                )
                .push_bind(expression.clone())
                .push(")");
        }
        query
            .push(" ORDER BY c.updated_at DESC, c.id DESC LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&mut *conn).await?;
        rows.iter().map(summary_from_row).collect()
    }

    /// One conversation with its messages; an answer being written shows its output so far.
    pub async fn get_conversation(&self, id: i64) -> Result<Conversation> {
        let mut tx = self.pool.begin().await?;
        let conversation = load_conversation(&mut tx, id).await?;
        tx.commit().await?;
        Ok(conversation)
    }

    /// Renames a conversation or changes its system prompt.
    #[tracing::instrument(level = "debug", skip_all, fields(id = id), err(level = "debug"))]
    pub async fn update_conversation(
        &self,
        id: i64,
        patch: &ConversationPatch,
    ) -> Result<Conversation> {
        let title = patch.title.as_deref().map(clean_title).transpose()?;
        let write = async {
            let mut tx = self.begin_write().await?;
            let updated = sqlx::query(
                "UPDATE conversations SET title = coalesce(?, title), \
                 system_prompt = coalesce(?, system_prompt), updated_at = ? WHERE id = ?",
            )
            .bind(title)
            .bind(patch.system_prompt.as_deref())
            .bind(encode_time(&Utc::now()))
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if updated == 0 {
                return Err(StoreError::conversation_not_found(id));
            }
            let conversation = load_conversation(&mut tx, id).await?;
            tx.commit().await?;
            Ok(conversation)
        };
        self.health.observe(write.await)
    }

    /// Deletes a conversation and its messages; the runs that answered it stay in the history.
    #[tracing::instrument(level = "debug", skip_all, fields(id = id), err(level = "debug"))]
    pub async fn delete_conversation(&self, id: i64) -> Result<()> {
        let write = async {
            let mut tx = self.begin_write().await?;
            let deleted = sqlx::query("DELETE FROM conversations WHERE id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if deleted == 0 {
                return Err(StoreError::conversation_not_found(id));
            }
            tx.commit().await
        };
        self.health.observe(write.await)
    }
}

fn clean_title(title: &str) -> Result<String> {
    let title = title.trim();
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(StoreError::invalid(format!(
            "a title has at most {MAX_TITLE_CHARS} characters"
        )));
    }
    if title.chars().any(char::is_control) {
        return Err(StoreError::invalid("a title is one line of text"));
    }
    Ok(title.to_owned())
}

/// `%word%` for LIKE, with LIKE's wildcards in the word taken literally.
fn like_pattern(word: &str) -> String {
    let escaped = word
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

async fn load_conversation(conn: &mut SqliteConnection, id: i64) -> Result<Conversation> {
    let row = sqlx::query(
        "SELECT id, title, system_prompt, created_at, updated_at FROM conversations WHERE id = ?",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| StoreError::conversation_not_found(id))?;
    let messages = sqlx::query(
        "SELECT m.id, m.role, m.run_id, m.answering, m.created_at, \
         CASE WHEN m.answering THEN m.content || coalesce(r.output, '') ELSE m.content END \
         AS content \
         FROM conversation_messages m LEFT JOIN runs r ON r.id = m.run_id \
         WHERE m.conversation_id = ? ORDER BY m.position",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    Ok(Conversation {
        id: row.try_get("id")?,
        title: row.try_get("title")?,
        system_prompt: row.try_get("system_prompt")?,
        created_at: time(&row, "created_at")?,
        updated_at: time(&row, "updated_at")?,
        messages: messages
            .iter()
            .map(message_from_row)
            .collect::<Result<_>>()?,
    })
}

fn message_from_row(row: &SqliteRow) -> Result<ConversationMessage> {
    Ok(ConversationMessage {
        id: row.try_get("id")?,
        role: row.try_get("role")?,
        content: row.try_get("content")?,
        run_id: row.try_get("run_id")?,
        answering: row.try_get("answering")?,
        created_at: time(row, "created_at")?,
    })
}

fn summary_from_row(row: &SqliteRow) -> Result<ConversationSummary> {
    Ok(ConversationSummary {
        id: row.try_get("id")?,
        title: row.try_get("title")?,
        created_at: time(row, "created_at")?,
        updated_at: time(row, "updated_at")?,
        message_count: row.try_get("message_count")?,
        snippet: row.try_get("snippet")?,
    })
}

fn time(row: &SqliteRow, column: &str) -> Result<DateTime<Utc>> {
    decode_time(column, row.try_get(column)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_take_wildcards_literally() {
        assert_eq!(like_pattern("50%_a\\b"), "%50\\%\\_a\\\\b%");
    }

    #[test]
    fn titles_are_one_bounded_line() {
        assert_eq!(clean_title("  Trip plans ").unwrap(), "Trip plans");
        assert!(clean_title("a\nb").is_err());
        assert!(clean_title(&"x".repeat(MAX_TITLE_CHARS + 1)).is_err());
    }
}
