//! Grammar checks in a child process, which can be killed. llama.cpp's grammar code cannot be
//! interrupted, so a thread that compiles an ambiguous grammar runs on for minutes after its
//! request was refused. A binary that calls [`serve_grammar_checks`] first in `main` has each new
//! grammar compiled and tried in a copy of itself, with a memory limit, killed at the deadline: a
//! refused grammar then costs nothing after its refusal. Only a grammar the child passed is
//! compiled in the server, where it takes as long as it took there. Without the call (the tests'
//! binaries), grammars are checked on threads as before.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;

use crate::error::EngineError;
use crate::grammar::check_places::PLACES;
use crate::grammar::trial::{compile_and_try, deadline_missed};

/// Set in a child's environment to the model whose vocabulary it checks a grammar against.
const CHILD_MODEL_ENV: &str = "MEDUSA_GRAMMAR_CHECK_MODEL";

/// The most memory a check may take besides the model's mapped file: llama.cpp's grammar stacks
/// grow with a grammar's ambiguity.
const CHILD_MEMORY_BYTES: u64 = 2 << 30;

/// How often a running child is looked at.
const POLL: Duration = Duration::from_millis(10);

/// This executable, when it serves grammar checks.
static CHECKER: OnceLock<PathBuf> = OnceLock::new();

/// Call first in a binary's `main`. In a child started to check a grammar, checks it and exits;
/// otherwise has this process check grammars in such children from now on.
pub fn serve_grammar_checks() {
    if let Some(model) = std::env::var_os(CHILD_MODEL_ENV) {
        std::process::exit(run_check(Path::new(&model)));
    }
    if let Ok(exe) = std::env::current_exe() {
        let _ = CHECKER.set(exe);
    }
}

/// What the child wrote: the grammar passed, or why not.
fn verdict_line(checked: &Result<(), EngineError>) -> String {
    match checked {
        Ok(()) => "ok".to_owned(),
        Err(EngineError::InvalidGrammar(why)) => format!("invalid\t{why}"),
        Err(err) => format!("too_complex\t{}", without_prefix(err)),
    }
}

/// An error's reason without the "grammar too complex: " its display starts with.
fn without_prefix(err: &EngineError) -> String {
    match err {
        EngineError::GrammarTooComplex(why) => why.clone(),
        other => other.to_string(),
    }
}

fn parse_verdict(line: &str) -> Result<(), EngineError> {
    let line = line.trim_end();
    if line == "ok" {
        return Ok(());
    }
    match line.split_once('\t') {
        Some(("invalid", why)) => Err(EngineError::InvalidGrammar(why.to_owned())),
        Some(("too_complex", why)) => Err(EngineError::GrammarTooComplex(why.to_owned())),
        _ => Err(EngineError::GrammarTooComplex(
            "its check ended without an answer (out of memory?)".to_owned(),
        )),
    }
}

/// The child's side: the grammar on stdin, against `model`'s vocabulary; its verdict on stdout.
fn run_check(model: &Path) -> i32 {
    limit_memory(CHILD_MEMORY_BYTES);
    let mut gbnf = String::new();
    if std::io::stdin().read_to_string(&mut gbnf).is_err() {
        return 2;
    }
    let checked = load_vocabulary(model).and_then(|model| compile_and_try(&model, &gbnf).map(drop));
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{}", verdict_line(&checked)).is_err() {
        return 2;
    }
    0
}

fn load_vocabulary(path: &Path) -> Result<LlamaModel, EngineError> {
    let backend = crate::llama_process::backend()?;
    let params = LlamaModelParams::default().with_vocab_only(true);
    LlamaModel::load_from_file(backend, path, &params).map_err(|e| {
        EngineError::Context(format!("the grammar check could not read the model: {e}"))
    })
}

/// Caps the process's data segment (heap and private mappings, not the mapped model file).
fn limit_memory(bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct it is given and changes only this process's limits.
    unsafe {
        libc::setrlimit(libc::RLIMIT_DATA, &limit);
    }
}

/// Checks `gbnf` against the model at `model` in a child, killed at `deadline`, in a place of
/// `client`'s share (see [`check_places`](super::check_places)); `None` when this
/// process does not serve grammar checks (see [`serve_grammar_checks`]) or cannot start one (its
/// executable replaced by an upgrade, say): the grammar is then checked on a thread.
pub(crate) fn check_in_child(
    model: &Path,
    gbnf: &str,
    deadline: Duration,
    client: Option<IpAddr>,
) -> Option<Result<(), EngineError>> {
    let exe = CHECKER.get()?;
    let until = Instant::now() + deadline;
    let _place = match PLACES.take(client, until) {
        Ok(place) => place,
        Err(busy) => return Some(Err(busy)),
    };
    let started = Command::new(exe)
        .env(CHILD_MODEL_ENV, model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    match started {
        Ok(child) => Some(follow(child, gbnf, until, deadline)),
        Err(err) => {
            tracing::warn!(error = %err, "cannot start a grammar check; checking on a thread");
            None
        }
    }
}

/// Sends `gbnf` to a started check and waits for its verdict until `until`, killing it then.
fn follow(
    mut child: Child,
    gbnf: &str,
    until: Instant,
    deadline: Duration,
) -> Result<(), EngineError> {
    let stop = |child: &mut Child| {
        let _ = child.kill();
        let _ = child.wait();
    };
    // The grammar is at most 128 KiB (checked before): the pipe takes it while the child reads.
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(gbnf.as_bytes()));
    if let Some(Err(err)) = written {
        stop(&mut child);
        return Err(EngineError::Context(format!(
            "cannot send a grammar to its check: {err}"
        )));
    }
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < until => std::thread::sleep(POLL),
            Ok(None) => {
                stop(&mut child);
                tracing::info!(
                    deadline_s = deadline.as_secs(),
                    "grammar check stopped at its deadline"
                );
                return Err(deadline_missed(deadline));
            }
            Err(err) => {
                stop(&mut child);
                return Err(EngineError::Context(format!(
                    "cannot follow a grammar check: {err}"
                )));
            }
        }
    }
    let mut answer = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut answer);
    }
    parse_verdict(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_cross_the_pipe_as_they_were() {
        for checked in [
            Ok(()),
            Err(EngineError::InvalidGrammar("no root rule".into())),
            Err(EngineError::GrammarTooComplex(
                "checking the vocabulary against it took 2000 ms at token 3".into(),
            )),
        ] {
            assert_eq!(
                parse_verdict(&format!("{}\n", verdict_line(&checked))),
                checked
            );
        }
        // A child that died (killed for its memory) wrote nothing.
        assert!(matches!(
            parse_verdict(""),
            Err(EngineError::GrammarTooComplex(why)) if why.contains("without an answer")
        ));
    }
}
