//! The credential scan: finds text that looks like a credential (an API key, a token, a
//! private key) in JSON, so that a durable run refuses to store it.
//!
//! [`scan_str`] decides for one string; [`scan_value`] walks a JSON value and names the first
//! hit by its JSON pointer (RFC 6901). [`scan_json_text`] is the fast pass over serialised
//! JSON that a durable write runs first: it allocates nothing and may answer `true` for text
//! that the exact walk then clears (a hit in a field allowed to hold credentials), never
//! `false` for text that holds one.

use std::fmt;

use serde_json::Value;

/// What a credential-like string looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CredentialKind {
    /// An OpenAI API key (`sk-...`, `sk-proj-...`, `sk-svcacct-...`, `sk-admin-...`).
    OpenAi,
    /// An Anthropic API key (`sk-ant-...`).
    Anthropic,
    /// An AWS access key id (`AKIA...`, `ASIA...`).
    AwsAccessKey,
    /// A GitHub token (`ghp_`, `gho_`, `ghs_`, `ghu_`, `ghr_`, `github_pat_`).
    GitHub,
    /// A Slack token (`xoxb-`, `xoxp-`, `xoxa-`, `xoxr-`, `xoxs-`, `xoxe-`, `xapp-`).
    Slack,
    /// A Stripe secret or restricted key (`sk_live_`, `rk_live_`, `sk_test_`, `rk_test_`).
    Stripe,
    /// A Google API key (`AIza` and at least 35 characters).
    GoogleApiKey,
    /// A JSON Web Token (three base64url parts, the first a JSON header with `alg`).
    Jwt,
    /// A PEM private key (`-----BEGIN ... PRIVATE KEY-----`).
    PemPrivateKey,
    /// A bearer token (`Bearer <token>`, as in an `Authorization` header).
    BearerToken,
}

impl CredentialKind {
    /// A short name: `OpenAI API key`.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialKind::OpenAi => "OpenAI API key",
            CredentialKind::Anthropic => "Anthropic API key",
            CredentialKind::AwsAccessKey => "AWS access key id",
            CredentialKind::GitHub => "GitHub token",
            CredentialKind::Slack => "Slack token",
            CredentialKind::Stripe => "Stripe secret key",
            CredentialKind::GoogleApiKey => "Google API key",
            CredentialKind::Jwt => "JSON Web Token",
            CredentialKind::PemPrivateKey => "PEM private key",
            CredentialKind::BearerToken => "bearer token",
        }
    }

    /// The name with its article, for a sentence: `an OpenAI API key`, `a GitHub token`.
    pub fn with_article(self) -> String {
        let name = self.as_str();
        let article = if name.starts_with(['A', 'E', 'I', 'O', 'U', 'a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
        format!("{article} {name}")
    }
}

impl fmt::Display for CredentialKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a credential-like string is, and what it looks like (never the string itself).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CredentialHit {
    /// The JSON pointer (RFC 6901) of the string, or of the member whose key it is:
    /// `/messages/3/content`. A segment that looks like a credential itself is written
    /// [`KEY_PLACEHOLDER`] (`/tokens/{key}`).
    pub pointer: String,
    /// What it looks like.
    pub kind: CredentialKind,
}

/// The first credential-like text in `s`, anywhere in it (a token inside a message too).
pub fn scan_str(s: &str) -> Option<CredentialKind> {
    scan_bytes(s.as_bytes(), false)
}

/// Whether serialised JSON `text` may hold a credential-like string: `false` means none does.
/// It reads the text once and allocates nothing (unless the text holds a percent-encoded `-`,
/// `_` or space, which is decoded into a copy and read again).
pub fn scan_json_text(text: &[u8]) -> bool {
    scan_bytes(text, true).is_some()
}

/// The first credential-like string in `value` (keys included), by its JSON pointer.
pub fn scan_value(value: &Value) -> Option<CredentialHit> {
    scan_value_skipping(value, &[])
}

/// [`scan_value`], leaving out the parts at the JSON pointers `skip` (fields allowed to hold
/// credentials, stored sealed).
///
/// The pointer of a hit never holds a credential: a member whose key looks like one is named
/// `{key}` (`/tokens/{key}`), and so is any other segment that does.
pub fn scan_value_skipping(value: &Value, skip: &[String]) -> Option<CredentialHit> {
    let mut pointer = String::new();
    walk(value, &mut pointer, skip)
}

/// What a pointer segment holding a credential is replaced by.
pub const KEY_PLACEHOLDER: &str = "{key}";

fn walk(value: &Value, pointer: &mut String, skip: &[String]) -> Option<CredentialHit> {
    if !skip.is_empty() && skip.iter().any(|s| s == pointer) {
        return None;
    }
    match value {
        Value::String(s) => scan_str(s).map(|kind| CredentialHit { pointer: safe_pointer(pointer), kind }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = pointer.len();
            pointer.push('/');
            pointer.push_str(&i.to_string());
            let hit = walk(item, pointer, skip);
            pointer.truncate(len);
            hit
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            let len = pointer.len();
            pointer.push('/');
            for c in key.chars() {
                match c {
                    '~' => pointer.push_str("~0"),
                    '/' => pointer.push_str("~1"),
                    c => pointer.push(c),
                }
            }
            let hit = if !skip.is_empty() && skip.iter().any(|s| s == pointer) {
                None
            } else if let Some(kind) = scan_str(key) {
                Some(CredentialHit { pointer: safe_pointer(pointer), kind })
            } else {
                walk(item, pointer, skip)
            };
            pointer.truncate(len);
            hit
        }),
        _ => None,
    }
}

/// `pointer` with every segment that looks like a credential replaced by [`KEY_PLACEHOLDER`].
fn safe_pointer(pointer: &str) -> String {
    let mut out = String::with_capacity(pointer.len());
    for segment in pointer.split('/').skip(1) {
        out.push('/');
        let key = segment.replace("~1", "/").replace("~0", "~");
        out.push_str(if scan_str(&key).is_some() { KEY_PLACEHOLDER } else { segment });
    }
    out
}

/// Whether a token may start at `i`. In JSON `text`, a character before it may have been
/// written as an escape (`\n`, `\u001f`), which ends in a letter or digit: a backslash among
/// the 6 bytes before counts as a start too.
fn starts_token(s: &[u8], i: usize, text: bool) -> bool {
    if i == 0 || CLASS[usize::from(s[i - 1])] & WORDY == 0 {
        return true;
    }
    text && s[i.saturating_sub(6)..i].contains(&b'\\')
}

/// How many bytes from `i` satisfy `ok`.
fn run(s: &[u8], i: usize, ok: impl Fn(u8) -> bool) -> usize {
    s.get(i..).map_or(0, |rest| rest.iter().take_while(|b| ok(**b)).count())
}

/// A byte of a key or of a base64url part: `[A-Za-z0-9_-]`.
fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Which of upper case, lower case and digits `s` holds.
fn mix(s: &[u8]) -> (bool, bool, bool) {
    let (mut upper, mut lower, mut digit) = (false, false, false);
    for b in s {
        upper |= b.is_ascii_uppercase();
        lower |= b.is_ascii_lowercase();
        digit |= b.is_ascii_digit();
    }
    (upper, lower, digit)
}

/// Mixed case and a digit, as a random key has (and prose, a slug or a placeholder has not).
fn random_looking(s: &[u8]) -> bool {
    mix(s) == (true, true, true)
}

/// A letter and a digit (so not one repeated character, as in a placeholder `XXXX`).
fn letter_and_digit(s: &[u8]) -> bool {
    let (upper, lower, digit) = mix(s);
    (upper || lower) && digit && s.first().is_some_and(|f| s.iter().any(|b| b != f))
}

/// Byte classes for the scan's loop: [`WORDY`] continues a word, [`TRIGGER`] may start a
/// shape, [`PERCENT`] may start a percent escape.
const WORDY: u8 = 1;
const TRIGGER: u8 = 2;
const PERCENT: u8 = 4;
static CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' {
            table[b] |= WORDY;
        }
        if matches!(c, b's' | b'r' | b'A' | b'g' | b'x' | b'e' | b'-' | b'B' | b'b') {
            table[b] |= TRIGGER;
        }
        if c == b'%' {
            table[b] |= PERCENT;
        }
        b += 1;
    }
    table
};

/// A credential-like span of `s`: where it starts and ends, and what it looks like.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) kind: CredentialKind,
}

fn scan_bytes(s: &[u8], text: bool) -> Option<CredentialKind> {
    match find_from(s, 0, text) {
        Ok(span) => Some(span.kind),
        Err(seen) if seen & PERCENT != 0 => {
            percent_decoded(s).and_then(|(d, _)| find_from(&d, 0, text).ok()).map(|h| h.kind)
        }
        Err(_) => None,
    }
}

/// The first credential-like span of `s` at or after `from`; else the byte classes seen.
pub(super) fn find_from(s: &[u8], from: usize, text: bool) -> Result<Span, u8> {
    // Only a trigger byte at the start of a word is looked at further; most bytes cost one
    // table read.
    let mut prev_wordy = from > 0 && CLASS[usize::from(s[from - 1])] & WORDY != 0;
    let mut seen = 0;
    for (i, &b) in s.iter().enumerate().skip(from) {
        let class = CLASS[usize::from(b)];
        seen |= class;
        if class & TRIGGER != 0
            && (!prev_wordy || starts_token(s, i, text))
            && let Some((kind, end)) = shape_at(s, i, text)
        {
            return Ok(Span { start: i, end, kind });
        }
        prev_wordy = class & WORDY != 0;
    }
    Err(seen)
}

/// `s` with `%2D`, `%5F` and `%20` (either case) decoded, and for each byte of the copy (and
/// its end) where it came from in `s`; `None` when there is nothing to decode.
pub(super) fn percent_decoded(s: &[u8]) -> Option<(Vec<u8>, Vec<usize>)> {
    let decode = |w: &[u8]| match w {
        [b'%', b'2', b'D' | b'd'] => Some(b'-'),
        [b'%', b'5', b'F' | b'f'] => Some(b'_'),
        [b'%', b'2', b'0'] => Some(b' '),
        _ => None,
    };
    if !s.windows(3).any(|w| decode(w).is_some()) {
        return None;
    }
    let (mut out, mut from) = (Vec::with_capacity(s.len()), Vec::with_capacity(s.len() + 1));
    let mut i = 0;
    while i < s.len() {
        from.push(i);
        match s.get(i..i + 3).and_then(decode) {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    from.push(s.len());
    Some((out, from))
}

/// The credential shape starting at `i`, if any, and where it ends.
fn shape_at(s: &[u8], i: usize, text: bool) -> Option<(CredentialKind, usize)> {
    let rest = &s[i..];
    let after = |prefix: &[u8]| rest.starts_with(prefix).then_some(i + prefix.len());
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    match s[i] {
        b's' | b'r' => {
            if let Some(j) = after(b"sk-ant-") {
                let n = run(s, j, key_char);
                return (n >= 32).then_some((CredentialKind::Anthropic, j + n));
            }
            let project = [b"sk-proj-".as_slice(), b"sk-svcacct-", b"sk-admin-"];
            if let Some(j) = project.iter().find_map(|p| after(p)) {
                let n = run(s, j, key_char);
                return (n >= 40).then_some((CredentialKind::OpenAi, j + n));
            }
            if let Some(j) = after(b"sk-") {
                let n = run(s, j, alnum);
                return (n >= 32 && random_looking(&s[j..j + n])).then_some((CredentialKind::OpenAi, j + n));
            }
            let stripe = [b"sk_live_".as_slice(), b"rk_live_", b"sk_test_", b"rk_test_"];
            let j = stripe.iter().find_map(|p| after(p))?;
            let n = run(s, j, alnum);
            (n >= 16).then_some((CredentialKind::Stripe, j + n))
        }
        b'A' => {
            if let Some(j) = after(b"AKIA").or_else(|| after(b"ASIA")) {
                let n = run(s, j, |b| b.is_ascii_uppercase() || b.is_ascii_digit());
                let ends = s.get(j + 16).is_none_or(|b| !b.is_ascii_alphanumeric());
                // `AKIAIOSFODNN7EXAMPLE` and its kin are the documentation's examples.
                let example = s[j..j + n].ends_with(b"EXAMPLE");
                return (n == 16 && ends && !example).then_some((CredentialKind::AwsAccessKey, j + 16));
            }
            let j = after(b"AIza")?;
            let n = run(s, j, key_char);
            (n >= 35).then_some((CredentialKind::GoogleApiKey, j + n))
        }
        b'g' => {
            if let Some(j) = after(b"github_pat_") {
                let n = run(s, j, key_char);
                return (n >= 22 && letter_and_digit(&s[j..j + n])).then_some((CredentialKind::GitHub, j + n));
            }
            let prefixes = [b"ghp_".as_slice(), b"gho_", b"ghs_", b"ghu_", b"ghr_"];
            let j = prefixes.iter().find_map(|p| after(p))?;
            let n = run(s, j, alnum);
            (n >= 36 && letter_and_digit(&s[j..j + n])).then_some((CredentialKind::GitHub, j + n))
        }
        b'x' => {
            // A refresh token is `xoxe.xoxp-..`.
            let k = if rest.starts_with(b"xoxe.xox") { i + 5 } else { i };
            let prefixes = [b"xoxb-".as_slice(), b"xoxp-", b"xoxa-", b"xoxr-", b"xoxs-", b"xoxe-", b"xapp-"];
            let j = k + prefixes.iter().find(|p| s[k..].starts_with(p))?.len();
            let n = run(s, j, |b| b.is_ascii_alphanumeric() || b == b'-');
            (n >= 20 && letter_and_digit(&s[j..j + n])).then_some((CredentialKind::Slack, j + n))
        }
        b'e' => jwt_at(s, i).map(|end| (CredentialKind::Jwt, end)),
        b'-' => pem_at(s, i, text).map(|end| (CredentialKind::PemPrivateKey, end)),
        b'B' | b'b' => {
            if !rest.get(..6).is_some_and(|p| p.eq_ignore_ascii_case(b"bearer")) {
                return None;
            }
            let j = skip_space(s, i + 6, text);
            let n =
                run(s, j, |b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/' | b'='));
            (j > i + 6 && n >= 20 && random_looking(&s[j..j + n])).then_some((CredentialKind::BearerToken, j + n))
        }
        _ => None,
    }
}

/// The index after ASCII white space from `i`: bytes, `%20`, and in JSON `text` the escapes
/// `\t`, `\n`, `\f` and `\r`.
fn skip_space(s: &[u8], mut i: usize, text: bool) -> usize {
    loop {
        match s.get(i..).unwrap_or_default() {
            [b, ..] if b.is_ascii_whitespace() => i += 1,
            [b'%', b'2', b'0', ..] => i += 3,
            [b'\\', b't' | b'n' | b'f' | b'r', ..] if text => i += 2,
            _ => return i,
        }
    }
}

/// `-----BEGIN <label> PRIVATE KEY-----` followed by a body (a base64 line, or the
/// `Proc-Type:` header of an encrypted key); where the key ends (after its `END` line when it
/// has one).
fn pem_at(s: &[u8], i: usize, text: bool) -> Option<usize> {
    let j = i + b"-----BEGIN ".len();
    if !s[i..].starts_with(b"-----BEGIN ") {
        return None;
    }
    let label = run(s, j, |b| b.is_ascii_uppercase() || b == b' ').min(48);
    if !(s[j + label..].starts_with(b"-----") && s[j..j + label].ends_with(b"PRIVATE KEY")) {
        return None;
    }
    let body = skip_space(s, j + label + 5, text);
    let n = run(s, body, |b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if n < 16 && !s[body..].starts_with(b"Proc-Type:") {
        return None;
    }
    const END: &[u8] = b"PRIVATE KEY-----";
    let end = s[body..].windows(END.len()).position(|w| w == END).map_or(body + n, |p| body + p + END.len());
    Some(end)
}

/// `eyJ..` `.` `..` `.` `..`: three base64url parts whose first decodes to a JSON object with
/// `"alg"`; where the token ends.
fn jwt_at(s: &[u8], i: usize) -> Option<usize> {
    if !s[i..].starts_with(b"eyJ") {
        return None;
    }
    let h = run(s, i, key_char);
    let p = i + h;
    if h < 10 || s.get(p) != Some(&b'.') {
        return None;
    }
    let b = run(s, p + 1, key_char);
    let q = p + 1 + b;
    let signature = run(s, q + 1, key_char);
    if b < 10 || s.get(q) != Some(&b'.') || signature < 16 {
        return None;
    }
    header_has_alg(&s[i..p]).then_some(q + 1 + signature)
}

/// Decodes a base64url JWT header (at most 384 bytes of it, on the stack) and looks for an
/// object with an `"alg"` key.
fn header_has_alg(part: &[u8]) -> bool {
    let mut out = [0u8; 288];
    let mut n = 0;
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &c in part.iter().take(384) {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return false,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out[n] = (acc >> bits) as u8;
            n += 1;
        }
    }
    let header = out[..n].trim_ascii();
    header.starts_with(b"{") && header.windows(5).any(|w| w == b"\"alg\"")
}

#[cfg(test)]
mod tests;
