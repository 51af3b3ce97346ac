//! The server's integration tests, over real HTTP, as one test binary: each module was a test
//! binary of its own, and each linked llama.cpp.

// The engine's tests run their process-wide tests alone the same way.
#[path = "../../../engine/tests/it/alone.rs"]
mod alone;
mod common;

mod catalog;
mod conversations;
mod faults;
mod hostile;
mod hostile_remotes;
mod http;
mod long_prompts;
mod plain_remote;
mod remote;
mod training;
