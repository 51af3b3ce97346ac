//! Token trees: the shape a drafter proposes ([`TreeSpec`]), the tree it drafts
//! ([`DraftTree`]) and how that tree is laid out for one llama.cpp decode ([`TreeLayout`]).

mod draft;
mod layout;
mod spec;

pub use draft::{DraftTree, TokenSource};
pub use layout::TreeLayout;
pub use spec::{PathFill, TreeError, TreeSpec, MAX_RANK, MAX_TREE_FILE_BYTES};
