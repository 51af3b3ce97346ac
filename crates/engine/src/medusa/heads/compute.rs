//! Where the heads run, as asked ([`HeadsPlacement`]) and as found when they loaded
//! ([`HeadsCompute`]): plain values, apart from the timing in `placement` that fills them.

use serde::Serialize;

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
    pub(super) fn describe(&self) -> String {
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

/// What [`HeadsCompute::runs_on`] says when the heads run on the engine's own thread pool.
pub(super) const THREAD_POOL: &str = "thread pool";

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
