//! [`SealedStore`]: any [`Store`] with its payloads sealed, and what it seals a whole commit,
//! batch or dump with.

use crate::dump::ThreadDump;
use crate::error::{CommitError, PurgeError, StorageError};
use crate::record::{
    ApprovalRecord, ApprovalTransition, AuditEntry, EffectBatch, EffectKey, NewAuditEntry, PendingWrite, StepCommit,
};
use crate::sealed::audit_view::{rechain, rechain_but};
use crate::sealed::error::SealError;
use crate::sealed::key_store::KeyStore;
use crate::sealed::keyring::{DEFAULT_KEY_CACHE, Keyring};
use crate::sealed::provider::KeyProvider;
use crate::sealed::records::{Opener, Sealer, kind, restored_json};
use crate::store::{Listing, Store};

/// A [`Store`] that seals every payload it is handed before the store it wraps keeps it, and
/// opens it again when it is read: checkpoint states, updates and metadata, pending writes
/// (map instances' included), effect results (tool arguments and results), interrupts and their
/// answers (kept as pending writes), approval arguments, conditions and notes, audit entry
/// details, queued and follow-up runs' inputs, event data, webhook payloads and schedules'
/// inputs. Ids, statuses, times, leases, the queue's fields, timers,
/// breakers and graph descriptions stay as they are, so listings and queries work unchanged.
///
/// Each thread has its own data key (XChaCha20-Poly1305, 256 bits), made the first time the
/// thread is written, wrapped by the [`KeyProvider`]'s key-encryption key and kept in the
/// [`KeyStore`], apart from the data: a copy of the data without the key store opens nothing.
/// [`Store::purge_thread`] destroys the data keys of the threads it purges once the wrapped
/// store has purged them, so every copy of the data (backups, replicas, freed pages) no longer
/// opens their payloads; if it fails between the two, purging again destroys the keys.
///
/// Unwrapped data keys are cached in memory (see [`with_key_cache`](Self::with_key_cache)). A
/// purge drops the key from this store's cache and no read racing it puts it back, but
/// another `SealedStore` on the same key store (another instance, or another process) keeps
/// its cached copy of a destroyed key until it is evicted there: such a store can still open
/// payloads it reads from a copy of the data. Open one `SealedStore` per key store in a
/// process, and restart (or size the cache down for) other processes when a purge must take
/// effect in their memory at once.
///
/// ```
/// use agentflow_store::sealed::{Kek, MemoryKeyStore, SealedStore, StaticKeyProvider};
/// use agentflow_store::{RedbStore, Store};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let kek = Kek::parse("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "example key")?;
/// let store = SealedStore::new(RedbStore::in_memory()?, MemoryKeyStore::new(), StaticKeyProvider::new(kek, vec![]));
/// assert!(store.seals_payloads());
/// # Ok(())
/// # }
/// ```
pub struct SealedStore<S> {
    pub(crate) inner: S,
    pub(crate) ring: Keyring,
}

impl<S: std::fmt::Debug> std::fmt::Debug for SealedStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedStore").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl<S: Store> SealedStore<S> {
    /// Wraps `inner`, keeping the data keys in `keys`, wrapped by `provider`'s keys.
    pub fn new(inner: S, keys: impl KeyStore + 'static, provider: impl KeyProvider + 'static) -> Self {
        SealedStore { inner, ring: Keyring::new(Box::new(keys), Box::new(provider), DEFAULT_KEY_CACHE) }
    }

    /// The same store keeping at most `capacity` unwrapped data keys in memory (default
    /// 4096); a thread whose key is not cached has it unwrapped again from the key store.
    #[must_use]
    pub fn with_key_cache(self, capacity: usize) -> Self {
        let SealedStore { inner, ring } = self;
        SealedStore { inner, ring: ring.with_capacity(capacity) }
    }

    /// The wrapped store (it reads and writes the sealed forms).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The key store holding the data keys.
    pub fn key_store(&self) -> &dyn KeyStore {
        self.ring.key_store()
    }

    /// Seals `payload` as a pending write of `thread` and opens it again: the codec's work on
    /// one record, outside any store (for measuring it); not part of the API.
    #[doc(hidden)]
    pub fn seal_and_open(&self, thread: &str, payload: &[u8]) -> Result<Vec<u8>, StorageError> {
        let sealed = self.sealer(thread)?.bytes(kind::PENDING, payload)?;
        Ok(self.opener(thread).bytes(kind::PENDING, sealed)?)
    }

    /// A sealer for `thread`.
    pub(crate) fn sealer<'a>(&self, thread: &'a str) -> Result<Sealer<'a>, StorageError> {
        Ok(Sealer::new(&self.ring, thread)?)
    }

    /// An opener for `thread`.
    pub(crate) fn opener<'a>(&'a self, thread: &'a str) -> Opener<'a> {
        Opener::new(&self.ring, thread)
    }

    /// Seals `effects`, each with its own thread's key.
    fn seal_effects(&self, effects: Vec<(EffectKey, Vec<u8>)>) -> Result<Vec<(EffectKey, Vec<u8>)>, StorageError> {
        effects
            .into_iter()
            .map(|(k, v)| {
                let sealed = self.sealer(&k.thread)?.bytes(kind::EFFECT, &v)?;
                Ok((k, sealed))
            })
            .collect()
    }

    /// Seals every payload of a step commit.
    pub(crate) fn seal_commit(&self, mut c: StepCommit) -> Result<StepCommit, StorageError> {
        let thread = c.thread.id.clone();
        let has_payload = c.checkpoint.is_some()
            || !c.pending_writes.is_empty()
            || !c.audit.is_empty()
            || !c.new_approvals.is_empty()
            || !c.approval_transitions.is_empty()
            || !c.events.is_empty();
        if has_payload {
            let s = self.sealer(&thread)?;
            c.checkpoint = c.checkpoint.map(|cp| s.checkpoint(cp)).transpose()?;
            let shared = (&mut c.pending_writes, &mut c.audit, &mut c.new_approvals, &mut c.approval_transitions);
            seal_shared(&s, shared)?;
            // An event's kind stays clear: readers filter on it.
            for event in &mut c.events {
                event.data = s.bytes(kind::EVENT, &event.data)?;
            }
        }
        c.effects = self.seal_effects(c.effects)?;
        Ok(c)
    }

    /// Seals every payload of an effect batch.
    pub(crate) fn seal_batch(&self, mut b: EffectBatch) -> Result<EffectBatch, StorageError> {
        let thread = b.thread.clone();
        if !b.pending_writes.is_empty()
            || !b.audit.is_empty()
            || !b.new_approvals.is_empty()
            || !b.approval_transitions.is_empty()
        {
            let s = self.sealer(&thread)?;
            seal_shared(&s, (&mut b.pending_writes, &mut b.audit, &mut b.new_approvals, &mut b.approval_transitions))?;
        }
        b.effects = self.seal_effects(b.effects)?;
        Ok(b)
    }

    /// Seals every payload of a dump, its audit log chained over the sealed details (each
    /// entry's own hashes sealed with its detail, read back as they were).
    pub(crate) fn seal_dump(&self, d: ThreadDump) -> Result<ThreadDump, CommitError> {
        let thread = d.thread.id.clone();
        let s = self.sealer(&thread)?;
        let seal = |mut d: ThreadDump| -> Result<ThreadDump, StorageError> {
            d.checkpoints = d.checkpoints.into_iter().map(|cp| s.checkpoint(cp)).collect::<Result<_, _>>()?;
            d.pending_writes = d.pending_writes.into_iter().map(|w| s.pending(w)).collect::<Result<_, _>>()?;
            d.audit = d.audit.into_iter().map(|e| s.audit_entry(e)).collect::<Result<_, _>>()?;
            d.approvals = d.approvals.into_iter().map(|a| s.approval(a)).collect::<Result<_, _>>()?;
            d.effects = self.seal_effects(d.effects)?;
            for e in &mut d.events {
                e.data = s.bytes(kind::EVENT, &e.data)?;
            }
            rechain(&thread, &mut d.audit);
            Ok(d)
        };
        Ok(seal(d)?)
    }

    /// Opens every payload of a dump.
    pub(crate) fn open_dump(&self, mut d: ThreadDump) -> Result<ThreadDump, StorageError> {
        let thread = d.thread.id.clone();
        let mut o = self.opener(&thread);
        d.checkpoints = d.checkpoints.into_iter().map(|cp| o.checkpoint(cp)).collect::<Result<_, _>>()?;
        d.pending_writes = d.pending_writes.into_iter().map(|w| o.pending(w)).collect::<Result<_, _>>()?;
        d.audit = self.open_audit(&thread, Listing::complete(std::mem::take(&mut d.audit)), true)?.items;
        d.approvals = d.approvals.into_iter().map(|a| o.approval(a)).collect::<Result<_, _>>()?;
        d.effects = d
            .effects
            .into_iter()
            .map(|(k, v)| {
                let opened = self.opener(&k.thread).bytes(kind::EFFECT, v)?;
                Ok::<_, SealError>((k, opened))
            })
            .collect::<Result<_, _>>()?;
        for e in &mut d.events {
            e.data = o.bytes(kind::EVENT, std::mem::take(&mut e.data))?;
        }
        Ok(d)
    }

    /// Opens the entries of `thread`'s log, with the hashes of the opened details (see
    /// [`rechain_but`]); an entry that does not open is the error (`strict`) or skipped.
    pub(crate) fn open_audit(
        &self,
        thread: &str,
        listing: Listing<AuditEntry>,
        strict: bool,
    ) -> Result<Listing<AuditEntry>, StorageError> {
        let mut o = self.opener(thread);
        let Listing { items, mut skipped } = listing;
        let mut opened = Vec::with_capacity(items.len());
        let mut carried = Vec::with_capacity(items.len());
        for e in items {
            let restored = restored_json(&e.detail).is_some();
            match o.audit(e) {
                Ok(e) => {
                    // A restored entry of a dump without hashes (an older build's) is chained.
                    carried.push(restored && !e.detail_hash.is_empty() && !e.link.is_empty());
                    opened.push(e);
                }
                Err(err) if !strict => skipped.push(err.into()),
                Err(err) => return Err(err.into()),
            }
        }
        rechain_but(thread, &mut opened, &carried);
        Ok(Listing::new(opened, skipped))
    }

    /// The purge, then crypto-erasure: the wrapped store purges (it refuses an unknown thread
    /// and legal holds on the thread, its subgraph children or a thread above it, in the same
    /// transaction as the purge, so a refused purge destroys no key), then the data keys of
    /// every thread it purged are destroyed. A purge of a thread purged already purges nothing
    /// more but still destroys any key left live, so purging again finishes a purge a crash
    /// stopped between the two (the data was gone from the live store, the copies still open
    /// until the key goes).
    pub(crate) fn purge(
        &self,
        thread: &str,
        entry: crate::record::NewAuditEntry,
    ) -> Result<crate::record::PurgeReport, PurgeError> {
        let report = self.inner.purge_thread(thread, entry)?;
        for t in &report.threads {
            self.ring.destroy(t).map_err(StorageError::from)?;
        }
        Ok(report)
    }
}

/// The payload lists a step commit and an effect batch share: pending writes, audit entries,
/// new approvals and approval transitions.
type Shared<'c> = (
    &'c mut Vec<PendingWrite>,
    &'c mut Vec<NewAuditEntry>,
    &'c mut Vec<ApprovalRecord>,
    &'c mut Vec<ApprovalTransition>,
);

/// Seals, in place, the payload lists a step commit and an effect batch share.
fn seal_shared(s: &Sealer<'_>, (pending, audit, approvals, transitions): Shared<'_>) -> Result<(), StorageError> {
    *pending = std::mem::take(pending).into_iter().map(|w| s.pending(w)).collect::<Result<_, _>>()?;
    *audit = std::mem::take(audit).into_iter().map(|e| s.audit(e)).collect::<Result<_, _>>()?;
    *approvals = std::mem::take(approvals).into_iter().map(|a| s.approval(a)).collect::<Result<_, _>>()?;
    for t in transitions.iter_mut() {
        t.patch = s.patch(std::mem::take(&mut t.patch))?;
    }
    Ok(())
}
