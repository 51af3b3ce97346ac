//! A feature-level drafter, as EAGLE drafts: one small decoder layer reads the base model's final
//! hidden state at a position with the embedding of the token chosen there, and predicts the
//! hidden state (the "feature") and the token one place further. It then reads its own predicted
//! feature with that token to go one deeper, so that one layer drafts a whole tree.
//!
//! Its attention reads a short window of the request's recent positions (the base model's own
//! features) and the drafter's own entries along the path being drafted. It has no position
//! encoding: the causal order of the window is all it sees of position. Training unrolls the
//! drafter on its own predictions several levels deep (training-time test), so that deeper
//! levels are trained on the inputs they will see when drafting.
//!
//! The same arithmetic runs in training (candle, the training crate) and here (ggml's dot
//! products on a thread pool); [`layer`] spells it out.

mod format;
mod layer;
mod load;
mod step_drafter;
mod tree;
mod write;

pub use format::FeatureShape;
pub use layer::{FeatureLayer, FeatureWeights};
pub use load::FeatureDrafterModel;
pub use step_drafter::EagleDrafter;
pub use tree::{accepted_along, FeatureAsk, GrownTree};
pub use write::{write_feature_drafter, FeatureTrainingRecord};
