//! A cap on the threads of the CPU decodes one thread of the engine makes, which the engine
//! lowers while other work holds cores (see `core_share`).
//!
//! llama.cpp sets a context's thread count on its CPU backend before every decode, through the
//! function it looked up in the CPU registry when the context was made, on the thread that
//! decodes, and offers no way to change a context's count after that. So the registry's lookup
//! is wrapped once per process (csrc/cpu_device.c): contexts made after that get a setter that
//! passes on the smaller of their own count and the calling thread's cap. The cap is the
//! thread's own, so that an engine with a thread count asked for keeps it beside one that
//! follows the load. Which thread sums a row does not change what it sums, so the cap changes
//! no result, exact mode included.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use llama_cpp_sys_2::{ggml_backend_reg_t, ggml_backend_t};

use crate::error::EngineError;

type GetProcAddress = unsafe extern "C" fn(ggml_backend_reg_t, *const c_char) -> *mut c_void;
type SetNThreads = unsafe extern "C" fn(ggml_backend_t, c_int);

#[cfg(cpu_device_hooks)]
unsafe extern "C" {
    /// The registry's function lookup (csrc/cpu_device.c).
    fn medusa_reg_get_proc_address(reg: ggml_backend_reg_t) -> Option<GetProcAddress>;
    /// Replaces the registry's function lookup (csrc/cpu_device.c).
    fn medusa_reg_set_proc_address(reg: ggml_backend_reg_t, get_proc_address: GetProcAddress);
}

/// The name llama.cpp looks the thread setter up by.
const SET_N_THREADS: &CStr = c"ggml_backend_set_n_threads";

thread_local! {
    /// Most threads a CPU decode made on this thread may use; 0 for no cap.
    static CAP: Cell<usize> = const { Cell::new(0) };
}
#[cfg_attr(not(cpu_device_hooks), allow(dead_code))]
static ORIGINAL_LOOKUP: OnceLock<GetProcAddress> = OnceLock::new();
#[cfg_attr(not(cpu_device_hooks), allow(dead_code))]
static ORIGINAL_SET: OnceLock<SetNThreads> = OnceLock::new();
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

#[cfg_attr(not(cpu_device_hooks), allow(dead_code))]
unsafe extern "C" fn lookup(reg: ggml_backend_reg_t, name: *const c_char) -> *mut c_void {
    let Some(original) = ORIGINAL_LOOKUP.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the registry's own lookup with the arguments ggml gave us.
    let found = unsafe { original(reg, name) };
    // SAFETY: ggml passes a NUL-terminated name.
    if found.is_null() || name.is_null() || unsafe { CStr::from_ptr(name) } != SET_N_THREADS {
        return found;
    }
    // SAFETY: the CPU registry's `ggml_backend_set_n_threads` has this signature
    // (`ggml_backend_set_n_threads_t` in ggml-backend.h).
    let setter = unsafe { std::mem::transmute::<*mut c_void, SetNThreads>(found) };
    ORIGINAL_SET.get_or_init(|| setter);
    capped_set_n_threads as *mut c_void
}

#[cfg_attr(not(cpu_device_hooks), allow(dead_code))]
unsafe extern "C" fn capped_set_n_threads(backend: ggml_backend_t, n_threads: c_int) {
    if let Some(original) = ORIGINAL_SET.get() {
        // SAFETY: the original setter with the backend llama.cpp gave us.
        unsafe { original(backend, capped(n_threads, CAP.get())) };
    }
}

/// `n_threads` under `cap` (0: no cap).
fn capped(n_threads: c_int, cap: usize) -> c_int {
    match cap {
        0 => n_threads,
        cap => n_threads.min(c_int::try_from(cap).unwrap_or(c_int::MAX)),
    }
}

#[cfg(cpu_device_hooks)]
fn wrap_lookup() -> Result<(), String> {
    // SAFETY: the registry of the CPU device is a static that lives as long as the process;
    // its lookup is replaced once, from `INSTALLED`, after the original is stored.
    unsafe {
        let dev = llama_cpp_sys_2::ggml_backend_dev_by_type(
            llama_cpp_sys_2::GGML_BACKEND_DEVICE_TYPE_CPU,
        );
        if dev.is_null() {
            return Err("llama.cpp has no CPU device".into());
        }
        let reg = llama_cpp_sys_2::ggml_backend_dev_backend_reg(dev);
        if reg.is_null() {
            return Err("the CPU device has no registry".into());
        }
        let original = medusa_reg_get_proc_address(reg)
            .ok_or_else(|| "the CPU registry has no function lookup".to_string())?;
        ORIGINAL_LOOKUP
            .set(original)
            .map_err(|_| "the CPU registry was wrapped twice".to_string())?;
        medusa_reg_set_proc_address(reg, lookup);
    }
    Ok(())
}

#[cfg(not(cpu_device_hooks))]
fn wrap_lookup() -> Result<(), String> {
    Err(format!(
        "this build could not compile against ggml's sources: {}",
        env!("MEDUSA_CPU_DEVICE_HOOKS_UNAVAILABLE")
    ))
}

/// Puts the cap in place for the contexts made from now on.
pub(crate) fn install() -> Result<(), EngineError> {
    INSTALLED
        .get_or_init(wrap_lookup)
        .clone()
        .map_err(|e| EngineError::Context(format!("thread cap unavailable: {e}")))
}

/// Caps the CPU decodes this thread makes at `threads` from its next decode on.
pub(crate) fn set(threads: usize) {
    CAP.set(threads);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_get_a_setter_that_passes_the_cap_on() {
        install().unwrap();
        // SAFETY: looked up as llama.cpp does when it makes a context.
        let found = unsafe {
            let dev = llama_cpp_sys_2::ggml_backend_dev_by_type(
                llama_cpp_sys_2::GGML_BACKEND_DEVICE_TYPE_CPU,
            );
            let reg = llama_cpp_sys_2::ggml_backend_dev_backend_reg(dev);
            llama_cpp_sys_2::ggml_backend_reg_get_proc_address(reg, SET_N_THREADS.as_ptr())
        };
        assert_eq!(found, capped_set_n_threads as *mut c_void);
        assert!(ORIGINAL_SET.get().is_some());
        assert_eq!(capped(4, 0), 4);
        assert_eq!(capped(4, 1), 1);
        assert_eq!(capped(4, 8), 4);
        assert_eq!(capped(4, usize::MAX), 4);
    }
}
