//! Medusa heads: the heads file format, computing heads (ggml's CPU kernels on a thread pool, or a
//! ggml backend), importing FasterDecoding checkpoints, and the drafter that turns head guesses
//! into a token tree.

pub mod accuracy;
pub mod convert;
pub mod heads;
pub mod heads_drafter;
pub mod plan;
