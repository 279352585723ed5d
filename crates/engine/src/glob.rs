//! Globs as policies and tool selectors write them.

/// Glob match (`*`, `?`, `[...]`); a pattern without wildcards is equality.
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    if !pattern.contains(['*', '?', '[']) {
        return pattern == text;
    }
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .is_ok_and(|g| g.compile_matcher().is_match(text))
}
