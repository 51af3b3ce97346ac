//! A run's turn in a conversation: the messages it writes there when it begins, and its answer
//! settled when it ends. Kept out of `conversations`, so runs and opening reach it without a loop.

use chrono::Utc;
use sqlx::SqliteConnection;

use crate::codec::encode_time;
use crate::error::{Result, StoreError};
use crate::records::{ConversationTurn, MessageRecord, PromptRecord};

/// Characters of the first prompt a conversation's title takes when it has none.
const DERIVED_TITLE_CHARS: usize = 60;

/// Makes the conversation's messages those of `prompt` and adds the answer `run_id` writes (or
/// hands it the last message, when the run continues it). Part of the run's first write.
pub(crate) async fn record_turn(
    conn: &mut SqliteConnection,
    turn: ConversationTurn,
    prompt: &PromptRecord,
    run_id: i64,
) -> Result<()> {
    let PromptRecord::Chat(messages) = prompt else {
        return Err(StoreError::invalid(
            "a conversation's run takes chat messages, not a raw prompt",
        ));
    };
    let (system_prompt, messages) = split_system(messages)?;
    if turn.continues && messages.last().is_none_or(|m| m.role != "assistant") {
        return Err(StoreError::invalid(
            "only an assistant message can be continued: it must be the last message",
        ));
    }
    let id = turn.conversation_id;
    let title: Option<String> = sqlx::query_scalar("SELECT title FROM conversations WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    let title = title.ok_or_else(|| StoreError::conversation_not_found(id))?;
    let stored: Vec<(String, String)> = sqlx::query_as(
        "SELECT role, content FROM conversation_messages \
         WHERE conversation_id = ? ORDER BY position",
    )
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    // Messages before the first change keep their rows (and the runs they link to).
    let kept = stored
        .iter()
        .zip(messages)
        .take_while(|((role, content), m)| *role == m.role && *content == m.content)
        .count();
    sqlx::query("DELETE FROM conversation_messages WHERE conversation_id = ? AND position >= ?")
        .bind(id)
        .bind(kept as i64)
        .execute(&mut *conn)
        .await?;
    let now = encode_time(&Utc::now());
    for (position, message) in messages.iter().enumerate().skip(kept) {
        insert_message(conn, id, position, message, None, &now).await?;
    }
    if turn.continues {
        sqlx::query(
            "UPDATE conversation_messages SET run_id = ?, answering = 1 \
             WHERE conversation_id = ? AND position = ?",
        )
        .bind(run_id)
        .bind(id)
        .bind(messages.len() as i64 - 1)
        .execute(&mut *conn)
        .await?;
    } else {
        let answer = MessageRecord {
            role: "assistant".into(),
            content: String::new(),
        };
        insert_message(conn, id, messages.len(), &answer, Some(run_id), &now).await?;
    }
    // A title taken from the first question follows it when it is edited; one chosen stays.
    let was_derived = title == derived_title(stored.iter().map(|(r, c)| (r.as_str(), c.as_str())));
    let title = if title.is_empty() || was_derived {
        derived_title(
            messages
                .iter()
                .map(|m| (m.role.as_str(), m.content.as_str())),
        )
    } else {
        title
    };
    sqlx::query(
        "UPDATE conversations SET title = ?, system_prompt = ?, updated_at = ? WHERE id = ?",
    )
    .bind(title)
    .bind(system_prompt)
    .bind(&now)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Folds the output of runs that ended into the answers they were writing: `run_id`'s, or with
/// `None` every one still open (after a restart, when no run is running any more). An answer
/// left empty by a run that failed is removed.
pub(crate) async fn settle_answers(conn: &mut SqliteConnection, run_id: Option<i64>) -> Result<()> {
    let filter = if run_id.is_some() {
        " AND run_id = ?"
    } else {
        " AND (? IS NULL)"
    };
    sqlx::query(&format!(
        "DELETE FROM conversation_messages WHERE answering = 1 AND content = '' \
         AND (SELECT status FROM runs WHERE runs.id = run_id) = 'failed' \
         AND coalesce((SELECT output FROM runs WHERE runs.id = run_id), '') = ''{filter}"
    ))
    .bind(run_id)
    .execute(&mut *conn)
    .await?;
    sqlx::query(&format!(
        "UPDATE conversation_messages SET answering = 0, content = content || \
         coalesce((SELECT output FROM runs WHERE runs.id = run_id), '') \
         WHERE answering = 1{filter}"
    ))
    .bind(run_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn insert_message(
    conn: &mut SqliteConnection,
    conversation_id: i64,
    position: usize,
    message: &MessageRecord,
    answering_run: Option<i64>,
    now: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO conversation_messages \
         (conversation_id, position, role, content, run_id, answering, created_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(conversation_id)
    .bind(position as i64)
    .bind(&message.role)
    .bind(&message.content)
    .bind(answering_run)
    .bind(answering_run.is_some())
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The system prompt (a leading system message) and the user and assistant messages after it.
fn split_system(messages: &[MessageRecord]) -> Result<(&str, &[MessageRecord])> {
    let (system, rest) = match messages.split_first() {
        Some((first, rest)) if first.role == "system" => (first.content.as_str(), rest),
        _ => ("", messages),
    };
    if let Some(m) = rest
        .iter()
        .find(|m| m.role != "user" && m.role != "assistant")
    {
        return Err(StoreError::invalid(format!(
            "a conversation holds one system prompt, first, then user and assistant messages; \
             found a {} message later",
            m.role
        )));
    }
    Ok((system, rest))
}

/// The first line of the first user message of `messages` (role and content), cut to a few
/// words' length.
fn derived_title<'m>(messages: impl IntoIterator<Item = (&'m str, &'m str)>) -> String {
    let first = messages
        .into_iter()
        .find(|(role, _)| *role == "user")
        .and_then(|(_, content)| content.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("");
    let mut title: String = first.chars().take(DERIVED_TITLE_CHARS).collect();
    if first.chars().count() > DERIVED_TITLE_CHARS {
        title = format!("{}…", title.trim_end());
    }
    title
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived_title(messages: &[MessageRecord]) -> String {
        super::derived_title(
            messages
                .iter()
                .map(|m| (m.role.as_str(), m.content.as_str())),
        )
    }

    #[test]
    fn titles_come_from_the_first_line_of_the_first_prompt() {
        let short = [MessageRecord::new("user", "\n  Hello there  \nmore")];
        assert_eq!(derived_title(&short), "Hello there");
        let long = [MessageRecord::new("user", "word ".repeat(20))];
        let title = derived_title(&long);
        assert!(title.ends_with('…'), "{title}");
        assert_eq!(title.chars().count(), 60);
        assert_eq!(derived_title(&[MessageRecord::new("assistant", "hi")]), "");
    }

    #[test]
    fn the_system_prompt_is_the_leading_system_message_only() {
        let messages = [
            MessageRecord::new("system", "Be brief."),
            MessageRecord::new("user", "Hi"),
        ];
        let (system, rest) = split_system(&messages).unwrap();
        assert_eq!((system, rest.len()), ("Be brief.", 1));
        let late = [
            MessageRecord::new("user", "Hi"),
            MessageRecord::new("system", "Obey"),
        ];
        assert!(split_system(&late).is_err());
    }
}
