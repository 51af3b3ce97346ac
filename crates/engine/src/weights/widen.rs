//! A model widened with zeros: the same tokens at a bigger model's cost. Speculative decoding
//! pays where an extra token in a batch costs little, which depends on the model's size; this
//! lets the default model be measured at the size of the models people chat with.
//!
//! The hidden size, the FFN and the attention heads grow by a factor k. New weights are zero, so
//! they add nothing to any dot product and the new hidden values stay zero; new heads have zero
//! queries, keys and values, so they add nothing either. RMSNorm is the only place the width
//! enters: its mean is over k times as many values, k times smaller. Dividing eps by k and the
//! norm weights by sqrt(k) gives the same normalized values; for k a power of 4 both are exact
//! in floating point, so the outputs are identical bit for bit.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::EngineError;
use crate::weights::gguf_copy::{widen_gguf, NewValue, TensorRule};
use crate::weights::gguf_file::GgufFile;
use crate::weights::model_file;

/// The factors a model can be widened by.
pub const WIDTH_FACTORS: [u32; 4] = [2, 4, 8, 16];

/// What `widen_model` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct WideModelReport {
    pub input: PathBuf,
    pub output: PathBuf,
    pub factor: u32,
    pub n_embd_before: u32,
    pub n_embd_after: u32,
    pub parameters_before: u64,
    pub parameters_after: u64,
    pub bytes: u64,
    /// True when the widened model computes the very same values (k a power of 4); otherwise
    /// the norms differ by rounding and a near-tie may pick another token.
    pub bit_exact: bool,
}

/// Whether widening by `factor` keeps every value bit for bit (sqrt(k) is a power of two).
pub fn width_is_bit_exact(factor: u32) -> bool {
    factor.is_power_of_two() && factor.trailing_zeros().is_multiple_of(2)
}

pub(crate) fn check_factor(factor: u32) -> Result<(), EngineError> {
    if WIDTH_FACTORS.contains(&factor) {
        return Ok(());
    }
    Err(EngineError::InvalidParameter {
        name: "width",
        message: format!(
            "{factor} is not a width factor; choose one of {}",
            WIDTH_FACTORS.map(|f| f.to_string()).join(", ")
        ),
    })
}

/// The factor norm weights and inputs read at unit RMS are multiplied by: 1 / sqrt(k).
pub(crate) fn norm_scale(factor: u32) -> f32 {
    (factor as f32).sqrt().recip()
}

/// Writes `output` as the llama-architecture model `input` widened `factor` times. The file
/// appears only when complete; `progress` gets (tensors written, tensors in all).
pub fn widen_model(
    input: &Path,
    output: &Path,
    factor: u32,
    progress: impl FnMut(usize, usize),
) -> Result<WideModelReport, EngineError> {
    check_factor(factor)?;
    model_file::inspect(input)?;
    let file = GgufFile::open(input).map_err(|_| EngineError::CorruptModel {
        path: input.to_path_buf(),
    })?;
    let refuse = |reason: String| EngineError::Widen {
        path: input.to_path_buf(),
        reason,
    };
    let arch = file.string("general.architecture").unwrap_or_default();
    if arch != "llama" {
        return Err(refuse(format!(
            "its architecture is '{arch}'; widening is known to keep the outputs only for 'llama' models (such as the default model)"
        )));
    }
    let number = |key: &str| {
        file.u32(&format!("{arch}.{key}"))
            .ok_or_else(|| refuse(format!("{arch}.{key} is missing or not one number")))
    };
    let n_embd = number("embedding_length")?;
    let mut values = vec![
        (
            format!("{arch}.embedding_length"),
            NewValue::U32(n_embd * factor),
        ),
        (
            format!("{arch}.feed_forward_length"),
            NewValue::U32(number("feed_forward_length")? * factor),
        ),
        (
            format!("{arch}.attention.head_count"),
            NewValue::U32(number("attention.head_count")? * factor),
        ),
    ];
    // Absent, it defaults to the head count, which grows with it.
    if let Some(kv_heads) = file.u32(&format!("{arch}.attention.head_count_kv")) {
        values.push((
            format!("{arch}.attention.head_count_kv"),
            NewValue::U32(kv_heads * factor),
        ));
    }
    let eps_key = format!("{arch}.attention.layer_norm_rms_epsilon");
    let eps = file
        .f32(&eps_key)
        .ok_or_else(|| refuse(format!("{eps_key} is missing")))?;
    values.push((eps_key, NewValue::F32(eps / factor as f32)));
    let name = file
        .string("general.name")
        .unwrap_or_else(|| "model".into());
    values.push((
        "general.name".into(),
        NewValue::Str(format!("{name}, {factor}x wide (same tokens)")),
    ));

    let norm = TensorRule::WIDER_ROWS.scaled(norm_scale(factor));
    let rule = |tensor: &str| -> Result<TensorRule, EngineError> {
        let in_block = tensor
            .strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .filter(|(layer, _)| layer.parse::<u32>().is_ok())
            .map(|(_, part)| part);
        Ok(match (tensor, in_block) {
            ("token_embd.weight" | "output.weight", _) => TensorRule::WIDER_ROWS,
            ("output_norm.weight", _) => norm,
            ("rope_freqs.weight", _) => TensorRule::KEEP,
            (_, Some("attn_norm.weight" | "ffn_norm.weight")) => norm,
            (
                _,
                Some(
                    "attn_q.weight" | "attn_k.weight" | "attn_v.weight" | "attn_output.weight"
                    | "ffn_gate.weight" | "ffn_up.weight" | "ffn_down.weight",
                ),
            ) => TensorRule::BOTH,
            _ => {
                return Err(refuse(format!(
                    "it has a tensor {tensor}, which widening does not know how to keep exact"
                )))
            }
        })
    };
    let widened = widen_gguf(&file, output, factor, &values, rule, progress)?;
    Ok(WideModelReport {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        factor,
        n_embd_before: n_embd,
        n_embd_after: n_embd * factor,
        parameters_before: widened.parameters_before,
        parameters_after: widened.parameters_after,
        bytes: widened.bytes,
        bit_exact: width_is_bit_exact(factor),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_four_are_bit_exact() {
        assert!(width_is_bit_exact(4));
        assert!(width_is_bit_exact(16));
        assert!(!width_is_bit_exact(2));
        assert!(!width_is_bit_exact(8));
        assert_eq!(norm_scale(4), 0.5);
        assert_eq!(norm_scale(16), 0.25);
    }

    #[test]
    fn other_factors_are_refused() {
        let err = check_factor(3).unwrap_err();
        assert_eq!(err.code(), "invalid_parameter");
        assert!(err.to_string().contains("2, 4, 8, 16"), "{err}");
        assert!(check_factor(8).is_ok());
    }
}
