//! Output held to a grammar: llama.cpp's GBNF grammar sampler says which tokens may come next,
//! and JSON schemas become grammars through llama.cpp's own converter.
//!
//! The sampler's state advances with every emitted token. Drafted tokens need no state of their
//! own: verification walks the accepted path one token at a time, and a drafted token the grammar
//! forbids can never equal the constrained choice, so it is rejected like any other miss.

pub(crate) mod cache;
pub(crate) mod check_places;
pub(crate) mod child;
pub(crate) mod deadline;
pub(crate) mod limits;
pub(crate) mod prep;
pub(crate) mod requester;
pub(crate) mod trial;

use std::time::{Duration, Instant};

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

use crate::error::EngineError;
use crate::grammar::limits::{check_gbnf, pattern_nesting, MAX_GRAMMAR_BYTES, MAX_GRAMMAR_NESTING};
use crate::token::TokenId;

/// Tokens checked before the whole vocabulary is: the likeliest, in order.
const SHORTLIST: usize = 256;

/// A grammar's state along one run's output.
#[derive(Debug, Clone)]
pub(crate) struct Grammar {
    sampler: LlamaSampler,
    /// What ends the run should the grammar allow nothing at all.
    end_token: TokenId,
    /// Time spent in llama.cpp's grammar code since [`Grammar::take_spent`] last read it.
    spent: Duration,
}

impl Grammar {
    /// Compiles GBNF text whose start rule is `root`.
    pub(crate) fn new(model: &LlamaModel, gbnf: &str) -> Result<Self, EngineError> {
        let sampler = LlamaSampler::grammar(model, gbnf, "root").map_err(|err| {
            EngineError::InvalidGrammar(format!(
                "llama.cpp's GBNF parser refused it ({err}): every rule used must be defined, \
                 and a rule named root must exist"
            ))
        })?;
        Ok(Self {
            sampler,
            end_token: model.vocab().eos().0,
            spent: Duration::ZERO,
        })
    }

    /// Runs `apply` on the candidates, counting its time.
    fn apply(&mut self, candidates: &mut LlamaTokenDataArray) {
        let started = Instant::now();
        self.sampler.apply(candidates);
        self.spent += started.elapsed();
    }

    /// The time spent following the grammar since the last call: what it cost the engine.
    pub(crate) fn take_spent(&mut self) -> Duration {
        std::mem::take(&mut self.spent)
    }

    /// Whether `token` may come next.
    pub(crate) fn allows(&mut self, token: TokenId, logit: f32) -> bool {
        let mut one = LlamaTokenDataArray::new(
            vec![LlamaTokenData::new(LlamaToken(token), logit, 0.0)],
            false,
        );
        self.apply(&mut one);
        one.data[0].logit() != f32::NEG_INFINITY
    }

    /// The `k` most likely tokens the grammar allows, most likely first, found among the
    /// likeliest few hundred; `None` when fewer than `k` of those are allowed (then
    /// [`Grammar::mask`] must decide). Checking a few hundred tokens costs a fraction of
    /// checking the whole vocabulary.
    pub(crate) fn top_allowed(&mut self, logits: &[f32], k: usize) -> Option<Vec<(TokenId, f32)>> {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        let by_logit = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        let shortlist = SHORTLIST.max(4 * k).min(order.len());
        if shortlist == 0 {
            return None;
        }
        if shortlist < order.len() {
            order.select_nth_unstable_by(shortlist - 1, by_logit);
            order.truncate(shortlist);
        }
        order.sort_unstable_by(by_logit);
        let mut candidates = LlamaTokenDataArray::from_iter(
            order
                .iter()
                .map(|&id| LlamaTokenData::new(LlamaToken(id as i32), logits[id], 0.0)),
            false,
        );
        self.apply(&mut candidates);
        let allowed: Vec<(TokenId, f32)> = candidates
            .data
            .iter()
            .filter(|d| d.logit() != f32::NEG_INFINITY)
            .take(k)
            .map(|d| (d.id().0, d.logit()))
            .collect();
        (allowed.len() == k).then_some(allowed)
    }

    /// Sets the logits of the tokens that may not come next to minus infinity.
    pub(crate) fn mask(&mut self, logits: &mut [f32]) {
        let mut all = LlamaTokenDataArray::from_iter(
            logits
                .iter()
                .enumerate()
                .map(|(id, &logit)| LlamaTokenData::new(LlamaToken(id as i32), logit, 0.0)),
            false,
        );
        self.apply(&mut all);
        for data in &all.data {
            logits[data.id().0 as usize] = data.logit();
        }
    }

    pub(crate) fn end_token(&self) -> TokenId {
        self.end_token
    }

    /// Advances past an emitted token (one the grammar allowed).
    pub(crate) fn accept(&mut self, token: TokenId) {
        let started = Instant::now();
        self.sampler.accept(LlamaToken(token));
        self.spent += started.elapsed();
    }
}

/// The grammar of a JSON schema, by llama.cpp's converter (the one llama-server uses).
pub fn json_schema_grammar(schema: &serde_json::Value) -> Result<String, EngineError> {
    check_schema(schema, schema)?;
    let text = schema.to_string();
    if text.len() > MAX_GRAMMAR_BYTES {
        return Err(EngineError::GrammarTooComplex(format!(
            "the JSON schema is {} bytes; at most {MAX_GRAMMAR_BYTES} are taken",
            text.len()
        )));
    }
    let converted = on_large_stack("medusa-schema", move || {
        llama_cpp_2::json_schema_to_grammar(&text).ok()
    })?;
    let grammar = converted.ok_or_else(|| {
        EngineError::InvalidSchema(
            "llama.cpp's converter could not turn this JSON schema into a grammar; it takes \
             type, properties, required, additionalProperties, items, prefixItems, enum, const, \
             anyOf, oneOf, allOf, local $refs, string formats and patterns, and number and \
             length bounds"
                .into(),
        )
    })?;
    check_gbnf(&grammar)?;
    Ok(grammar)
}

/// Stack for llama.cpp's recursive grammar parser and schema converter: the nesting limits keep
/// them far inside it whatever a request sends.
pub(crate) const GRAMMAR_STACK_BYTES: usize = 64 << 20;

/// Runs `work` on a thread of its own with [`GRAMMAR_STACK_BYTES`] of stack, and waits for it.
fn on_large_stack<T: Send>(name: &str, work: impl FnOnce() -> T + Send) -> Result<T, EngineError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(GRAMMAR_STACK_BYTES)
            .spawn_scoped(scope, work)
            .map_err(|e| EngineError::Context(format!("cannot start a grammar thread: {e}")))?
            .join()
            .map_err(|_| EngineError::GrammarTooComplex("converting it failed".into()))
    })
}

/// The grammar of any JSON object (`response_format: {"type": "json_object"}`).
pub fn json_object_grammar() -> Result<String, EngineError> {
    json_schema_grammar(&serde_json::json!({ "type": "object" }))
}

/// What the converter refuses without saying why, found here so the error can say it.
fn check_schema(node: &serde_json::Value, root: &serde_json::Value) -> Result<(), EngineError> {
    use serde_json::Value;
    match node {
        Value::Bool(_) => Ok(()),
        Value::Object(map) => {
            if let Some(reference) = map.get("$ref") {
                let target = reference
                    .as_str()
                    .and_then(|r| r.strip_prefix('#'))
                    .and_then(|pointer| root.pointer(pointer));
                if target.is_none() {
                    return Err(EngineError::InvalidSchema(format!(
                        "$ref {reference} does not point into this schema (only local references \
                         such as \"#/$defs/Name\" are resolved)"
                    )));
                }
            }
            if let Some(pattern) = map.get("pattern").and_then(Value::as_str) {
                if !(pattern.starts_with('^') && pattern.ends_with('$')) {
                    return Err(EngineError::InvalidSchema(format!(
                        "pattern {pattern:?} must start with ^ and end with $"
                    )));
                }
                let depth = pattern_nesting(pattern);
                if depth > MAX_GRAMMAR_NESTING {
                    return Err(EngineError::GrammarTooComplex(format!(
                        "a pattern nests groups {depth} deep; at most {MAX_GRAMMAR_NESTING} \
                         levels are taken"
                    )));
                }
            }
            map.iter()
                .filter(|(key, _)| {
                    !matches!(key.as_str(), "enum" | "const" | "default" | "examples")
                })
                .try_for_each(|(_, value)| check_schema(value, root))
        }
        Value::Array(items) => items.iter().try_for_each(|item| check_schema(item, root)),
        Value::Null | Value::Number(_) | Value::String(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_becomes_a_grammar_with_its_properties() {
        let grammar = json_schema_grammar(&serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"]
        }))
        .unwrap();
        assert!(grammar.contains("root ::="), "{grammar}");
        assert!(grammar.contains("\\\"name\\\""), "{grammar}");
        assert!(json_object_grammar().unwrap().contains("root ::="));
    }

    #[test]
    fn schemas_the_converter_cannot_take_are_refused_with_the_reason() {
        let dangling = json_schema_grammar(&serde_json::json!({"$ref": "#/$defs/Missing"}));
        assert!(
            matches!(&dangling, Err(EngineError::InvalidSchema(m)) if m.contains("#/$defs/Missing")),
            "{dangling:?}"
        );
        let remote =
            json_schema_grammar(&serde_json::json!({"$ref": "https://example.com/s.json"}));
        assert!(matches!(remote, Err(EngineError::InvalidSchema(_))));
        let pattern =
            json_schema_grammar(&serde_json::json!({"type": "string", "pattern": "[a-z]+"}));
        assert!(
            matches!(&pattern, Err(EngineError::InvalidSchema(m)) if m.contains("must start with ^")),
            "{pattern:?}"
        );
        let local = json_schema_grammar(&serde_json::json!({
            "$defs": {"Name": {"type": "string"}},
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/Name"}}
        }));
        assert!(local.is_ok(), "{local:?}");
    }
}
