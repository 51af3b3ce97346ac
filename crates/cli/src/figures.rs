//! How the command line writes figures.

/// Shares as percents with one decimal, joined by `/` (e.g. per head: `30.7/15.7/10.0`).
pub(crate) fn percents(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{:.1}", v * 100.0))
        .collect::<Vec<_>>()
        .join("/")
}
