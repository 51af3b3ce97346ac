//! Times as the engine reports them: milliseconds, as `f64`.

use std::time::Instant;

pub(crate) fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// CPU time this process has used on all its threads, in milliseconds; `None` where the
/// system cannot tell.
pub(crate) fn process_cpu_ms() -> Option<f64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the call.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    (status == 0).then(|| now.tv_sec as f64 * 1000.0 + now.tv_nsec as f64 / 1e6)
}
