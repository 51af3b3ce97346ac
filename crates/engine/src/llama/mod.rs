//! What touches llama.cpp beyond the process-wide backend (`llama_process`): the runtime a step
//! decodes through, exact mode's kernels and cell order, the batched CPU kernels, prompt
//! templating, the draft model and embeddings in contexts of their own, and where a model runs.

pub(crate) mod cell_order;
pub(crate) mod compute;
pub mod cpu_kernels;
pub(crate) mod draft_model;
pub(crate) mod embeddings;
pub(crate) mod exact_kernels;
pub(crate) mod prompt;
pub(crate) mod runtime;
