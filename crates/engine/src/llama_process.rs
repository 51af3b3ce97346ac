//! The process-wide llama.cpp backend and its log routing.
//!
//! llama.cpp may be initialised once per process, so every context shares this backend. Its log
//! lines go to `tracing` instead of stderr; the last error lines are kept so that a failed model
//! load can say why, and quantization progress is read from the per-tensor lines.

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, OnceLock};

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_sys_2::ggml_log_level;

use crate::error::EngineError;

static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();

pub fn backend() -> Result<&'static LlamaBackend, EngineError> {
    BACKEND
        .get_or_init(|| {
            // SAFETY: installs a plain C callback with no user data; the callback only touches
            // the statics below.
            unsafe { llama_cpp_sys_2::llama_log_set(Some(log_callback), std::ptr::null_mut()) };
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| EngineError::Context(format!("llama.cpp backend init failed: {e}")))
}

struct LogState {
    partial: String,
    recent_errors: VecDeque<String>,
    progress: Option<Box<dyn FnMut(usize, usize) + Send>>,
}

static LOG: Mutex<LogState> = Mutex::new(LogState {
    partial: String::new(),
    recent_errors: VecDeque::new(),
    progress: None,
});

const RECENT_ERRORS_KEPT: usize = 8;

unsafe extern "C" fn log_callback(level: ggml_log_level, text: *const c_char, _user: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for this call.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let Ok(mut state) = LOG.lock() else { return };
    // Lines may arrive in pieces (a CONT level continues the previous line).
    state.partial.push_str(&text);
    while let Some(newline) = state.partial.find('\n') {
        let line: String = state.partial.drain(..=newline).collect();
        let line = line.trim_end();
        if !line.is_empty() {
            handle_line(&mut state, level, line);
        }
    }
}

fn handle_line(state: &mut LogState, level: ggml_log_level, line: &str) {
    match level {
        llama_cpp_sys_2::GGML_LOG_LEVEL_ERROR => {
            tracing::warn!(target: "llama_cpp", "{line}");
            if state.recent_errors.len() == RECENT_ERRORS_KEPT {
                state.recent_errors.pop_front();
            }
            state.recent_errors.push_back(line.to_owned());
        }
        llama_cpp_sys_2::GGML_LOG_LEVEL_WARN => tracing::debug!(target: "llama_cpp", "{line}"),
        _ => tracing::trace!(target: "llama_cpp", "{line}"),
    }
    if let Some((done, total)) = parse_tensor_progress(line) {
        if let Some(progress) = state.progress.as_mut() {
            progress(done, total);
        }
    }
}

/// Reads llama.cpp's quantizer lines, which begin `[  12/ 272] tensor.name ...`.
fn parse_tensor_progress(line: &str) -> Option<(usize, usize)> {
    let inner = line.strip_prefix('[')?.split(']').next()?;
    let (done, total) = inner.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// Forgets earlier error lines, so that `take_recent_errors` reports only what follows.
pub(crate) fn clear_recent_errors() {
    if let Ok(mut state) = LOG.lock() {
        state.recent_errors.clear();
    }
}

pub(crate) fn take_recent_errors() -> Vec<String> {
    LOG.lock()
        .map(|mut state| state.recent_errors.drain(..).collect())
        .unwrap_or_default()
}

/// Routes per-tensor quantization progress to `progress` until the returned guard drops.
pub(crate) fn watch_tensor_progress(
    progress: Box<dyn FnMut(usize, usize) + Send>,
) -> ProgressGuard {
    if let Ok(mut state) = LOG.lock() {
        state.progress = Some(progress);
    }
    ProgressGuard
}

pub(crate) struct ProgressGuard;

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        if let Ok(mut state) = LOG.lock() {
            state.progress = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_quantizer_progress_lines() {
        assert_eq!(
            parse_tensor_progress("[  12/ 272]        blk.0.attn_k.weight - [576, 192]"),
            Some((12, 272))
        );
        assert_eq!(parse_tensor_progress("llama_model_loader: loaded"), None);
        assert_eq!(parse_tensor_progress("[abc/def]"), None);
    }
}
