//! Errors: the four classes a node failure falls into, and the typed errors of
//! each operation.

use std::fmt;
use std::time::Duration;

/// What the executor should do with a failure (the four classes of the design brief).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum ErrorClass {
    /// A passing fault (timeout, rate limit, connection reset): retried per the
    /// node's retry policy with capped exponential backoff and jitter.
    Transient,
    /// The caller can fix it (bad tool arguments, malformed model output): fed
    /// back as an observation, a bounded number of times. Never retried blindly.
    Correctable,
    /// Only a human can unblock it: the run pauses for them. A value given to `interrupt`
    /// that does not have the shape the node reads fails the run with this class instead: the
    /// thread waits for a new answer where it was answered, and (not a failure for good) no saga
    /// compensation starts.
    NeedsInput,
    /// Nothing will fix it by retrying (permission denied, invariant broken):
    /// the run stops and reports it.
    Fatal,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Correctable => "correctable",
            ErrorClass::NeedsInput => "needs-input",
            ErrorClass::Fatal => "fatal",
        })
    }
}

/// The error a node returns. It carries its [`ErrorClass`] so the executor
/// knows whether to retry, report or stop.
///
/// `?` converts the library's own errors into it. For any other error (an
/// `std::io::Error`, an HTTP client's error) say how the executor should
/// treat it: `.transient()?`, `.fatal()?` and the like, from
/// [`NodeResultExt`] in the prelude.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{class} error: {message}")]
pub struct NodeError {
    /// How the executor treats this error.
    pub class: ErrorClass,
    /// What went wrong, for people.
    pub message: String,
    /// For transient errors: how long the source asked us to wait (e.g. `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Duration>,
}

impl NodeError {
    /// A new error of the given class.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        NodeError { class, message: message.into(), retry_after: None }
    }
    /// A passing fault worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Transient, message)
    }
    /// A fault the caller (often a model) can correct.
    pub fn correctable(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Correctable, message)
    }
    /// A fault only a human can resolve.
    pub fn needs_input(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::NeedsInput, message)
    }
    /// A fault that stops the run.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Fatal, message)
    }
    /// Ask the retry loop to wait at least `delay` before the next attempt,
    /// up to the node's retry `max_delay` (a longer `delay` waits `max_delay`).
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }
}

/// Classifies any other error for `?` in a node: `?` converts only errors
/// that implement `Into<NodeError>`, and whether a foreign error (an
/// `std::io::Error`, an HTTP client's error) is worth a retry is the node's
/// call, not the library's. In the prelude.
///
/// Each method keeps the error's `Display` text as the message.
///
/// ```
/// use agentflow::ErrorClass;
/// use agentflow::prelude::*;
///
/// fn load(path: &str) -> Result<u32, NodeError> {
///     // A read that fails may work next time: retried per the node's `retry`.
///     let text = std::fs::read_to_string(path).transient()?;
///     // Bad content will not get better: the run stops.
///     let n: u32 = text.trim().parse().fatal()?;
///     Ok(n)
/// }
///
/// let err = load("/no/such/file").unwrap_err();
/// assert_eq!(err.class, ErrorClass::Transient);
/// ```
pub trait NodeResultExt<T> {
    /// Maps the error to [`ErrorClass::Transient`]: retried per the node's retry policy.
    fn transient(self) -> Result<T, NodeError>;
    /// Maps the error to [`ErrorClass::Correctable`].
    fn correctable(self) -> Result<T, NodeError>;
    /// Maps the error to [`ErrorClass::NeedsInput`].
    fn needs_input(self) -> Result<T, NodeError>;
    /// Maps the error to [`ErrorClass::Fatal`]: the run stops.
    fn fatal(self) -> Result<T, NodeError>;
}

impl<T, E: fmt::Display> NodeResultExt<T> for Result<T, E> {
    fn transient(self) -> Result<T, NodeError> {
        self.map_err(|e| NodeError::transient(e.to_string()))
    }
    fn correctable(self) -> Result<T, NodeError> {
        self.map_err(|e| NodeError::correctable(e.to_string()))
    }
    fn needs_input(self) -> Result<T, NodeError> {
        self.map_err(|e| NodeError::needs_input(e.to_string()))
    }
    fn fatal(self) -> Result<T, NodeError> {
        self.map_err(|e| NodeError::fatal(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_ext_classifies_a_foreign_error_and_keeps_its_text() {
        let io = || -> Result<(), std::io::Error> { Err(std::io::Error::other("disk on fire")) };
        for (got, class) in [
            (io().transient(), ErrorClass::Transient),
            (io().correctable(), ErrorClass::Correctable),
            (io().needs_input(), ErrorClass::NeedsInput),
            (io().fatal(), ErrorClass::Fatal),
        ] {
            assert_eq!(got, Err(NodeError::new(class, "disk on fire")));
        }
        assert_eq!(Ok::<u8, std::io::Error>(7).fatal(), Ok(7));
    }
}
