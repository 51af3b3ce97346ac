//! A weight matrix kept in a ggml type (F32, F16, Q8_0, Q4_K, ...) and multiplied by a vector
//! with ggml's own CPU dot-product kernels, the ones llama.cpp uses for the model.

use std::sync::Once;

use llama_cpp_sys_2::{ggml_get_type_traits, ggml_get_type_traits_cpu, ggml_type};
use rayon::prelude::*;

use crate::error::EngineError;

pub const GGML_TYPE_F32: ggml_type = llama_cpp_sys_2::GGML_TYPE_F32;
pub const GGML_TYPE_F16: ggml_type = llama_cpp_sys_2::GGML_TYPE_F16;
pub const GGML_TYPE_Q8_0: ggml_type = llama_cpp_sys_2::GGML_TYPE_Q8_0;
pub const GGML_TYPE_Q4_K: ggml_type = llama_cpp_sys_2::GGML_TYPE_Q4_K;
pub const GGML_TYPE_I32: ggml_type = llama_cpp_sys_2::GGML_TYPE_I32;

/// Row-major: `rows` rows of `cols` values, each row `row_bytes` long in `ty`'s encoding.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    pub ty: ggml_type,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    data: Vec<u8>,
}

fn cpu_init() {
    static INIT: Once = Once::new();
    // SAFETY: initialises ggml's CPU tables (e.g. the f16 conversion table); idempotent.
    INIT.call_once(|| unsafe { llama_cpp_sys_2::ggml_cpu_init() });
}

/// Bytes of one row of `cols` values in `ty`, or an error when `cols` does not fill whole blocks.
pub fn row_bytes(ty: ggml_type, cols: usize) -> Result<usize, EngineError> {
    // SAFETY: plain lookups in ggml's static type tables.
    let block = unsafe { llama_cpp_sys_2::ggml_blck_size(ty) } as usize;
    if cols == 0 || block == 0 || !cols.is_multiple_of(block) {
        return Err(EngineError::Heads(format!(
            "a row of {cols} values does not fit {} blocks of {block}",
            type_name(ty)
        )));
    }
    Ok(unsafe { llama_cpp_sys_2::ggml_row_size(ty, cols as i64) })
}

pub fn type_name(ty: ggml_type) -> String {
    // SAFETY: ggml returns a pointer into its static table, or its "unknown" entry.
    let traits = unsafe { ggml_get_type_traits(ty) };
    if traits.is_null() {
        return format!("type {ty}");
    }
    let name = unsafe { (*traits).type_name };
    if name.is_null() {
        return format!("type {ty}");
    }
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

impl QuantMatrix {
    /// Takes raw rows already in `ty`'s encoding (as stored in a GGUF file).
    pub fn from_raw(
        ty: ggml_type,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<Self, EngineError> {
        cpu_init();
        let row_bytes = row_bytes(ty, cols)?;
        if data.len() != rows * row_bytes {
            return Err(EngineError::Heads(format!(
                "a {rows}x{cols} {} matrix needs {} bytes, found {}",
                type_name(ty),
                rows * row_bytes,
                data.len()
            )));
        }
        let cpu = unsafe { ggml_get_type_traits_cpu(ty) };
        if cpu.is_null() || unsafe { (*cpu).vec_dot }.is_none() {
            return Err(EngineError::Heads(format!(
                "no CPU kernel for {}",
                type_name(ty)
            )));
        }
        Ok(Self {
            ty,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// Encodes f32 rows into `ty` (quantizing where `ty` is a quantized type).
    pub fn quantize(
        ty: ggml_type,
        rows: usize,
        cols: usize,
        values: &[f32],
    ) -> Result<Self, EngineError> {
        cpu_init();
        let row_bytes = row_bytes(ty, cols)?;
        if rows == 0 || values.len() != rows * cols {
            return Err(EngineError::Heads(format!(
                "{} values do not make a {rows}x{cols} matrix",
                values.len()
            )));
        }
        let mut data = vec![0u8; rows * row_bytes];
        // SAFETY: `values` holds rows*cols floats and `data` rows*row_bytes bytes, as ggml expects.
        unsafe {
            llama_cpp_sys_2::ggml_quantize_chunk(
                ty,
                values.as_ptr(),
                data.as_mut_ptr().cast(),
                0,
                rows as i64,
                cols as i64,
                std::ptr::null(),
            );
        }
        Self::from_raw(ty, rows, cols, data)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The matrix decoded to f32, row-major (to train against a quantized projection).
    pub fn to_f32(&self) -> Result<Vec<f32>, EngineError> {
        let mut out = vec![0.0f32; self.rows * self.cols];
        for (row, values) in out.chunks_exact_mut(self.cols).enumerate() {
            self.decode_row(row, values)?;
        }
        Ok(out)
    }

    /// Row `row` decoded into `out` (`cols` values).
    pub fn decode_row(&self, row: usize, out: &mut [f32]) -> Result<(), EngineError> {
        if row >= self.rows || out.len() != self.cols {
            return Err(EngineError::Heads(format!(
                "row {row} of a {}x{} matrix does not fit {} values",
                self.rows,
                self.cols,
                out.len()
            )));
        }
        let bytes = &self.data[row * self.row_bytes..(row + 1) * self.row_bytes];
        if self.ty == GGML_TYPE_F32 {
            for (value, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *value = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            }
            return Ok(());
        }
        // SAFETY: a pointer into ggml's static type table, checked before use.
        let to_float = unsafe { ggml_get_type_traits(self.ty).as_ref() }.and_then(|t| t.to_float);
        let to_float = to_float.ok_or_else(|| {
            EngineError::Heads(format!("{} cannot be decoded", type_name(self.ty)))
        })?;
        // SAFETY: one encoded row of `cols` values in, `cols` floats out.
        unsafe { to_float(bytes.as_ptr().cast(), out.as_mut_ptr(), self.cols as i64) };
        Ok(())
    }

    /// A matrix of the given rows, in the given order.
    pub fn gather_rows(&self, rows: &[usize]) -> Result<Self, EngineError> {
        let mut data = Vec::with_capacity(rows.len() * self.row_bytes);
        for &r in rows {
            if r >= self.rows {
                return Err(EngineError::Heads(format!(
                    "row {r} is outside a {}-row matrix",
                    self.rows
                )));
            }
            data.extend_from_slice(&self.data[r * self.row_bytes..(r + 1) * self.row_bytes]);
        }
        Self::from_raw(self.ty, rows.len(), self.cols, data)
    }

    /// `out[r] = row_r . x`, split over the threads of the current rayon pool (run it inside
    /// [`rayon::ThreadPool::install`] to choose the pool; a pool's threads wait between calls,
    /// where spawning threads per call would cost more than a small product).
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(out.len(), self.rows);
        let product = self.matmul(&[x]);
        out.copy_from_slice(&product[0]);
    }

    /// `[row_r . x for every row r]` for each of `xs`: each row is read once for all of them,
    /// which is what makes several vectors cheaper together than one by one.
    pub fn matmul(&self, xs: &[&[f32]]) -> Vec<Vec<f32>> {
        assert!(xs.iter().all(|x| x.len() == self.cols));
        let n = xs.len();
        if n == 0 {
            return Vec::new();
        }
        // SAFETY: the traits were checked to exist in `from_raw`.
        let cpu = unsafe { *ggml_get_type_traits_cpu(self.ty) };
        let vec_dot = cpu.vec_dot.expect("checked in from_raw");
        // The kernel wants the vectors in its partner type (e.g. Q8_0 weights with Q8_0 activations).
        let encoded: Vec<Vec<u8>> = xs
            .iter()
            .map(|x| encode_vector(cpu.vec_dot_type, x))
            .collect();
        let rows_per_chunk = self.rows.div_ceil(rayon::current_num_threads()).max(1);
        let (data, cols, row_bytes) = (&self.data, self.cols, self.row_bytes);
        // Row-major `[rows, n]`, so that each thread writes whole rows.
        let mut flat = vec![0.0f32; self.rows * n];
        flat.par_chunks_mut(rows_per_chunk * n)
            .enumerate()
            .for_each(|(chunk_index, chunk)| {
                let first_row = chunk_index * rows_per_chunk;
                for (i, slots) in chunk.chunks_mut(n).enumerate() {
                    let row = &data[(first_row + i) * row_bytes..];
                    for (slot, x) in slots.iter_mut().zip(&encoded) {
                        // SAFETY: `row` holds a whole encoded row and `x` an encoded vector,
                        // both of `cols` values; one result is written to `slot`.
                        unsafe {
                            vec_dot(
                                cols as i32,
                                slot,
                                0,
                                row.as_ptr().cast(),
                                0,
                                x.as_ptr().cast(),
                                0,
                                1,
                            );
                        }
                    }
                }
            });
        (0..n)
            .map(|j| flat.iter().skip(j).step_by(n).copied().collect())
            .collect()
    }
}

fn encode_vector(ty: ggml_type, x: &[f32]) -> Vec<u8> {
    if ty == GGML_TYPE_F32 {
        return x.iter().flat_map(|v| v.to_ne_bytes()).collect();
    }
    let bytes = row_bytes(ty, x.len()).unwrap_or(x.len() * 4);
    let mut out = vec![0u8; bytes];
    // SAFETY: the CPU traits of a vec_dot partner type always have from_float.
    let from_float = unsafe { (*ggml_get_type_traits_cpu(ty)).from_float };
    if let Some(from_float) = from_float {
        unsafe { from_float(x.as_ptr(), out.as_mut_ptr().cast(), x.len() as i64) };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(values: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
        (0..rows)
            .map(|r| (0..cols).map(|c| values[r * cols + c] * x[c]).sum())
            .collect()
    }

    fn data(rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>) {
        let values = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let x = (0..cols)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 14.0)
            .collect();
        (values, x)
    }

    #[test]
    fn f32_matvec_is_exact_enough() {
        let (rows, cols) = (7, 64);
        let (values, x) = data(rows, cols);
        let m = QuantMatrix::quantize(GGML_TYPE_F32, rows, cols, &values).unwrap();
        let mut out = vec![0.0; rows];
        m.matvec(&x, &mut out);
        for (a, b) in out.iter().zip(reference(&values, rows, cols, &x)) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn several_vectors_at_once_give_each_ones_product() {
        let (rows, cols) = (33, 128);
        let (values, x) = data(rows, cols);
        let y: Vec<f32> = x.iter().rev().copied().collect();
        let m = QuantMatrix::quantize(GGML_TYPE_Q8_0, rows, cols, &values).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let both = pool.install(|| m.matmul(&[&x, &y]));
        let (mut one, mut other) = (vec![0.0; rows], vec![0.0; rows]);
        m.matvec(&x, &mut one);
        m.matvec(&y, &mut other);
        assert_eq!(both, vec![one, other]);
        assert!(m.matmul(&[]).is_empty());
    }

    #[test]
    fn q8_0_matvec_is_close() {
        let (rows, cols) = (33, 128);
        let (values, x) = data(rows, cols);
        let m = QuantMatrix::quantize(GGML_TYPE_Q8_0, rows, cols, &values).unwrap();
        assert_eq!(m.bytes().len(), rows * 4 * 34);
        let mut out = vec![0.0; rows];
        // Three threads: 33 rows split unevenly.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| m.matvec(&x, &mut out));
        for (a, b) in out.iter().zip(reference(&values, rows, cols, &x)) {
            assert!((a - b).abs() < 0.05 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn gathered_rows_keep_their_values() {
        let (rows, cols) = (5, 32);
        let (values, x) = data(rows, cols);
        let m = QuantMatrix::quantize(GGML_TYPE_Q8_0, rows, cols, &values).unwrap();
        let mut all = vec![0.0; rows];
        m.matvec(&x, &mut all);
        let picked = m.gather_rows(&[4, 1]).unwrap();
        let mut some = vec![0.0; 2];
        picked.matvec(&x, &mut some);
        assert_eq!(some, vec![all[4], all[1]]);
        assert!(m.gather_rows(&[5]).is_err());
    }

    #[test]
    fn decodes_back_to_f32() {
        let (rows, cols) = (3, 64);
        let (values, _) = data(rows, cols);
        let exact = QuantMatrix::quantize(GGML_TYPE_F32, rows, cols, &values).unwrap();
        assert_eq!(exact.to_f32().unwrap(), values);
        let q8 = QuantMatrix::quantize(GGML_TYPE_Q8_0, rows, cols, &values).unwrap();
        for (a, b) in q8.to_f32().unwrap().iter().zip(&values) {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
        let mut row = vec![0.0; cols];
        exact.decode_row(2, &mut row).unwrap();
        assert_eq!(row, values[2 * cols..]);
        assert!(exact.decode_row(3, &mut row).is_err());
        assert!(exact.decode_row(0, &mut row[1..]).is_err());
    }

    #[test]
    fn rows_must_fill_whole_blocks() {
        assert!(QuantMatrix::quantize(GGML_TYPE_Q8_0, 1, 20, &[0.0; 20]).is_err());
        assert!(QuantMatrix::from_raw(GGML_TYPE_F32, 2, 4, vec![0; 7]).is_err());
        assert!(QuantMatrix::quantize(GGML_TYPE_F32, 0, 0, &[]).is_err());
        assert!(QuantMatrix::quantize(GGML_TYPE_F32, 2, 4, &[0.0; 7]).is_err());
    }
}
