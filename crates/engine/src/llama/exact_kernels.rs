//! Batch-invariant CPU kernels: the same sums whether a token is decoded alone, in a tree or
//! beside other requests.
//!
//! llama.cpp's CPU backend picks kernels by the shape of a decode: one query token with 512 or
//! more cells splits attention across threads and merges the parts; 64 or more query tokens take
//! a tiled attention kernel; llamafile's GEMM replaces ggml's row-by-row dot products for the
//! Q8_0 output matrix. Each sums in its own order, so a token's logits depend on how many tokens
//! were decoded with it. ggml keeps a reference path without any of these (`use_ref`): attention
//! walks each query's cells one by one, matrices are products of rows. llama.cpp creates its CPU
//! backend itself and offers no switch (no context parameter, environment variable or getter for
//! the backend), so the CPU device's backend constructor is wrapped once per process to turn the
//! reference path on for the backends created while exact kernels are asked for. The swap is
//! done in C against ggml's own definition of the device (csrc/exact_kernels.c, see build.rs).

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use llama_cpp_sys_2::{ggml_backend_dev_t, ggml_backend_t};

use crate::error::EngineError;

type InitBackend = unsafe extern "C" fn(ggml_backend_dev_t, *const c_char) -> ggml_backend_t;

#[cfg(exact_kernels)]
unsafe extern "C" {
    /// The device's backend constructor (csrc/exact_kernels.c).
    fn medusa_exact_get_init_backend(dev: ggml_backend_dev_t) -> Option<InitBackend>;
    /// Replaces the device's backend constructor (csrc/exact_kernels.c).
    fn medusa_exact_set_init_backend(dev: ggml_backend_dev_t, init_backend: InitBackend);
}

/// The CPU device's own constructor, set before the wrapper is put in its place.
#[cfg_attr(not(exact_kernels), allow(dead_code))]
static ORIGINAL_INIT: OnceLock<InitBackend> = OnceLock::new();
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
static EXACT: AtomicBool = AtomicBool::new(false);
/// Held from setting `EXACT` until the context is created, so that engines loading at the same
/// time each get the kernels they asked for.
static CREATING: Mutex<()> = Mutex::new(());
/// The last CPU backend the wrapper made and whether it got the reference path.
#[cfg(test)]
static LAST_WRAPPED: Mutex<Option<(usize, bool)>> = Mutex::new(None);

#[cfg_attr(not(exact_kernels), allow(dead_code))]
unsafe extern "C" fn init_backend(
    dev: ggml_backend_dev_t,
    params: *const c_char,
) -> ggml_backend_t {
    let Some(original) = ORIGINAL_INIT.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the original constructor with the arguments ggml gave us.
    let backend = unsafe { original(dev, params) };
    // SAFETY: a CPU backend just created by the CPU device, not yet shared.
    if !backend.is_null() && unsafe { llama_cpp_sys_2::ggml_backend_is_cpu(backend) } {
        let exact = EXACT.load(Ordering::SeqCst);
        unsafe { llama_cpp_sys_2::ggml_backend_cpu_set_use_ref(backend, exact) };
        #[cfg(test)]
        {
            *LAST_WRAPPED.lock().unwrap() = Some((backend as usize, exact));
        }
    }
    backend
}

#[cfg(exact_kernels)]
fn wrap_cpu_device() -> Result<(), String> {
    // SAFETY: the registry's CPU device is a static that lives as long as the process; its
    // constructor is replaced before any context of this process is created (the engine asks
    // for exact kernels before it creates one), and only once, from `INSTALLED`. The original
    // is stored before the wrapper, which calls it, can run.
    unsafe {
        let dev = llama_cpp_sys_2::ggml_backend_dev_by_type(
            llama_cpp_sys_2::GGML_BACKEND_DEVICE_TYPE_CPU,
        );
        if dev.is_null() {
            return Err("llama.cpp has no CPU device".into());
        }
        let original = medusa_exact_get_init_backend(dev)
            .ok_or_else(|| "the CPU device has no backend constructor".to_string())?;
        ORIGINAL_INIT
            .set(original)
            .map_err(|_| "the CPU device was wrapped twice".to_string())?;
        medusa_exact_set_init_backend(dev, init_backend);
    }
    Ok(())
}

#[cfg(not(exact_kernels))]
fn wrap_cpu_device() -> Result<(), String> {
    Err(format!(
        "this build could not compile against ggml's sources: {}",
        env!("MEDUSA_EXACT_KERNELS_UNAVAILABLE")
    ))
}

fn install() -> Result<(), EngineError> {
    INSTALLED
        .get_or_init(wrap_cpu_device)
        .clone()
        .map_err(|e| EngineError::Context(format!("exact kernels unavailable: {e}")))
}

/// Runs `create` (which creates a llama.cpp context) so that its CPU backend uses
/// batch-invariant kernels when `exact`, or llama.cpp's own choice by batch shape otherwise.
pub(crate) fn creating_context<T>(
    exact: bool,
    create: impl FnOnce() -> T,
) -> Result<T, EngineError> {
    // Without the wrapper, CPU backends keep llama.cpp's own kernels, which is all that a
    // context without exact kernels needs.
    if let Err(err) = install() {
        if exact {
            return Err(err);
        }
    }
    let _creating = CREATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    EXACT.store(exact, Ordering::SeqCst);
    Ok(create())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU backend made through ggml's public constructor, as llama.cpp makes a context's.
    fn cpu_backend() -> (ggml_backend_t, Option<(usize, bool)>) {
        // SAFETY: the registry's CPU device; the backend is checked and freed by the caller.
        let backend = unsafe {
            llama_cpp_sys_2::ggml_backend_init_by_type(
                llama_cpp_sys_2::GGML_BACKEND_DEVICE_TYPE_CPU,
                std::ptr::null(),
            )
        };
        (backend, LAST_WRAPPED.lock().unwrap().take())
    }

    /// Fails when the constructor is no longer replaced in the device that ggml dispatches
    /// through, e.g. when ggml changes how a device's backends are made.
    #[test]
    fn cpu_backends_get_the_kernels_asked_for() {
        for exact in [true, false, true] {
            let (backend, wrapped) = creating_context(exact, cpu_backend).unwrap();
            assert!(!backend.is_null());
            assert_eq!(wrapped, Some((backend as usize, exact)));
            // SAFETY: made above, used by nothing else.
            unsafe { llama_cpp_sys_2::ggml_backend_free(backend) };
        }
    }
}
