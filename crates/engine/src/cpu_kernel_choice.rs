//! Which CPU kernels a decode of several tokens runs with: the setting, its names and what it
//! means in words. Turning them on is llama.cpp's business (`llama::cpu_kernels`).

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// The CPU kernels for decodes of several tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum CpuKernels {
    /// Q4_1 and Q8_0 weight blocks unpacked once for up to 4 tokens (patches/ggml), with the
    /// best instruction set the CPU has.
    #[default]
    Batched,
    /// The batched kernels held to AVX2 on any CPU.
    BatchedAvx2,
    /// ggml's own: one dot product per weight row per token.
    Stock,
}

impl CpuKernels {
    /// Whether these are the patch's batched kernels, with whichever instruction set.
    pub fn is_batched(self) -> bool {
        self != Self::Stock
    }

    /// In words, for `medusa info` and the bench.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Batched => {
                "batched: Q4_1 and Q8_0 weight blocks unpacked once for up to 4 tokens"
            }
            Self::BatchedAvx2 => {
                "batched, AVX2 only: Q4_1 and Q8_0 weight blocks unpacked once for up to 4 tokens"
            }
            Self::Stock => "stock: one dot product per weight row per token",
        }
    }
}

impl std::str::FromStr for CpuKernels {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "batched" => Ok(Self::Batched),
            "batched-avx2" | "batched_avx2" => Ok(Self::BatchedAvx2),
            "stock" => Ok(Self::Stock),
            other => Err(format!(
                "'{other}' is not a kind of CPU kernels: batched, batched-avx2 or stock"
            )),
        }
    }
}
