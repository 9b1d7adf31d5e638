//! Where secrets are read from, and written to.

use async_trait::async_trait;

use super::error::SecretError;
use super::exposed::Exposed;
use super::reference::SecretRef;

/// A place secrets are kept: the environment, a directory, a vault. Reads are async so a
/// store may ask a service; the built-in ones answer at once.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// The secret `reference` names.
    async fn get(&self, reference: &SecretRef) -> Result<Exposed<String>, SecretError>;

    /// Keeps `value` under `name` and answers its reference, so the reference (not the value)
    /// can enter a state. The default refuses: the store is read-only.
    async fn put(&self, name: &str, value: Exposed<String>) -> Result<SecretRef, SecretError> {
        let _ = (name, value);
        Err(SecretError::ReadOnly { scheme: self.scheme().to_string() })
    }

    /// The scheme this store answers to by default (`env`, `file`).
    fn scheme(&self) -> &str;
}
