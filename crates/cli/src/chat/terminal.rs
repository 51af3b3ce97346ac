//! The terminal while an answer streams: Ctrl-C stops the answer instead of the program, and
//! what is typed meanwhile is neither echoed into the answer nor left for the next prompt.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use engine::Canceller;
use nix::sys::termios::{self, LocalFlags, SetArg, Termios};

/// Routes Ctrl-C (SIGINT) to the answer streaming, if any; without one it ends the program as
/// Ctrl-C would. At the prompt the line editor reads Ctrl-C as a key, not a signal.
pub struct Interrupts {
    current: Arc<Mutex<Option<Canceller>>>,
}

impl Interrupts {
    pub fn install() -> anyhow::Result<Self> {
        let current: Arc<Mutex<Option<Canceller>>> = Arc::default();
        let handler = current.clone();
        ctrlc::set_handler(move || {
            match handler
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                Some(answer) => answer.cancel(),
                None => std::process::exit(130),
            }
        })
        .context("installing the Ctrl-C handler")?;
        Ok(Self { current })
    }

    /// Runs `f` with Ctrl-C cancelling `answer`.
    pub fn during<T>(&self, answer: Canceller, f: impl FnOnce() -> T) -> T {
        self.set(Some(answer));
        let result = f();
        self.set(None);
        result
    }

    fn set(&self, answer: Option<Canceller>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = answer;
    }
}

/// While alive, input typed on the terminal is not echoed; when dropped, the terminal is put
/// back and what was typed is discarded. Does nothing when stdin is no terminal.
pub struct QuietInput {
    saved: Option<Termios>,
}

impl QuietInput {
    pub fn new() -> Self {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Self { saved: None };
        }
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return Self { saved: None };
        };
        let mut quiet = saved.clone();
        // ISIG stays on: Ctrl-C must still arrive as a signal.
        quiet
            .local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ICANON);
        let applied = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &quiet).is_ok();
        Self {
            saved: applied.then_some(saved),
        }
    }
}

impl Drop for QuietInput {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let stdin = std::io::stdin();
            let _ = termios::tcflush(stdin.as_fd(), termios::FlushArg::TCIFLUSH);
            let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, saved);
        }
    }
}
