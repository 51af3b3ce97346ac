//! Requantizing a GGUF model with llama.cpp's quantizer.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::error::EngineError;
use crate::llama_process::{
    backend, clear_recent_errors, take_recent_errors, watch_tensor_progress,
};
use crate::weights::model_file::{self, partial_path};

/// Weight formats llama.cpp can write, by their usual names and llama.cpp `llama_ftype` values.
const FILE_TYPES: &[(&str, u32)] = &[
    ("f32", 0),
    ("f16", 1),
    ("q4_0", 2),
    ("q4_1", 3),
    ("q8_0", 7),
    ("q5_0", 8),
    ("q5_1", 9),
    ("q2_k", 10),
    ("q3_k_s", 11),
    ("q3_k_m", 12),
    ("q3_k_l", 13),
    ("q4_k_s", 14),
    ("q4_k_m", 15),
    ("q5_k_s", 16),
    ("q5_k_m", 17),
    ("q6_k", 18),
    ("iq4_nl", 25),
    ("iq4_xs", 30),
    ("bf16", 32),
];

/// Formats that can be produced without an importance matrix.
pub fn quantize_type_names() -> impl Iterator<Item = &'static str> {
    FILE_TYPES
        .iter()
        .map(|(name, _)| *name)
        .filter(|n| *n != "f32")
}

/// "Q4_1" for llama.cpp's file type 3, and so on.
pub fn file_type_name(ftype: u32) -> String {
    FILE_TYPES
        .iter()
        .find(|(_, id)| *id == ftype)
        .map_or_else(|| format!("type {ftype}"), |(name, _)| name.to_uppercase())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantType(u32);

impl QuantType {
    /// "Q4_0", and so on.
    pub fn name(self) -> String {
        file_type_name(self.0)
    }
}

impl std::str::FromStr for QuantType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.to_ascii_lowercase();
        FILE_TYPES
            .iter()
            .find(|(name, _)| *name == wanted && *name != "f32")
            .map(|(_, id)| QuantType(*id))
            .ok_or_else(|| EngineError::InvalidParameter {
                name: "type",
                message: format!(
                    "unknown quantization type '{s}'; choose one of: {}",
                    quantize_type_names().collect::<Vec<_>>().join(", ")
                ),
            })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct QuantizeReport {
    pub input: PathBuf,
    pub output: PathBuf,
    pub file_type: String,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub seconds: f64,
}

/// Writes `output` as `input` requantized to `kind`. The file appears only when complete.
/// `progress` receives (tensors done, tensors total).
pub fn quantize(
    input: &Path,
    output: &Path,
    kind: QuantType,
    threads: usize,
    progress: impl FnMut(usize, usize) + Send + 'static,
) -> Result<QuantizeReport, EngineError> {
    model_file::inspect(input)?;
    let same_file =
        output.exists() && std::fs::canonicalize(input).ok() == std::fs::canonicalize(output).ok();
    if same_file {
        return Err(EngineError::InvalidParameter {
            name: "out",
            message: "the output must not overwrite the input model".into(),
        });
    }
    backend()?;
    let partial = partial_path(output);
    let c_path = |p: &Path| {
        CString::new(p.to_string_lossy().as_bytes()).map_err(|_| EngineError::InvalidParameter {
            name: "path",
            message: format!("{} contains a NUL byte", p.display()),
        })
    };
    let (c_input, c_partial) = (c_path(input)?, c_path(&partial)?);

    // SAFETY: plain-data defaults from llama.cpp.
    let mut params = unsafe { llama_cpp_sys_2::llama_model_quantize_default_params() };
    params.nthread = threads as i32;
    params.ftype = kind.0 as _;
    // Shipped models are usually quantized already; requantizing them is the point here.
    params.allow_requantize = true;

    let started = Instant::now();
    clear_recent_errors();
    let status = {
        let _watch = watch_tensor_progress(Box::new(progress));
        // SAFETY: both paths are valid C strings and `params` outlives the call.
        unsafe {
            llama_cpp_sys_2::llama_model_quantize(c_input.as_ptr(), c_partial.as_ptr(), &params)
        }
    };
    if status != 0 {
        let _ = std::fs::remove_file(&partial);
        let errors = take_recent_errors();
        return Err(EngineError::Quantize(if errors.is_empty() {
            format!("llama.cpp returned status {status}")
        } else {
            errors.join("; ")
        }));
    }
    std::fs::rename(&partial, output).map_err(|e| EngineError::io(output, &e))?;
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    Ok(QuantizeReport {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        file_type: file_type_name(kind.0),
        input_bytes: size(input),
        output_bytes: size(output),
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_case_insensitively() {
        assert_eq!("Q4_0".parse::<QuantType>().unwrap(), QuantType(2));
        assert_eq!("q4_k_m".parse::<QuantType>().unwrap(), QuantType(15));
    }

    #[test]
    fn unknown_type_lists_choices() {
        let err = "q9".parse::<QuantType>().unwrap_err();
        assert!(err.to_string().contains("q4_k_m"), "{err}");
    }

    #[test]
    fn names_file_types() {
        assert_eq!(file_type_name(3), "Q4_1");
        assert_eq!(file_type_name(99), "type 99");
    }
}
