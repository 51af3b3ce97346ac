//! Token ids sent to `/v1/embeddings`: this model's own, or OpenAI's tokenizer's. OpenAI takes
//! ids of its own tokenizer, and clients made for it send those: LangChain's `OpenAIEmbeddings`
//! by default tokenizes every text with tiktoken (`cl100k_base`) and sends the ids. Read as
//! this model's, they would be another text. tiktoken-rs carries OpenAI's tokenizers, so such
//! ids are read back into the text the client was given.

use std::fmt;
use std::str::FromStr;

use engine::{EmbeddingInput, TokenId};
use tiktoken_rs::CoreBPE;

use super::refusals::invalid;
use crate::error::ApiError;

/// Whose token ids an embeddings request carries (`medusa serve --embedding-token-ids`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmbeddingTokenIds {
    /// OpenAI's tokenizer's where they are exactly how it writes a text and not how this
    /// model writes what they spell in its own vocabulary; this model's otherwise.
    #[default]
    Auto,
    /// Always this model's.
    Model,
    /// Always OpenAI's tokenizer's: the one of the model the request names, `cl100k_base` for
    /// names OpenAI does not use.
    OpenAi,
}

impl EmbeddingTokenIds {
    const ALL: [Self; 3] = [Self::Auto, Self::Model, Self::OpenAi];

    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Model => "model",
            Self::OpenAi => "openai",
        }
    }

    /// What to embed for `ids`, sent with `model` as the request's model name: OpenAI's
    /// tokenizer is the one tiktoken picks for that name, as a client does.
    pub(crate) fn read(
        self,
        ids: Vec<TokenId>,
        model: Option<&str>,
    ) -> Result<EmbeddingInput, ApiError> {
        // Looked up only for the readings that use it.
        let tokenizer = || {
            model
                .and_then(|name| tiktoken_rs::bpe_for_model(name).ok())
                .unwrap_or_else(default_tokenizer)
        };
        match self {
            Self::Model => Ok(EmbeddingInput::Tokens(ids)),
            Self::OpenAi => openai_text(tokenizer(), &ids)
                .map(EmbeddingInput::Text)
                .ok_or_else(|| {
                    invalid(
                        "input",
                        "these token ids are not a text of OpenAI's tokenizer (the server \
                         reads token ids as OpenAI's: --embedding-token-ids openai)",
                    )
                }),
            Self::Auto => {
                let tokenizer = tokenizer();
                Ok(
                    match openai_text(tokenizer, &ids)
                        .filter(|text| tokenizer.encode_ordinary(text) == as_ranks(&ids))
                    {
                        Some(text) => EmbeddingInput::TokensOrText { ids, text },
                        None => EmbeddingInput::Tokens(ids),
                    },
                )
            }
        }
    }
}

/// The tokenizer OpenAI's clients fall back to for model names OpenAI does not use.
fn default_tokenizer() -> &'static CoreBPE {
    tiktoken_rs::cl100k_base_singleton()
}

/// What `ids` spell in `tokenizer`, when they are all its ids and spell UTF-8 text.
fn openai_text(tokenizer: &CoreBPE, ids: &[TokenId]) -> Option<String> {
    if ids.iter().any(|&id| id < 0) {
        return None;
    }
    let bytes = tokenizer.decode_bytes(&as_ranks(ids)).ok()?;
    String::from_utf8(bytes).ok()
}

fn as_ranks(ids: &[TokenId]) -> Vec<u32> {
    ids.iter().map(|&id| id as u32).collect()
}

impl FromStr for EmbeddingTokenIds {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|reading| reading.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|reading| reading.name()).collect();
                format!(
                    "'{name}' is not a reading of token ids; choose {}",
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for EmbeddingTokenIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cl100k(text: &str) -> Vec<TokenId> {
        default_tokenizer()
            .encode_ordinary(text)
            .into_iter()
            .map(|rank| rank as TokenId)
            .collect()
    }

    const TEXT: &str = "The cat sat on the mat.";

    #[test]
    fn the_names_read_back() {
        for reading in EmbeddingTokenIds::ALL {
            assert_eq!(reading.to_string().parse(), Ok(reading));
        }
        assert!("tiktoken".parse::<EmbeddingTokenIds>().is_err());
    }

    #[test]
    fn ids_as_openai_writes_a_text_leave_the_choice_to_the_model_others_are_its() {
        let ids = cl100k(TEXT);
        let read = EmbeddingTokenIds::Auto
            .read(ids.clone(), Some("SmolLM2-135M-Instruct"))
            .unwrap();
        assert_eq!(
            read,
            EmbeddingInput::TokensOrText {
                ids,
                text: TEXT.into()
            }
        );
        // "The" then " cat" cut in two: not how OpenAI's tokenizer writes any text.
        let mut cut = cl100k("The");
        cut.extend(cl100k(" c"));
        cut.extend(cl100k("at"));
        let read = EmbeddingTokenIds::Auto.read(cut.clone(), None).unwrap();
        assert_eq!(read, EmbeddingInput::Tokens(cut));
        // Not OpenAI's ids at all.
        let read = EmbeddingTokenIds::Auto.read(vec![-1, 5], None).unwrap();
        assert_eq!(read, EmbeddingInput::Tokens(vec![-1, 5]));
    }

    #[test]
    fn the_switch_reads_ids_one_way_whatever_they_are() {
        let ids = cl100k(TEXT);
        assert_eq!(
            EmbeddingTokenIds::Model
                .read(ids.clone(), Some("text-embedding-ada-002"))
                .unwrap(),
            EmbeddingInput::Tokens(ids.clone())
        );
        assert_eq!(
            EmbeddingTokenIds::OpenAi.read(ids, None).unwrap(),
            EmbeddingInput::Text(TEXT.into())
        );
        // The tokenizer of the model the request names.
        let o200k: Vec<TokenId> = tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(TEXT)
            .into_iter()
            .map(|rank| rank as TokenId)
            .collect();
        assert_eq!(
            EmbeddingTokenIds::OpenAi
                .read(o200k, Some("gpt-4o"))
                .unwrap(),
            EmbeddingInput::Text(TEXT.into())
        );
        let refused = EmbeddingTokenIds::OpenAi
            .read(vec![200_000], None)
            .unwrap_err();
        assert_eq!(refused.0.code, "invalid_parameter");
    }
}
