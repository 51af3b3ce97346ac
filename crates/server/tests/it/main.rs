//! The server's integration tests, over real HTTP, as one test binary: each module was a test
//! binary of its own, and each linked llama.cpp.

mod alone;
mod common;

mod catalog;
mod conversations;
mod faults;
mod hostile;
mod hostile_remotes;
mod http;
mod remote;
mod training;
