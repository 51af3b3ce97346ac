//! The playground's own request shapes (the UI's, over HTTP and IPC) and their defaults.

use std::path::PathBuf;

use engine::{
    ChatMessage, GenerateRequest, GenerationMode, LookupMemoryUse, Prompt, QuantType,
    SamplingParams, TreeSpec,
};
use serde::Deserialize;
use ts_rs::TS;

use crate::draft::{DraftFields, TreeChoice};
use crate::error::AppError;
use crate::model_host::{LoadRequest, ModelSource};

/// Tokens generated when a playground request gives no `max_tokens`.
pub const PLAYGROUND_MAX_TOKENS: u32 = 256;

/// Body of a generation from the UI (`/api/generate`, the desktop app's `generate`): a raw
/// `prompt` to continue or chat `messages` for the model's template, not both. Defaults: 256
/// tokens, normal mode, the engine's sampling defaults (llama.cpp's), no stop strings.
#[derive(Debug, Default, Clone, Deserialize, TS)]
#[ts(optional_fields)]
pub struct PlaygroundRequest {
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    /// `normal`, `medusa` or `lookup` (any case).
    #[serde(default)]
    #[ts(as = "Option<GenerationMode>")]
    pub mode: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    #[ts(as = "Option<Vec<String>>")]
    pub stop: Vec<String>,
    /// Any subset of the sampling settings; the rest take their defaults.
    #[serde(default)]
    #[ts(optional, type = "Partial<SamplingParams>")]
    pub sampling: Option<SamplingParams>,
    /// Cap on drafted tokens per step (speculative modes, `auto` drafting).
    #[serde(default)]
    pub max_draft_tokens: Option<usize>,
    #[serde(flatten)]
    #[ts(flatten)]
    pub draft: DraftFields,
    /// `false` reads the whole prompt: no cells reused from earlier requests, none kept.
    #[serde(default)]
    pub cache_prompt: Option<bool>,
    /// Whether lookup drafts from its memory of earlier requests' text and adds this one's
    /// (`read_write`, the default), only drafts from it (`read_only`: one prompt measured in
    /// several modes), or neither (`off`).
    #[serde(default)]
    pub lookup_memory: Option<LookupMemoryUse>,
    /// The conversation this chat belongs to: it takes the request's messages and the answer.
    #[serde(default)]
    pub conversation_id: Option<i64>,
    /// Write on from the last (assistant) message instead of answering it.
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// Run on this remote engine (by name) instead of the model served here.
    #[serde(default)]
    pub engine: Option<String>,
    /// The remote engine's model; default: the first it lists.
    #[serde(default)]
    pub model: Option<String>,
    /// The answer must be JSON: `true` for any JSON object, or a JSON schema it must follow.
    #[serde(default)]
    #[ts(optional, type = "boolean | Record<string, unknown>")]
    pub json: Option<serde_json::Value>,
    /// GBNF text the answer must follow (llama.cpp's grammar format); not with `json`.
    #[serde(default)]
    pub grammar: Option<String>,
    /// Report each generated token's log-probability and this many likeliest alternatives
    /// (0 to 20), with the `text` events and the run's summary.
    #[serde(default)]
    pub logprobs: Option<usize>,
}

impl PlaygroundRequest {
    /// The engine request this asks for; checked by [`crate::Playground::check`].
    pub fn into_request(self) -> Result<GenerateRequest, AppError> {
        if self.conversation_id.is_some() && self.messages.is_none() {
            return Err(AppError::invalid_parameter(
                "a conversation's request sends messages, not a prompt",
            ));
        }
        let prompt = prompt_of(self.prompt, self.messages)?;
        let mode = match &self.mode {
            Some(name) => name.parse()?,
            None => GenerationMode::Normal,
        };
        let mut request =
            GenerateRequest::new(prompt, self.max_tokens.unwrap_or(PLAYGROUND_MAX_TOKENS))
                .with_sampling(self.sampling.unwrap_or_default())
                .with_stop(self.stop)
                .with_mode(mode)
                .with_draft(self.draft.policy(mode)?);
        request.max_draft_tokens = self.max_draft_tokens;
        request.cache_prompt = self.cache_prompt.unwrap_or(true);
        request.lookup_memory = self.lookup_memory.unwrap_or_default();
        request.continue_final_message = self.continue_final_message.unwrap_or(false);
        request.grammar = output_grammar(self.json.as_ref(), self.grammar)?;
        request.logprobs = self.logprobs;
        Ok(request)
    }
}

/// The grammar a request's `json` or `grammar` asks for, if any.
fn output_grammar(
    json: Option<&serde_json::Value>,
    grammar: Option<String>,
) -> Result<Option<String>, AppError> {
    use serde_json::Value;
    let from_json = match json {
        None | Some(Value::Null) | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(engine::json_object_grammar()?),
        Some(schema @ Value::Object(_)) => Some(engine::json_schema_grammar(schema)?),
        Some(_) => {
            return Err(AppError::invalid_parameter(
                "json is true (any JSON object) or a JSON schema object",
            )
            .with_param("json"))
        }
    };
    match (from_json, grammar.filter(|g| !g.trim().is_empty())) {
        (Some(_), Some(_)) => {
            Err(AppError::invalid_parameter("give json or grammar, not both").with_param("grammar"))
        }
        (from_json, grammar) => Ok(from_json.or(grammar)),
    }
}

/// The prompt a request gives as a raw `prompt` to continue or chat `messages`, not both (neither:
/// an empty text, which the engine refuses).
pub(crate) fn prompt_of(
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
) -> Result<Prompt, AppError> {
    match (prompt, messages) {
        (Some(_), Some(_)) => Err(AppError::invalid_parameter(
            "send either prompt or messages, not both",
        )),
        (None, Some(messages)) => Ok(Prompt::Chat(messages)),
        (prompt, None) => Ok(Prompt::Text(prompt.unwrap_or_default())),
    }
}

/// Another model (and heads, tree) to load.
#[derive(Debug, Clone, Deserialize, TS)]
pub struct LoadModelRequest {
    /// A GGUF path on the machine running the backend.
    #[ts(type = "string")]
    pub model: PathBuf,
    /// A `*.medusa.gguf` heads file; null for none.
    #[serde(default)]
    #[ts(optional, type = "string | null")]
    pub heads: Option<PathBuf>,
    /// A smaller GGUF with the model's vocabulary that drafts for it (draft mode, and part of
    /// auto); null for none.
    #[serde(default)]
    #[ts(optional, type = "string | null")]
    pub draft_model: Option<PathBuf>,
    /// A feature drafter for the model (`medusa train-drafter`; eagle mode, and part of auto);
    /// null for none.
    #[serde(default)]
    #[ts(optional, type = "string | null")]
    pub drafter: Option<PathBuf>,
    /// Tree name (`mc_sim_7b_63`, `chain-N`) or a JSON file; null for the heads' default.
    #[serde(default)]
    #[ts(optional = nullable)]
    pub tree: Option<String>,
    /// Context cells each request may use (prompt, answer and draft tree); null keeps the
    /// size the backend was started with.
    #[serde(default)]
    #[ts(optional = nullable)]
    pub ctx_size: Option<u32>,
    /// Exact mode (batch-invariant sums: greedy speculative output is normal decoding's, bit for
    /// bit; prompts read slower); null keeps the backend's setting.
    #[serde(default)]
    #[ts(optional = nullable)]
    pub exact: Option<bool>,
    /// Load the model converted to this weight format (`q4_0`, ...): written beside it with
    /// llama.cpp's quantizer on first use, and kept; the original file stays. Null loads the
    /// model as it is.
    #[serde(default)]
    #[ts(optional = nullable)]
    pub convert_to: Option<String>,
}

/// Context sizes a load may ask for.
pub const CTX_SIZE_RANGE: std::ops::RangeInclusive<u32> = 256..=1 << 20;

impl LoadModelRequest {
    /// Refuses a context size out of [`CTX_SIZE_RANGE`].
    pub fn check_ctx_size(&self) -> Result<(), AppError> {
        match self.ctx_size.filter(|c| !CTX_SIZE_RANGE.contains(c)) {
            Some(ctx_size) => Err(AppError::invalid_parameter(format!(
                "the context size must be between {} and {} tokens, not {ctx_size}",
                CTX_SIZE_RANGE.start(),
                CTX_SIZE_RANGE.end()
            ))),
            None => Ok(()),
        }
    }

    /// What to load; a tree that names no known tree and no readable file is refused here.
    pub fn into_load_request(self) -> Result<LoadRequest, AppError> {
        let tree = self
            .tree
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(TreeSpec::from_name_or_file)
            .transpose()
            .map_err(|e| AppError::invalid_parameter(format!("tree: {e}")))?;
        self.check_ctx_size()?;
        let model = match self.convert_to.as_deref() {
            Some(format) => ModelSource::Convert {
                from: self.model,
                kind: format
                    .parse::<QuantType>()
                    .map_err(|e| AppError::invalid_parameter(format!("convert_to: {e}")))?,
            },
            None => ModelSource::Path(self.model),
        };
        Ok(LoadRequest {
            model,
            heads: self.heads,
            draft_model: self.draft_model,
            drafter: self.drafter,
            tree,
            ctx_size: self.ctx_size,
            exact: self.exact,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_the_request_leaves_out() {
        let request: PlaygroundRequest = serde_json::from_str(r#"{"prompt": "Hi"}"#).unwrap();
        let request = request.into_request().unwrap();
        assert_eq!(request.prompt, Prompt::Text("Hi".into()));
        assert_eq!(request.max_tokens, PLAYGROUND_MAX_TOKENS);
        assert_eq!(request.mode, GenerationMode::Normal);
        assert_eq!(request.sampling, SamplingParams::default());
        assert_eq!(request.lookup_memory, LookupMemoryUse::ReadWrite);
    }

    #[test]
    fn lookup_memory_is_taken_by_name_and_an_unknown_one_refused() {
        let request = |memory: &str| {
            serde_json::from_str::<PlaygroundRequest>(&format!(
                r#"{{"prompt": "Hi", "lookup_memory": "{memory}"}}"#
            ))
        };
        let read_only = request("read_only").unwrap().into_request().unwrap();
        assert_eq!(read_only.lookup_memory, LookupMemoryUse::ReadOnly);
        let off = request("off").unwrap().into_request().unwrap();
        assert_eq!(off.lookup_memory, LookupMemoryUse::Off);
        assert!(request("sometimes").is_err());
    }

    #[test]
    fn partial_sampling_keeps_the_other_defaults() {
        let request: PlaygroundRequest = serde_json::from_str(
            r#"{"messages": [{"role": "user", "content": "Hi"}], "mode": "lookup",
                "sampling": {"temperature": 0}}"#,
        )
        .unwrap();
        let request = request.into_request().unwrap();
        assert_eq!(request.mode, GenerationMode::Lookup);
        assert_eq!(request.sampling.temperature, 0.0);
        assert_eq!(request.sampling.top_k, SamplingParams::default().top_k);
    }

    #[test]
    fn json_becomes_a_grammar_and_log_probabilities_pass_through() {
        let request = |body: &str| {
            serde_json::from_str::<PlaygroundRequest>(body)
                .unwrap()
                .into_request()
        };
        let any = request(r#"{"prompt": "Hi", "json": true, "logprobs": 2}"#).unwrap();
        assert_eq!(any.grammar, Some(engine::json_object_grammar().unwrap()));
        assert_eq!(any.logprobs, Some(2));
        let schema = request(r#"{"prompt": "Hi", "json": {"type": "integer"}}"#).unwrap();
        assert!(schema.grammar.unwrap().contains("root ::="));
        assert_eq!(
            request(r#"{"prompt": "Hi", "json": false}"#)
                .unwrap()
                .grammar,
            None
        );
        let raw = request(r#"{"prompt": "Hi", "grammar": "root ::= \"a\""}"#).unwrap();
        assert_eq!(raw.grammar.as_deref(), Some("root ::= \"a\""));
        let both = request(r#"{"prompt": "Hi", "json": true, "grammar": "root ::= \"a\""}"#);
        assert_eq!(both.unwrap_err().param.as_deref(), Some("grammar"));
        let bad = request(r##"{"prompt": "Hi", "json": {"$ref": "#/nowhere"}}"##).unwrap_err();
        assert_eq!(bad.code, "invalid_json_schema");
        assert_eq!(
            request(r#"{"prompt": "Hi", "json": 3}"#).unwrap_err().code,
            "invalid_parameter"
        );
    }

    #[test]
    fn context_sizes_out_of_range_are_refused_before_loading() {
        let load = |ctx: &str| {
            let body = format!(r#"{{"model": "/m.gguf", "ctx_size": {ctx}}}"#);
            serde_json::from_str::<LoadModelRequest>(&body)
                .unwrap()
                .into_load_request()
        };
        assert_eq!(load("4096").unwrap().ctx_size, Some(4096));
        assert_eq!(load("null").unwrap().ctx_size, None);
        let Err(err) = load("100") else {
            panic!("a context of 100 tokens was taken")
        };
        assert_eq!(err.code, "invalid_parameter");
        assert!(
            err.message.contains("between 256 and 1048576"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_conversation_takes_messages_only() {
        let request: PlaygroundRequest =
            serde_json::from_str(r#"{"prompt": "a", "conversation_id": 3}"#).unwrap();
        assert_eq!(
            request.into_request().unwrap_err().code,
            "invalid_parameter"
        );
        let request: PlaygroundRequest = serde_json::from_str(
            r#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                "conversation_id": 3, "continue_final_message": true}"#,
        )
        .unwrap();
        assert!(request.into_request().unwrap().continue_final_message);
    }

    #[test]
    fn prompt_and_messages_together_are_refused() {
        let request: PlaygroundRequest = serde_json::from_str(
            r#"{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}"#,
        )
        .unwrap();
        assert_eq!(
            request.into_request().unwrap_err().code,
            "invalid_parameter"
        );
    }
}

/// Settings' tree: what Medusa requests drafting `auto` draft in full, changed without reloading
/// the model. `"auto"` undoes it.
#[derive(Debug, Clone, PartialEq, Deserialize, TS)]
pub struct SetTreeRequest {
    pub tree: TreeChoice,
}
