//! Where the heads run: the engine's thread pool or a ggml backend, each timed when the heads
//! load, and what a further node of a depth costs there.

use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Instant;

use super::compute::{HeadsCompute, HeadsPlacement, THREAD_POOL};
use super::device::{BackendDevice, DeviceHeads};
use super::evaluate::{lock, HeadQuery, MedusaHeads};
use crate::clock::ms_since;
use crate::error::EngineError;
use crate::token::TokenId;

/// Timed runs per measurement; the fastest is kept (the others met a busier machine).
const RUNS: usize = 4;

/// The fastest of [`RUNS`] timed runs of `run`, in milliseconds.
fn fastest_ms<E>(mut run: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let started = Instant::now();
        run()?;
        best = best.min(ms_since(started));
    }
    Ok(best)
}

impl MedusaHeads {
    /// Uploads the heads to a ggml backend unless told not to, times each place that can run
    /// them and keeps the one `placement` asks for, the faster for [`HeadsPlacement::Fastest`].
    pub(super) fn place(&mut self, placement: HeadsPlacement, device: BackendDevice) {
        let mut ggml_error = None;
        if placement != HeadsPlacement::ThreadPool {
            let n_embd = self.info.base.n_embd as usize;
            match DeviceHeads::upload(
                &self.heads,
                self.shared_projection.as_deref(),
                n_embd,
                device,
            ) {
                Ok(backend) => self.on_backend = Some(Mutex::new(backend)),
                Err(e) => ggml_error = Some(e.to_string()),
            }
        }
        let ggml_device = self
            .on_backend
            .as_ref()
            .map(|b| lock(b).device().to_owned());
        let (thread_pool_ms, ggml_ms) = match self.time_places(placement) {
            Ok(times) => times,
            Err(e) => {
                // The backend started but cannot run the heads (an operation it lacks, no room).
                self.on_backend = None;
                ggml_error = Some(e.to_string());
                (
                    self.time_places(HeadsPlacement::ThreadPool)
                        .ok()
                        .and_then(|times| times.0),
                    None,
                )
            }
        };
        let use_ggml = match (thread_pool_ms, ggml_ms) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(threads), Some(ggml)) => ggml < threads,
        };
        if !use_ggml {
            self.on_backend = None;
        }
        let mut compute = HeadsCompute {
            runs_on: match (&ggml_device, use_ggml) {
                (Some(device), true) => device.clone(),
                _ => THREAD_POOL.to_owned(),
            },
            thread_pool_ms,
            ggml_ms,
            ggml_device,
            ggml_error,
            extra_node_ms: self.time_extra_node(),
            summary: String::new(),
        };
        compute.summary = compute.describe();
        self.info.compute = compute;
    }

    /// Milliseconds per head evaluation on the thread pool and on the backend, as far as
    /// `placement` needs them: the fastest run of every head on a neutral hidden state, averaged
    /// over the heads. The places take turns in blocks of a few runs, so that both see the same
    /// machine load and each runs as it would alone (threads that just woke run slower).
    fn time_places(
        &self,
        placement: HeadsPlacement,
    ) -> Result<(Option<f64>, Option<f64>), EngineError> {
        const BLOCKS: usize = 3;
        let hidden = vec![0.0; self.info.base.n_embd as usize];
        let query = [HeadQuery {
            hidden: &hidden,
            inputs: self.token_inputs(&vec![0; self.head_count()]),
            k: 10,
        }];
        let time_threads = placement != HeadsPlacement::Ggml || self.on_backend.is_none();
        let mut threads_best = vec![f64::INFINITY; self.head_count()];
        let mut ggml_best = threads_best.clone();
        for _ in 0..BLOCKS {
            if time_threads {
                for (head, best) in threads_best.iter_mut().enumerate() {
                    let Ok(ms) = fastest_ms::<Infallible>(|| {
                        std::hint::black_box(self.thread_pool_rows(head, &query));
                        Ok(())
                    });
                    *best = best.min(ms);
                }
            }
            if let Some(backend) = &self.on_backend {
                for (head, best) in ggml_best.iter_mut().enumerate() {
                    let ms = fastest_ms(|| {
                        std::hint::black_box(lock(backend).top_k_each(head, &query)?);
                        Ok::<_, EngineError>(())
                    })?;
                    *best = best.min(ms);
                }
            }
        }
        let mean = |best: &[f64]| {
            let total: f64 = best.iter().sum();
            Some(total / best.len().max(1) as f64).filter(|ms| ms.is_finite())
        };
        Ok((mean(&threads_best), mean(&ggml_best)))
    }

    /// For heads that read the path: what each node after the first adds to one evaluation of
    /// several nodes, where the heads now run (eight queries against one, the fastest of a few
    /// runs, averaged over the heads).
    fn time_extra_node(&self) -> Option<f64> {
        const NODES: usize = 8;
        if !self.info.path_input {
            return None;
        }
        let hidden = vec![0.0; self.info.base.n_embd as usize];
        let mut total = 0.0;
        for head in 0..self.head_count() {
            // Node q's path: the root and tokens q.., as deep as this head reads.
            let query = |q: usize| {
                let path: Vec<TokenId> = (0..=head as TokenId + 1)
                    .map(|t| t + q as TokenId)
                    .collect();
                HeadQuery {
                    hidden: &hidden,
                    inputs: self.token_inputs(&path),
                    k: 10,
                }
            };
            let one = [query(0)];
            let many: Vec<_> = (0..NODES).map(query).collect();
            let fastest = |queries: &[HeadQuery<'_>]| {
                let Ok(ms) = fastest_ms::<Infallible>(|| {
                    std::hint::black_box(self.top_k_each(head, queries));
                    Ok(())
                });
                ms
            };
            total += ((fastest(&many) - fastest(&one)) / (NODES - 1) as f64).max(0.0);
        }
        Some(total / self.head_count().max(1) as f64)
    }
}
