//! The decoding step: the batcher that runs every active request in one decode per step, the
//! requests waiting for a slot, the KV cache's books, the decoder seam it decodes through, each
//! request's state and drafting, the batch, the prompt cache, and the verification of a decoded
//! tree.

pub(crate) mod active_request;
pub(crate) mod admission;
pub(crate) mod batch;
pub(crate) mod batcher;
pub(crate) mod decoder;
pub(crate) mod drafter_pool;
pub(crate) mod drafting;
pub(crate) mod kv_ledger;
pub(crate) mod prompt_cache;
pub(crate) mod recent_states;
#[cfg(test)]
pub(crate) mod toy_model;
pub(crate) mod verify;
