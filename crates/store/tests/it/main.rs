//! The store's integration tests as one test binary: each module was a test binary of its own.

mod common;

mod comparisons;
mod conversations;
mod export_import;
mod faults;
mod migrations;
#[cfg(unix)]
mod private_files;
mod runs;
mod search_and_delete;
mod training_jobs;
