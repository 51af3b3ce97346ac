//! Choosing tokens: the sampler and its seeded generator, the model's recommended settings, and
//! log-probabilities.

pub(crate) mod defaults;
pub(crate) mod rng;
pub(crate) mod sampler;
pub(crate) mod token_choice;
