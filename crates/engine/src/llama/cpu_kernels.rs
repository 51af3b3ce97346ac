//! Which matrix kernels ggml's CPU backend runs a decode of several tokens with.
//!
//! Stock ggml multiplies a Q4_1 weight matrix by N tokens as N separate row-by-row dot products,
//! unpacking every 4-bit block again for each token. This repository's patch to ggml
//! (patches/ggml, applied by the build) adds a kernel that unpacks each block once for up to 4
//! tokens and folds every token's sum exactly as the one-token dot product does, so that it
//! changes what verifying a drafted tree costs and not one bit of what it computes. The switch
//! is ggml's and so process-wide; the stock path stays selectable for comparison.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// The CPU kernels for decodes of several tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum CpuKernels {
    /// Q4_1 weight blocks unpacked once for up to 4 tokens (patches/ggml).
    #[default]
    Batched,
    /// ggml's own: one dot product per weight row per token.
    Stock,
}

impl CpuKernels {
    /// In words, for `medusa info` and the bench.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Batched => "batched: Q4_1 weight blocks unpacked once for up to 4 tokens",
            Self::Stock => "stock: one dot product per weight row per token",
        }
    }
}

impl std::str::FromStr for CpuKernels {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "batched" => Ok(Self::Batched),
            "stock" => Ok(Self::Stock),
            other => Err(format!(
                "'{other}' is not a kind of CPU kernels: batched or stock"
            )),
        }
    }
}

#[cfg(batched_kernels)]
unsafe extern "C" {
    /// Turns the patched kernels on or off for the whole process (patches/ggml).
    fn ggml_cpu_medusa_set_batched_kernels(enabled: bool);
    /// Whether they are on: false where this CPU build has no such kernel (no AVX2 and FMA).
    fn ggml_cpu_medusa_batched_kernels() -> bool;
}

/// Asks for `kernels` for every decode from now on and returns the ones in effect: stock where
/// this build or CPU has no batched kernel.
pub fn select(kernels: CpuKernels) -> CpuKernels {
    #[cfg(batched_kernels)]
    // SAFETY: an atomic store in ggml; decodes running meanwhile take either path, which
    // compute the same bits.
    unsafe {
        ggml_cpu_medusa_set_batched_kernels(kernels == CpuKernels::Batched);
    }
    #[cfg(not(batched_kernels))]
    let _ = kernels;
    in_effect()
}

/// The kernels decodes run with now.
pub fn in_effect() -> CpuKernels {
    #[cfg(batched_kernels)]
    // SAFETY: an atomic load in ggml.
    if unsafe { ggml_cpu_medusa_batched_kernels() } {
        return CpuKernels::Batched;
    }
    CpuKernels::Stock
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_kernels_and_others_are_refused() {
        assert_eq!("batched".parse(), Ok(CpuKernels::Batched));
        assert_eq!("stock".parse(), Ok(CpuKernels::Stock));
        assert_eq!(
            "fast".parse::<CpuKernels>(),
            Err("'fast' is not a kind of CPU kernels: batched or stock".to_owned())
        );
    }
}
