//! Heads for a widened model (`wide_model`): the same guesses from its hidden states. Every
//! matrix grows with zero rows and columns, so the widened hidden state (the same values, then
//! zeros) gives the same products. The root and path matrices read token embeddings scaled to
//! unit RMS, which the widening makes sqrt(k) times larger; they are divided by sqrt(k).

use std::path::Path;

use super::format::keys;
use crate::error::EngineError;
use crate::weights::gguf_copy::{widen_gguf, NewValue, TensorRule};
use crate::weights::gguf_file::GgufFile;
use crate::weights::widen::{check_factor, norm_scale};

/// Writes `output` as the heads file `input` widened `factor` times, for the model
/// `widen_model` made with the same factor. The file appears only when complete.
pub fn widen_heads(
    input: &Path,
    output: &Path,
    factor: u32,
    progress: impl FnMut(usize, usize),
) -> Result<(), EngineError> {
    check_factor(factor)?;
    let file = GgufFile::open(input)?;
    if file.string(keys::ARCH).as_deref() != Some("medusa") {
        return Err(EngineError::Heads(format!(
            "{} is a GGUF file but not Medusa heads",
            input.display()
        )));
    }
    let n_embd = file.required_u32(keys::N_EMBD)?;
    let values = [(keys::N_EMBD.to_owned(), NewValue::U32(n_embd * factor))];
    let token_input = TensorRule::BOTH.scaled(norm_scale(factor));
    let rule = |tensor: &str| -> Result<TensorRule, EngineError> {
        if tensor == keys::VOCAB_SUBSET {
            return Ok(TensorRule::KEEP);
        }
        let part = tensor
            .strip_prefix("medusa.")
            .and_then(|rest| rest.split_once('.'))
            .filter(|(head, _)| head.parse::<u32>().is_ok())
            .map(|(_, part)| part)
            .unwrap_or_default();
        let numbered = |prefix: &str, suffix: &str| {
            part.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix))
                .is_some_and(|n| n.parse::<u32>().is_ok())
        };
        Ok(match part {
            "root.weight" => token_input,
            "proj.weight" => TensorRule::WIDER_ROWS,
            _ if numbered("block.", ".weight") => TensorRule::BOTH,
            _ if numbered("block.", ".bias") => TensorRule::WIDER_ROWS,
            _ if numbered("path.", ".weight") => token_input,
            _ => {
                return Err(EngineError::Heads(format!(
                    "{}: unknown tensor {tensor}",
                    input.display()
                )))
            }
        })
    };
    widen_gguf(&file, output, factor, &values, rule, progress).map(|_| ())
}
