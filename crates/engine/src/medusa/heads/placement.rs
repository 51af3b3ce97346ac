//! Where the heads run: the engine's thread pool or a ggml backend, each timed when the heads
//! load, and what a further node of a depth costs there.

use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use super::{lock, MedusaHeads};
use crate::clock::ms_since;
use crate::error::EngineError;
use crate::medusa::backend_heads::{BackendDevice, BackendHeads};
use crate::sampler::TokenId;

/// Where the heads are evaluated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeadsPlacement {
    /// Both places timed when the heads load, the faster kept.
    #[default]
    Fastest,
    /// The engine's own thread pool, with ggml's CPU dot products.
    ThreadPool,
    /// A ggml backend: the GPU the model's layers went to, else ggml's CPU backend.
    Ggml,
}

impl std::str::FromStr for HeadsPlacement {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "fastest" => Ok(Self::Fastest),
            "threads" => Ok(Self::ThreadPool),
            "ggml" => Ok(Self::Ggml),
            other => Err(format!(
                "'{other}' is not a place for the heads: fastest, threads or ggml"
            )),
        }
    }
}

/// Where the heads run, and what each place cost when they loaded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ts_rs::TS)]
pub struct HeadsCompute {
    /// "thread pool", or the ggml backend's device ("CPU", "CUDA0").
    pub runs_on: String,
    /// Milliseconds one head takes to propose its ten best tokens on the thread pool, the
    /// fastest of a few runs (`None` when it was not timed).
    pub thread_pool_ms: Option<f64>,
    /// The same on the ggml backend, when it could run them.
    pub ggml_ms: Option<f64>,
    /// The ggml backend's device, when one started.
    pub ggml_device: Option<String>,
    /// Why the heads do not run on the ggml backend, when they could not.
    pub ggml_error: Option<String>,
    /// For heads that read the drafted path: what each further node adds to an evaluation of
    /// the nodes of one depth together, where the heads run (measured with eight at once).
    pub extra_node_ms: Option<f64>,
    /// In words: where the heads run and what each place cost, e.g. "CPU (ggml backend),
    /// 0.150 ms per head; thread pool 0.180 ms".
    pub summary: String,
}

impl HeadsCompute {
    fn describe(&self) -> String {
        let placed = self.describe_place();
        match self.extra_node_ms {
            Some(extra) => format!("{placed}; each further node of a depth adds {extra:.3} ms"),
            None => placed,
        }
    }

    fn describe_place(&self) -> String {
        let ms =
            |t: Option<f64>| t.map_or_else(|| "not timed".to_owned(), |t| format!("{t:.3} ms"));
        match (&self.ggml_device, &self.ggml_error) {
            (Some(device), _) if self.runs_on == *device => format!(
                "{device} (ggml backend), {} per head; thread pool {}",
                ms(self.ggml_ms),
                ms(self.thread_pool_ms)
            ),
            (Some(device), _) => format!(
                "the thread pool, {} per head; {device} (ggml backend) {}",
                ms(self.thread_pool_ms),
                ms(self.ggml_ms)
            ),
            (None, Some(error)) => format!(
                "the thread pool, {} per head (ggml backend: {error})",
                ms(self.thread_pool_ms)
            ),
            (None, None) => format!("the thread pool, {} per head", ms(self.thread_pool_ms)),
        }
    }
}

const THREAD_POOL: &str = "thread pool";

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
            match BackendHeads::upload(
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
        let query = [(self.token_inputs(&vec![0; self.head_count()]), 10)];
        let time_threads = placement != HeadsPlacement::Ggml || self.on_backend.is_none();
        let mut threads_best = vec![f64::INFINITY; self.head_count()];
        let mut ggml_best = threads_best.clone();
        for _ in 0..BLOCKS {
            if time_threads {
                for (head, best) in threads_best.iter_mut().enumerate() {
                    let Ok(ms) = fastest_ms::<Infallible>(|| {
                        std::hint::black_box(self.thread_pool_rows(head, &hidden, &query));
                        Ok(())
                    });
                    *best = best.min(ms);
                }
            }
            if let Some(backend) = &self.on_backend {
                for (head, best) in ggml_best.iter_mut().enumerate() {
                    let ms = fastest_ms(|| {
                        std::hint::black_box(lock(backend).top_k_each(head, &hidden, &query)?);
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
                (self.token_inputs(&path), 10)
            };
            let one = [query(0)];
            let many: Vec<_> = (0..NODES).map(query).collect();
            let fastest = |queries: &[(Vec<Vec<f32>>, usize)]| {
                let Ok(ms) = fastest_ms::<Infallible>(|| {
                    std::hint::black_box(self.top_k_each(head, &hidden, queries));
                    Ok(())
                });
                ms
            };
            total += ((fastest(&many) - fastest(&one)) / (NODES - 1) as f64).max(0.0);
        }
        Some(total / self.head_count().max(1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_are_named() {
        assert_eq!("fastest".parse(), Ok(HeadsPlacement::Fastest));
        assert_eq!("threads".parse(), Ok(HeadsPlacement::ThreadPool));
        assert_eq!("ggml".parse(), Ok(HeadsPlacement::Ggml));
        let refused = "gpu".parse::<HeadsPlacement>().unwrap_err();
        assert_eq!(
            refused,
            "'gpu' is not a place for the heads: fastest, threads or ggml"
        );
    }

    #[test]
    fn where_the_heads_run_is_said_with_both_times() {
        let compute = |runs_on: &str, device: Option<&str>, ggml_ms, error: Option<&str>| {
            HeadsCompute {
                runs_on: runs_on.into(),
                thread_pool_ms: Some(0.18),
                ggml_ms,
                ggml_device: device.map(Into::into),
                ggml_error: error.map(Into::into),
                extra_node_ms: None,
                summary: String::new(),
            }
            .describe()
        };
        assert_eq!(
            compute("CPU", Some("CPU"), Some(0.15), None),
            "CPU (ggml backend), 0.150 ms per head; thread pool 0.180 ms"
        );
        assert_eq!(
            compute(THREAD_POOL, Some("CUDA0"), Some(0.4), None),
            "the thread pool, 0.180 ms per head; CUDA0 (ggml backend) 0.400 ms"
        );
        assert_eq!(
            compute(THREAD_POOL, None, None, Some("no GPU")),
            "the thread pool, 0.180 ms per head (ggml backend: no GPU)"
        );
        assert_eq!(
            compute(THREAD_POOL, None, None, None),
            "the thread pool, 0.180 ms per head"
        );
        let path_heads = HeadsCompute {
            extra_node_ms: Some(0.05),
            thread_pool_ms: Some(0.18),
            runs_on: THREAD_POOL.into(),
            ..HeadsCompute::default()
        };
        assert_eq!(
            path_heads.describe(),
            "the thread pool, 0.180 ms per head; each further node of a depth adds 0.050 ms"
        );
    }
}
