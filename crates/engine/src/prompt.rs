//! From a `Prompt` to the token ids the model reads.

use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use crate::error::EngineError;
use crate::request::{ChatMessage, Prompt};

/// A prompt as the model will read it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RenderedPrompt {
    /// The text after the chat template.
    pub text: String,
    pub token_count: usize,
}

pub(crate) fn render(
    model: &LlamaModel,
    template: Option<&LlamaChatTemplate>,
    prompt: &Prompt,
) -> Result<String, EngineError> {
    match prompt {
        Prompt::Text(text) => Ok(text.clone()),
        Prompt::Chat(messages) => {
            let template = template.ok_or(EngineError::NoChatTemplate)?;
            let messages = messages
                .iter()
                .map(|ChatMessage { role, content }| {
                    LlamaChatMessage::new(role.clone(), content.clone())
                        .map_err(|e| EngineError::ChatTemplate(e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            model
                .apply_chat_template(template, &messages, true)
                .map_err(|e| EngineError::ChatTemplate(e.to_string()))
        }
    }
}

/// Tokenizes with the model's special tokens (BOS where the model wants it); a template that
/// already wrote BOS as text does not get a second one.
pub(crate) fn tokenize(model: &LlamaModel, text: &str) -> Vec<LlamaToken> {
    let vocab = model.vocab();
    let mut tokens = vocab.tokenize(text.as_bytes(), true, true);
    if vocab.should_add_bos()
        && tokens.len() >= 2
        && tokens[0] == tokens[1]
        && tokens[0] == vocab.bos()
    {
        tokens.remove(0);
    }
    tokens
}
