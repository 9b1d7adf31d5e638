//! A secret's reference: `scheme:name`, the only form a secret takes in stored data.

use std::fmt;
use std::str::FromStr;

use super::error::SecretError;

/// Where a secret is kept: `scheme:name` (`env:OPENAI_KEY`, `file:github-token`). It names
/// the secret and never holds its value.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretRef {
    text: String,
    colon: usize,
}

/// What an error shows of a text that is not a reference: the part before its first `:` when
/// that is a short word, and its length, never the rest.
fn shown(text: &str) -> String {
    let len = text.chars().count();
    match text.split_once(':') {
        Some((scheme, _))
            if scheme.len() <= 16 && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            format!("{scheme}:… ({len} characters)")
        }
        _ => format!("… ({len} characters, no `scheme:`)"),
    }
}

impl SecretRef {
    /// Parses `scheme:name`: a scheme of lowercase ASCII letters, digits, `-` or `_` starting
    /// with a letter, and a non-empty name of at most 256 bytes without control characters,
    /// `/` or `\`.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        // A text that is not a reference is often the secret itself, pasted by mistake: the
        // error shows only its scheme (what comes before a `:`) and its length.
        let bad = || SecretError::BadReference { reference: shown(text) };
        let colon = text.find(':').ok_or_else(bad)?;
        let (scheme, name) = (&text[..colon], &text[colon + 1..]);
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_lowercase())
            && scheme.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        let name_ok = !name.is_empty()
            && name.len() <= 256
            && !name.chars().any(|c| c.is_control() || c == '/' || c == '\\')
            && name != "."
            && name != "..";
        if !scheme_ok || !name_ok {
            return Err(bad());
        }
        Ok(SecretRef { text: text.to_string(), colon })
    }

    /// A reference from its parts.
    pub fn new(scheme: &str, name: &str) -> Result<Self, SecretError> {
        Self::parse(&format!("{scheme}:{name}"))
    }

    /// `env` in `env:OPENAI_KEY`.
    pub fn scheme(&self) -> &str {
        &self.text[..self.colon]
    }

    /// `OPENAI_KEY` in `env:OPENAI_KEY`.
    pub fn name(&self) -> &str {
        &self.text[self.colon + 1..]
    }

    /// The whole reference, `scheme:name`.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for SecretRef {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretRef({})", self.text)
    }
}
