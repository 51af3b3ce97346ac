//! Times as the engine reports them: milliseconds, as `f64`.

use std::time::Instant;

pub(crate) fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}
