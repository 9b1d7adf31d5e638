//! Credential-like text replaced in a line that is stored or shown in clear (a thread's status
//! line, a journal marker), and serde errors described without the value they quote.

use std::borrow::Cow;

use super::credential_scan::{Span, find_from, percent_decoded};

/// `text` with every credential-like part (as [`scan_str`](super::scan_str) finds them)
/// replaced by `[redacted <kind>]`: `Authorization: [redacted bearer token]`. Text without one
/// is borrowed as it is (nothing is allocated).
pub fn redact_credentials(text: &str) -> Cow<'_, str> {
    let once = replace_spans(text, text.as_bytes(), None);
    if !once.contains('%') {
        return once;
    }
    // A token written percent-encoded (`sk%2Dproj%2D..`) is found in a decoded copy.
    let Some((decoded, from)) = percent_decoded(once.as_bytes()) else { return once };
    match replace_spans(&once, &decoded, Some(&from)) {
        Cow::Borrowed(_) => once,
        Cow::Owned(twice) => Cow::Owned(twice),
    }
}

/// `text` with the spans found in `bytes` replaced; `from` maps an index of `bytes` to one of
/// `text` (when `bytes` is a decoded copy of it).
fn replace_spans<'a>(text: &'a str, bytes: &[u8], from: Option<&[usize]>) -> Cow<'a, str> {
    let at = |i: usize| from.map_or(Some(i), |f| f.get(i).copied());
    let mut out: Option<String> = None;
    let (mut pos, mut kept) = (0, 0);
    while let Ok(Span { start, end, kind }) = find_from(bytes, pos, false) {
        pos = end.max(start + 1);
        let (Some(a), Some(b)) = (at(start), at(end)) else { break };
        let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
        // Spans start and end next to ASCII bytes, so on character boundaries.
        out.push_str(text.get(kept..a).unwrap_or_default());
        out.push_str("[redacted ");
        out.push_str(kind.as_str());
        out.push(']');
        kept = b;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.push_str(text.get(kept..).unwrap_or_default());
            Cow::Owned(out)
        }
    }
}

/// What went wrong decoding a value with serde, without quoting the value: `invalid type,
/// expected u32` rather than `invalid type: string "4111 1111 1111 1111", expected u32`. Kept
/// are what the target type says (what it expects, a missing or duplicate field) and where
/// (line and column, for text); a message of another form is reduced to its category.
pub fn describe_decode_error(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let message = match e.line() {
        0 => full.as_str(),
        line => full.strip_suffix(&format!(" at line {line} column {}", e.column())).unwrap_or(&full),
    };
    let mut out = if message.starts_with("missing field `") || message.starts_with("duplicate field `") {
        message.to_string()
    } else if let Some(head) = ["invalid type", "invalid value", "invalid length", "unknown variant", "unknown field"]
        .into_iter()
        .find(|h| message.starts_with(h))
    {
        // The expected part comes after the value, so the last `, expected ` is the type's.
        match message.rfind(", expected ") {
            Some(i) => format!("{head}{}", &message[i..]),
            None => head.to_string(),
        }
    } else {
        match e.classify() {
            serde_json::error::Category::Io => "an input error",
            serde_json::error::Category::Syntax => "a syntax error",
            serde_json::error::Category::Eof => "unexpected end of input",
            serde_json::error::Category::Data => "a value of another shape than expected",
        }
        .to_string()
    };
    if e.line() > 0 {
        out.push_str(&format!(" at line {} column {}", e.line(), e.column()));
    }
    redact_credentials(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI: &str = "sk-proj-4fT9xQ2mL7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ";
    const GITHUB: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";

    #[test]
    fn credentials_are_replaced_by_their_kind() {
        let table = [
            (format!("node failed: key {OPENAI} refused"), "node failed: key [redacted OpenAI API key] refused"),
            (
                format!("Authorization: Bearer aB3dE5gH7jK9mN1pQ3sT5vX7 and {GITHUB}."),
                "Authorization: [redacted bearer token] and [redacted GitHub token].",
            ),
            (format!("url ?token={}", OPENAI.replace('-', "%2D")), "url ?token=[redacted OpenAI API key]"),
            ("héllo ✓ Bearer\taB3dE5gH7jK9mN1pQ3sT5vX7 ✓".to_string(), "héllo ✓ [redacted bearer token] ✓"),
        ];
        for (text, want) in table {
            let got = redact_credentials(&text);
            assert_eq!(got, want);
            assert!(matches!(got, Cow::Owned(_)));
        }
    }

    #[test]
    fn text_without_credentials_is_borrowed() {
        for text in ["", "the run failed: budget exhausted (50%)", "task-sk-list ✓", "100%2D"] {
            assert!(matches!(redact_credentials(text), Cow::Borrowed(t) if t == text), "{text:?}");
        }
    }

    #[test]
    fn decode_errors_do_not_quote_the_value() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Answer {
            amount: u32,
            mode: Mode,
        }
        #[derive(Debug, serde::Deserialize)]
        enum Mode {
            Fast,
        }
        let secret = "4111 1111 1111 1111";
        let cases = [
            (serde_json::json!({"amount": secret, "mode": "Fast"}), "invalid type, expected u32"),
            (serde_json::json!({"amount": 1, "mode": secret}), "unknown variant, expected `Fast`"),
            (serde_json::json!({"amount": 1}), "missing field `mode`"),
            (serde_json::json!(secret), "invalid type, expected struct Answer"),
        ];
        for (value, want) in cases {
            let e = serde_json::from_value::<Answer>(value).unwrap_err();
            assert!(e.to_string().contains(secret) || want.starts_with("missing"), "{e}");
            let got = describe_decode_error(&e);
            assert_eq!(got, want);
            assert!(!got.contains(secret));
        }
        let e = serde_json::from_str::<Answer>(&format!("{{\"amount\": \"{secret}\"")).unwrap_err();
        assert_eq!(describe_decode_error(&e), "invalid type, expected u32 at line 1 column 32");
    }
}
