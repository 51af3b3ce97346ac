//! Tests that read or change what belongs to the whole process (its resident memory, open
//! descriptors, environment or log subscriber) run in a process of their own: this binary holds
//! every integration test of the crate, and the others run beside them in its threads.

use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Set in the environment of a child process of this binary: the name, or the start of the
/// names, of the tests it was started for.
const ALONE: &str = "MEDUSA_TEST_ALONE";

/// In the test binary's run, runs `test` (its full name, `module::test`) again in a child
/// process of the same binary, where it is the only test, and returns true once it passed
/// there: the caller returns. In that child, returns false: the caller goes on with the test.
pub fn in_own_process(test: &str) -> bool {
    in_child(test, true, test)
}

/// As [`in_own_process`], for a test whose process it shares with the other tests whose names
/// start with `group` (e.g. `hostile::`), as when they were a test binary of their own: the
/// first of them to start runs them all in one child process, and each reports its own result
/// from there.
#[allow(dead_code, reason = "the server's tests use it, reading this file")]
pub fn in_group_process(group: &str, test: &str) -> bool {
    assert!(test.starts_with(group), "{test} is not in {group}");
    in_child(group, false, test)
}

fn in_child(filter: &str, exact: bool, test: &str) -> bool {
    if std::env::var(ALONE).is_ok_and(|started_for| started_for == filter) {
        return false;
    }
    let output = child_run(filter, exact);
    let verdict = format!("test {test} ... ");
    match output
        .lines()
        .find_map(|line| line.strip_prefix(verdict.as_str()))
    {
        Some("ok") => true,
        Some(_) => panic!(
            "{test} failed in its own process:\n{}",
            failure_of(&output, test)
        ),
        None => panic!("{test} did not run in its own process:\n{output}"),
    }
}

/// What a child process said of `test` when it failed: the output libtest shows for it, else
/// all of it.
fn failure_of<'a>(output: &'a str, test: &str) -> &'a str {
    let Some((_, rest)) = output.split_once(&format!("---- {test} stdout ----\n")) else {
        return output;
    };
    let end = ["\n---- ", "\nfailures:\n"]
        .iter()
        .filter_map(|next| rest.find(next))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

/// What the child process for `filter` wrote, stdout then stderr; started once per filter.
fn child_run(filter: &str, exact: bool) -> String {
    static RUNS: Mutex<Vec<(String, Arc<OnceLock<String>>)>> = Mutex::new(Vec::new());
    let run = {
        let mut runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner);
        match runs.iter().find(|(started_for, _)| started_for == filter) {
            Some((_, run)) => run.clone(),
            None => {
                let run = Arc::new(OnceLock::new());
                runs.push((filter.to_owned(), run.clone()));
                run
            }
        }
    };
    run.get_or_init(|| {
        let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
        command
            .args([filter, "--include-ignored"])
            .env(ALONE, filter);
        if exact {
            command.arg("--exact");
        }
        let output = command.output().expect("the test binary starts");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
    .clone()
}
