//! One conversation as a file to keep or share: JSON (the conversation as the API answers it) or
//! Markdown (a heading per message).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::conversations::Conversation;
use crate::error::{Result, StoreError};

/// The formats a conversation exports to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum ConversationExport {
    Json,
    Markdown,
}

impl ConversationExport {
    pub fn extension(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Markdown => "md",
        }
    }

    pub fn mime_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Markdown => "text/markdown; charset=utf-8",
        }
    }

    /// The file's name: the title's ASCII letters and digits (a header carries it), else the
    /// conversation's id.
    pub fn filename(self, conversation: &Conversation) -> String {
        let mut stem = String::new();
        for c in conversation.title.chars() {
            if c.is_ascii_alphanumeric() {
                stem.extend(c.to_lowercase());
            } else if !stem.ends_with('-') && !stem.is_empty() {
                stem.push('-');
            }
            if stem.chars().count() >= 40 {
                break;
            }
        }
        let stem = stem.trim_end_matches('-');
        let stem = if stem.is_empty() {
            format!("conversation-{}", conversation.id)
        } else {
            stem.to_owned()
        };
        format!("{stem}.{}", self.extension())
    }

    pub fn render(self, conversation: &Conversation) -> Result<String> {
        match self {
            Self::Json => Ok(serde_json::to_string_pretty(conversation)?),
            Self::Markdown => Ok(markdown(conversation)),
        }
    }
}

impl FromStr for ConversationExport {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "markdown" | "md" => Ok(Self::Markdown),
            _ => Err(StoreError::invalid(format!(
                "unknown conversation export format {s:?}: use json or markdown"
            ))),
        }
    }
}

/// A heading per message; the messages' own markdown is kept as written.
fn markdown(conversation: &Conversation) -> String {
    let title = if conversation.title.is_empty() {
        "New chat"
    } else {
        &conversation.title
    };
    let mut text = format!(
        "# {title}\n\n_{}_\n",
        conversation.created_at.format("%Y-%m-%d %H:%M UTC")
    );
    if !conversation.system_prompt.is_empty() {
        text.push_str(&format!("\n## System\n\n{}\n", conversation.system_prompt));
    }
    for message in &conversation.messages {
        let heading = match message.role.as_str() {
            "user" => "User".to_owned(),
            _ => match message.run_id {
                Some(run) => format!("Assistant (run {run})"),
                None => "Assistant".to_owned(),
            },
        };
        text.push_str(&format!("\n## {heading}\n\n{}\n", message.content));
    }
    text
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::conversations::ConversationMessage;

    fn conversation(title: &str) -> Conversation {
        let at = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let message = |id, role: &str, content: &str, run_id| ConversationMessage {
            id,
            role: role.into(),
            content: content.into(),
            run_id,
            answering: false,
            created_at: at,
        };
        Conversation {
            id: 7,
            title: title.into(),
            system_prompt: "Be brief.".into(),
            created_at: at,
            updated_at: at,
            messages: vec![
                message(1, "user", "Say *hi*", None),
                message(2, "assistant", "```\nhi\n```", Some(42)),
            ],
        }
    }

    #[test]
    fn markdown_has_a_heading_per_message() {
        let text = ConversationExport::Markdown
            .render(&conversation("Greetings"))
            .unwrap();
        assert_eq!(
            text,
            "# Greetings\n\n_2026-01-02 03:04 UTC_\n\n## System\n\nBe brief.\n\n\
             ## User\n\nSay *hi*\n\n## Assistant (run 42)\n\n```\nhi\n```\n"
        );
    }

    #[test]
    fn json_reads_back_as_the_conversation() {
        let original = conversation("Greetings");
        let text = ConversationExport::Json.render(&original).unwrap();
        let back: Conversation = serde_json::from_str(&text).unwrap();
        assert_eq!(back, original);
    }

    #[test]
    fn file_names_come_from_the_title() {
        let format = ConversationExport::Markdown;
        assert_eq!(
            format.filename(&conversation("Trip: Paris & Rome!")),
            "trip-paris-rome.md"
        );
        assert_eq!(format.filename(&conversation("???")), "conversation-7.md");
        assert_eq!(
            "JSON".parse::<ConversationExport>().unwrap(),
            ConversationExport::Json
        );
        assert!("pdf".parse::<ConversationExport>().is_err());
    }
}
