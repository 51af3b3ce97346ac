//! llama.cpp's grammar code run within a deadline. It cannot be interrupted: an ambiguous grammar
//! can keep its thread busy for minutes after the request was refused. So a thread that misses its
//! deadline is moved to the idle scheduling class, where it runs only on cores nothing else
//! wants and cannot slow a generation, and it is counted until it ends. While too many are still
//! running, new work is refused instead of started, which bounds the threads and memory that
//! refused requests can hold.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

/// Grammar threads past their deadline that may run at once before new grammars are refused.
pub const MAX_OVERDUE_GRAMMARS: usize = 4;

/// The process's grammar threads, shared by every engine in it (the cores are).
pub(crate) static GRAMMAR_WORKERS: DeadlineWorkers = DeadlineWorkers::new(MAX_OVERDUE_GRAMMARS);

/// How many grammar threads missed their deadline and are still running.
pub fn overdue_grammar_threads() -> usize {
    GRAMMAR_WORKERS.overdue()
}

/// Why work run within a deadline gave no result.
#[derive(Debug)]
pub(crate) enum DeadlineError {
    /// The deadline passed; the thread goes on at idle priority.
    Missed,
    /// `overdue` threads are still running past their deadlines: nothing new was started.
    Busy { overdue: usize },
    /// The thread could not be started, or ended without an answer (a panic).
    Thread(String),
}

/// Threads started for deadline-bound work, and how many of them are overdue.
pub(crate) struct DeadlineWorkers {
    limit: usize,
    overdue: AtomicUsize,
}

/// Where one thread is, as its starter and the thread itself see it.
enum Phase {
    /// Running; the kernel's id of the thread once it has started.
    Running {
        thread_id: Option<i32>,
    },
    Overdue,
    Ended,
}

impl DeadlineWorkers {
    pub(crate) const fn new(limit: usize) -> Self {
        Self {
            limit,
            overdue: AtomicUsize::new(0),
        }
    }

    pub(crate) fn overdue(&self) -> usize {
        self.overdue.load(Ordering::SeqCst)
    }

    /// Runs `work` on a thread named `name` with `stack_bytes` of stack and waits at most
    /// `deadline` for its answer.
    pub(crate) fn run<T: Send + 'static>(
        &'static self,
        name: &str,
        stack_bytes: usize,
        deadline: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, DeadlineError> {
        let overdue = self.overdue();
        if overdue >= self.limit {
            return Err(DeadlineError::Busy { overdue });
        }
        let phase = Arc::new(Mutex::new(Phase::Running { thread_id: None }));
        let thread_phase = phase.clone();
        let (done, answer) = mpsc::channel();
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(stack_bytes)
            .spawn(move || {
                match &mut *lock(&thread_phase) {
                    Phase::Running { thread_id } => *thread_id = current_thread_id(),
                    // Overdue before it got a core: it moves itself.
                    Phase::Overdue => {
                        if let Some(thread_id) = current_thread_id() {
                            run_only_when_idle(thread_id);
                        }
                    }
                    Phase::Ended => {}
                }
                let _ = done.send(work());
                let mut phase = lock(&thread_phase);
                if matches!(*phase, Phase::Overdue) {
                    self.overdue.fetch_sub(1, Ordering::SeqCst);
                }
                *phase = Phase::Ended;
            })
            .map_err(|e| DeadlineError::Thread(format!("cannot start a thread: {e}")))?;
        match answer.recv_timeout(deadline) {
            Ok(answer) => Ok(answer),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(DeadlineError::Thread("it ended without an answer".into()))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let mut phase = lock(&phase);
                // Answered between the deadline and the lock.
                if let Ok(answer) = answer.try_recv() {
                    return Ok(answer);
                }
                match *phase {
                    Phase::Running { thread_id } => {
                        *phase = Phase::Overdue;
                        let overdue = self.overdue.fetch_add(1, Ordering::SeqCst) + 1;
                        if let Some(thread_id) = thread_id {
                            run_only_when_idle(thread_id);
                        }
                        tracing::warn!(
                            name,
                            overdue,
                            "work past its deadline goes on at idle priority"
                        );
                        Err(DeadlineError::Missed)
                    }
                    Phase::Ended | Phase::Overdue => {
                        Err(DeadlineError::Thread("it ended without an answer".into()))
                    }
                }
            }
        }
    }
}

fn lock(phase: &Mutex<Phase>) -> std::sync::MutexGuard<'_, Phase> {
    phase.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(target_os = "linux")]
fn current_thread_id() -> Option<i32> {
    // SAFETY: gettid has no preconditions and cannot fail.
    Some(unsafe { libc::gettid() })
}

#[cfg(not(target_os = "linux"))]
fn current_thread_id() -> Option<i32> {
    None
}

/// Moves a thread of this process to `SCHED_IDLE`: it then gets a core only when no other
/// thread wants one.
#[cfg(target_os = "linux")]
fn run_only_when_idle(thread_id: i32) {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call's duration; a thread that has ended
    // meanwhile makes the call fail with ESRCH, which changes nothing.
    let failed = unsafe { libc::sched_setscheduler(thread_id, libc::SCHED_IDLE, &param) } != 0;
    if failed {
        tracing::warn!(
            thread_id,
            error = %std::io::Error::last_os_error(),
            "an overdue thread keeps its priority"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn run_only_when_idle(_thread_id: i32) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    const STACK: usize = 1 << 20;

    /// Spins like llama.cpp's grammar code (it cannot be told to stop): says on `seen` whether
    /// it saw itself moved to the idle class, then goes on until `release` is set.
    fn spin(seen: mpsc::Sender<bool>, release: Arc<AtomicBool>) {
        let give_up = Instant::now() + Duration::from_secs(120);
        let mut told = false;
        while Instant::now() < give_up && !release.load(Ordering::SeqCst) {
            if !told && runs_only_when_idle() {
                told = seen.send(true).is_ok();
            }
            std::hint::spin_loop();
        }
        if !told {
            let _ = seen.send(false);
        }
    }

    #[cfg(target_os = "linux")]
    fn runs_only_when_idle() -> bool {
        // SAFETY: asks for the calling thread's own policy.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
    }

    #[cfg(not(target_os = "linux"))]
    fn runs_only_when_idle() -> bool {
        true
    }

    #[test]
    fn work_within_its_deadline_answers() {
        static WORKERS: DeadlineWorkers = DeadlineWorkers::new(1);
        let answer = WORKERS.run("quick", STACK, Duration::from_secs(120), || 42);
        assert_eq!(answer.unwrap(), 42);
        assert_eq!(WORKERS.overdue(), 0);
    }

    #[test]
    fn an_overdue_thread_runs_at_idle_priority_and_is_counted_until_it_ends() {
        static WORKERS: DeadlineWorkers = DeadlineWorkers::new(1);
        let (report, seen) = mpsc::channel();
        let release = Arc::new(AtomicBool::new(false));
        let spinning = release.clone();
        let missed = WORKERS.run("spinning", STACK, Duration::from_millis(1), move || {
            spin(report, spinning)
        });
        assert!(matches!(missed, Err(DeadlineError::Missed)), "{missed:?}");
        assert_eq!(WORKERS.overdue(), 1);

        // At the limit, nothing new starts.
        let refused = WORKERS.run("refused", STACK, Duration::from_secs(120), || 1);
        assert!(
            matches!(refused, Err(DeadlineError::Busy { overdue: 1 })),
            "{refused:?}"
        );

        assert!(seen.recv().unwrap(), "the overdue thread kept its priority");
        release.store(true, Ordering::SeqCst);
        let give_up = Instant::now() + Duration::from_secs(120);
        while WORKERS.overdue() > 0 {
            assert!(Instant::now() < give_up, "an ended thread is still counted");
            std::thread::sleep(Duration::from_millis(5));
        }
        let again = WORKERS.run("again", STACK, Duration::from_secs(120), || 2);
        assert_eq!(again.unwrap(), 2);
    }

    #[test]
    fn a_thread_that_panics_is_an_error_not_a_hang() {
        static WORKERS: DeadlineWorkers = DeadlineWorkers::new(1);
        let failed = WORKERS.run("panicking", STACK, Duration::from_secs(120), || -> u8 {
            panic!("grammar code failed")
        });
        assert!(
            matches!(failed, Err(DeadlineError::Thread(_))),
            "{failed:?}"
        );
        assert_eq!(WORKERS.overdue(), 0);
    }
}
