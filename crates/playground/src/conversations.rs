//! Chat conversations as the playground answers them. Their messages are written by the runs
//! that answer them (a request's `conversation_id`); these operations list, read, rename,
//! delete and export them.

use serde::{Deserialize, Serialize};
use store::{Conversation, ConversationExport, ConversationPatch, ConversationSummary};
use ts_rs::TS;

use crate::error::AppError;
use crate::playground::Playground;

/// Which conversations to list: those matching `search` (words of the title or of one message),
/// at most `limit`, the latest changed first.
#[derive(Debug, Default, Clone, Deserialize, TS)]
#[ts(optional_fields)]
pub struct ConversationsQuery {
    pub search: Option<String>,
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Serialize, TS)]
pub struct ConversationList {
    pub conversations: Vec<ConversationSummary>,
}

/// One conversation exported: a file name, its type and text.
pub struct ConversationFile {
    pub filename: String,
    pub mime_type: &'static str,
    pub body: String,
}

impl Playground {
    pub async fn list_conversations(
        &self,
        query: &ConversationsQuery,
    ) -> Result<ConversationList, AppError> {
        let conversations = self
            .store()
            .list_conversations(query.search.as_deref(), query.limit)
            .await?;
        Ok(ConversationList { conversations })
    }

    pub async fn get_conversation(&self, id: i64) -> Result<Conversation, AppError> {
        Ok(self.store().get_conversation(id).await?)
    }

    pub async fn create_conversation(
        &self,
        patch: &ConversationPatch,
    ) -> Result<Conversation, AppError> {
        Ok(self.store().create_conversation(patch).await?)
    }

    /// Renames a conversation or changes its system prompt.
    pub async fn update_conversation(
        &self,
        id: i64,
        patch: &ConversationPatch,
    ) -> Result<Conversation, AppError> {
        Ok(self.store().update_conversation(id, patch).await?)
    }

    /// Deletes a conversation; its runs stay in the history.
    pub async fn delete_conversation(&self, id: i64) -> Result<(), AppError> {
        Ok(self.store().delete_conversation(id).await?)
    }

    /// `format`: `json` or `markdown`.
    pub async fn export_conversation(
        &self,
        id: i64,
        format: &str,
    ) -> Result<ConversationFile, AppError> {
        let format: ConversationExport = format
            .parse()
            .map_err(|e: store::StoreError| AppError::invalid_parameter(e.to_string()))?;
        let conversation = self.store().get_conversation(id).await?;
        Ok(ConversationFile {
            filename: format.filename(&conversation),
            mime_type: format.mime_type(),
            body: format.render(&conversation)?,
        })
    }
}
