//! Diagnostics, apart from serving: the bare greedy loop (the yardstick for the engine's
//! overhead), how likely chosen next tokens are, the Medusa heads' accuracy along a text and
//! the decode costs. Each needs the whole context (they clear the KV cache), so the scheduler
//! runs them only when no request is decoding.

mod baseline;
mod probes;

use std::sync::mpsc as std_mpsc;

pub use baseline::BaselineRun;

use crate::error::EngineError;
use crate::llama::runtime::LlamaRuntime;
use crate::medusa::accuracy::HeadAccuracy;
use crate::medusa::heads::MedusaHeads;
use crate::request::Prompt;
use crate::sampling::token_choice::{PromptLogprobs, TokenChoice};
use crate::speculative::costs::{CostModel, DecodeCosts};
use crate::step::decoder::{Decoder, KvCells};
use crate::token::TokenId;

type Reply<T> = std_mpsc::Sender<Result<T, EngineError>>;

pub(crate) enum Diagnostic {
    Baseline {
        prompt: Prompt,
        max_tokens: usize,
        reply: Reply<BaselineRun>,
    },
    NextTokenChoices {
        prompt: Prompt,
        continuation: Vec<TokenId>,
        tokens: Vec<TokenId>,
        reply: Reply<Vec<TokenChoice>>,
    },
    PromptLogprobs {
        prompt: Prompt,
        top: usize,
        reply: Reply<PromptLogprobs>,
    },
    DecodeCosts {
        /// Measure again (and keep the result) rather than answer what is known.
        fresh: bool,
        reply: Reply<DecodeCosts>,
    },
    MeasureHeads {
        prompt: Prompt,
        continuation: Vec<TokenId>,
        top_k: usize,
        reply: Reply<HeadAccuracy>,
    },
}

impl Diagnostic {
    /// Runs on the engine thread with nothing decoding, and answers the caller.
    pub(crate) fn run(self, runtime: &mut LlamaRuntime<'_>, heads: Option<&MedusaHeads>) {
        let _span = tracing::info_span!("diagnostic").entered();
        match self {
            Diagnostic::Baseline {
                prompt,
                max_tokens,
                reply,
            } => {
                let run = runtime.prompt_tokens(&prompt, false).and_then(|tokens| {
                    let (model, ctx) = runtime.model_and_context();
                    baseline::raw_greedy_decode(model, ctx, &tokens, max_tokens)
                });
                runtime.clear_cells();
                let _ = reply.send(run);
            }
            Diagnostic::NextTokenChoices {
                prompt,
                continuation,
                tokens,
                reply,
            } => {
                let _ = reply.send(probes::next_token_choices(
                    runtime,
                    &prompt,
                    &continuation,
                    &tokens,
                ));
            }
            Diagnostic::MeasureHeads {
                prompt,
                continuation,
                top_k,
                reply,
            } => {
                let measured = match heads {
                    Some(heads) => {
                        probes::measure_heads(runtime, heads, &prompt, &continuation, top_k)
                    }
                    None => Err(EngineError::NoMedusaHeads),
                };
                let _ = reply.send(measured);
            }
            Diagnostic::PromptLogprobs { prompt, top, reply } => {
                let _ = reply.send(probes::prompt_logprobs(runtime, &prompt, top));
            }
            Diagnostic::DecodeCosts { fresh, reply } => {
                let costs = if fresh {
                    runtime.measure_costs()
                } else {
                    runtime.ensure_cost_model()
                }
                .map(CostModel::report);
                let _ = reply.send(costs);
            }
        }
    }
}
