//! Speculative decoding: drafters propose a token tree, one decode verifies it (the step's
//! `verify`).

pub mod budget;
pub mod costs;
pub mod drafter;
pub mod drafter_kind;
pub mod lookup;
pub mod lookup_memory;
pub mod model_drafter;
pub mod outlook;
pub mod tree;
pub mod tree_builder;
