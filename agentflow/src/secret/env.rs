//! Secrets read from environment variables: `env:NAME`, for the names the application lists.

use std::collections::BTreeSet;

use async_trait::async_trait;

use super::error::SecretError;
use super::exposed::Exposed;
use super::reference::SecretRef;
use super::store::SecretStore;

/// Reads `env:NAME` from the environment variable `NAME`, for the names it was given. Read-only.
///
/// A reference can come from data someone else wrote: a tool's arguments (written by a model),
/// a run's input, an edited approval. Listing the names keeps such a reference from reading
/// any other variable of the process (`env:AWS_SECRET_ACCESS_KEY`, the key-encryption key of
/// encryption at rest): a name not listed is refused as [`SecretError::NotAllowed`].
///
/// ```
/// use agentflow::secret::{EnvSecrets, Secrets};
/// let secrets = Secrets::new().with(EnvSecrets::only(["OPENAI_API_KEY"]));
/// let also = EnvSecrets::prefixed("MYAPP_SECRET_"); // MYAPP_SECRET_GITHUB, ...
/// # let _ = (secrets, also);
/// ```
#[derive(Debug, Clone)]
pub struct EnvSecrets {
    allowed: Allowed,
}

#[derive(Debug, Clone)]
enum Allowed {
    Only(BTreeSet<String>),
    Prefixed(String),
}

impl EnvSecrets {
    /// Reads only the variables named here.
    pub fn only<N: Into<String>>(names: impl IntoIterator<Item = N>) -> Self {
        EnvSecrets { allowed: Allowed::Only(names.into_iter().map(Into::into).collect()) }
    }

    /// Reads only the variables whose names start with `prefix` (not empty: an empty prefix
    /// would allow every variable, so it allows none).
    pub fn prefixed(prefix: &str) -> Self {
        EnvSecrets { allowed: Allowed::Prefixed(prefix.to_string()) }
    }

    fn allows(&self, name: &str) -> bool {
        match &self.allowed {
            Allowed::Only(names) => names.contains(name),
            Allowed::Prefixed(prefix) => !prefix.is_empty() && name.starts_with(prefix.as_str()),
        }
    }
}

#[async_trait]
impl SecretStore for EnvSecrets {
    async fn get(&self, reference: &SecretRef) -> Result<Exposed<String>, SecretError> {
        if !self.allows(reference.name()) {
            return Err(SecretError::NotAllowed { reference: reference.to_string() });
        }
        std::env::var(reference.name()).map(Exposed::new).map_err(|e| SecretError::Missing {
            reference: reference.to_string(),
            hint: match e {
                std::env::VarError::NotPresent => format!("set the environment variable `{}`", reference.name()),
                std::env::VarError::NotUnicode(_) => {
                    format!("the environment variable `{}` is not valid UTF-8", reference.name())
                }
            },
        })
    }

    fn scheme(&self) -> &str {
        "env"
    }
}
