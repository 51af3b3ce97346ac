//! A grammar compiled and followed for a few tokens before it serves: where each step's check
//! of the vocabulary would stall the engine, it is refused before it runs.

use std::time::{Duration, Instant};

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::error::EngineError;
use crate::grammar::Grammar;

/// Longest one check of the whole vocabulary against a grammar may take while it is tried, and
/// the most grammar work one request may cost a step: others wait for it. JSON schemas' grammars
/// take 3 to 155 ms a check here (2 cores), so the limit leaves them ten times that.
pub const GRAMMAR_STEP_LIMIT: Duration = Duration::from_millis(1500);

/// Tokens followed when a grammar is tried, each the longest the grammar allows, to walk deep
/// into it where ambiguity multiplies the work.
const TRIAL_TOKENS: usize = 6;

/// The refusal of a grammar whose compiling and trying took longer than `deadline`.
pub(crate) fn deadline_missed(deadline: Duration) -> EngineError {
    EngineError::GrammarTooComplex(format!(
        "compiling and trying it took more than {} s",
        deadline.as_secs()
    ))
}

/// Compiles `gbnf` for `model` and follows it for [`TRIAL_TOKENS`] tokens, each the longest it
/// allows, refusing it where one check of the vocabulary takes more than
/// [`GRAMMAR_STEP_LIMIT`].
pub(crate) fn compile_and_try(model: &LlamaModel, gbnf: &str) -> Result<Grammar, EngineError> {
    let grammar = Grammar::new(model, gbnf)?;
    let mut trial = grammar.clone();
    let n_vocab = model.n_vocab().max(0) as usize;
    let mut logits = vec![0.0f32; n_vocab];
    for token_index in 0..TRIAL_TOKENS {
        logits.fill(0.0);
        let started = Instant::now();
        trial.mask(&mut logits);
        let took = started.elapsed();
        tracing::debug!(
            token_index,
            mask_ms = took.as_millis() as u64,
            "grammar tried"
        );
        if took > GRAMMAR_STEP_LIMIT {
            return Err(EngineError::GrammarTooComplex(format!(
                "checking the vocabulary against it took {} ms at token {}; each step may \
                 spend at most {} ms on the grammar",
                took.as_millis(),
                token_index + 1,
                GRAMMAR_STEP_LIMIT.as_millis()
            )));
        }
        let Some(next) = longest_allowed(model, &logits, trial.end_token()) else {
            break;
        };
        trial.accept(next);
    }
    Ok(grammar)
}

/// The allowed token (not the end) whose text is longest, lowest id first among equals.
fn longest_allowed(model: &LlamaModel, masked: &[f32], end_token: i32) -> Option<i32> {
    let vocab = model.vocab();
    masked
        .iter()
        .enumerate()
        .filter(|(id, logit)| **logit != f32::NEG_INFINITY && *id as i32 != end_token)
        .map(|(id, _)| id as i32)
        .filter(|&id| !vocab.is_eog(LlamaToken(id)))
        .max_by_key(|&id| (vocab.token_to_piece(LlamaToken(id), false, None).len(), -id))
}
