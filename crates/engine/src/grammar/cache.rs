//! Grammars already prepared, by their text: tool calls and JSON modes send the same grammar
//! request after request, and compiling and trying one takes a few hundred milliseconds here.
//! A grammar refused for what it is stays refused, so repeating it costs nothing either.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use crate::error::EngineError;
use crate::grammar::Grammar;

/// Grammars kept, the most recently used first.
const KEPT: usize = 16;

#[derive(Default)]
pub(crate) struct PreparedGrammars {
    kept: Mutex<VecDeque<(String, Result<Grammar, EngineError>)>>,
}

impl PreparedGrammars {
    /// A fresh copy of `gbnf`'s grammar (or its refusal), prepared by `prepare` if it is not
    /// kept yet.
    pub(crate) fn get_or_prepare(
        &self,
        gbnf: String,
        prepare: impl FnOnce(String) -> Result<Grammar, EngineError>,
    ) -> Result<Grammar, EngineError> {
        if let Some(kept) = self.take(&gbnf) {
            self.keep(gbnf, kept.clone());
            return kept;
        }
        let prepared = prepare(gbnf.clone());
        // Failing to start a thread, or finding every grammar thread or check taken, says
        // nothing of the grammar: the next request tries it again.
        if !matches!(
            prepared,
            Err(EngineError::Context(_)
                | EngineError::GrammarsBusy { .. }
                | EngineError::GrammarChecksBusy { .. }
                | EngineError::ClientGrammarChecksBusy { .. })
        ) {
            self.keep(gbnf, prepared.clone());
        }
        prepared
    }

    fn take(&self, gbnf: &str) -> Option<Result<Grammar, EngineError>> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let at = kept.iter().position(|(text, _)| text == gbnf)?;
        kept.remove(at).map(|(_, grammar)| grammar)
    }

    fn keep(&self, gbnf: String, grammar: Result<Grammar, EngineError>) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_front((gbnf, grammar));
        kept.truncate(KEPT);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn refused(text: String) -> Result<Grammar, EngineError> {
        Err(EngineError::InvalidGrammar(text))
    }

    #[test]
    fn a_grammar_is_prepared_once_while_it_is_kept() {
        let grammars = PreparedGrammars::default();
        let prepared = Cell::new(0);
        let prepare = |text: String| {
            prepared.set(prepared.get() + 1);
            refused(text)
        };
        for _ in 0..3 {
            let answer = grammars.get_or_prepare("root ::= x".into(), prepare);
            assert_eq!(
                answer.err(),
                Some(EngineError::InvalidGrammar("root ::= x".into()))
            );
        }
        assert_eq!(prepared.get(), 1);
        // Used again, it stays while KEPT - 1 others come.
        for i in 0..KEPT - 1 {
            let _ = grammars.get_or_prepare(format!("g{i}"), prepare);
        }
        let _ = grammars.get_or_prepare("root ::= x".into(), prepare);
        assert_eq!(prepared.get(), KEPT);
        // KEPT others push it out.
        for i in 0..KEPT {
            let _ = grammars.get_or_prepare(format!("h{i}"), prepare);
        }
        let _ = grammars.get_or_prepare("root ::= x".into(), prepare);
        assert_eq!(prepared.get(), 2 * KEPT + 1);
    }

    #[test]
    fn a_grammar_whose_thread_could_not_start_is_prepared_again() {
        let grammars = PreparedGrammars::default();
        let prepared = Cell::new(0);
        let no_thread = |_: String| {
            prepared.set(prepared.get() + 1);
            Err(EngineError::Context("no thread".into()))
        };
        let _ = grammars.get_or_prepare("root ::= x".into(), no_thread);
        let _ = grammars.get_or_prepare("root ::= x".into(), no_thread);
        assert_eq!(prepared.get(), 2);
    }

    #[test]
    fn a_grammar_refused_while_every_grammar_thread_was_taken_is_prepared_again() {
        let grammars = PreparedGrammars::default();
        let prepared = Cell::new(0);
        let busy_then_free = |text: String| {
            prepared.set(prepared.get() + 1);
            match prepared.get() {
                1 => Err(EngineError::GrammarsBusy { overdue: 4 }),
                _ => refused(text),
            }
        };
        let first = grammars.get_or_prepare("root ::= x".into(), busy_then_free);
        assert_eq!(first.err(), Some(EngineError::GrammarsBusy { overdue: 4 }));
        let second = grammars.get_or_prepare("root ::= x".into(), busy_then_free);
        assert_eq!(
            second.err(),
            Some(EngineError::InvalidGrammar("root ::= x".into()))
        );
        // What the grammar itself earned is kept.
        let _ = grammars.get_or_prepare("root ::= x".into(), busy_then_free);
        assert_eq!(prepared.get(), 2);
    }
}
