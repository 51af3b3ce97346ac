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
//! The kernels are compiled for AVX2 (the build's baseline, so that a package runs on any x86-64
//! CPU from the last decade) and for AVX-512 VNNI, and the patch picks the second where the CPU
//! has it. Both compute the same integer sums and fold them alike, so they give the same bits;
//! `batched-avx2` holds the kernels to AVX2 on any CPU, for comparison.
//!
//! A static build links the switch; a `dynamic-link` build looks it up in the llama.cpp libraries
//! it runs with, which may have been built elsewhere without the patch (then: stock).

use crate::cpu_kernel_choice::CpuKernels;

type SetKernels = unsafe extern "C" fn(bool);
type KernelsOn = unsafe extern "C" fn() -> bool;
type SetIsa = unsafe extern "C" fn(std::ffi::c_int);
type KernelIsa = unsafe extern "C" fn(bool, std::ffi::c_int) -> *const std::ffi::c_char;

/// The patch's switches and what they say: `ggml_cpu_medusa_set_batched_kernels` turns the
/// kernels on or off for the whole process and `ggml_cpu_medusa_batched_kernels` says whether they
/// are on (false where the CPU build has no such kernel: no AVX2 and FMA);
/// `ggml_cpu_medusa_set_kernel_isa` holds them to AVX2 (0) or lets them take the CPU's best (-1),
/// and `ggml_cpu_medusa_kernel_isa` names the instruction set Q4_1 and Q8_0 products run with
/// on this CPU with or without them, asked for one or the other.
#[derive(Clone, Copy)]
struct Switch {
    set: SetKernels,
    on: KernelsOn,
    set_isa: SetIsa,
    isa: KernelIsa,
}

#[cfg(all(batched_kernels, not(feature = "dynamic-link")))]
fn switch() -> Option<Switch> {
    unsafe extern "C" {
        fn ggml_cpu_medusa_set_batched_kernels(enabled: bool);
        fn ggml_cpu_medusa_batched_kernels() -> bool;
        fn ggml_cpu_medusa_set_kernel_isa(isa: std::ffi::c_int);
        fn ggml_cpu_medusa_kernel_isa(
            batched: bool,
            isa: std::ffi::c_int,
        ) -> *const std::ffi::c_char;
    }
    Some(Switch {
        set: ggml_cpu_medusa_set_batched_kernels,
        on: ggml_cpu_medusa_batched_kernels,
        set_isa: ggml_cpu_medusa_set_kernel_isa,
        isa: ggml_cpu_medusa_kernel_isa,
    })
}

#[cfg(feature = "dynamic-link")]
fn switch() -> Option<Switch> {
    use std::sync::OnceLock;
    static FOUND: OnceLock<Option<Switch>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let find = |name: &std::ffi::CStr| {
            // SAFETY: dlsym on the process's loaded libraries with a NUL-terminated name.
            let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!found.is_null()).then_some(found)
        };
        let set = find(c"ggml_cpu_medusa_set_batched_kernels")?;
        let on = find(c"ggml_cpu_medusa_batched_kernels")?;
        let set_isa = find(c"ggml_cpu_medusa_set_kernel_isa")?;
        let isa = find(c"ggml_cpu_medusa_kernel_isa")?;
        // SAFETY: each symbol found is the patch's function of the signature given above.
        unsafe {
            Some(Switch {
                set: std::mem::transmute::<*mut libc::c_void, SetKernels>(set),
                on: std::mem::transmute::<*mut libc::c_void, KernelsOn>(on),
                set_isa: std::mem::transmute::<*mut libc::c_void, SetIsa>(set_isa),
                isa: std::mem::transmute::<*mut libc::c_void, KernelIsa>(isa),
            })
        }
    })
}

#[cfg(not(any(batched_kernels, feature = "dynamic-link")))]
fn switch() -> Option<Switch> {
    None
}

/// The patch's code for "AVX2 only" and for "the CPU's best".
const ISA_AVX2: std::ffi::c_int = 0;
const ISA_BEST: std::ffi::c_int = -1;

/// The patch's code for the instruction set `kernels` ask for.
fn isa_asked(kernels: CpuKernels) -> std::ffi::c_int {
    if kernels == CpuKernels::BatchedAvx2 {
        ISA_AVX2
    } else {
        ISA_BEST
    }
}

/// Asks for `kernels` for every decode from now on and returns the ones in effect: stock where
/// this build or CPU has no batched kernel.
pub fn select(kernels: CpuKernels) -> CpuKernels {
    let Some(switch) = switch() else {
        return CpuKernels::Stock;
    };
    // SAFETY: atomic stores and a load in ggml; decodes running meanwhile take either path,
    // which compute the same bits.
    let on = unsafe {
        (switch.set_isa)(isa_asked(kernels));
        (switch.set)(kernels.is_batched());
        (switch.on)()
    };
    match kernels {
        CpuKernels::BatchedAvx2 if on => CpuKernels::BatchedAvx2,
        _ if on => CpuKernels::Batched,
        _ => CpuKernels::Stock,
    }
}

/// The instruction set products of Q4_1 and Q8_0 weights run with on this CPU under `kernels`
/// (in effect, as [`select`] returns them), in words: the batched kernels' or else the one
/// llama.cpp was built for.
pub fn instruction_set(kernels: CpuKernels) -> String {
    let Some(switch) = switch() else {
        return "as llama.cpp was built".to_owned();
    };
    // SAFETY: a pure function of its arguments and the CPU, returning a static NUL-terminated
    // name.
    let name =
        unsafe { std::ffi::CStr::from_ptr((switch.isa)(kernels.is_batched(), isa_asked(kernels))) };
    instruction_set_in_words(&name.to_string_lossy())
}

/// The patch's short name of an instruction set as people write it.
fn instruction_set_in_words(name: &str) -> String {
    match name {
        "avx512vnni" => "AVX-512 VNNI".to_owned(),
        "avx512" => "AVX-512".to_owned(),
        "avx2" => "AVX2".to_owned(),
        "avx" => "AVX".to_owned(),
        "neon" => "NEON".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_kernels_and_others_are_refused() {
        assert_eq!("batched".parse(), Ok(CpuKernels::Batched));
        assert_eq!("batched-avx2".parse(), Ok(CpuKernels::BatchedAvx2));
        assert_eq!("stock".parse(), Ok(CpuKernels::Stock));
        assert_eq!(
            "fast".parse::<CpuKernels>(),
            Err("'fast' is not a kind of CPU kernels: batched, batched-avx2 or stock".to_owned())
        );
    }

    #[test]
    fn instruction_sets_are_named_as_people_write_them() {
        assert_eq!(instruction_set_in_words("avx512vnni"), "AVX-512 VNNI");
        assert_eq!(instruction_set_in_words("avx2"), "AVX2");
        assert_eq!(instruction_set_in_words("generic"), "generic");
    }
}
