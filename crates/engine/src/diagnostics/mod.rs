//! Diagnostics, apart from serving: the bare greedy loop (the yardstick for the engine's
//! overhead), the next-token logits, the Medusa heads' accuracy along a text and the decode
//! costs. Each needs the whole context (they clear the KV cache), so the scheduler runs them
//! only when no request is decoding.

mod baseline;
mod probes;

use std::sync::mpsc as std_mpsc;

pub use baseline::BaselineRun;

use crate::engine::Engine;
use crate::error::EngineError;
use crate::llama_runtime::LlamaRuntime;
use crate::medusa::accuracy::HeadAccuracy;
use crate::medusa::heads::MedusaHeads;
use crate::request::Prompt;
use crate::sampler::TokenId;
use crate::speculative::costs::{CostModel, DecodeCosts};

type Reply<T> = std_mpsc::Sender<Result<T, EngineError>>;

pub(crate) enum Diagnostic {
    Baseline {
        prompt: Prompt,
        max_tokens: usize,
        reply: Reply<BaselineRun>,
    },
    NextTokenLogits {
        prompt: Prompt,
        continuation: Vec<TokenId>,
        top: usize,
        reply: Reply<Vec<(TokenId, f32)>>,
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
                runtime.clear_kv();
                let _ = reply.send(run);
            }
            Diagnostic::NextTokenLogits {
                prompt,
                continuation,
                top,
                reply,
            } => {
                let _ = reply.send(probes::next_token_logits(
                    runtime,
                    &prompt,
                    &continuation,
                    top,
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

impl Engine {
    /// The `top` most likely next tokens and their logits after `prompt` followed by
    /// `continuation`, decoded plainly in one pass (blocking). For inspecting near-ties.
    pub fn next_token_logits(
        &self,
        prompt: Prompt,
        continuation: Vec<TokenId>,
        top: usize,
    ) -> Result<Vec<(TokenId, f32)>, EngineError> {
        self.diagnose(|reply| Diagnostic::NextTokenLogits {
            prompt,
            continuation,
            top,
            reply,
        })
    }

    /// Decode time in milliseconds by number of tokens in a batch, as known to the draft budget
    /// (from the cache, or measured now if no speculative request has run yet; blocking).
    pub fn decode_costs(&self) -> Result<DecodeCosts, EngineError> {
        self.diagnose(|reply| Diagnostic::DecodeCosts {
            fresh: false,
            reply,
        })
    }

    /// The same, measured now whatever is known, and kept in the cache for later loads.
    pub fn measure_decode_costs(&self) -> Result<DecodeCosts, EngineError> {
        self.diagnose(|reply| Diagnostic::DecodeCosts { fresh: true, reply })
    }

    /// How often the Medusa heads' top-`top_k` guesses are right along `continuation`, text the
    /// model wrote after `prompt` (blocking; runs when no request is decoding).
    pub fn measure_heads(
        &self,
        prompt: Prompt,
        continuation: Vec<TokenId>,
        top_k: usize,
    ) -> Result<HeadAccuracy, EngineError> {
        self.diagnose(|reply| Diagnostic::MeasureHeads {
            prompt,
            continuation,
            top_k,
            reply,
        })
    }

    /// Runs the bare llama-cpp-2 greedy loop on this engine's context (blocking).
    pub fn raw_baseline(
        &self,
        prompt: Prompt,
        max_tokens: usize,
    ) -> Result<BaselineRun, EngineError> {
        self.diagnose(|reply| Diagnostic::Baseline {
            prompt,
            max_tokens,
            reply,
        })
    }
}
