//! Medusa heads: `x + SiLU(W x + b)` blocks on the base model's last hidden state, then a
//! vocabulary projection (the head's own, or the base model's output matrix).
//!
//! Heads may also read the tree's root, the token the base model itself chose from that hidden
//! state: its input embedding (scaled to unit RMS) enters the first block as `+ R e`. Guessing
//! the token two ahead is much easier knowing the one in between, and the root is known before
//! drafting, so this costs one small product per head and no extra pass.
//!
//! Heads that read the drafted path (Hydra's sequentially dependent heads) also add `P_j e_j`
//! for each token between the root and the one they guess: each node's children are guessed
//! knowing the node's whole path, at one head evaluation per node that has children.
//!
//! Heads files are GGUF (`*.medusa.gguf`) and record the base model they were made for, so
//! that heads for another model are refused instead of silently drafting nonsense.

mod compute;
mod device;
mod evaluate;
mod format;
mod info;
mod load;
mod placement;
mod weights;
mod widen;
mod write;

pub use compute::{HeadsCompute, HeadsPlacement};
pub(crate) use evaluate::top_indices;
pub use evaluate::{scale_to_unit_rms, HeadQuery, MedusaHeads};
pub use info::{BaseIdentity, HeadsInfo, TrainingRecord};
pub use load::{base_projection, base_token_embedding};
pub use widen::widen_heads;
pub use write::{write_heads, HeadsEncoding, HeadsWeights};
