//! Where the wrapped data keys are kept, apart from the data: the [`KeyStore`] trait, its
//! record, and a store in memory.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::codec::{Dec, DecodeResult, Enc};
use crate::sealed::error::KeyStoreError;

/// The format version of a stored [`KeyRecord`].
const KEY_RECORD_VERSION: u8 = 1;

/// A thread's data key as a key store keeps it: wrapped by a key-encryption key, or destroyed.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyRecord {
    /// The key's generation: 1 for a thread's first key, one more for a key made after the
    /// one before was destroyed. Every sealed payload names the generation it was sealed with.
    pub generation: u32,
    /// The id of the key-encryption key that wraps it (see [`Kek::id`](crate::sealed::Kek::id)).
    pub kek_id: String,
    /// The wrapped key (`nonce || ciphertext || tag`); empty once destroyed.
    pub wrapped: Vec<u8>,
}

impl std::fmt::Debug for KeyRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRecord")
            .field("generation", &self.generation)
            .field("kek_id", &self.kek_id)
            .field("destroyed", &self.is_destroyed())
            .finish()
    }
}

impl KeyRecord {
    /// A record of a wrapped key (for `KeyStore` implementations outside this crate).
    pub fn new(generation: u32, kek_id: impl Into<String>, wrapped: Vec<u8>) -> Self {
        KeyRecord { generation, kek_id: kek_id.into(), wrapped }
    }

    /// Whether the key was destroyed (its thread purged).
    pub fn is_destroyed(&self) -> bool {
        self.wrapped.is_empty()
    }

    /// The record with its key destroyed: its generation stays, so a key made later for the
    /// same thread gets the next one.
    pub fn destroyed(&self) -> KeyRecord {
        KeyRecord { generation: self.generation, kek_id: String::new(), wrapped: Vec::new() }
    }

    /// The record's stored bytes (with a format version and a checksum).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(KEY_RECORD_VERSION);
        e.u32(self.generation).str(&self.kek_id).bytes(&self.wrapped);
        e.finish()
    }

    /// Decodes stored bytes made by [`KeyRecord::encode`].
    pub fn decode(buf: &[u8]) -> Result<Self, String> {
        Self::decode_inner(buf)
    }

    fn decode_inner(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, KEY_RECORD_VERSION)?;
        let record =
            KeyRecord { generation: d.u32("generation")?, kek_id: d.str("kek_id")?, wrapped: d.bytes("wrapped")? };
        d.end()?;
        Ok(record)
    }
}

/// Keeps the wrapped data keys of threads, apart from the store that holds their data (a
/// copy of the data without the key store does not open). Every write is durable when the
/// method returns: a payload is sealed with a data key only after the key is kept.
///
/// Implementations are shared between threads. A key store for several processes (a
/// database table) must make [`KeyStore::create`] and [`KeyStore::replace`] compare-and-sets.
pub trait KeyStore: Send + Sync {
    /// The record of `thread`'s data key, if one was ever made.
    fn get(&self, thread: &str) -> Result<Option<KeyRecord>, KeyStoreError>;

    /// Keeps `record` as `thread`'s key unless a live (not destroyed) key is kept already,
    /// durably; answers the record kept (the one there before, when another writer was
    /// first).
    fn create(&self, thread: &str, record: KeyRecord) -> Result<KeyRecord, KeyStoreError>;

    /// Replaces `thread`'s record with `new` if it is still `expected` (a rotation's re-wrap),
    /// durably; `false`, changing nothing, if it is not.
    fn replace(&self, thread: &str, expected: &KeyRecord, new: KeyRecord) -> Result<bool, KeyStoreError>;

    /// Destroys `thread`'s data key (keeping its generation), durably; `false` if there was
    /// no live key. Destroying a destroyed key succeeds.
    fn destroy(&self, thread: &str) -> Result<bool, KeyStoreError>;

    /// Every thread with a record, live or destroyed, ordered by id.
    fn threads(&self) -> Result<Vec<String>, KeyStoreError>;
}

/// A key store in memory: for tests and for data that need not outlive the process.
#[derive(Debug, Default)]
pub struct MemoryKeyStore {
    records: Mutex<BTreeMap<String, KeyRecord>>,
}

impl MemoryKeyStore {
    /// An empty key store.
    pub fn new() -> Self {
        MemoryKeyStore::default()
    }

    fn records(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, KeyRecord>> {
        self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl KeyStore for MemoryKeyStore {
    fn get(&self, thread: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        Ok(self.records().get(thread).cloned())
    }

    fn create(&self, thread: &str, record: KeyRecord) -> Result<KeyRecord, KeyStoreError> {
        let mut records = self.records();
        match records.get(thread) {
            Some(live) if !live.is_destroyed() => Ok(live.clone()),
            _ => {
                records.insert(thread.to_string(), record.clone());
                Ok(record)
            }
        }
    }

    fn replace(&self, thread: &str, expected: &KeyRecord, new: KeyRecord) -> Result<bool, KeyStoreError> {
        let mut records = self.records();
        match records.get_mut(thread) {
            Some(current) if current == expected => {
                *current = new;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn destroy(&self, thread: &str) -> Result<bool, KeyStoreError> {
        let mut records = self.records();
        match records.get_mut(thread) {
            Some(current) if !current.is_destroyed() => {
                *current = current.destroyed();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn threads(&self) -> Result<Vec<String>, KeyStoreError> {
        Ok(self.records().keys().cloned().collect())
    }
}

/// A shared key store (several [`SealedStore`](crate::sealed::SealedStore)s on one key store,
/// or a key store kept to rotate it).
impl<K: KeyStore + ?Sized> KeyStore for std::sync::Arc<K> {
    fn get(&self, thread: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        (**self).get(thread)
    }

    fn create(&self, thread: &str, record: KeyRecord) -> Result<KeyRecord, KeyStoreError> {
        (**self).create(thread, record)
    }

    fn replace(&self, thread: &str, expected: &KeyRecord, new: KeyRecord) -> Result<bool, KeyStoreError> {
        (**self).replace(thread, expected, new)
    }

    fn destroy(&self, thread: &str) -> Result<bool, KeyStoreError> {
        (**self).destroy(thread)
    }

    fn threads(&self) -> Result<Vec<String>, KeyStoreError> {
        (**self).threads()
    }
}
