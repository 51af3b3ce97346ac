//! WebKitGTK turns the POSIX locale into `navigator.language`; under `LANG=C` (servers, minimal
//! containers) that is "C", which is no language tag, and `Intl` then throws at the UI's start.

/// The variables the language is read from, in order of precedence.
const LOCALE_VARIABLES: [&str; 4] = ["LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"];

/// Whether a locale value names a language (not unset, empty, `C` or `POSIX`).
pub fn names_a_language(value: &str) -> bool {
    let base = value.split(['.', '@']).next().unwrap_or("");
    !(base.is_empty() || base == "C" || base == "POSIX")
}

/// Sets `LANG=en_US.UTF-8` when no locale variable names a language. Call first thing in
/// `main`, before any other thread starts.
pub fn ensure_language_tag() {
    let named = LOCALE_VARIABLES
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .any(|value| names_a_language(&value));
    if !named {
        for name in LOCALE_VARIABLES {
            std::env::remove_var(name);
        }
        std::env::set_var("LANG", "en_US.UTF-8");
    }
}

#[cfg(test)]
mod tests {
    use super::names_a_language;

    #[test]
    fn c_and_posix_name_no_language() {
        for value in ["", "C", "C.UTF-8", "POSIX", "C@euro"] {
            assert!(!names_a_language(value), "{value}");
        }
        for value in ["en_US.UTF-8", "de_DE", "fr", "pt_BR@latin"] {
            assert!(names_a_language(value), "{value}");
        }
    }
}
