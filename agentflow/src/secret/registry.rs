//! The secret stores of an application, by scheme.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use super::error::SecretError;
use super::exposed::Exposed;
use super::reference::SecretRef;
use super::store::SecretStore;

/// Dispatches a reference to the store registered for its scheme. Keep one in the graph's
/// deps; nodes and tools resolve a [`Secret`](super::Secret) with it and put run-time secrets
/// into it.
///
/// ```
/// use agentflow::secret::{EnvSecrets, FileSecrets, Secrets};
/// let dir = std::env::temp_dir();
/// let secrets = Secrets::new().with(EnvSecrets::only(["OPENAI_API_KEY"])).with(FileSecrets::new(dir)).writable("file");
/// assert_eq!(secrets.schemes().collect::<Vec<_>>(), ["env", "file"]);
/// ```
#[derive(Clone, Default)]
pub struct Secrets {
    stores: BTreeMap<String, Arc<dyn SecretStore>>,
    writable: Option<String>,
}

impl Secrets {
    /// No stores.
    pub fn new() -> Self {
        Secrets::default()
    }

    /// Adds `store` under its own scheme ([`SecretStore::scheme`]).
    pub fn with(self, store: impl SecretStore + 'static) -> Self {
        let scheme = store.scheme().to_string();
        self.with_scheme(&scheme, Arc::new(store))
    }

    /// Adds `store` under `scheme` (replacing one registered there).
    pub fn with_scheme(mut self, scheme: &str, store: Arc<dyn SecretStore>) -> Self {
        self.stores.insert(scheme.to_string(), store);
        self
    }

    /// Where [`SecretStore::put`] on the registry writes: the store of `scheme`.
    pub fn writable(mut self, scheme: &str) -> Self {
        self.writable = Some(scheme.to_string());
        self
    }

    /// The registered schemes, in order.
    pub fn schemes(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    fn store(&self, scheme: &str, reference: &str) -> Result<&Arc<dyn SecretStore>, SecretError> {
        self.stores
            .get(scheme)
            .ok_or_else(|| SecretError::UnknownScheme { scheme: scheme.to_string(), reference: reference.to_string() })
    }
}

#[async_trait]
impl SecretStore for Secrets {
    async fn get(&self, reference: &SecretRef) -> Result<Exposed<String>, SecretError> {
        self.store(reference.scheme(), reference.as_str())?.get(reference).await
    }

    /// Writes to the store chosen with [`Secrets::writable`].
    async fn put(&self, name: &str, value: Exposed<String>) -> Result<SecretRef, SecretError> {
        let Some(scheme) = &self.writable else {
            return Err(SecretError::ReadOnly { scheme: "(none chosen with `Secrets::writable`)".to_string() });
        };
        let store = self.store(scheme, &format!("{scheme}:{name}"))?;
        let reference = store.put(name, value).await?;
        // A store answering under another scheme would be unreachable through this registry.
        if reference.scheme() == scheme { Ok(reference) } else { SecretRef::new(scheme, reference.name()) }
    }

    fn scheme(&self) -> &str {
        self.writable.as_deref().unwrap_or("")
    }
}
