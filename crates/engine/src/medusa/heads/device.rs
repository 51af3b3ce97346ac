//! The heads on a ggml backend: the model's GPU when its layers went there, else ggml's CPU
//! backend. The weights are uploaded once; each evaluation sends the hidden state (and the
//! token embeddings the heads read), runs the blocks, the vocabulary projection and the top-k on
//! the device, and brings back only the top-k rows and their logits.

use std::ffi::CStr;
use std::ptr;

use llama_cpp_sys_2 as sys;

use super::weights::Head;
use super::HeadQuery;
use crate::error::EngineError;
use crate::weights::matrix::{QuantMatrix, GGML_TYPE_F32};

/// Where to put the heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendDevice {
    /// ggml's CPU backend with this many threads.
    Cpu { threads: usize },
    /// The first GPU ggml found (where llama.cpp puts offloaded layers).
    Gpu,
}

/// Tensors of a graph, at most: inputs, the token terms, two products per block and the rest.
const GRAPH_TENSORS: usize = 256;

/// One head's weights on the device.
struct HeadTensors {
    blocks: Vec<(*mut sys::ggml_tensor, *mut sys::ggml_tensor)>,
    /// `R` then `P_1..P_k`, in the order the token inputs come.
    token_matrices: Vec<*mut sys::ggml_tensor>,
    /// Null when the head shares the base projection.
    projection: *mut sys::ggml_tensor,
}

/// The heads' weights on a ggml backend and what evaluating them needs.
pub struct DeviceHeads {
    backend: sys::ggml_backend_t,
    weights_ctx: *mut sys::ggml_context,
    weights: sys::ggml_backend_buffer_t,
    allocator: sys::ggml_gallocr_t,
    heads: Vec<HeadTensors>,
    shared_projection: *mut sys::ggml_tensor,
    n_embd: usize,
    device: String,
}

// SAFETY: the ggml objects are owned by this value alone and used through `&mut self` only
// (the caller keeps it behind a mutex), never from two threads at once.
unsafe impl Send for DeviceHeads {}

impl Drop for DeviceHeads {
    fn drop(&mut self) {
        // SAFETY: each was created by `upload` and is freed once, in reverse order of creation.
        unsafe {
            if !self.allocator.is_null() {
                sys::ggml_gallocr_free(self.allocator);
            }
            if !self.weights.is_null() {
                sys::ggml_backend_buffer_free(self.weights);
            }
            if !self.weights_ctx.is_null() {
                sys::ggml_free(self.weights_ctx);
            }
            sys::ggml_backend_free(self.backend);
        }
    }
}

/// A graph's metadata context, freed when the evaluation ends however it ends.
struct GraphContext(*mut sys::ggml_context);

impl Drop for GraphContext {
    fn drop(&mut self) {
        // SAFETY: made by `metadata_context` for one evaluation and freed once, after its
        // tensors were read back (or the evaluation failed).
        unsafe { sys::ggml_free(self.0) };
    }
}

fn backend_error(message: impl Into<String>) -> EngineError {
    EngineError::Heads(message.into())
}

/// A ggml context that only describes tensors (their data lives in backend buffers).
fn metadata_context(tensors: usize) -> Result<*mut sys::ggml_context, EngineError> {
    // SAFETY: plain size queries, then a context that allocates only its own metadata.
    let ctx = unsafe {
        sys::ggml_init(sys::ggml_init_params {
            mem_size: sys::ggml_tensor_overhead() * tensors + sys::ggml_graph_overhead(),
            mem_buffer: ptr::null_mut(),
            no_alloc: true,
        })
    };
    if ctx.is_null() {
        return Err(backend_error("ggml could not make a context"));
    }
    Ok(ctx)
}

fn init_backend(device: BackendDevice) -> Result<(sys::ggml_backend_t, String), EngineError> {
    // SAFETY: the device registry is filled when llama.cpp's backend is initialised, which
    // happens before any model (and so any heads) load; the returned pointers are checked.
    unsafe {
        let backend = match device {
            BackendDevice::Cpu { threads } => {
                let backend = sys::ggml_backend_cpu_init();
                if !backend.is_null() {
                    sys::ggml_backend_cpu_set_n_threads(backend, threads.clamp(1, 64) as i32);
                }
                backend
            }
            BackendDevice::Gpu => {
                let dev = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_GPU);
                if dev.is_null() {
                    return Err(backend_error("no GPU device in this build of llama.cpp"));
                }
                sys::ggml_backend_dev_init(dev, ptr::null())
            }
        };
        if backend.is_null() {
            return Err(backend_error("the ggml backend could not start"));
        }
        let name = CStr::from_ptr(sys::ggml_backend_name(backend))
            .to_string_lossy()
            .into_owned();
        Ok((backend, name))
    }
}

/// Describes `matrix` in `ctx` (row-major rows of `cols` values are ggml's `[cols, rows]`).
fn describe(ctx: *mut sys::ggml_context, matrix: &QuantMatrix) -> *mut sys::ggml_tensor {
    // SAFETY: `ctx` has room for every tensor described (counted by the caller).
    unsafe { sys::ggml_new_tensor_2d(ctx, matrix.ty, matrix.cols as i64, matrix.rows as i64) }
}

fn describe_vector(ctx: *mut sys::ggml_context, len: usize) -> *mut sys::ggml_tensor {
    // SAFETY: as in `describe`.
    unsafe { sys::ggml_new_tensor_1d(ctx, GGML_TYPE_F32, len as i64) }
}

/// Copies `bytes` into a tensor allocated on the device; they must be its whole contents.
fn upload_bytes(tensor: *mut sys::ggml_tensor, bytes: &[u8]) {
    // SAFETY: the tensor was allocated in a backend buffer and `bytes` is exactly its size
    // (a QuantMatrix holds whole rows of its type, a bias `n_embd` floats).
    unsafe {
        debug_assert_eq!(sys::ggml_nbytes(tensor), bytes.len());
        sys::ggml_backend_tensor_set(tensor, bytes.as_ptr().cast(), 0, bytes.len());
    }
}

fn f32_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte pattern of it is readable as u8.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), std::mem::size_of_val(values)) }
}

impl DeviceHeads {
    /// Uploads `heads` (and the base projection they share, if any) to `device`.
    pub(super) fn upload(
        heads: &[Head],
        shared_projection: Option<&QuantMatrix>,
        n_embd: usize,
        device: BackendDevice,
    ) -> Result<Self, EngineError> {
        let (backend, device_name) = init_backend(device)?;
        let mut this = Self {
            backend,
            weights_ctx: ptr::null_mut(),
            weights: ptr::null_mut(),
            allocator: ptr::null_mut(),
            heads: Vec::with_capacity(heads.len()),
            shared_projection: ptr::null_mut(),
            n_embd,
            device: device_name,
        };
        let tensor_count = 1 + heads
            .iter()
            .map(|h| 2 * h.blocks.len() + h.root.iter().len() + h.path.len() + 1)
            .sum::<usize>();
        this.weights_ctx = metadata_context(tensor_count)?;
        let ctx = this.weights_ctx;
        let mut uploads: Vec<(*mut sys::ggml_tensor, &[u8])> = Vec::new();
        if let Some(matrix) = shared_projection {
            this.shared_projection = describe(ctx, matrix);
            uploads.push((this.shared_projection, matrix.bytes()));
        }
        for head in heads {
            let mut tensors = HeadTensors {
                blocks: Vec::with_capacity(head.blocks.len()),
                token_matrices: Vec::new(),
                projection: ptr::null_mut(),
            };
            for (weight, bias) in &head.blocks {
                let (w, b) = (describe(ctx, weight), describe_vector(ctx, bias.len()));
                uploads.push((w, weight.bytes()));
                uploads.push((b, f32_bytes(bias)));
                tensors.blocks.push((w, b));
            }
            for matrix in head.root.iter().chain(&head.path) {
                let t = describe(ctx, matrix);
                uploads.push((t, matrix.bytes()));
                tensors.token_matrices.push(t);
            }
            if let Some(matrix) = &head.projection {
                tensors.projection = describe(ctx, matrix);
                uploads.push((tensors.projection, matrix.bytes()));
            }
            if tensors.projection.is_null() && this.shared_projection.is_null() {
                return Err(backend_error("a head without a projection to use"));
            }
            this.heads.push(tensors);
        }
        if uploads.iter().any(|(t, _)| t.is_null()) {
            return Err(backend_error("ggml could not describe the heads' weights"));
        }
        // SAFETY: every tensor of the context is described; the buffer is checked.
        this.weights = unsafe { sys::ggml_backend_alloc_ctx_tensors(ctx, this.backend) };
        if this.weights.is_null() {
            return Err(backend_error(format!(
                "no room on {} for the heads' weights",
                this.device
            )));
        }
        for (tensor, bytes) in uploads {
            upload_bytes(tensor, bytes);
        }
        // SAFETY: the backend is live; the allocator is freed in `drop`.
        this.allocator = unsafe {
            sys::ggml_gallocr_new(sys::ggml_backend_get_default_buffer_type(this.backend))
        };
        if this.allocator.is_null() {
            return Err(backend_error("ggml could not make a graph allocator"));
        }
        Ok(this)
    }

    /// The device's name as ggml gives it ("CPU", "CUDA0", ...).
    pub(super) fn device(&self) -> &str {
        &self.device
    }

    /// For each query, head `head`'s best projection rows and their logits, in no particular
    /// order: as many as the largest `k` asks for, for every query (see
    /// [`super::heads::MedusaHeads::top_k_each`]).
    pub(super) fn top_k_each(
        &mut self,
        head: usize,
        queries: &[HeadQuery<'_>],
    ) -> Result<Vec<Vec<(usize, f32)>>, EngineError> {
        let tensors = self
            .heads
            .get(head)
            .ok_or_else(|| backend_error(format!("there is no head {head}")))?;
        let projection = if tensors.projection.is_null() {
            self.shared_projection
        } else {
            tensors.projection
        };
        // SAFETY: `projection` is a live 2-D tensor of the weights context.
        let rows = unsafe { (*projection).ne[1] } as usize;
        let n = queries.len();
        let k = queries.iter().map(|q| q.k).max().unwrap_or(0).min(rows);
        if n == 0 || k == 0 || queries.iter().any(|q| q.hidden.len() != self.n_embd) {
            return Ok(vec![Vec::new(); n]);
        }
        let (ids, logits) = self.evaluate(tensors, projection, rows, queries, k)?;
        Ok((0..n)
            .map(|q| {
                (q * k..(q + 1) * k)
                    .map(|i| (ids[i] as usize, logits[i]))
                    .collect()
            })
            .collect())
    }

    fn evaluate(
        &self,
        tensors: &HeadTensors,
        projection: *mut sys::ggml_tensor,
        rows: usize,
        queries: &[HeadQuery<'_>],
        k: usize,
    ) -> Result<(Vec<i32>, Vec<f32>), EngineError> {
        let graph_ctx = GraphContext(metadata_context(GRAPH_TENSORS)?);
        let ctx = graph_ctx.0;
        let (n, n_embd) = (queries.len(), self.n_embd);
        let mut inputs: Vec<(*mut sys::ggml_tensor, Vec<f32>)> = Vec::new();
        // SAFETY: graph building on a metadata context with room for GRAPH_TENSORS tensors;
        // every operand is a tensor of this graph or of the uploaded weights, shapes as ggml
        // requires them (`[n_embd, n]` activations, `[n_embd, rows]` matrices).
        unsafe {
            let input = |inputs: &mut Vec<_>, values: Vec<f32>| {
                let t = sys::ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd as i64, n as i64);
                sys::ggml_set_input(t);
                inputs.push((t, values));
                t
            };
            let hiddens = queries
                .iter()
                .flat_map(|q| q.hidden.iter().copied())
                .collect();
            let mut x = input(&mut inputs, hiddens);
            // `R e_root + sum_j P_j e_j`: the m-th matrix applies to each query's m-th input
            // (zeros for a query with fewer inputs, which adds nothing).
            let mut token_term: *mut sys::ggml_tensor = ptr::null_mut();
            for (m, &matrix) in tensors.token_matrices.iter().enumerate() {
                if queries.iter().all(|q| q.inputs.len() <= m) {
                    continue;
                }
                let mut values = Vec::with_capacity(n_embd * n);
                for query in queries {
                    match query.inputs.get(m) {
                        Some(e) if e.len() == n_embd => values.extend_from_slice(e),
                        _ => values.resize(values.len() + n_embd, 0.0),
                    }
                }
                let product = sys::ggml_mul_mat(ctx, matrix, input(&mut inputs, values));
                token_term = if token_term.is_null() {
                    product
                } else {
                    sys::ggml_add(ctx, token_term, product)
                };
            }
            for (block, &(weight, bias)) in tensors.blocks.iter().enumerate() {
                let mut t = sys::ggml_mul_mat(ctx, weight, x);
                if block == 0 && !token_term.is_null() {
                    t = sys::ggml_add(ctx, t, token_term);
                }
                t = sys::ggml_add(ctx, t, bias);
                x = sys::ggml_add(ctx, x, sys::ggml_silu(ctx, t));
            }
            let logits = sys::ggml_mul_mat(ctx, projection, x);
            let ids = sys::ggml_top_k(ctx, logits, k as i32);
            let by_row = sys::ggml_reshape_3d(ctx, logits, 1, rows as i64, n as i64);
            let values = sys::ggml_get_rows(ctx, by_row, ids);
            sys::ggml_set_output(ids);
            sys::ggml_set_output(values);
            let graph = sys::ggml_new_graph(ctx);
            sys::ggml_build_forward_expand(graph, ids);
            sys::ggml_build_forward_expand(graph, values);
            for i in 0..sys::ggml_graph_n_nodes(graph) {
                let node = sys::ggml_graph_node(graph, i);
                if !sys::ggml_backend_supports_op(self.backend, node) {
                    let op = CStr::from_ptr(sys::ggml_op_desc(node)).to_string_lossy();
                    return Err(backend_error(format!(
                        "{} cannot run the heads' {op}",
                        self.device
                    )));
                }
            }
            if !sys::ggml_gallocr_alloc_graph(self.allocator, graph) {
                return Err(backend_error(format!(
                    "no room on {} for the heads' activations",
                    self.device
                )));
            }
            for (tensor, values) in &inputs {
                upload_bytes(*tensor, f32_bytes(values));
            }
            let status = sys::ggml_backend_graph_compute(self.backend, graph);
            if status != sys::GGML_STATUS_SUCCESS {
                return Err(backend_error(format!(
                    "the heads failed on {} (ggml status {status})",
                    self.device
                )));
            }
            let mut row_ids = vec![0i32; k * n];
            let mut row_logits = vec![0f32; k * n];
            sys::ggml_backend_tensor_get(
                ids,
                row_ids.as_mut_ptr().cast(),
                0,
                std::mem::size_of_val(row_ids.as_slice()),
            );
            sys::ggml_backend_tensor_get(
                values,
                row_logits.as_mut_ptr().cast(),
                0,
                std::mem::size_of_val(row_logits.as_slice()),
            );
            if row_ids.iter().any(|&id| id < 0 || id as usize >= rows) {
                return Err(backend_error("the heads' top-k gave rows out of range"));
            }
            Ok((row_ids, row_logits))
        }
    }
}
