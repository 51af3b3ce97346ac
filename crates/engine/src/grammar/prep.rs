//! A request's grammar made ready off the engine thread: compiled on a thread with a large stack,
//! within a deadline, and tried first (see [`trial`](super::trial)), so that a grammar whose every
//! step would stall the engine is refused before it runs instead of holding every request up.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use llama_cpp_2::model::LlamaModel;

use crate::error::EngineError;
use crate::grammar::child::check_in_child;
use crate::grammar::deadline::{DeadlineError, GRAMMAR_WORKERS};
use crate::grammar::trial::{compile_and_try, deadline_missed};
use crate::grammar::{Grammar, GRAMMAR_STACK_BYTES};

/// Longest a grammar may take to compile and to be tried.
pub const GRAMMAR_PREPARE_DEADLINE: Duration = Duration::from_secs(10);

/// Compiles and tries `gbnf` (within the limits request validation checks) for `model` (the
/// file at `model_path`) on behalf of `client`, waiting at most [`GRAMMAR_PREPARE_DEADLINE`]. Where this process serves
/// grammar checks (see [`child`](super::child)), a child checks it first and is killed at the
/// deadline; the grammar it passed is then only compiled here. Otherwise a grammar that misses
/// the deadline is refused and its thread finishes on its own at idle priority (see
/// [`deadline`](super::deadline)).
pub(crate) fn prepare_grammar(
    model: Arc<LlamaModel>,
    model_path: &Path,
    gbnf: String,
    client: Option<IpAddr>,
) -> Result<Grammar, EngineError> {
    let tried = match check_in_child(model_path, &gbnf, GRAMMAR_PREPARE_DEADLINE, client) {
        Some(checked) => {
            checked?;
            true
        }
        None => false,
    };
    let prepared = GRAMMAR_WORKERS.run(
        "medusa-grammar",
        GRAMMAR_STACK_BYTES,
        GRAMMAR_PREPARE_DEADLINE,
        move || {
            if tried {
                Grammar::new(&model, &gbnf)
            } else {
                compile_and_try(&model, &gbnf)
            }
        },
    );
    match prepared {
        Ok(prepared) => prepared,
        Err(DeadlineError::Missed) => Err(deadline_missed(GRAMMAR_PREPARE_DEADLINE)),
        Err(DeadlineError::Busy { overdue }) => Err(EngineError::GrammarsBusy { overdue }),
        Err(DeadlineError::Thread(reason)) => Err(EngineError::GrammarTooComplex(format!(
            "llama.cpp failed while compiling it: {reason}"
        ))),
    }
}
