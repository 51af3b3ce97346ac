//! The engine's integration tests, on the real default model, as one test binary: each module
//! was a test binary of its own, and each linked llama.cpp.

mod alone;
mod common;

mod batching;
mod constrained;
mod draft_model;
mod eagle;
mod kernels;
mod medusa;
mod prompt_cache;
mod real_model;
mod sizing;
mod speculative;
