//! Which matrix kernels ggml's CPU backend runs a decode of several tokens with.
//!
//! Stock ggml multiplies a Q4_1 or Q8_0 weight matrix (the default model's layers and its output
//! matrix) by N tokens as N separate row-by-row dot products, reading and unpacking every block
//! again for each token. This repository's patch to ggml (patches/ggml, applied by the build)
//! adds kernels that unpack each block once for up to 4 tokens and fold every token's sum exactly
//! as the one-token dot product does, so that they change what verifying a drafted tree costs and
//! not one bit of what it computes. The switch is ggml's and so process-wide; the stock path
//! stays selectable for comparison.
//!
//! A static build links the switch; a `dynamic-link` build looks it up in the llama.cpp libraries
//! it runs with, which may have been built elsewhere without the patch (then: stock).

use serde::{Deserialize, Serialize};
use ts_rs::TS;

/// The CPU kernels for decodes of several tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum CpuKernels {
    /// Q4_1 and Q8_0 weight blocks unpacked once for up to 4 tokens (patches/ggml).
    #[default]
    Batched,
    /// ggml's own: one dot product per weight row per token.
    Stock,
}

impl CpuKernels {
    /// In words, for `medusa info` and the bench.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Batched => {
                "batched: Q4_1 and Q8_0 weight blocks unpacked once for up to 4 tokens"
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
            "stock" => Ok(Self::Stock),
            other => Err(format!(
                "'{other}' is not a kind of CPU kernels: batched or stock"
            )),
        }
    }
}

type SetKernels = unsafe extern "C" fn(bool);
type KernelsOn = unsafe extern "C" fn() -> bool;

/// The patch's switch and its state: `ggml_cpu_medusa_set_batched_kernels` turns the kernels on
/// or off for the whole process, `ggml_cpu_medusa_batched_kernels` says whether they are on (false
/// where the CPU build has no such kernel: no AVX2 and FMA).
#[cfg(all(batched_kernels, not(feature = "dynamic-link")))]
fn switch() -> Option<(SetKernels, KernelsOn)> {
    unsafe extern "C" {
        fn ggml_cpu_medusa_set_batched_kernels(enabled: bool);
        fn ggml_cpu_medusa_batched_kernels() -> bool;
    }
    Some((
        ggml_cpu_medusa_set_batched_kernels,
        ggml_cpu_medusa_batched_kernels,
    ))
}

#[cfg(feature = "dynamic-link")]
fn switch() -> Option<(SetKernels, KernelsOn)> {
    use std::sync::OnceLock;
    static FOUND: OnceLock<Option<(SetKernels, KernelsOn)>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: dlsym on the process's loaded libraries with NUL-terminated names; each symbol
        // found is the patch's function of the signature given above.
        unsafe {
            let set = libc::dlsym(
                libc::RTLD_DEFAULT,
                c"ggml_cpu_medusa_set_batched_kernels".as_ptr(),
            );
            let on = libc::dlsym(
                libc::RTLD_DEFAULT,
                c"ggml_cpu_medusa_batched_kernels".as_ptr(),
            );
            (!set.is_null() && !on.is_null()).then(|| {
                (
                    std::mem::transmute::<*mut libc::c_void, SetKernels>(set),
                    std::mem::transmute::<*mut libc::c_void, KernelsOn>(on),
                )
            })
        }
    })
}

#[cfg(not(any(batched_kernels, feature = "dynamic-link")))]
fn switch() -> Option<(SetKernels, KernelsOn)> {
    None
}

/// Asks for `kernels` for every decode from now on and returns the ones in effect: stock where
/// this build or CPU has no batched kernel.
pub fn select(kernels: CpuKernels) -> CpuKernels {
    if let Some((set, _)) = switch() {
        // SAFETY: an atomic store in ggml; decodes running meanwhile take either path, which
        // compute the same bits.
        unsafe { set(kernels == CpuKernels::Batched) };
    }
    in_effect()
}

/// The kernels decodes run with now.
fn in_effect() -> CpuKernels {
    match switch() {
        // SAFETY: an atomic load in ggml.
        Some((_, on)) if unsafe { on() } => CpuKernels::Batched,
        _ => CpuKernels::Stock,
    }
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
