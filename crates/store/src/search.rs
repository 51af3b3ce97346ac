//! Searched text: what a search may hold, and the full-text (FTS5) query made of its words.
//! Runs and conversations search alike, so both take it from here.

use crate::error::StoreError;

/// Searched text is typed text: a control character (NUL above all, which SQLite reads as the
/// end of a pattern, so that a search failed or matched everything) is refused with a clear
/// error instead.
pub(crate) fn check_search_text(field: &str, text: &str) -> Result<(), StoreError> {
    match text.chars().find(|c| c.is_control()) {
        None => Ok(()),
        Some(c) => Err(StoreError::invalid(format!(
            "{field} must not hold control characters such as NUL or line breaks (it holds U+{:04X})",
            u32::from(c)
        ))),
    }
}

/// The words of `text` as an FTS5 query: each a quoted prefix (never FTS5 syntax, whatever
/// the user typed), all required. `None` without words.
pub(crate) fn match_expression(text: &str) -> Option<String> {
    let terms: Vec<String> = text
        .split_whitespace()
        .map(|word| format!("\"{}\"*", word.replace('"', "\"\"")))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" "))
}
