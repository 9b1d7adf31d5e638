//! What an operator allows of completion webhooks: the URL prefixes runs may name, the secret
//! deliveries are signed with, and how often a failed delivery is tried again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

/// How many attempts a delivery gets unless [`WebhookConfig::attempts`] says otherwise.
pub const DEFAULT_WEBHOOK_ATTEMPTS: u32 = 6;
/// The wait after a first failed attempt unless [`WebhookConfig::backoff`] says otherwise (it
/// doubles after each failure).
pub const DEFAULT_WEBHOOK_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts unless [`WebhookConfig::backoff`] says otherwise.
pub const DEFAULT_WEBHOOK_BACKOFF_CAP: Duration = Duration::from_secs(60);

/// A webhook URL refused, or a webhook configuration that cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The URL starts with none of the prefixes the operator allows.
    #[error(
        "webhook URL `{url}` is not allowed: it must start with one of {}; ask the server's operator to allow it",
        if allowed.is_empty() { "no prefix (this server allows no webhook URL)".to_string() } else { format!("{allowed:?}") }
    )]
    NotAllowed {
        /// The URL, masked ([`mask_url`](crate::secret::mask_url)), its first 200 characters.
        url: String,
        /// The prefixes allowed.
        allowed: Vec<String>,
    },
    /// The URL is not an `http`/`https` URL without a user name or password.
    #[error(
        "webhook URL `{url}` is refused: {reason}; give an http:// or https:// URL without a user name or password"
    )]
    BadUrl {
        /// The URL, masked ([`mask_url`](crate::secret::mask_url)), its first 200 characters.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The signing secret could not be read, or is empty.
    #[error("the webhook signing secret {0}")]
    Secret(String),
    /// The HTTP client could not be built.
    #[error("the webhook HTTP client could not be built: {0}")]
    Client(String),
    /// The store failed reading the due deliveries.
    #[error(transparent)]
    Store(#[from] agentflow_store::QueueError),
    /// A store call could not be made.
    #[error(transparent)]
    Persist(#[from] crate::durable::PersistError),
}

/// What an operator allows of completion webhooks (see [`webhook`](crate::webhook)): the URL
/// prefixes a run may name (none by default: every URL is refused), the secret each delivery is
/// signed with, how many attempts a delivery gets (default [`DEFAULT_WEBHOOK_ATTEMPTS`]) and the
/// wait between them (default 1 s, doubling, at most 60 s).
///
/// ```
/// use agentflow::webhook::WebhookConfig;
/// let config = WebhookConfig::new("a long random secret").allow("https://hooks.example.com/agentflow/");
/// assert!(config.check("https://hooks.example.com/agentflow/done").is_ok());
/// assert!(config.check("https://hooks.example.com.evil.test/agentflow/").is_err());
/// assert!(config.check("https://elsewhere.example.com/").is_err());
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// The URL prefixes a run's webhook may start with.
    pub allow: Vec<String>,
    secret: Arc<[u8]>,
    /// How many attempts a delivery gets before it is given up (at least 1).
    pub attempts: u32,
    /// The wait after the first failed attempt; it doubles after each failure.
    pub backoff: Duration,
    /// The longest wait between two attempts.
    pub backoff_cap: Duration,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("allow", &self.allow)
            .field("secret", &"•••")
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .field("backoff_cap", &self.backoff_cap)
            .finish()
    }
}

impl WebhookConfig {
    /// Deliveries signed with `secret`, no URL allowed yet ([`WebhookConfig::allow`]).
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        WebhookConfig {
            allow: Vec::new(),
            secret: secret.into().into(),
            attempts: DEFAULT_WEBHOOK_ATTEMPTS,
            backoff: DEFAULT_WEBHOOK_BACKOFF,
            backoff_cap: DEFAULT_WEBHOOK_BACKOFF_CAP,
        }
    }

    /// Deliveries signed with the value of environment variable `var`.
    ///
    /// # Errors
    /// [`WebhookError::Secret`] when it is unset, not UTF-8 or empty.
    pub fn from_env(var: &str) -> Result<Self, WebhookError> {
        let value = std::env::var(var)
            .map_err(|e| WebhookError::Secret(format!("from environment variable `{var}` cannot be read: {e}")))?;
        Self::non_empty(value.into_bytes(), &format!("in environment variable `{var}`"))
    }

    /// Deliveries signed with the content of the file at `path` (a final line break left out).
    ///
    /// # Errors
    /// [`WebhookError::Secret`] when it cannot be read or is empty.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, WebhookError> {
        let path = path.as_ref();
        let mut bytes = std::fs::read(path)
            .map_err(|e| WebhookError::Secret(format!("file `{}` cannot be read: {e}", path.display())))?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        Self::non_empty(bytes, &format!("in file `{}`", path.display()))
    }

    fn non_empty(secret: Vec<u8>, place: &str) -> Result<Self, WebhookError> {
        if secret.is_empty() {
            return Err(WebhookError::Secret(format!("{place} is empty; put a long random value there")));
        }
        Ok(Self::new(secret))
    }

    /// Allows the webhook URLs that start with `prefix` (`https://hooks.example.com/agentflow/`):
    /// a URL that continues the prefix past a host name or a path segment
    /// (`https://hooks.example.com.evil.test/`) does not match it.
    #[must_use]
    pub fn allow(mut self, prefix: impl Into<String>) -> Self {
        self.allow.push(prefix.into());
        self
    }

    /// How many attempts a delivery gets before it is given up (default
    /// [`DEFAULT_WEBHOOK_ATTEMPTS`], at least 1).
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The wait after the first failed attempt (doubling after each failure) and the longest
    /// wait (defaults 1 s and 60 s).
    #[must_use]
    pub fn backoff(mut self, first: Duration, cap: Duration) -> Self {
        self.backoff = first;
        self.backoff_cap = cap.max(first);
        self
    }

    /// The secret deliveries are signed with.
    pub(crate) fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// The wait after failed attempt number `attempt` (1 for the first).
    pub(crate) fn backoff_after(&self, attempt: u32) -> Duration {
        let doubled = self.backoff.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        doubled.min(self.backoff_cap)
    }

    /// `Ok` if a run may name `url` as its webhook: an `http` or `https` URL without a user name
    /// or password, starting with one of the allowed prefixes (compared as URLs are written
    /// once parsed: the scheme and host in lowercase, an empty path as `/`).
    ///
    /// # Errors
    /// [`WebhookError::BadUrl`], [`WebhookError::NotAllowed`] naming the allowed prefixes.
    pub fn check(&self, url: &str) -> Result<(), WebhookError> {
        self.checked(url).map(drop)
    }

    /// As [`WebhookConfig::check`], giving back `url` as it is written once parsed (leading
    /// and trailing spaces left out, `\` as `/`, the scheme and host in lowercase): the URL
    /// the prefixes were compared with.
    pub(crate) fn checked(&self, url: &str) -> Result<String, WebhookError> {
        let bad = |reason: &str| WebhookError::BadUrl { url: shown(url), reason: reason.to_string() };
        let parsed = Url::parse(url).map_err(|e| bad(&format!("it is not a URL ({e})")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad("its scheme is not http or https"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("it holds a user name or password"));
        }
        let written = parsed.as_str();
        if self.allow.iter().any(|prefix| continues(written, &normalized(prefix))) {
            return Ok(written.to_string());
        }
        Err(WebhookError::NotAllowed { url: shown(url), allowed: self.allow.clone() })
    }
}

/// `url` as an error names it: masked ([`mask_url`](crate::secret::mask_url)), its first 200 characters.
fn shown(url: &str) -> String {
    crate::secret::mask_url(url).chars().take(200).collect()
}

/// `prefix` as a parsed URL writes it, when it parses (else as given).
fn normalized(prefix: &str) -> String {
    Url::parse(prefix).map_or_else(|_| prefix.to_string(), |u| u.as_str().to_string())
}

/// Whether `url` starts with `prefix` and goes on past it at a boundary: the prefix ends with
/// `/`, or the URL ends there or goes on with `/`, `?` or `#`.
fn continues(url: &str, prefix: &str) -> bool {
    let Some(rest) = url.strip_prefix(prefix) else { return false };
    prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?', '#'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_allowed_by_a_prefix_it_continues_at_a_boundary() {
        let config = WebhookConfig::new("s").allow("https://Hooks.Example.com").allow("http://127.0.0.1:9000/in");
        for ok in [
            "https://hooks.example.com",
            "https://hooks.example.com/",
            "https://HOOKS.example.com/a?b=1",
            "http://127.0.0.1:9000/in",
            "http://127.0.0.1:9000/in/done",
            "http://127.0.0.1:9000/in?x=1",
        ] {
            assert!(config.check(ok).is_ok(), "{ok}");
        }
        for refused in [
            "https://hooks.example.com.evil.test/",
            "https://hooks.example.com@evil.test/",
            "http://hooks.example.com/",
            "http://127.0.0.1:9000/inbox",
            "http://127.0.0.1:9001/in",
            "ftp://hooks.example.com/",
            "https://user:pw@hooks.example.com/",
            "not a url",
        ] {
            assert!(config.check(refused).is_err(), "{refused}");
        }
        let err = config.check("http://127.0.0.1:9000/inbox").unwrap_err();
        assert!(err.to_string().contains("https://Hooks.Example.com"), "{err}");
        let none = WebhookConfig::new("s").check("https://hooks.example.com/").unwrap_err();
        assert!(none.to_string().contains("allows no webhook URL"), "{none}");
    }

    #[test]
    fn a_url_is_given_back_as_it_is_written_once_parsed() {
        let config = WebhookConfig::new("s").allow("https://hooks.slack.com/services/");
        let normal = "https://hooks.slack.com/services/T0/B0/SECRET";
        for given in
            [r"https://HOOKS.slack.com\services\T0\B0\SECRET", " https://hooks.slack.com/services/T0/B0/SECRET\n"]
        {
            assert_eq!(config.checked(given).unwrap(), normal, "{given:?}");
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let config = WebhookConfig::new("s").backoff(Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (1..=8).map(|n| config.backoff_after(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(config.attempts, DEFAULT_WEBHOOK_ATTEMPTS);
        assert!(!format!("{config:?}").contains("\"s\""));
    }

    #[test]
    fn a_secret_comes_from_a_file_without_its_line_break_and_is_never_empty() {
        let dir = std::env::temp_dir().join(format!("agentflow-webhook-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), "k3y\n").unwrap();
        assert_eq!(WebhookConfig::from_file(dir.join("secret")).unwrap().secret(), b"k3y");
        std::fs::write(dir.join("empty"), "\n").unwrap();
        assert!(matches!(WebhookConfig::from_file(dir.join("empty")), Err(WebhookError::Secret(_))));
        assert!(matches!(WebhookConfig::from_file(dir.join("missing")), Err(WebhookError::Secret(_))));
        std::fs::remove_dir_all(&dir).ok();
    }
}
