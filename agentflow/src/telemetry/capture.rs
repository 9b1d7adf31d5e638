//! The opt-in to message contents, tool arguments and results on spans, and the masking every
//! captured text goes through first.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::access::personal::MASK;
use crate::secret::redact_credentials;

/// Whether contents go on spans: set by `agentflow::otel` when its layer is built.
static CAPTURE: AtomicBool = AtomicBool::new(false);

/// Whether an OpenTelemetry layer was built in this process (spans can then be linked).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Turns content capture on or off for the process.
#[cfg(feature = "otel")]
pub(crate) fn set_capture(on: bool) {
    CAPTURE.store(on, Ordering::Relaxed);
}

/// Records that an OpenTelemetry layer exists in this process.
#[cfg(feature = "otel")]
pub(crate) fn set_installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// Whether message contents, tool arguments and results go on spans (one atomic load; always
/// off without the `otel` feature).
pub(crate) fn enabled() -> bool {
    cfg!(feature = "otel") && CAPTURE.load(Ordering::Relaxed)
}

/// Whether an OpenTelemetry layer was built in this process (always `false` without `otel`).
pub(crate) fn installed() -> bool {
    cfg!(feature = "otel") && INSTALLED.load(Ordering::Relaxed)
}

/// `text` as it may go on a span: every credential the scan finds redacted, then every
/// non-empty value of `masked` (the state's personal and credential field values) replaced by
/// the mask wherever it occurs (ASCII case ignored), longest first. Apply it to each text leaf,
/// never to serialized JSON (a short value would rewrite its keys and punctuation).
pub(crate) fn mask(text: &str, masked: &[String]) -> String {
    let mut out = redact_credentials(text).into_owned();
    let mut values: Vec<&str> = masked.iter().map(String::as_str).filter(|v| !v.is_empty()).collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    for value in values {
        if let Some(replaced) = replace_ignoring_ascii_case(&out, value) {
            out = replaced;
        }
    }
    out
}

/// `text` with every occurrence of `value` (ASCII case ignored) replaced by the mask, or `None`
/// when there is none. ASCII lowercasing keeps every byte offset, so the matches found in the
/// lowercased text are the same ranges of `text`.
fn replace_ignoring_ascii_case(text: &str, value: &str) -> Option<String> {
    let haystack = text.to_ascii_lowercase();
    let needle = value.to_ascii_lowercase();
    let mut matches = haystack.match_indices(needle.as_str()).peekable();
    matches.peek()?;
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in matches {
        out.push_str(&text[last..at]);
        out.push_str(MASK);
        last = at + needle.len();
    }
    out.push_str(&text[last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_redacted() {
        let out = mask("use key sk_live_51H8aBcDeFgHiJkLmNoPqRsTu please", &[]);
        assert!(!out.contains("sk_live_51H8aBcDeFgHiJkLmNoPqRsTu"), "{out}");
        assert!(out.starts_with("use key "), "{out}");
    }

    #[test]
    fn personal_values_are_masked_inside_longer_text() {
        let values = vec!["Ada Lovelace".to_string(), "ada@example.com".to_string(), String::new()];
        let out = mask("refund for Ada Lovelace (ada@example.com), order 7", &values);
        assert_eq!(out, format!("refund for {MASK} ({MASK}), order 7"));
    }

    #[test]
    fn the_longest_value_is_masked_first() {
        let values = vec!["Ada".to_string(), "Ada Lovelace".to_string()];
        assert_eq!(mask("Ada Lovelace", &values), MASK);
    }

    #[test]
    fn matching_ignores_ascii_case() {
        let values = vec!["Ada Lovelace".to_string()];
        assert_eq!(mask("ADA LOVELACE and ada lovelace, Ünï", &values), format!("{MASK} and {MASK}, Ünï"));
    }

    #[test]
    fn plain_text_is_unchanged() {
        let values = vec!["Ada".to_string()];
        assert_eq!(mask("order 7 is late", &values), "order 7 is late");
    }

    /// No layer is built in these tests: contents stay off and spans unlinked, and with nothing
    /// to mask a text is unchanged.
    #[test]
    fn the_flags_are_off_until_a_layer_is_built() {
        assert!(!enabled() && !installed());
        assert_eq!(mask(r#"{"role":"user","n":12345}"#, &[]), r#"{"role":"user","n":12345}"#);
    }
}
