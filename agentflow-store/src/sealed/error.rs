//! What can go wrong sealing and opening payloads, and with the keys that do it.

use std::path::PathBuf;

use crate::error::StorageError;

/// A key store could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KeyStoreError {
    /// The key store file could not be opened, read or written.
    #[error("{}: the key store cannot be used ({detail}); check the path, the disk and its permissions", path.display())]
    Io {
        /// The key store (a file path, or a server URL without its password).
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// A record of the key store does not decode.
    #[error("{}: the data key record of thread `{thread}` is damaged ({detail}); restore the key store from a backup", path.display())]
    Damaged {
        /// The key store.
        path: PathBuf,
        /// The thread whose record it is.
        thread: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// Sealing or opening a payload, or wrapping, unwrapping or rotating a data key, failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The thread has no data key: it was destroyed by a purge, or the key store is not the
    /// one the data was written with.
    #[error(
        "thread `{thread}` has no data key {why}: its sealed payloads cannot be opened (open the store with the key store it was written with; a purged thread's data is gone for good)"
    )]
    NoKey {
        /// The thread.
        thread: String,
        /// `(it was destroyed)` or `(the key store holds none)` and the key generation asked for.
        why: String,
    },
    /// The key-encryption key that wraps a data key is not held by the key provider.
    #[error(
        "the data key of thread `{thread}` is wrapped by key-encryption key `{kek_id}`, which the key provider does not hold; add that key to the provider (as an older key), or rotate the key store while the old key is still available"
    )]
    MissingKek {
        /// The thread.
        thread: String,
        /// The id of the key-encryption key that wraps it.
        kek_id: String,
    },
    /// A data key did not unwrap: the key store record was changed, or moved to another thread.
    #[error(
        "the data key of thread `{thread}` does not unwrap with key-encryption key `{kek_id}`: the key store record was changed or belongs to another thread; restore the key store from a backup"
    )]
    Unwrap {
        /// The thread.
        thread: String,
        /// The id of the key-encryption key tried.
        kek_id: String,
    },
    /// A sealed payload did not open: its bytes were changed, or moved to another thread or
    /// field.
    #[error(
        "a sealed {what} of thread `{thread}` does not open ({detail}): it was changed, or moved from another thread or field; restore the store from a backup"
    )]
    Tampered {
        /// The thread.
        thread: String,
        /// Which payload.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A key (a key-encryption key from the environment or a file) is not usable.
    #[error("{source_name}: {detail}")]
    BadKey {
        /// Where the key came from (an environment variable or a file).
        source_name: String,
        /// What is wrong with it, and what to do.
        detail: String,
    },
    /// The system's random number generator failed.
    #[error("the system's random number generator failed ({detail}); retry, and check the system's entropy source")]
    Random {
        /// What it reported.
        detail: String,
    },
    /// The key store failed.
    #[error(transparent)]
    KeyStore(#[from] KeyStoreError),
}

impl SealError {
    /// The thread the error is about, if it names one.
    pub fn thread(&self) -> Option<&str> {
        match self {
            SealError::NoKey { thread, .. }
            | SealError::MissingKek { thread, .. }
            | SealError::Unwrap { thread, .. }
            | SealError::Tampered { thread, .. } => Some(thread),
            SealError::KeyStore(KeyStoreError::Damaged { thread, .. }) => Some(thread),
            _ => None,
        }
    }
}

impl From<SealError> for StorageError {
    /// The error as the [`StorageError::Sealed`] a [`Store`](crate::Store) method returns.
    fn from(e: SealError) -> Self {
        let what = match &e {
            SealError::Tampered { what, .. } => what.clone(),
            _ => "payload".to_string(),
        };
        StorageError::Sealed { thread: e.thread().unwrap_or_default().to_string(), what, detail: e.to_string() }
    }
}
