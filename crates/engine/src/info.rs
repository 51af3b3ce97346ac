//! What a loaded model is ([`ModelInfo`]): its file, shape, context, compute, heads and Medusa
//! tree, shown to the user and recorded with every run.

use std::path::PathBuf;

use serde::Serialize;
use ts_rs::TS;

use crate::cpu_kernel_choice::CpuKernels;
use crate::llama::compute::ComputeInfo;
use crate::medusa::heads::HeadsInfo;
use crate::medusa::plan::MedusaPlan;
use crate::sampling::defaults::SamplingDefaults;
use crate::speculative::outlook::DraftingOutlook;
use crate::speculative::tree::TreeSpec;

/// What a loaded model is, for display and for recording next to every run.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct ModelInfo {
    #[ts(type = "string")]
    pub path: PathBuf,
    /// The name people know the model by (see `GgufHeader::display_name`).
    pub name: String,
    /// The file's own `general.name`, when it has one.
    pub metadata_name: Option<String>,
    pub architecture: String,
    /// Weight format, e.g. "Q4_1".
    pub file_type: String,
    pub file_size_bytes: u64,
    pub n_params: u64,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_vocab: u32,
    pub n_ctx_train: u32,
    /// Context cells each request may use (prompt, output and draft tree).
    pub n_ctx: u32,
    /// Requests decoded together.
    pub parallel: usize,
    pub n_batch: u32,
    pub threads: usize,
    /// The backend, the devices and the layers on a GPU.
    pub compute: ComputeInfo,
    pub has_chat_template: bool,
    /// Sampling for chats: the model's recommendations, else the playground's chat default.
    pub sampling_defaults: SamplingDefaults,
    /// The Medusa heads loaded with the model, if any.
    pub heads: Option<HeadsInfo>,
    /// The token tree Medusa mode uses; `None` with heads when it decodes plainly.
    pub medusa_tree: Option<TreeSpec>,
    /// How Medusa mode's tree was settled on this machine, and the decision in words.
    pub medusa_plan: Option<MedusaPlan>,
    /// Whether drafting can pay for this model here, and why, from the decode costs measured
    /// here. It changes as they are learnt, so the engine leaves it `None` in what the model was
    /// loaded with; whoever reports the model fills it from
    /// [`Engine::known_drafting_outlook`](crate::Engine::known_drafting_outlook) (`None` until
    /// the costs are known) or [`Engine::drafting_outlook`](crate::Engine::drafting_outlook).
    pub drafting_outlook: Option<DraftingOutlook>,
    /// The draft model loaded beside the model, if any.
    pub draft_model: Option<DraftModelInfo>,
    /// The feature drafter loaded beside the model, if any.
    pub eagle: Option<EagleInfo>,
    /// Exact mode: batch-invariant kernels and cells in position order, so that greedy
    /// speculative and batched output is plain decoding's, bit for bit.
    pub exact: bool,
    /// The CPU kernels decodes of several tokens ran with when the model loaded.
    pub cpu_kernels: CpuKernels,
    /// The instruction set Q4_1 and Q8_0 products ran with when the model loaded, in words
    /// ("AVX-512 VNNI", "AVX2").
    pub cpu_instruction_set: String,
}

/// A feature drafter: one decoder layer on the model's hidden states that drafts a tree.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct EagleInfo {
    #[ts(type = "string")]
    pub path: PathBuf,
    pub file_size_bytes: u64,
    /// Recent positions its attention reads besides the drafted path.
    pub window: usize,
    /// Tokens it can propose (the most frequent of its training answers), when restricted.
    pub vocab_subset: Option<usize>,
    /// Tokens per step of its trees along held-out answers when it was trained:
    /// `(max_nodes, tokens per step)`.
    pub heldout_tokens_per_step: Vec<(usize, f64)>,
    /// Growing an 8-node tree for one request, measured at load.
    pub draft_ms: f64,
}

/// A draft model: a smaller model with the same vocabulary that drafts for the served one.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct DraftModelInfo {
    #[ts(type = "string")]
    pub path: PathBuf,
    pub name: String,
    /// Weight format, e.g. "Q4_0".
    pub file_type: String,
    pub file_size_bytes: u64,
    pub n_params: u64,
    /// Of its confident guesses along the model's own answer to a question asked at load, the
    /// share the model agreed with: where its acceptance starts.
    pub agreement: Option<f64>,
    /// One draft decode of a single token, measured at load.
    pub ms_per_token: Option<f64>,
}
