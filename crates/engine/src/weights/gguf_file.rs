//! Reading and writing the few GGUF features heads files need. Reading goes through ggml's own
//! parser (it also reads the base model's projection); writing is done here, since ggml's
//! writer wants tensors in a ggml context.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use llama_cpp_sys_2::{ggml_type, gguf_context};

use super::matrix::{row_bytes, type_name, QuantMatrix, GGML_TYPE_F32, GGML_TYPE_I32};
use crate::error::EngineError;

fn heads_err(path: &Path, message: impl std::fmt::Display) -> EngineError {
    EngineError::Heads(format!("{}: {message}", path.display()))
}

/// A GGUF file opened for its metadata; tensor data is read on request.
pub struct GgufFile {
    ctx: *mut gguf_context,
    path: PathBuf,
}

impl Drop for GgufFile {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from gguf_init_from_file and is freed once.
        unsafe { llama_cpp_sys_2::gguf_free(self.ctx) };
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self, EngineError> {
        let mut magic = [0u8; 4];
        File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(|e| heads_err(path, e))?;
        if &magic != b"GGUF" {
            return Err(heads_err(path, "not a GGUF file"));
        }
        let c_path = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| heads_err(path, "path contains a NUL byte"))?;
        let params = llama_cpp_sys_2::gguf_init_params {
            no_alloc: true,
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: a valid C path; ggml returns null on any parse error.
        let ctx = unsafe { llama_cpp_sys_2::gguf_init_from_file(c_path.as_ptr(), params) };
        if ctx.is_null() {
            return Err(heads_err(path, "the GGUF header is truncated or corrupt"));
        }
        Ok(Self {
            ctx,
            path: path.to_path_buf(),
        })
    }

    fn key(&self, key: &str, wanted: llama_cpp_sys_2::gguf_type) -> Option<i64> {
        let c_key = CString::new(key).ok()?;
        // SAFETY: valid context and C string; types are checked before any typed read, since
        // a read of the wrong type aborts inside ggml.
        let id = unsafe { llama_cpp_sys_2::gguf_find_key(self.ctx, c_key.as_ptr()) };
        (id >= 0 && unsafe { llama_cpp_sys_2::gguf_get_kv_type(self.ctx, id) } == wanted)
            .then_some(id)
    }

    pub fn u32(&self, key: &str) -> Option<u32> {
        let id = self.key(key, llama_cpp_sys_2::GGUF_TYPE_UINT32)?;
        Some(unsafe { llama_cpp_sys_2::gguf_get_val_u32(self.ctx, id) })
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        let id = self.key(key, llama_cpp_sys_2::GGUF_TYPE_BOOL)?;
        Some(unsafe { llama_cpp_sys_2::gguf_get_val_bool(self.ctx, id) })
    }

    pub fn string(&self, key: &str) -> Option<String> {
        let id = self.key(key, llama_cpp_sys_2::GGUF_TYPE_STRING)?;
        let ptr = unsafe { llama_cpp_sys_2::gguf_get_val_str(self.ctx, id) };
        (!ptr.is_null()).then(|| {
            unsafe { CStr::from_ptr(ptr) }
                .to_string_lossy()
                .into_owned()
        })
    }

    pub fn f32(&self, key: &str) -> Option<f32> {
        let id = self.key(key, llama_cpp_sys_2::GGUF_TYPE_FLOAT32)?;
        Some(unsafe { llama_cpp_sys_2::gguf_get_val_f32(self.ctx, id) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header, for ggml calls that copy from it.
    pub(crate) fn as_ptr(&self) -> *const gguf_context {
        self.ctx
    }

    /// Each tensor's name, type and ggml dimensions (innermost first, 1 past the last).
    pub fn tensors(&self) -> Vec<(String, ggml_type, [i64; 4])> {
        // SAFETY: ids below the count are valid; names are C strings owned by the context and
        // `ne` points at the tensor's four dimensions.
        let count = unsafe { llama_cpp_sys_2::gguf_get_n_tensors(self.ctx) };
        (0..count)
            .map(|id| unsafe {
                let name = CStr::from_ptr(llama_cpp_sys_2::gguf_get_tensor_name(self.ctx, id))
                    .to_string_lossy()
                    .into_owned();
                let ne = llama_cpp_sys_2::gguf_get_tensor_ne(self.ctx, id);
                let dims = [*ne, *ne.add(1), *ne.add(2), *ne.add(3)];
                (
                    name,
                    llama_cpp_sys_2::gguf_get_tensor_type(self.ctx, id),
                    dims,
                )
            })
            .collect()
    }

    pub fn required_u32(&self, key: &str) -> Result<u32, EngineError> {
        self.u32(key)
            .ok_or_else(|| heads_err(&self.path, format!("missing u32 key {key}")))
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensor_id(name).is_some()
    }

    fn tensor_id(&self, name: &str) -> Option<i64> {
        let c_name = CString::new(name).ok()?;
        let id = unsafe { llama_cpp_sys_2::gguf_find_tensor(self.ctx, c_name.as_ptr()) };
        (id >= 0).then_some(id)
    }

    /// The type and raw bytes of tensor `name`.
    pub fn tensor_bytes(&self, name: &str) -> Result<(ggml_type, Vec<u8>), EngineError> {
        let id = self
            .tensor_id(name)
            .ok_or_else(|| heads_err(&self.path, format!("missing tensor {name}")))?;
        // SAFETY: `id` is a valid tensor index of this context.
        let (ty, size, offset) = unsafe {
            (
                llama_cpp_sys_2::gguf_get_tensor_type(self.ctx, id),
                llama_cpp_sys_2::gguf_get_tensor_size(self.ctx, id),
                llama_cpp_sys_2::gguf_get_data_offset(self.ctx)
                    + llama_cpp_sys_2::gguf_get_tensor_offset(self.ctx, id),
            )
        };
        let mut data = vec![0u8; size];
        let mut file = File::open(&self.path).map_err(|e| heads_err(&self.path, e))?;
        file.seek(SeekFrom::Start(offset as u64))
            .and_then(|_| file.read_exact(&mut data))
            .map_err(|e| heads_err(&self.path, format!("reading tensor {name}: {e}")))?;
        Ok((ty, data))
    }

    /// Reads tensor `name` as a `rows` x `cols` matrix, checking that its size agrees.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<QuantMatrix, EngineError> {
        let (ty, data) = self.tensor_bytes(name)?;
        let expected = rows * row_bytes(ty, cols)?;
        if data.len() != expected {
            return Err(heads_err(
                &self.path,
                format!(
                    "tensor {name} ({}) has {} bytes, a {rows}x{cols} matrix needs {expected}",
                    type_name(ty),
                    data.len()
                ),
            ));
        }
        QuantMatrix::from_raw(ty, rows, cols, data)
    }

    /// A list of token ids stored as I32.
    pub fn token_ids(&self, name: &str) -> Result<Vec<i32>, EngineError> {
        let (ty, data) = self.tensor_bytes(name)?;
        if ty != GGML_TYPE_I32 {
            return Err(heads_err(&self.path, format!("tensor {name} must be I32")));
        }
        Ok(data
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }

    /// A vector stored as F32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, EngineError> {
        let m = self.matrix(name, 1, len)?;
        if m.ty != GGML_TYPE_F32 {
            return Err(heads_err(&self.path, format!("tensor {name} must be F32")));
        }
        Ok(m.bytes()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

/// Metadata values the heads writer needs.
pub enum MetaValue {
    U32(u32),
    Bool(bool),
    Str(String),
}

/// A tensor to write: name, ggml dimensions (`[cols, rows]`, innermost first) and data.
pub struct TensorOut<'a> {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: ggml_type,
    pub data: &'a [u8],
}

const ALIGNMENT: u64 = 32;

/// A tensor encoded for writing: name, ggml dimensions (innermost first), type and bytes.
pub type EncodedTensor = (String, Vec<u64>, ggml_type, Vec<u8>);

/// Token ids as a tensor (a drafter's vocabulary subset).
pub(crate) fn token_ids_tensor(name: &str, ids: &[i32]) -> EncodedTensor {
    let bytes = ids.iter().flat_map(|t| t.to_le_bytes()).collect();
    (
        name.into(),
        vec![ids.len() as u64],
        llama_cpp_sys_2::GGML_TYPE_I32,
        bytes,
    )
}

/// [`write_gguf`] with tensors the writer owns.
pub fn write_encoded(
    path: &Path,
    meta: &[(&str, MetaValue)],
    encoded: &[EncodedTensor],
) -> Result<(), EngineError> {
    let tensors: Vec<TensorOut<'_>> = encoded
        .iter()
        .map(|(name, dims, ty, data)| TensorOut {
            name: name.clone(),
            dims: dims.clone(),
            ty: *ty,
            data,
        })
        .collect();
    write_gguf(path, meta, &tensors)
}

/// Writes a GGUF v3 file; it appears at `path` only when complete.
pub fn write_gguf(
    path: &Path,
    meta: &[(&str, MetaValue)],
    tensors: &[TensorOut<'_>],
) -> Result<(), EngineError> {
    let partial = path.with_extension("partial");
    let io = |e: std::io::Error| EngineError::io(path, &e);
    {
        let mut w = BufWriter::new(File::create(&partial).map_err(io)?);
        let mut put = |bytes: &[u8]| w.write_all(bytes);
        let string = |s: &str| -> Vec<u8> {
            let mut out = (s.len() as u64).to_le_bytes().to_vec();
            out.extend_from_slice(s.as_bytes());
            out
        };
        put(b"GGUF").map_err(io)?;
        put(&3u32.to_le_bytes()).map_err(io)?;
        put(&(tensors.len() as u64).to_le_bytes()).map_err(io)?;
        put(&(meta.len() as u64).to_le_bytes()).map_err(io)?;
        for (key, value) in meta {
            put(&string(key)).map_err(io)?;
            let (kind, bytes): (u32, Vec<u8>) = match value {
                MetaValue::U32(v) => (llama_cpp_sys_2::GGUF_TYPE_UINT32, v.to_le_bytes().to_vec()),
                MetaValue::Bool(v) => (llama_cpp_sys_2::GGUF_TYPE_BOOL, vec![u8::from(*v)]),
                MetaValue::Str(v) => (llama_cpp_sys_2::GGUF_TYPE_STRING, string(v)),
            };
            put(&kind.to_le_bytes()).map_err(io)?;
            put(&bytes).map_err(io)?;
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in tensors {
            put(&string(&t.name)).map_err(io)?;
            put(&(t.dims.len() as u32).to_le_bytes()).map_err(io)?;
            for d in &t.dims {
                put(&d.to_le_bytes()).map_err(io)?;
            }
            put(&t.ty.to_le_bytes()).map_err(io)?;
            put(&offset.to_le_bytes()).map_err(io)?;
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).next_multiple_of(ALIGNMENT);
        }
        let header_len = w.stream_position().map_err(io)?;
        let pad = |w: &mut BufWriter<File>, to: u64| -> std::io::Result<()> {
            let here = w.stream_position()?;
            w.write_all(&vec![0u8; (to - here) as usize])
        };
        let data_start = header_len.next_multiple_of(ALIGNMENT);
        pad(&mut w, data_start).map_err(io)?;
        for (t, off) in tensors.iter().zip(offsets) {
            pad(&mut w, data_start + off).map_err(io)?;
            w.write_all(t.data).map_err(io)?;
        }
        w.into_inner()
            .map_err(|e| io(e.into_error()))?
            .sync_all()
            .map_err(io)?;
    }
    std::fs::rename(&partial, path).map_err(io)
}
