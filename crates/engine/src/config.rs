//! How the engine loads a model and sizes its context: paths, threads, parallel requests, GPU
//! layers, Medusa heads and tree, with the defaults and the limits it checks.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::cpu_kernel_choice::CpuKernels;
use crate::error::EngineError;
use crate::medusa::heads::HeadsPlacement;
use crate::speculative::budget::CONFIDENCE_Z;
use crate::speculative::costs::CostPoint;
use crate::speculative::tree::TreeSpec;

/// How to load a model and size its context.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub model_path: PathBuf,
    /// Threads for decoding; `None` uses one per available core.
    pub threads: Option<usize>,
    /// Context length per request in tokens; `None` uses the smaller of 4096 and the model's
    /// training context. The KV cache holds this many for each of `parallel` requests.
    pub ctx_size: Option<u32>,
    /// Requests decoded together in one batch.
    pub parallel: usize,
    /// Requests that may wait for a slot before new ones are refused.
    pub max_queued: usize,
    /// Most tokens one embedding call may take; `None`: as many as the KV cache holds for all
    /// requests (`ctx_size` times `parallel`).
    pub max_embedding_tokens: Option<usize>,
    /// Most prompt tokens decoded in one llama.cpp call.
    pub batch_size: u32,
    /// Layers offloaded to a GPU when the build has one.
    pub gpu_layers: u32,
    /// Medusa heads file (`*.medusa.gguf`) for this model, enabling Medusa mode.
    pub heads_path: Option<PathBuf>,
    /// A smaller GGUF with the model's vocabulary that drafts tokens for it (draft mode, and
    /// part of auto).
    pub draft_model_path: Option<PathBuf>,
    /// A feature drafter for this model (`medusa train-drafter`), enabling eagle mode.
    pub feature_drafter_path: Option<PathBuf>,
    /// Where the heads are evaluated: the faster of the engine's thread pool and a ggml backend
    /// (the model's GPU, or ggml's CPU backend) unless one is asked for.
    pub heads_placement: HeadsPlacement,
    /// Token tree for Medusa mode; `None` sizes one for this machine from the heads' held-out
    /// accuracy (or uses the one stored with heads that record none).
    pub tree: Option<TreeSpec>,
    /// Where decode costs measured on this machine are kept between loads; `None` measures
    /// them at every load with heads.
    pub decode_costs_dir: Option<PathBuf>,
    /// Decode costs to plan with instead of measuring them: a fixed cost model that real steps
    /// do not move (figures known for the machine; tests that must not depend on its load).
    pub decode_costs: Option<Vec<CostPoint>>,
    /// Told what loading is doing and how far it has got, so a UI can show it for large models
    /// and for a first load's timing of decodes.
    pub load_progress: Option<LoadProgress>,
    /// Makes the context return final hidden states even without heads (to train heads).
    pub hidden_states: bool,
    /// Decodes with batch-invariant kernels and keeps each sequence's cells in position order,
    /// so that greedy speculative and batched output is identical to plain decoding, bit for bit.
    /// CPU only: with layers on a GPU the engine decodes with the GPU's kernels instead.
    pub exact: bool,
    /// The CPU kernels for decodes of several tokens; process-wide, so the last engine loaded
    /// sets them for all (see [`crate::llama::cpu_kernels`]).
    pub cpu_kernels: CpuKernels,
    /// How sure the draft budget must be that a draft pays: it plans with each drafter's
    /// acceptance this many standard deviations below the rate seen (a Wilson lower bound).
    /// Higher drafts later and less; 0 plans with the rate seen.
    pub draft_confidence: f64,
    /// Contexts of each length lookup remembers from finished requests' text, shared by all
    /// requests (40 bytes each); 0 remembers nothing.
    pub lookup_memory: usize,
}

/// What a load is doing when it reports its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadStage {
    /// Reading a model's weights (the model's, then a draft model's).
    Weights,
    /// Timing decodes of several sizes on this machine, which sizes Medusa's tree: on the first
    /// load of a model with heads, as later loads read the kept figures.
    DecodeCosts,
}

/// A callback receiving what a load is doing and the share of that stage done, in `0.0..=1.0`.
#[derive(Clone)]
pub struct LoadProgress(pub Arc<dyn Fn(LoadStage, f32) + Send + Sync>);

impl LoadProgress {
    pub fn new(callback: impl Fn(LoadStage, f32) + Send + Sync + 'static) -> Self {
        Self(Arc::new(callback))
    }

    pub fn report(&self, stage: LoadStage, share: f32) {
        (self.0)(stage, share.clamp(0.0, 1.0));
    }
}

impl fmt::Debug for LoadProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LoadProgress")
    }
}

pub const DEFAULT_CTX_SIZE: u32 = 4096;
pub const DEFAULT_BATCH_SIZE: u32 = 512;
pub const DEFAULT_PARALLEL: usize = 4;
pub const DEFAULT_MAX_QUEUED: usize = 64;
/// 2^17 contexts of each of two lengths: 10 MiB, about 100,000 tokens of text before older
/// contexts start to give way.
pub const DEFAULT_LOOKUP_MEMORY: usize = 1 << 17;
/// Most contexts of each length: 2.5 GiB.
pub const MAX_LOOKUP_MEMORY: usize = 1 << 25;

impl EngineConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            threads: None,
            ctx_size: None,
            batch_size: DEFAULT_BATCH_SIZE,
            parallel: DEFAULT_PARALLEL,
            max_queued: DEFAULT_MAX_QUEUED,
            max_embedding_tokens: None,
            gpu_layers: 999,
            heads_path: None,
            draft_model_path: None,
            feature_drafter_path: None,
            heads_placement: HeadsPlacement::Fastest,
            tree: None,
            decode_costs_dir: None,
            decode_costs: None,
            load_progress: None,
            hidden_states: false,
            exact: true,
            cpu_kernels: CpuKernels::default(),
            draft_confidence: DEFAULT_DRAFT_CONFIDENCE,
            lookup_memory: DEFAULT_LOOKUP_MEMORY,
        }
    }

    pub fn resolved_threads(&self) -> usize {
        self.threads.unwrap_or_else(default_threads)
    }

    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |name, message: String| Err(EngineError::InvalidParameter { name, message });
        if self.lookup_memory > MAX_LOOKUP_MEMORY {
            return invalid(
                "lookup_memory",
                format!(
                    "must be at most {MAX_LOOKUP_MEMORY} contexts, got {}",
                    self.lookup_memory
                ),
            );
        }
        if let Some(threads) = self.threads {
            if !(1..=512).contains(&threads) {
                return invalid(
                    "threads",
                    format!("must be between 1 and 512, got {threads}"),
                );
            }
        }
        if let Some(ctx) = self.ctx_size {
            if !(16..=1 << 20).contains(&ctx) {
                return invalid(
                    "ctx_size",
                    format!("must be between 16 and 1048576, got {ctx}"),
                );
            }
        }
        if !(1..=64).contains(&self.parallel) {
            return invalid(
                "parallel",
                format!("must be between 1 and 64, got {}", self.parallel),
            );
        }
        if self.max_embedding_tokens == Some(0) {
            return invalid("max_embedding_tokens", "must be at least 1".into());
        }
        if self.max_queued > 1 << 20 {
            return invalid(
                "max_queued",
                format!("must be at most 1048576, got {}", self.max_queued),
            );
        }
        if !(1..=1 << 16).contains(&self.batch_size) {
            return invalid(
                "batch_size",
                format!("must be between 1 and 65536, got {}", self.batch_size),
            );
        }
        if !(0.0..=MAX_DRAFT_CONFIDENCE).contains(&self.draft_confidence) {
            return invalid(
                "draft_confidence",
                format!(
                    "must be between 0 and {MAX_DRAFT_CONFIDENCE} standard deviations, got {}",
                    self.draft_confidence
                ),
            );
        }
        Ok(())
    }
}

/// The usual one-sided 90% bound; the sweep on `bench/tuning/` is in BENCHMARKS.
pub const DEFAULT_DRAFT_CONFIDENCE: f64 = CONFIDENCE_Z;
/// Beyond 5 standard deviations the bound stays near 0 for any evidence a run gathers.
pub const MAX_DRAFT_CONFIDENCE: f64 = 5.0;

/// One thread per core: llama.cpp's own default oversubscribes small machines.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_memory_beyond_its_bound_is_refused_by_name() {
        let mut config = EngineConfig::new("m.gguf");
        config.lookup_memory = MAX_LOOKUP_MEMORY;
        assert!(config.validate().is_ok());
        config.lookup_memory = MAX_LOOKUP_MEMORY + 1;
        let Err(EngineError::InvalidParameter { name, message }) = config.validate() else {
            panic!("accepted {}", config.lookup_memory);
        };
        assert_eq!(name, "lookup_memory");
        assert_eq!(
            message,
            format!(
                "must be at most {MAX_LOOKUP_MEMORY} contexts, got {}",
                MAX_LOOKUP_MEMORY + 1
            )
        );
    }
}
