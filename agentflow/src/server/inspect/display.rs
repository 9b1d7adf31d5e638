//! Times and stored values shown to people, the same way in the inbox's pages and the
//! `agentflow` CLI's tables: `3m ago`, `in 2h`, a JSON value cut to a cell's width.

use serde_json::Value;

/// How long ago `at` (unix millis) was at `now`, for people: `45s ago`, `3m ago`, `2h ago`,
/// `4d ago`; a time after `now` is `in 3m`.
pub fn ago(at: u64, now: u64) -> String {
    if at > now {
        return format!("in {}", span(at - now));
    }
    format!("{} ago", span(now - at))
}

/// A duration in millis, for people, in its largest whole unit: `45s`, `3m`, `2h`, `4d`.
pub(crate) fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A JSON value on one line (a string as its text), cut to `max` characters with `…`.
pub fn brief(value: &Value, max: usize) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn times_read_in_their_largest_whole_unit() {
        assert_eq!(span(45_999), "45s");
        assert_eq!(span(180_000), "3m");
        assert_eq!(span(7_200_000), "2h");
        assert_eq!(span(4 * 86_400_000), "4d");
        assert_eq!(ago(1_000, 61_000), "1m ago");
        assert_eq!(ago(61_000, 1_000), "in 1m");
    }

    #[test]
    fn a_long_value_is_cut_to_its_cell() {
        assert_eq!(brief(&json!("short"), 10), "short");
        assert_eq!(brief(&json!({"a": 1}), 10), "{\"a\":1}");
        assert_eq!(brief(&json!("abcdefghij"), 5), "abcd…");
    }
}
