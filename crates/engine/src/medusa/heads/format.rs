//! The heads file's layout inside GGUF: its metadata keys and tensor names, and the checks that
//! reading and writing share.

use crate::error::EngineError;
use crate::token::{is_vocabulary_subset, TokenId};

pub(super) mod keys {
    pub const ARCH: &str = "general.architecture";
    pub const HEADS: &str = "medusa.head_count";
    pub const LAYERS: &str = "medusa.layers_per_head";
    pub const SHARED: &str = "medusa.shared_projection";
    pub const ROOT_INPUT: &str = "medusa.root_token_input";
    pub const PATH_INPUT: &str = "medusa.path_input";
    pub const TREE: &str = "medusa.tree";
    pub const N_EMBD: &str = "medusa.base.n_embd";
    pub const N_VOCAB: &str = "medusa.base.n_vocab";
    pub const TOKENIZER: &str = "medusa.base.tokenizer_sha256";
    pub const VOCAB_SUBSET: &str = "medusa.vocab_subset";
    pub const TRAINING: &str = "medusa.training";
}

pub(super) fn block_weight(h: usize, l: usize) -> String {
    format!("medusa.{h}.block.{l}.weight")
}
pub(super) fn block_bias(h: usize, l: usize) -> String {
    format!("medusa.{h}.block.{l}.bias")
}
pub(super) fn projection(h: usize) -> String {
    format!("medusa.{h}.proj.weight")
}
pub(super) fn root_weight(h: usize) -> String {
    format!("medusa.{h}.root.weight")
}
pub(super) fn path_weight(h: usize, j: usize) -> String {
    format!("medusa.{h}.path.{j}.weight")
}

pub(super) fn check_subset(ids: &[TokenId], n_vocab: usize) -> Result<(), EngineError> {
    if !is_vocabulary_subset(ids, n_vocab) {
        return Err(EngineError::Heads(
            "the vocabulary subset is empty or holds ids outside the vocabulary".into(),
        ));
    }
    Ok(())
}
