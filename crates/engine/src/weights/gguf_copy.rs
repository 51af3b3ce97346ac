//! Copying a GGUF file with some of its tensors widened by zeros: the machinery that the model
//! and heads wideners share. Each tensor's new shape and values follow a rule per tensor; the
//! metadata is copied with a few values replaced. Tensors are streamed one at a time, so a file
//! many times the input's size needs little memory.

use std::ffi::CString;
use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;

use half::f16;
use llama_cpp_sys_2::{ggml_context, ggml_type, gguf_context};

use crate::error::EngineError;
use crate::weights::gguf_file::GgufFile;
use crate::weights::model_file::partial_path;

/// How one tensor changes when its file is widened by a factor `k`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TensorRule {
    /// Its rows get `k` times as many values, the new ones zero.
    pub wider_rows: bool,
    /// It gets `k` times as many rows, the new ones zero (only for matrices).
    pub more_rows: bool,
    /// Its existing values are multiplied by this.
    pub scale: Option<f32>,
}

impl TensorRule {
    pub const KEEP: Self = Self {
        wider_rows: false,
        more_rows: false,
        scale: None,
    };
    pub const WIDER_ROWS: Self = Self {
        wider_rows: true,
        more_rows: false,
        scale: None,
    };
    pub const BOTH: Self = Self {
        wider_rows: true,
        more_rows: true,
        scale: None,
    };

    pub fn scaled(self, by: f32) -> Self {
        Self {
            scale: Some(by),
            ..self
        }
    }
}

/// A metadata value to set in the copy.
pub(crate) enum NewValue {
    U32(u32),
    F32(f32),
    Str(String),
}

/// What was written: the parameter count before and after.
pub(crate) struct Widened {
    pub parameters_before: u64,
    pub parameters_after: u64,
    pub bytes: u64,
}

fn widen_err(path: &Path, reason: impl Into<String>) -> EngineError {
    EngineError::Widen {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

struct OwnedGguf(*mut gguf_context);
impl Drop for OwnedGguf {
    fn drop(&mut self) {
        // SAFETY: made by gguf_init_empty and freed once.
        unsafe { llama_cpp_sys_2::gguf_free(self.0) };
    }
}

struct OwnedGgml(*mut ggml_context);
impl Drop for OwnedGgml {
    fn drop(&mut self) {
        // SAFETY: made by ggml_init and freed once.
        unsafe { llama_cpp_sys_2::ggml_free(self.0) };
    }
}

/// Writes `output` as `source` with every tensor changed by `rule(name)` and the metadata in
/// `values` set. The file appears at `output` only when complete. `progress` gets (tensors
/// written, tensors in all).
pub(crate) fn widen_gguf(
    source: &GgufFile,
    output: &Path,
    factor: u32,
    values: &[(String, NewValue)],
    rule: impl Fn(&str) -> Result<TensorRule, EngineError>,
    mut progress: impl FnMut(usize, usize),
) -> Result<Widened, EngineError> {
    let input = source.path();
    let k = i64::from(factor);
    let tensors = source.tensors();
    let mut plans = Vec::with_capacity(tensors.len());
    let (mut before, mut after) = (0u64, 0u64);
    for (name, ty, ne) in &tensors {
        let rule = rule(name)?;
        let matrix = ne[2] == 1 && ne[3] == 1;
        if (rule.more_rows && (!matrix || ne[1] == 1)) || (rule.wider_rows && !matrix) {
            return Err(widen_err(
                input,
                format!("tensor {name} ({ne:?}) is not a matrix or vector"),
            ));
        }
        let mut new_ne = *ne;
        if rule.wider_rows {
            new_ne[0] *= k;
        }
        if rule.more_rows {
            new_ne[1] *= k;
        }
        // SAFETY: plain lookups in ggml's static type tables.
        let block = unsafe { llama_cpp_sys_2::ggml_blck_size(*ty) };
        if block <= 0 || ne[0] % block != 0 {
            return Err(widen_err(
                input,
                format!("tensor {name} has rows that are not whole blocks"),
            ));
        }
        if let Some(by) = rule.scale {
            scale_row(*ty, &mut [], by)
                .map_err(|reason| widen_err(input, format!("tensor {name}: {reason}")))?;
        }
        before += ne.iter().product::<i64>() as u64;
        after += new_ne.iter().product::<i64>() as u64;
        plans.push((name.clone(), *ty, *ne, new_ne, rule));
    }

    // The header: the source's metadata with the new values, and each tensor's new shape.
    // SAFETY: gguf_init_empty returns a fresh context (null only when out of memory).
    let header = OwnedGguf(unsafe { llama_cpp_sys_2::gguf_init_empty() });
    if header.0.is_null() {
        return Err(widen_err(input, "ggml could not allocate a GGUF context"));
    }
    // SAFETY: both contexts are valid; ggml copies every key and value.
    unsafe { llama_cpp_sys_2::gguf_set_kv(header.0, source.as_ptr()) };
    for (key, value) in values {
        let c_key = CString::new(key.as_str()).map_err(|_| widen_err(input, "key with NUL"))?;
        // SAFETY: a valid context and C strings; ggml copies them.
        unsafe {
            match value {
                NewValue::U32(v) => llama_cpp_sys_2::gguf_set_val_u32(header.0, c_key.as_ptr(), *v),
                NewValue::F32(v) => llama_cpp_sys_2::gguf_set_val_f32(header.0, c_key.as_ptr(), *v),
                NewValue::Str(v) => {
                    let c_value =
                        CString::new(v.as_str()).map_err(|_| widen_err(input, "value with NUL"))?;
                    llama_cpp_sys_2::gguf_set_val_str(header.0, c_key.as_ptr(), c_value.as_ptr())
                }
            }
        }
    }
    let params = llama_cpp_sys_2::ggml_init_params {
        // SAFETY: a constant of ggml's.
        mem_size: (plans.len() + 1) * unsafe { llama_cpp_sys_2::ggml_tensor_overhead() },
        mem_buffer: std::ptr::null_mut(),
        no_alloc: true,
    };
    // SAFETY: a descriptor-only context (no tensor data is allocated).
    let shapes = OwnedGgml(unsafe { llama_cpp_sys_2::ggml_init(params) });
    if shapes.0.is_null() {
        return Err(widen_err(input, "ggml could not allocate a context"));
    }
    for (name, ty, _, new_ne, _) in &plans {
        let c_name = CString::new(name.as_str()).map_err(|_| widen_err(input, "name with NUL"))?;
        // SAFETY: the context has room for every tensor descriptor; gguf copies the tensor.
        unsafe {
            let tensor = llama_cpp_sys_2::ggml_new_tensor(shapes.0, *ty, 4, new_ne.as_ptr());
            llama_cpp_sys_2::ggml_set_name(tensor, c_name.as_ptr());
            llama_cpp_sys_2::gguf_add_tensor(header.0, tensor);
        }
    }
    // SAFETY: valid context; the buffer is exactly the size ggml reports.
    let meta = unsafe {
        let size = llama_cpp_sys_2::gguf_get_meta_size(header.0);
        let mut meta = vec![0u8; size];
        llama_cpp_sys_2::gguf_get_meta_data(header.0, meta.as_mut_ptr().cast());
        meta
    };

    let partial = partial_path(output);
    let io = |e: std::io::Error| EngineError::io(output, &e);
    let written = (|| {
        let mut w = BufWriter::new(File::create(&partial).map_err(io)?);
        w.write_all(&meta).map_err(io)?;
        let data_start = meta.len() as u64;
        for (id, (name, ty, ne, new_ne, rule)) in plans.iter().enumerate() {
            // SAFETY: `id` is below the header's tensor count.
            let offset = unsafe { llama_cpp_sys_2::gguf_get_tensor_offset(header.0, id as i64) };
            let here = w.stream_position().map_err(io)?;
            write_zeros(&mut w, data_start + offset as u64 - here).map_err(io)?;
            let (_, mut data) = source.tensor_bytes(name)?;
            // SAFETY: plain lookups in ggml's static type tables.
            let (row, new_row) = unsafe {
                (
                    llama_cpp_sys_2::ggml_row_size(*ty, ne[0]),
                    llama_cpp_sys_2::ggml_row_size(*ty, new_ne[0]),
                )
            };
            let rows = (ne[1] * ne[2] * ne[3]) as usize;
            if data.len() != row * rows {
                return Err(widen_err(
                    input,
                    format!("tensor {name} has the wrong size"),
                ));
            }
            for chunk in data.chunks_exact_mut(row) {
                if let Some(by) = rule.scale {
                    scale_row(*ty, chunk, by)
                        .map_err(|reason| widen_err(input, format!("tensor {name}: {reason}")))?;
                }
                w.write_all(chunk).map_err(io)?;
                write_zeros(&mut w, (new_row - row) as u64).map_err(io)?;
            }
            let new_rows = (new_ne[1] * new_ne[2] * new_ne[3]) as usize;
            write_zeros(&mut w, ((new_rows - rows) * new_row) as u64).map_err(io)?;
            progress(id + 1, plans.len());
        }
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        file.metadata().map(|m| m.len()).map_err(io)
    })();
    match written {
        Ok(bytes) => {
            std::fs::rename(&partial, output).map_err(io)?;
            Ok(Widened {
                parameters_before: before,
                parameters_after: after,
                bytes,
            })
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

fn write_zeros(w: &mut impl Write, mut count: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    while count > 0 {
        let n = count.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..n])?;
        count -= n as u64;
    }
    Ok(())
}

/// Multiplies every value of one row in `ty`'s encoding by `by`: floats directly, and the block
/// formats whose values are `d * q (+ m)` through their f16 scales, so the quantized values stay
/// as they are (a power of two scales them exactly). Called with an empty row to check `ty`.
fn scale_row(ty: ggml_type, row: &mut [u8], by: f32) -> Result<(), String> {
    let scale_f16 = |bytes: &mut [u8]| {
        let v = f16::from_le_bytes([bytes[0], bytes[1]]).to_f32() * by;
        bytes.copy_from_slice(&f16::from_f32(v).to_le_bytes());
    };
    // (block bytes, offsets of the f16 scales within a block)
    let (block, fields): (usize, &[usize]) = match ty {
        llama_cpp_sys_2::GGML_TYPE_F32 => {
            for value in row.chunks_exact_mut(4) {
                let v = f32::from_le_bytes([value[0], value[1], value[2], value[3]]) * by;
                value.copy_from_slice(&v.to_le_bytes());
            }
            return Ok(());
        }
        llama_cpp_sys_2::GGML_TYPE_F16 => (2, &[0]),
        llama_cpp_sys_2::GGML_TYPE_Q4_0 => (18, &[0]),
        llama_cpp_sys_2::GGML_TYPE_Q4_1 => (20, &[0, 2]),
        llama_cpp_sys_2::GGML_TYPE_Q5_0 => (22, &[0]),
        llama_cpp_sys_2::GGML_TYPE_Q5_1 => (24, &[0, 2]),
        llama_cpp_sys_2::GGML_TYPE_Q8_0 => (34, &[0]),
        _ => {
            return Err(format!(
                "its values are {}, which cannot be scaled here (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 can)",
                crate::weights::matrix::type_name(ty)
            ))
        }
    };
    for chunk in row.chunks_exact_mut(block) {
        for &at in fields {
            scale_f16(&mut chunk[at..at + 2]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halving_block_scales_halves_every_value() {
        // One Q4_1 block: d = 0.5, m = -1, nibbles all 3 -> values 0.5 * 3 - 1 = 0.5.
        let mut block = vec![0u8; 20];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        block[4..].fill(0x33);
        scale_row(llama_cpp_sys_2::GGML_TYPE_Q4_1, &mut block, 0.5).unwrap();
        assert_eq!(f16::from_le_bytes([block[0], block[1]]).to_f32(), 0.25);
        assert_eq!(f16::from_le_bytes([block[2], block[3]]).to_f32(), -0.5);
        assert!(block[4..].iter().all(|&b| b == 0x33));
    }

    #[test]
    fn scaling_f32_rows_is_exact_for_powers_of_two() {
        let mut row: Vec<u8> = [1.5f32, -3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        scale_row(llama_cpp_sys_2::GGML_TYPE_F32, &mut row, 0.5).unwrap();
        assert_eq!(row[..4], 0.75f32.to_le_bytes());
        assert_eq!(row[4..], (-1.5f32).to_le_bytes());
    }

    #[test]
    fn formats_without_plain_scales_are_refused() {
        let err = scale_row(llama_cpp_sys_2::GGML_TYPE_Q4_K, &mut [], 0.5).unwrap_err();
        assert!(err.contains("q4_K"), "{err}");
    }
}
