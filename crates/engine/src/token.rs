//! The token id every part of the engine speaks: its own module, at the bottom of the crate, so
//! that drafting, sampling and requests can name a token without importing one another.

/// A token of the model's vocabulary, as llama.cpp numbers it.
pub type TokenId = i32;
