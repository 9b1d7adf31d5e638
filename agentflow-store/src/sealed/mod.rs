//! Encryption at rest (feature `encryption`): [`SealedStore`] wraps any [`Store`](crate::Store)
//! and seals the payloads it keeps with a data key per thread.
//!
//! - **Payloads sealed**: checkpoint states, updates and metadata, pending writes (map
//!   instances' and interrupts' and their answers included), effect results (tool arguments
//!   and results), approval arguments, conditions and decision notes, audit entry details,
//!   queued and follow-up runs' inputs, event data, webhook payloads, and cron schedules'
//!   inputs (under a key of each schedule's own, destroyed when it is deleted). Ids, statuses,
//!   times, leases, the queue, timers, breakers, URLs and graph descriptions stay readable, so
//!   listings and queries are unchanged.
//! - **Cipher**: XChaCha20-Poly1305 with a random 192-bit nonce per payload; the thread id and
//!   the payload's kind are its associated data, so a sealed value moved to another thread or
//!   field does not open. A sealed payload is `0xA7 || version || key generation || nonce ||
//!   ciphertext || tag` (42 bytes more than the payload); a sealed JSON value is
//!   `{"$sealed": "<base64>"}`, a sealed text `$sealed:<base64>`.
//! - **Keys**: each thread's 256-bit data key is made the first time the thread is written,
//!   wrapped by the current key-encryption key of a [`KeyProvider`] ([`EnvKeyProvider`],
//!   [`FileKeyProvider`], [`StaticKeyProvider`]) and kept durably in a [`KeyStore`]
//!   ([`RedbKeyStore`], `PostgresKeyStore` with feature `postgres`, [`MemoryKeyStore`]) before any payload is sealed with it. Unwrapped
//!   keys are cached in memory (bounded). [`rotate_keys`] re-wraps every data key with a new
//!   key-encryption key without touching the payloads.
//! - **Crypto-erasure**: [`Store::purge_thread`](crate::Store::purge_thread) destroys the data
//!   keys of the threads it purges once the wrapped store has purged them (the wrapped store
//!   checks legal holds in the purge's own transaction), so no copy of the data file or tables
//!   (a backup, a replica, freed pages) opens their payloads again. A crash between the two
//!   leaves the data purged and a key live: purging the thread again destroys it.
//! - **Key cache**: a purge drops the thread's key from its store's cache, and no read racing
//!   the purge puts it back. Another `SealedStore` on the same key store (in this process or
//!   another) keeps its own cached copy of the key until it evicts it.
//!
//! A payload that does not open (its key destroyed, the wrong key store, changed bytes) is a
//! [`StorageError::Sealed`](crate::StorageError::Sealed) naming the thread, never a panic. A
//! value that is not sealed (written before the store was wrapped, or by the store itself, such
//! as the `approval.requested` entry or a purge marker) is read as it is.

mod admission;
mod audit_view;
mod cipher;
mod error;
mod key_store;
mod keyring;
mod open_listing;
#[cfg(feature = "postgres")]
mod postgres_key_store;
mod provider;
mod records;
mod redb_key_store;
mod sealed_store;
mod store_impl;

pub use cipher::{KEY_LEN, SEAL_OVERHEAD};
pub use error::{KeyStoreError, SealError};
pub use key_store::{KeyRecord, KeyStore, MemoryKeyStore};
pub use keyring::{DEFAULT_KEY_CACHE, RotationReport, rotate_keys};
#[cfg(feature = "postgres")]
pub use postgres_key_store::{POSTGRES_KEY_SCHEMA, PostgresKeyStore};
pub use provider::{EnvKeyProvider, FileKeyProvider, Kek, KeyProvider, StaticKeyProvider};
pub use redb_key_store::RedbKeyStore;
pub use sealed_store::SealedStore;

#[cfg(test)]
mod listing_tests;
#[cfg(test)]
mod tests;
