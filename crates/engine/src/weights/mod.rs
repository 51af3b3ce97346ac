//! Model files: reading a GGUF header, requantizing, and widening a model (with a streaming GGUF
//! copier) into the scale fixture.

pub(crate) mod gguf_copy;
pub(crate) mod gguf_file;
pub mod matrix;
pub(crate) mod model_file;
pub(crate) mod quantize;
pub(crate) mod widen;
