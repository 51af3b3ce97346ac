//! Batch-invariant CPU kernels: the same sums whether a token is decoded alone, in a tree or
//! beside other requests.
//!
//! llama.cpp's CPU backend picks kernels by the shape of a decode: one query token with 512 or
//! more cells splits attention across threads and merges the parts; 64 or more query tokens take
//! a tiled attention kernel; llamafile's GEMM replaces ggml's row-by-row dot products for the
//! Q8_0 output matrix. Each sums in its own order, so a token's logits depend on how many tokens
//! were decoded with it. ggml keeps a reference path without any of these (`use_ref`): attention
//! walks each query's cells one by one, matrices are products of rows. llama.cpp creates its CPU
//! backend itself and offers no switch, so the CPU device's backend constructor is wrapped once per
//! process to turn the reference path on for the backends created while exact kernels are asked
//! for.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use llama_cpp_sys_2::{ggml_backend_dev_t, ggml_backend_t};

use crate::error::EngineError;

type InitBackend = unsafe extern "C" fn(ggml_backend_dev_t, *const c_char) -> ggml_backend_t;

/// The head of ggml's `struct ggml_backend_device` (ggml-backend-impl.h): its interface starts with
/// five functions and then the backend constructor. Only this prefix is read or written.
#[repr(C)]
struct DeviceHead {
    get_name: *const c_void,
    get_description: *const c_void,
    get_memory: *const c_void,
    get_type: *const c_void,
    get_props: *const c_void,
    init_backend: Option<InitBackend>,
}

static ORIGINAL_INIT: OnceLock<Result<InitBackend, String>> = OnceLock::new();
static EXACT: AtomicBool = AtomicBool::new(false);
/// Held from setting `EXACT` until the context is created, so that engines loading at the same
/// time each get the kernels they asked for.
static CREATING: Mutex<()> = Mutex::new(());

unsafe extern "C" fn init_backend(
    dev: ggml_backend_dev_t,
    params: *const c_char,
) -> ggml_backend_t {
    let Some(Ok(original)) = ORIGINAL_INIT.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the original constructor with the arguments ggml gave us.
    let backend = unsafe { original(dev, params) };
    // SAFETY: a CPU backend just created by the CPU device, not yet shared.
    if !backend.is_null() && unsafe { llama_cpp_sys_2::ggml_backend_is_cpu(backend) } {
        unsafe {
            llama_cpp_sys_2::ggml_backend_cpu_set_use_ref(backend, EXACT.load(Ordering::SeqCst))
        };
    }
    backend
}

fn install() -> Result<(), EngineError> {
    ORIGINAL_INIT
        .get_or_init(|| {
            // SAFETY: the registry's CPU device is a static that lives as long as the process;
            // its constructor is swapped before any context of this process is created (the
            // engine asks for exact kernels before it creates one), and only from this OnceLock.
            unsafe {
                let dev = llama_cpp_sys_2::ggml_backend_dev_by_type(
                    llama_cpp_sys_2::GGML_BACKEND_DEVICE_TYPE_CPU,
                );
                if dev.is_null() {
                    return Err("llama.cpp has no CPU device".into());
                }
                let head = dev.cast::<DeviceHead>();
                let original = (*head)
                    .init_backend
                    .ok_or_else(|| "the CPU device has no backend constructor".to_string())?;
                (*head).init_backend = Some(init_backend);
                Ok(original)
            }
        })
        .as_ref()
        .map(|_| ())
        .map_err(|e| EngineError::Context(format!("exact kernels unavailable: {e}")))
}

/// Runs `create` (which creates a llama.cpp context) so that its CPU backend uses
/// batch-invariant kernels when `exact`, or llama.cpp's own choice by batch shape otherwise.
pub(crate) fn creating_context<T>(
    exact: bool,
    create: impl FnOnce() -> T,
) -> Result<T, EngineError> {
    install()?;
    let _creating = CREATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    EXACT.store(exact, Ordering::SeqCst);
    Ok(create())
}
