//! How many threads a decode uses on a machine shared with other work.
//!
//! ggml's threads meet at a barrier after every operation of a decode (hundreds of times per
//! token). When another process holds a core, the thread the kernel put behind it arrives late
//! at each barrier while the others wait for it, and a decode on every core runs at a fraction
//! of the speed one thread fewer gets. So the engine looks at what the rest of the machine used
//! of the cores over the last half second (the machine's CPU time from `/proc/stat` less this
//! process's own) and decodes with one thread per core the others leave, at least one and at
//! most the configured count. On a quiet machine that is every configured thread.

use std::time::{Duration, Instant};

use crate::clock::process_cpu_ms;

/// Least time between two looks at the machine: long enough for `/proc/stat`'s clock ticks
/// (10 ms each) to measure a share, short enough to follow a build starting beside a chat.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The machine's CPU time so far, from `/proc/stat`'s `cpu` line, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MachineTicks {
    /// Time some task ran, or the hypervisor gave the core to another machine (steal).
    busy: u64,
}

/// Reads the `cpu` line of `/proc/stat`: user, nice, system, idle, iowait, irq, softirq,
/// steal (guest time is already counted in user).
fn parse_proc_stat(text: &str) -> Option<MachineTicks> {
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let tick = |i: usize| fields.get(i).copied().unwrap_or(0);
    if fields.len() < 4 {
        return None;
    }
    Some(MachineTicks {
        busy: tick(0) + tick(1) + tick(2) + tick(5) + tick(6) + tick(7),
    })
}

/// Cores the rest of the machine kept busy over an interval: the machine's busy time less this
/// process's, over the interval's length.
fn others_cores(machine_busy_s: f64, own_cpu_s: f64, wall_s: f64) -> f64 {
    if wall_s <= 0.0 {
        return 0.0;
    }
    ((machine_busy_s - own_cpu_s) / wall_s).max(0.0)
}

/// One thread per core the others leave (a core half taken counts as free), at least one, at
/// most `max`.
pub(crate) fn threads_for(max: usize, cores: usize, others: f64) -> usize {
    let free = (cores as f64 - others).round();
    (free.max(1.0) as usize).clamp(1, max.max(1))
}

/// A look at the machine: when, its busy ticks and this process's CPU time.
#[derive(Debug, Clone, Copy)]
struct Look {
    at: Instant,
    machine: MachineTicks,
    own_cpu_ms: f64,
}

impl Look {
    fn now() -> Option<Self> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        Some(Self {
            at: Instant::now(),
            machine: parse_proc_stat(&text)?,
            own_cpu_ms: process_cpu_ms()?,
        })
    }
}

/// The thread count of the decodes to come, from the machine's load.
#[derive(Debug)]
pub(crate) struct CoreShare {
    max: usize,
    cores: usize,
    ticks_per_s: f64,
    last: Option<Look>,
    threads: usize,
}

impl CoreShare {
    /// Up to `max` threads; `None` where the system does not say how busy it is.
    pub(crate) fn new(max: usize) -> Option<Self> {
        // SAFETY: sysconf has no preconditions.
        let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let cores = std::thread::available_parallelism().ok()?.get();
        let last = Look::now()?;
        (ticks_per_s > 0).then_some(Self {
            max,
            cores,
            ticks_per_s: ticks_per_s as f64,
            last: Some(last),
            threads: max,
        })
    }

    /// The threads for the next decode: looked at again when the last look is old enough.
    pub(crate) fn threads(&mut self) -> usize {
        let due = self.last.is_none_or(|last| last.at.elapsed() >= LOOK_EVERY);
        if due {
            if let Some(now) = Look::now() {
                if let Some(last) = self.last {
                    let machine_s = now.machine.busy.saturating_sub(last.machine.busy) as f64
                        / self.ticks_per_s;
                    let own_s = (now.own_cpu_ms - last.own_cpu_ms) / 1000.0;
                    let wall_s = now.at.duration_since(last.at).as_secs_f64();
                    let others = others_cores(machine_s, own_s, wall_s);
                    let threads = threads_for(self.max, self.cores, others);
                    if threads != self.threads {
                        tracing::debug!(
                            others,
                            threads,
                            "decode threads follow the machine's load"
                        );
                    }
                    self.threads = threads;
                }
                self.last = Some(now);
            }
        }
        self.threads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machines_busy_time_is_every_tick_but_idle_and_iowait() {
        let stat = "cpu  100 5 20 1000 7 3 2 4 50 0\ncpu0 50 2 10 500 3 1 1 2 25 0\nintr 1 2\n";
        assert_eq!(parse_proc_stat(stat), Some(MachineTicks { busy: 134 }));
        // Older kernels stop after iowait or irq.
        assert_eq!(
            parse_proc_stat("cpu  1 2 3 4\n"),
            Some(MachineTicks { busy: 6 })
        );
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 x 3 4\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2\n"), None);
    }

    #[test]
    fn others_are_the_machines_busy_time_less_this_process() {
        assert_eq!(others_cores(1.5, 0.5, 0.5), 2.0);
        assert_eq!(others_cores(1.0, 1.0, 0.5), 0.0);
        // Ticks are coarser than the process's clock: never below nothing.
        assert_eq!(others_cores(0.9, 1.0, 0.5), 0.0);
        assert_eq!(others_cores(1.0, 0.0, 0.0), 0.0);
    }

    #[test]
    fn a_decode_takes_the_cores_the_others_leave() {
        // Two cores: quiet, a little used, half a core, one busy process, two.
        assert_eq!(threads_for(2, 2, 0.0), 2);
        assert_eq!(threads_for(2, 2, 0.3), 2);
        assert_eq!(threads_for(2, 2, 0.5), 2);
        assert_eq!(threads_for(2, 2, 0.6), 1);
        assert_eq!(threads_for(2, 2, 1.0), 1);
        assert_eq!(threads_for(2, 2, 2.0), 1);
        assert_eq!(threads_for(2, 2, 7.9), 1);
        // Never above the configured count, nor below one.
        assert_eq!(threads_for(4, 16, 3.0), 4);
        assert_eq!(threads_for(16, 16, 3.0), 13);
        assert_eq!(threads_for(0, 2, 0.0), 1);
    }

    #[test]
    fn the_first_look_keeps_every_thread() {
        let mut share = CoreShare::new(3).expect("Linux says how busy it is");
        assert_eq!(share.threads(), 3);
    }
}
