//! Listings of the sealing store: deliveries that do not open do not starve the others, and a
//! key store that fails for now is an error, never a damaged row.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::conformance::NOW;
use crate::{NewRun, NewWebhookDelivery, RedbStore, Settle, StorageError, Store};

/// A key store that fails every read while `fail` is set.
struct Flaky {
    keys: MemoryKeyStore,
    fail: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), KeyStoreError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(KeyStoreError::Io { path: PathBuf::from("keys"), detail: "timed out".into() });
        }
        Ok(())
    }
}

impl KeyStore for Flaky {
    fn get(&self, thread: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        self.check()?;
        self.keys.get(thread)
    }
    fn create(&self, thread: &str, record: KeyRecord) -> Result<KeyRecord, KeyStoreError> {
        self.keys.create(thread, record)
    }
    fn replace(&self, thread: &str, expected: &KeyRecord, new: KeyRecord) -> Result<bool, KeyStoreError> {
        self.keys.replace(thread, expected, new)
    }
    fn destroy(&self, thread: &str) -> Result<bool, KeyStoreError> {
        self.keys.destroy(thread)
    }
    fn threads(&self) -> Result<Vec<String>, KeyStoreError> {
        self.keys.threads()
    }
}

fn sealed(keys: Arc<Flaky>) -> SealedStore<RedbStore> {
    // A cache of one key (the fewest): reads ask the key store.
    let provider = StaticKeyProvider::new(Kek::new([7; KEY_LEN]), vec![]);
    SealedStore::new(RedbStore::in_memory().unwrap(), keys, provider).with_key_cache(0)
}

/// A delivery of thread `thread` made at `at`, by the settle of a run with a webhook.
fn deliver(store: &dyn Store, thread: &str, at: u64) {
    let url = format!("https://example.test/{thread}");
    store.enqueue_run(NewRun::new(thread, "g", Some(b"in".to_vec()), "ada", at).with_webhook(url.as_str())).unwrap();
    assert_eq!(store.claim_runs("g", "w", 1000, at, 1).unwrap().len(), 1);
    let delivery = NewWebhookDelivery::new(url, b"{}".to_vec()).at(at);
    assert!(store.settle_run_and_release(thread, "w", &Settle::remove().with_webhook(delivery)).unwrap());
}

fn flaky() -> Arc<Flaky> {
    Arc::new(Flaky { keys: MemoryKeyStore::new(), fail: AtomicBool::new(false) })
}

#[test]
fn deliveries_that_do_not_open_do_not_starve_the_ones_due_after_them() {
    let store = sealed(flaky());
    for i in 0..40 {
        let thread = format!("erased-{i:02}");
        deliver(&store, &thread, NOW + i);
        assert!(store.ring.destroy(&thread).unwrap());
    }
    deliver(&store, "kept", NOW + 100);
    let due = store.due_webhooks(NOW + 1000, 32).unwrap();
    let threads: Vec<&str> = due.items.iter().map(|d| d.thread.as_str()).collect();
    assert_eq!(threads, ["kept"], "the delivery after 40 that do not open");
    assert_eq!(due.skipped.len(), 40);
    // At most `limit`, the longest due first.
    for i in 0..3 {
        deliver(&store, &format!("more-{i}"), NOW + 200 + i);
    }
    let due = store.due_webhooks(NOW + 1000, 2).unwrap();
    let threads: Vec<&str> = due.items.iter().map(|d| d.thread.as_str()).collect();
    assert_eq!(threads, ["kept", "more-0"]);
}

#[test]
fn a_key_store_that_fails_for_now_is_an_error_not_a_damaged_row() {
    let keys = flaky();
    let store = sealed(Arc::clone(&keys));
    deliver(&store, "t", NOW);
    // A cache of one key: `t`'s is read from the key store again.
    deliver(&store, "u", NOW + 5);
    keys.fail.store(true, Ordering::SeqCst);
    let err = store.due_webhooks(NOW + 1, 10).unwrap_err();
    assert!(matches!(&err, crate::QueueError::Storage(StorageError::Sealed { .. })), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
    keys.fail.store(false, Ordering::SeqCst);
    let due = store.due_webhooks(NOW + 10, 10).unwrap();
    assert_eq!((due.items.len(), due.skipped.len()), (2, 0));
}
