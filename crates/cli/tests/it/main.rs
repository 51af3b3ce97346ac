//! The `medusa` binary's integration tests as one test binary: each module was a test binary of
//! its own, and each linked llama.cpp.

mod cli;
mod serve;
mod serve_import;
