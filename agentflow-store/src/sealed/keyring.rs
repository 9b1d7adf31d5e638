//! The data keys of threads: made the first time a thread is written (kept durably in the key
//! store before any payload is sealed with them), unwrapped once and kept in a bounded cache,
//! destroyed by a purge, and re-wrapped by a rotation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::sealed::cipher::{DataKey, KEY_LEN, SecretKey};
use crate::sealed::error::SealError;
use crate::sealed::key_store::{KeyRecord, KeyStore};
use crate::sealed::provider::{Kek, KeyProvider};

/// How many unwrapped data keys a [`SealedStore`](crate::sealed::SealedStore) keeps in memory by
/// default (see [`SealedStore::with_key_cache`](crate::sealed::SealedStore::with_key_cache)).
pub const DEFAULT_KEY_CACHE: usize = 4096;

/// The associated data of a wrapped data key: its thread and generation.
fn wrap_aad(thread: &str, generation: u32) -> Vec<u8> {
    let mut aad = b"agentflow.datakey.v1\0".to_vec();
    aad.extend_from_slice(thread.as_bytes());
    aad.push(0);
    aad.extend_from_slice(&generation.to_be_bytes());
    aad
}

/// Wraps `key` (of `thread`, generation `generation`) with `kek`.
fn wrap(kek: &Kek, thread: &str, generation: u32, key: &SecretKey) -> Result<KeyRecord, SealError> {
    let wrapped = kek.key.seal(&[], key.bytes(), &wrap_aad(thread, generation))?;
    Ok(KeyRecord::new(generation, kek.id(), wrapped))
}

/// Unwraps the key of `record` (a live one) with the provider's key that wrapped it.
fn unwrap(provider: &dyn KeyProvider, thread: &str, record: &KeyRecord) -> Result<SecretKey, SealError> {
    let kek = provider
        .key(&record.kek_id)
        .ok_or_else(|| SealError::MissingKek { thread: thread.to_string(), kek_id: record.kek_id.clone() })?;
    let bytes = kek
        .key
        .open(&record.wrapped, &wrap_aad(thread, record.generation))
        .ok_or_else(|| SealError::Unwrap { thread: thread.to_string(), kek_id: record.kek_id.clone() })?;
    let bytes: [u8; KEY_LEN] = bytes
        .try_into()
        .map_err(|_| SealError::Unwrap { thread: thread.to_string(), kek_id: record.kek_id.clone() })?;
    Ok(SecretKey::new(bytes))
}

/// The unwrapped keys, and what tells a key read before a destroy from one read after it.
#[derive(Default)]
struct Cache {
    keys: HashMap<String, Arc<DataKey>>,
    /// How many times each thread's key was destroyed by this keyring (bounded: see `cleared`).
    destroyed: HashMap<String, u64>,
    /// How many times `destroyed` was emptied to keep it bounded.
    cleared: u64,
}

/// Where a thread's key stood in [`Cache`] when it was read from the key store: a key read
/// before a destroy of its thread carries an older epoch and is not cached.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Epoch {
    cleared: u64,
    destroyed: u64,
}

impl Cache {
    fn epoch(&self, thread: &str) -> Epoch {
        Epoch { cleared: self.cleared, destroyed: self.destroyed.get(thread).copied().unwrap_or(0) }
    }
}

/// The data keys of a sealing store: its key store, its key provider and the cache.
pub(crate) struct Keyring {
    keys: Box<dyn KeyStore>,
    provider: Box<dyn KeyProvider>,
    cache: Mutex<Cache>,
    capacity: usize,
    /// Held while a key is made, so two writers of one process make one key.
    creating: Mutex<()>,
}

impl Keyring {
    pub(crate) fn new(keys: Box<dyn KeyStore>, provider: Box<dyn KeyProvider>, capacity: usize) -> Self {
        Keyring {
            keys,
            provider,
            cache: Mutex::new(Cache::default()),
            capacity: capacity.max(1),
            creating: Mutex::new(()),
        }
    }

    pub(crate) fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    pub(crate) fn key_store(&self) -> &dyn KeyStore {
        self.keys.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn cached(&self, thread: &str) -> Option<Arc<DataKey>> {
        self.lock().keys.get(thread).cloned()
    }

    /// Where `thread`'s key stands now: taken before reading the key store, given back to
    /// [`remember`](Self::remember).
    fn epoch(&self, thread: &str) -> Epoch {
        self.lock().epoch(thread)
    }

    /// Caches `key`, read from the key store at `epoch`, unless `thread`'s key was destroyed
    /// since: a reader racing a purge never puts the destroyed key back.
    fn remember(&self, thread: &str, key: Arc<DataKey>, epoch: Epoch) {
        let mut cache = self.lock();
        if cache.epoch(thread) != epoch {
            return;
        }
        if cache.keys.len() >= self.capacity && !cache.keys.contains_key(thread) {
            // Bounded: drop an arbitrary entry (it is unwrapped again when next needed).
            if let Some(victim) = cache.keys.keys().next().cloned() {
                cache.keys.remove(&victim);
            }
        }
        cache.keys.insert(thread.to_string(), key);
    }

    /// Drops `thread`'s key from the cache and moves its epoch on, so a key read before now
    /// is not cached.
    fn forget(&self, thread: &str) {
        let mut cache = self.lock();
        cache.keys.remove(thread);
        if cache.destroyed.len() >= self.capacity && !cache.destroyed.contains_key(thread) {
            // Bounded: emptying it moves every thread's epoch on at once.
            cache.destroyed.clear();
            cache.cleared += 1;
        }
        *cache.destroyed.entry(thread.to_string()).or_default() += 1;
    }

    /// The live key of `record` (read from the key store at `epoch`), unwrapped and cached.
    fn live(&self, thread: &str, record: &KeyRecord, epoch: Epoch) -> Result<Arc<DataKey>, SealError> {
        let key =
            Arc::new(DataKey { generation: record.generation, key: unwrap(self.provider.as_ref(), thread, record)? });
        self.remember(thread, key.clone(), epoch);
        Ok(key)
    }

    /// The key to seal `thread`'s payloads with: its live key, or a new one, durable in the
    /// key store before it is returned (so no payload is ever sealed with a key that a crash
    /// could lose).
    pub(crate) fn for_write(&self, thread: &str) -> Result<Arc<DataKey>, SealError> {
        if let Some(key) = self.cached(thread) {
            return Ok(key);
        }
        let _creating = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = self.cached(thread) {
            return Ok(key);
        }
        let epoch = self.epoch(thread);
        let generation = match self.keys.get(thread)? {
            Some(record) if !record.is_destroyed() => return self.live(thread, &record, epoch),
            Some(destroyed) => destroyed.generation.saturating_add(1),
            None => 1,
        };
        let key = SecretKey::generate()?;
        let record = wrap(self.provider.current(), thread, generation, &key)?;
        let kept = self.keys.create(thread, record.clone())?;
        if kept != record {
            // Another process made the thread's key first: use that one.
            return self.live(thread, &kept, epoch);
        }
        let key = Arc::new(DataKey { generation, key });
        self.remember(thread, key.clone(), epoch);
        Ok(key)
    }

    /// The key that opens `thread`'s payloads sealed with key generation `generation`.
    pub(crate) fn for_read(&self, thread: &str, generation: u32) -> Result<Arc<DataKey>, SealError> {
        if let Some(key) = self.cached(thread).filter(|k| k.generation == generation) {
            return Ok(key);
        }
        let epoch = self.epoch(thread);
        match self.keys.get(thread)? {
            Some(record) if !record.is_destroyed() && record.generation == generation => {
                self.live(thread, &record, epoch)
            }
            Some(record) if record.generation >= generation => Err(SealError::NoKey {
                thread: thread.to_string(),
                why: format!("of generation {generation} (it was destroyed)"),
            }),
            _ => Err(SealError::NoKey {
                thread: thread.to_string(),
                why: format!("of generation {generation} (the key store holds none)"),
            }),
        }
    }

    /// Destroys `thread`'s data key (dropping it from the cache before and after); `false` if
    /// it had no live key. A reader that read the key from the key store before the destroy
    /// does not cache it (see [`remember`](Self::remember)). Another keyring (another
    /// `SealedStore` or process) keeps its cached copy until it evicts it.
    pub(crate) fn destroy(&self, thread: &str) -> Result<bool, SealError> {
        self.forget(thread);
        let destroyed = self.keys.destroy(thread)?;
        self.forget(thread);
        Ok(destroyed)
    }
}

/// What [`rotate_keys`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RotationReport {
    /// Data keys re-wrapped by the new current key.
    pub rewrapped: usize,
    /// Data keys already wrapped by it (left as they were).
    pub current: usize,
    /// Destroyed keys (nothing to re-wrap).
    pub destroyed: usize,
}

/// Re-wraps every live data key of `key_store` with `new`'s current key-encryption key,
/// unwrapping each with the key of `old` (or of `new`) that wrapped it. Payloads are not
/// touched: they stay sealed with the same data keys. Once it returns, the old
/// key-encryption keys are no longer needed and can be retired.
///
/// Safe to run while stores use the key store (each re-wrap is a compare-and-set) and to
/// run again after a failure part-way (keys already moved are left as they are). A key that
/// neither provider can unwrap is an error, and the keys after it are not moved.
pub fn rotate_keys(
    key_store: &dyn KeyStore,
    old: &dyn KeyProvider,
    new: &dyn KeyProvider,
) -> Result<RotationReport, SealError> {
    let mut report = RotationReport::default();
    let target = new.current();
    for thread in key_store.threads()? {
        while let Some(record) = key_store.get(&thread)? {
            if record.is_destroyed() {
                report.destroyed += 1;
                break;
            }
            if record.kek_id == target.id() {
                report.current += 1;
                break;
            }
            let key = match unwrap(old, &thread, &record) {
                Err(SealError::MissingKek { .. }) => unwrap(new, &thread, &record)?,
                other => other?,
            };
            let rewrapped = wrap(target, &thread, record.generation, &key)?;
            if key_store.replace(&thread, &record, rewrapped)? {
                report.rewrapped += 1;
                break;
            }
            // The record changed meanwhile (destroyed, or made anew): look again.
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealed::key_store::MemoryKeyStore;
    use crate::sealed::provider::StaticKeyProvider;

    fn ring(capacity: usize) -> Keyring {
        let provider = StaticKeyProvider::new(Kek::new([1; KEY_LEN]), vec![]);
        Keyring::new(Box::new(MemoryKeyStore::new()), Box::new(provider), capacity)
    }

    #[test]
    fn a_key_read_before_a_destroy_is_not_put_back_in_the_cache() {
        let ring = ring(8);
        ring.for_write("t").unwrap();
        ring.forget("t");
        // A reader reads the live record; the purge destroys the key; the reader unwraps it.
        let epoch = ring.epoch("t");
        let record = ring.keys.get("t").unwrap().unwrap();
        assert!(ring.destroy("t").unwrap());
        ring.live("t", &record, epoch).unwrap();
        assert!(ring.cached("t").is_none());
        assert!(matches!(ring.for_read("t", 1), Err(SealError::NoKey { .. })));
        // Without a destroy in between, the key read is cached.
        ring.for_write("u").unwrap();
        ring.forget("u");
        let epoch = ring.epoch("u");
        let record = ring.keys.get("u").unwrap().unwrap();
        ring.live("u", &record, epoch).unwrap();
        assert!(ring.cached("u").is_some());
    }

    #[test]
    fn the_destroy_marks_stay_bounded_and_still_refuse_a_key_read_before() {
        let ring = ring(1);
        ring.for_write("a").unwrap();
        ring.forget("a");
        let epoch = ring.epoch("a");
        let record = ring.keys.get("a").unwrap().unwrap();
        ring.destroy("a").unwrap();
        // Another destroy empties the marks (capacity 1): "a"'s old epoch still does not match.
        ring.destroy("b").unwrap();
        assert!(ring.lock().destroyed.len() <= 1);
        ring.live("a", &record, epoch).unwrap();
        assert!(ring.cached("a").is_none());
    }
}
