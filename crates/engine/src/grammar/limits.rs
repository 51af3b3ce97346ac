//! What a grammar may ask of the engine, checked on its text before llama.cpp sees it.
//! llama.cpp's GBNF parser recurses once per nested group and its JSON-schema converter once per
//! nested regex group: a few thousand levels overflow a thread's stack and abort the process.

use crate::error::EngineError;

/// Longest GBNF text a request may carry (a JSON schema's converted grammar included). Real
/// schemas and grammars are a few kilobytes; the limit leaves ten times that.
pub const MAX_GRAMMAR_BYTES: usize = 128 * 1024;

/// Deepest nesting of parenthesised groups in a GBNF text, or in a schema's regex pattern.
/// llama.cpp's converter nests a group per optional property and per bounded repetition
/// (`a{0,200}` is 200 deep), so the limit is well above what real schemas produce.
pub const MAX_GRAMMAR_NESTING: usize = 1024;

/// Refuses GBNF text that is too long or nested too deeply, naming the limit.
pub(crate) fn check_gbnf(gbnf: &str) -> Result<(), EngineError> {
    if gbnf.len() > MAX_GRAMMAR_BYTES {
        return Err(EngineError::GrammarTooComplex(format!(
            "the grammar is {} bytes; at most {MAX_GRAMMAR_BYTES} are taken",
            gbnf.len()
        )));
    }
    let depth = gbnf_nesting(gbnf);
    if depth > MAX_GRAMMAR_NESTING {
        return Err(EngineError::GrammarTooComplex(format!(
            "the grammar nests groups {depth} deep; at most {MAX_GRAMMAR_NESTING} levels are taken"
        )));
    }
    Ok(())
}

/// The deepest nesting of `(` groups in GBNF text, outside string literals, character classes
/// and comments (where parentheses are characters, not groups).
fn gbnf_nesting(gbnf: &str) -> usize {
    #[derive(Clone, Copy, PartialEq)]
    enum Inside {
        Rule,
        Literal,
        Class,
        Comment,
    }
    let (mut inside, mut escaped) = (Inside::Rule, false);
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in gbnf.chars() {
        match inside {
            Inside::Literal | Inside::Class if escaped => escaped = false,
            Inside::Literal | Inside::Class if c == '\\' => escaped = true,
            Inside::Literal if c == '"' => inside = Inside::Rule,
            Inside::Class if c == ']' => inside = Inside::Rule,
            Inside::Comment if c == '\n' || c == '\r' => inside = Inside::Rule,
            Inside::Literal | Inside::Class | Inside::Comment => {}
            Inside::Rule => match c {
                '"' => inside = Inside::Literal,
                '[' => inside = Inside::Class,
                '#' => inside = Inside::Comment,
                '(' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    deepest
}

/// The deepest nesting of groups in a regular expression (outside character classes and
/// escapes), as the schema converter will recurse through it.
pub(crate) fn pattern_nesting(pattern: &str) -> usize {
    let (mut in_class, mut escaped) = (false, false);
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in pattern.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' if !in_class => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_counts_groups_but_not_parentheses_in_literals_classes_or_comments() {
        assert_eq!(gbnf_nesting(r#"root ::= "a""#), 0);
        assert_eq!(gbnf_nesting(r#"root ::= ("a" ("b" | "c")*)?"#), 2);
        assert_eq!(gbnf_nesting(r#"root ::= "((((" [()] "\"(" ("x")"#), 1);
        assert_eq!(gbnf_nesting("root ::= \"a\" # ((((\nx ::= (\"b\")"), 1);
        assert_eq!(gbnf_nesting(r#"root ::= [\]((] ("a")"#), 1);
    }

    #[test]
    fn a_grammar_nested_thousands_deep_is_refused_naming_the_limit() {
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(5000), ")".repeat(5000));
        let err = check_gbnf(&deep).unwrap_err();
        assert_eq!(err.code(), "grammar_too_complex");
        assert!(err.to_string().contains("5000 deep"), "{err}");
        assert!(err.to_string().contains("1024"), "{err}");
        let fits = format!("root ::= {}\"a\"{}", "(".repeat(1024), ")".repeat(1024));
        assert_eq!(check_gbnf(&fits), Ok(()));
    }

    #[test]
    fn a_grammar_over_the_size_limit_is_refused() {
        let long = format!("root ::= \"{}\"", "a".repeat(MAX_GRAMMAR_BYTES));
        let err = check_gbnf(&long).unwrap_err();
        assert!(
            err.to_string().contains(&MAX_GRAMMAR_BYTES.to_string()),
            "{err}"
        );
    }

    #[test]
    fn pattern_nesting_skips_escapes_and_classes() {
        assert_eq!(pattern_nesting("^(a+)+$"), 1);
        assert_eq!(pattern_nesting(r"^\((a|(b))[(]$"), 2);
        assert_eq!(pattern_nesting(&"(".repeat(3000)), 3000);
    }
}
