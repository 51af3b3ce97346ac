//! What a caller asks for: the prompt, how many tokens, how to pick them, when to stop.

pub(crate) mod draft;
pub(crate) mod valid;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::error::EngineError;
use crate::speculative::tree::TreeSpec;
use crate::token::TokenId;

/// How drafted tokens are accepted (speculative modes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum AcceptanceRule {
    /// Greedy matching at temperature 0, exact speculative sampling above it.
    Lossless,
    Typical {
        threshold: f32,
        alpha: f32,
    },
}

impl AcceptanceRule {
    pub const TYPICAL_DEFAULT: Self = Self::Typical {
        threshold: 0.09,
        alpha: 0.3,
    };
}

/// How tokens are produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
#[ts(rename = "Mode")]
pub enum GenerationMode {
    /// One token per decode.
    #[default]
    Normal,
    /// Medusa heads draft a token tree; one decode verifies it.
    Medusa,
    /// Earlier text that matches the latest tokens is drafted and verified.
    Lookup,
    /// Lookup, the Medusa heads, the draft model and the feature drafter (those loaded) all
    /// draft, as far as each
    /// is expected to pay at that step; their guesses are merged into one tree verified in one
    /// decode.
    Auto,
    /// A smaller model with the same vocabulary drafts a chain of its guesses.
    Draft,
    /// The feature-level drafter (one decoder layer on the model's hidden states, EAGLE-style)
    /// grows a tree by its own confidence.
    Eagle,
}

impl GenerationMode {
    pub const ALL: [GenerationMode; 6] = [
        Self::Normal,
        Self::Medusa,
        Self::Lookup,
        Self::Auto,
        Self::Draft,
        Self::Eagle,
    ];

    /// Whether a Medusa tree (`tree`) shapes this mode's drafts.
    pub fn drafts_trees(self) -> bool {
        matches!(self, Self::Medusa | Self::Auto)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Medusa => "medusa",
            Self::Lookup => "lookup",
            Self::Auto => "auto",
            Self::Draft => "draft",
            Self::Eagle => "eagle",
        }
    }
}

impl std::fmt::Display for GenerationMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for GenerationMode {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                invalid(
                    "mode",
                    format!("unknown mode '{s}'; use normal, medusa, lookup, auto, draft or eagle"),
                )
            })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ChatMessage {
    #[ts(type = "'system' | 'user' | 'assistant'")]
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Prompt {
    /// Raw text, tokenized as is.
    Text(String),
    /// A conversation, rendered through the model's own chat template.
    Chat(Vec<ChatMessage>),
}

impl Prompt {
    fn is_blank(&self) -> bool {
        match self {
            Prompt::Text(text) => text.trim().is_empty(),
            Prompt::Chat(messages) => messages.iter().all(|m| m.content.trim().is_empty()),
        }
    }
}

/// Sampling settings. Defaults are llama.cpp's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(default)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: u32,
    /// 1 disables top-p.
    pub top_p: f32,
    /// 0 disables min-p.
    pub min_p: f32,
    /// 1 disables the repetition penalty.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token in the penalty window (OpenAI's
    /// `presence_penalty`); 0 disables it.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it occurs in the window (OpenAI's
    /// `frequency_penalty`); 0 disables it.
    pub frequency_penalty: f32,
    /// Added to these tokens' logits before anything else (OpenAI's `logit_bias`); -100 bans
    /// a token.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[ts(as = "Option<Vec<LogitBias>>", optional)]
    pub logit_bias: Vec<LogitBias>,
    /// Fixes the random draws; without it a seed is picked and reported with the run.
    pub seed: Option<u64>,
}

/// One entry of [`SamplingParams::logit_bias`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, TS)]
pub struct LogitBias {
    pub token: TokenId,
    pub bias: f32,
}

/// The largest logit bias taken (OpenAI's bound).
pub const MAX_LOGIT_BIAS: f32 = 100.0;

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// The model's own distribution at `temperature`: no top-k, top-p, min-p or penalty.
    pub fn unfiltered(temperature: f32) -> Self {
        Self {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), EngineError> {
        check_range("temperature", self.temperature, 0.0, 5.0)?;
        check_range("top_p", self.top_p, f32::MIN_POSITIVE, 1.0)?;
        check_range("min_p", self.min_p, 0.0, 1.0)?;
        check_range("repeat_penalty", self.repeat_penalty, 0.01, 10.0)?;
        check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        if self.repeat_last_n > 1 << 16 {
            return Err(invalid("repeat_last_n", "must be at most 65536".into()));
        }
        for entry in &self.logit_bias {
            check_range("logit_bias", entry.bias, -MAX_LOGIT_BIAS, MAX_LOGIT_BIAS)?;
            if entry.token < 0 {
                return Err(invalid(
                    "logit_bias",
                    format!("token ids are not negative, got {}", entry.token),
                ));
            }
        }
        Ok(())
    }
}

/// Hard upper bound on tokens per request, whatever the context size.
pub const MAX_TOKENS_LIMIT: u32 = 1 << 20;

/// The roles a chat message may have.
pub const CHAT_ROLES: [&str; 3] = ["system", "user", "assistant"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    pub max_tokens: u32,
    #[serde(default)]
    pub sampling: SamplingParams,
    /// Generation ends before the first occurrence of any of these.
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub mode: GenerationMode,
    /// How drafted tokens are accepted (speculative modes).
    #[serde(default = "lossless")]
    pub acceptance: AcceptanceRule,
    /// Most drafted tokens per step (speculative modes); `None` uses the drafter's default.
    #[serde(default)]
    pub max_draft_tokens: Option<usize>,
    /// Reuse the cells of an earlier request that started with the same tokens, and keep this
    /// one's for later requests (llama-server's `cache_prompt`). Off measures a cold start.
    #[serde(default = "yes")]
    pub cache_prompt: bool,
    /// How much to draft at each step: as much as pays on this machine, or a fixed draft.
    #[serde(default)]
    pub draft: DraftPolicy,
    /// Whether lookup may draft from earlier requests' text, and whether this one's text is
    /// remembered for later ones.
    #[serde(default)]
    pub lookup_memory: LookupMemoryUse,
    /// The chat's last message is an unfinished assistant answer to write on from, instead of
    /// a prompt to answer (vLLM's `continue_final_message`).
    #[serde(default)]
    pub continue_final_message: bool,
    /// GBNF the output must follow (llama-server's `grammar`; JSON schemas arrive converted,
    /// see [`crate::json_schema_grammar`]). Drafted tokens it forbids are rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
    /// Report each generated token's log-probability and this many most likely alternatives
    /// (at most [`MAX_TOP_LOGPROBS`]), from the verifying decode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<usize>,
    /// Return the final hidden state behind every generated token (to train heads); needs an
    /// engine loaded with `EngineConfig::hidden_states` or heads.
    #[serde(skip)]
    pub record_hidden_states: bool,
}

fn lossless() -> AcceptanceRule {
    AcceptanceRule::Lossless
}

fn yes() -> bool {
    true
}

/// Most alternatives per token a request may ask log-probabilities for (OpenAI's bound).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Refuses more alternatives per token than [`MAX_TOP_LOGPROBS`], naming the field `name`.
pub fn check_top_logprobs(name: &'static str, top: usize) -> Result<(), EngineError> {
    if top > MAX_TOP_LOGPROBS {
        return Err(invalid(
            name,
            format!("must be between 0 and {MAX_TOP_LOGPROBS}, got {top}"),
        ));
    }
    Ok(())
}

/// What lookup does with its memory of earlier requests' text for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum LookupMemoryUse {
    /// Drafts from it, and adds the request's prompt and answer to it when it finishes.
    #[default]
    ReadWrite,
    /// Drafts from it but leaves it as it was: a measurement that runs one prompt in several
    /// modes must not draft one run's answer from another's.
    ReadOnly,
    /// Neither.
    Off,
}

impl LookupMemoryUse {
    pub fn reads(self) -> bool {
        self != Self::Off
    }

    pub fn writes(self) -> bool {
        self == Self::ReadWrite
    }

    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWrite => "read_write",
            Self::ReadOnly => "read_only",
            Self::Off => "off",
        }
    }
}

/// Upper bound on drafted tokens per step: leaves need sequence ids, which llama.cpp caps.
pub const MAX_DRAFT_TOKENS: usize = 128;

/// How much a speculative request drafts at each step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum DraftPolicy {
    /// What pays on this machine: the draft budget weighs the expected accepted tokens against
    /// the measured cost of decoding them, so a CPU often drafts little or nothing.
    #[default]
    Auto,
    /// Medusa mode: this whole tree at every step, whatever it costs. Auto mode: this tree and
    /// lookup's whole continuation, merged, at every step.
    Tree(TreeSpec),
    /// Medusa and auto modes: the fastest tree the tuner found for this machine, drafted as
    /// `Tree` is; the engine makes it a `Tree` when it accepts the request.
    Tuned,
    /// Lookup and draft modes: this many tokens at every step that has a guess, whatever they
    /// cost.
    Length(usize),
}

impl DraftPolicy {
    fn validate(&self, mode: GenerationMode) -> Result<(), EngineError> {
        match (self, mode) {
            (Self::Auto, _) | (Self::Tuned, GenerationMode::Medusa | GenerationMode::Auto) => {
                Ok(())
            }
            (Self::Tree(tree), GenerationMode::Medusa | GenerationMode::Auto)
                if tree.len() <= MAX_DRAFT_TOKENS =>
            {
                Ok(())
            }
            (Self::Tree(tree), GenerationMode::Medusa | GenerationMode::Auto) => Err(invalid(
                "tree",
                format!(
                    "has {} nodes; at most {MAX_DRAFT_TOKENS} are drafted per step",
                    tree.len()
                ),
            )),
            (
                Self::Length(n),
                GenerationMode::Lookup | GenerationMode::Draft | GenerationMode::Eagle,
            ) if (1..=MAX_DRAFT_TOKENS).contains(n) => Ok(()),
            (
                Self::Length(n),
                GenerationMode::Lookup | GenerationMode::Draft | GenerationMode::Eagle,
            ) => Err(invalid(
                "draft_length",
                format!("must be between 1 and {MAX_DRAFT_TOKENS}, got {n}"),
            )),
            (Self::Tree(_) | Self::Tuned, mode) => Err(invalid(
                "tree",
                format!("a tree is drafted in medusa and auto modes, not in {mode} mode"),
            )),
            (Self::Length(_), mode) => Err(invalid(
                "draft_length",
                format!(
                    "a draft length applies to lookup, draft and eagle modes, not to {mode} mode"
                ),
            )),
        }
    }
}

impl GenerateRequest {
    pub fn new(prompt: Prompt, max_tokens: u32) -> Self {
        Self {
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            mode: GenerationMode::Normal,
            acceptance: AcceptanceRule::Lossless,
            max_draft_tokens: None,
            cache_prompt: true,
            continue_final_message: false,
            draft: DraftPolicy::Auto,
            lookup_memory: LookupMemoryUse::default(),
            grammar: None,
            logprobs: None,
            record_hidden_states: false,
        }
    }

    pub fn with_draft(mut self, draft: DraftPolicy) -> Self {
        self.draft = draft;
        self
    }

    pub fn with_hidden_states(mut self) -> Self {
        self.record_hidden_states = true;
        self
    }

    pub fn with_mode(mut self, mode: GenerationMode) -> Self {
        self.mode = mode;
        self
    }

    pub fn with_sampling(mut self, sampling: SamplingParams) -> Self {
        self.sampling = sampling;
        self
    }

    pub fn with_stop(mut self, stop: Vec<String>) -> Self {
        self.stop = stop;
        self
    }

    /// Checks everything that can be checked without the tokenizer.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.prompt.is_blank() {
            return Err(EngineError::EmptyPrompt);
        }
        match &self.prompt {
            Prompt::Chat(messages) => {
                // The template's own markers carry the roles: an unknown one would be written
                // into the prompt as given.
                if let Some(m) = messages
                    .iter()
                    .find(|m| !CHAT_ROLES.contains(&m.role.as_str()))
                {
                    return Err(invalid(
                        "messages",
                        format!(
                            "role {:?} is not one of {}",
                            m.role.chars().take(40).collect::<String>(),
                            CHAT_ROLES.join(", ")
                        ),
                    ));
                }
                // Tokenizers and chat templates work on C strings: a NUL would cut the text.
                if messages
                    .iter()
                    .any(|m| m.role.contains('\0') || m.content.contains('\0'))
                {
                    return Err(invalid(
                        "messages",
                        "a message contains a NUL character".into(),
                    ));
                }
            }
            Prompt::Text(text) if text.contains('\0') => {
                return Err(invalid(
                    "prompt",
                    "the prompt contains a NUL character".into(),
                ));
            }
            Prompt::Text(_) => {}
        }
        if self.continue_final_message {
            let last = match &self.prompt {
                Prompt::Chat(messages) => messages.last(),
                Prompt::Text(_) => None,
            };
            if last.is_none_or(|m| m.role != "assistant") {
                return Err(invalid(
                    "continue_final_message",
                    "continues the chat's last message, which must be the assistant's".into(),
                ));
            }
        }
        self.draft.validate(self.mode)?;
        if let Some(top) = self.logprobs {
            check_top_logprobs("top_logprobs", top)?;
        }
        if let Some(grammar) = &self.grammar {
            if grammar.trim().is_empty() || grammar.contains('\0') {
                return Err(EngineError::InvalidGrammar(
                    "the grammar is empty or contains a NUL character".into(),
                ));
            }
            crate::grammar::limits::check_gbnf(grammar)?;
        }
        if self.max_tokens == 0 || self.max_tokens > MAX_TOKENS_LIMIT {
            return Err(invalid(
                "max_tokens",
                format!(
                    "must be between 1 and {MAX_TOKENS_LIMIT}, got {}",
                    self.max_tokens
                ),
            ));
        }
        if let Some(n) = self.max_draft_tokens {
            if !(1..=MAX_DRAFT_TOKENS).contains(&n) {
                return Err(invalid(
                    "max_draft_tokens",
                    format!("must be between 1 and {MAX_DRAFT_TOKENS}, got {n}"),
                ));
            }
        }
        if let AcceptanceRule::Typical { threshold, alpha } = self.acceptance {
            check_range("typical_threshold", threshold, 0.0, 1.0)?;
            check_range("typical_alpha", alpha, 0.0, 1.0)?;
        }
        if self.stop.len() > 16 {
            return Err(invalid("stop", "at most 16 stop strings".into()));
        }
        self.sampling.validate()
    }
}

fn check_range(name: &'static str, value: f32, min: f32, max: f32) -> Result<(), EngineError> {
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(invalid(
            name,
            format!("must be between {min} and {max}, got {value}"),
        ))
    }
}

fn invalid(name: &'static str, message: String) -> EngineError {
    EngineError::InvalidParameter { name, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> GenerateRequest {
        GenerateRequest::new(Prompt::Text("hi".into()), 8)
    }

    #[test]
    fn lookup_memory_uses_are_named_on_the_wire_as_serde_names_them() {
        for used in [
            LookupMemoryUse::ReadWrite,
            LookupMemoryUse::ReadOnly,
            LookupMemoryUse::Off,
        ] {
            assert_eq!(serde_json::to_value(used).unwrap(), used.as_str());
        }
    }

    #[test]
    fn modes_parse_by_name() {
        assert_eq!(
            "Lookup".parse::<GenerationMode>(),
            Ok(GenerationMode::Lookup)
        );
        assert_eq!(" auto".parse::<GenerationMode>(), Ok(GenerationMode::Auto));
        let err = "fast".parse::<GenerationMode>().unwrap_err();
        assert!(
            err.to_string()
                .contains("normal, medusa, lookup, auto, draft or eagle"),
            "{err}"
        );
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(request().validate(), Ok(()));
    }

    #[test]
    fn blank_prompts_are_refused() {
        let mut r = request();
        r.prompt = Prompt::Text("  \n".into());
        assert_eq!(r.validate(), Err(EngineError::EmptyPrompt));
        r.prompt = Prompt::Chat(vec![]);
        assert_eq!(r.validate(), Err(EngineError::EmptyPrompt));
    }

    #[test]
    fn only_the_chat_roles_are_taken() {
        let mut r = request();
        for role in ["system", "user", "assistant"] {
            r.prompt = Prompt::Chat(vec![ChatMessage::new(role, "hi")]);
            assert_eq!(r.validate(), Ok(()), "{role}");
        }
        for role in ["", "wizard", "User", "user<|im_end|>"] {
            r.prompt = Prompt::Chat(vec![ChatMessage::new(role, "hi")]);
            assert!(
                matches!(
                    r.validate(),
                    Err(EngineError::InvalidParameter {
                        name: "messages",
                        ..
                    })
                ),
                "{role}"
            );
        }
    }

    #[test]
    fn nul_characters_are_refused() {
        let mut r = request();
        r.prompt = Prompt::Text("a\0b".into());
        assert!(matches!(
            r.validate(),
            Err(EngineError::InvalidParameter { name: "prompt", .. })
        ));
        r.prompt = Prompt::Chat(vec![ChatMessage::new("user", "hi\0")]);
        assert!(matches!(
            r.validate(),
            Err(EngineError::InvalidParameter {
                name: "messages",
                ..
            })
        ));
    }

    #[test]
    fn out_of_range_values_name_the_parameter() {
        let mut r = request();
        r.max_tokens = 0;
        assert!(matches!(
            r.validate(),
            Err(EngineError::InvalidParameter {
                name: "max_tokens",
                ..
            })
        ));
        let mut r = request();
        r.sampling.temperature = -0.1;
        assert!(matches!(
            r.validate(),
            Err(EngineError::InvalidParameter {
                name: "temperature",
                ..
            })
        ));
        r.sampling.temperature = f32::NAN;
        assert!(matches!(
            r.validate(),
            Err(EngineError::InvalidParameter {
                name: "temperature",
                ..
            })
        ));
        let mut r = request();
        r.sampling.top_p = 0.0;
        assert!(matches!(
            r.validate(),
            Err(EngineError::InvalidParameter { name: "top_p", .. })
        ));
    }
}
