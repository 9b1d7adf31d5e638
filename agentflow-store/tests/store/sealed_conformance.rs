//! The conformance suite on `SealedStore` (feature `encryption`): over `RedbStore` in memory
//! and on files (with its keys in a `RedbKeyStore`), and over `PostgresStore` when
//! `AGENTFLOW_PG_URL` names a server. Sealing must change nothing a caller sees.

#![cfg(feature = "encryption")]

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};

use agentflow_store::sealed::{Kek, MemoryKeyStore, RedbKeyStore, SealedStore, StaticKeyProvider};
use agentflow_store::{RedbStore, Store, conformance};
use common::TempDir;

fn provider() -> StaticKeyProvider {
    StaticKeyProvider::new(Kek::new([7; 32]), vec![])
}

#[test]
fn sealed_in_memory() {
    conformance::run_all(&|| {
        Box::new(SealedStore::new(RedbStore::in_memory().expect("in-memory store"), MemoryKeyStore::new(), provider()))
    });
}

#[test]
fn sealed_on_files_with_a_redb_key_store() {
    let dir = TempDir::new("sealed-conformance");
    let n = AtomicU64::new(0);
    conformance::run_all(&|| {
        let i = n.fetch_add(1, Ordering::Relaxed);
        let data = RedbStore::open(dir.file(&format!("store-{i}.redb"))).expect("file store");
        let keys = RedbKeyStore::open(dir.file(&format!("keys-{i}.redb"))).expect("key store");
        Box::new(SealedStore::new(data, keys, provider())) as Box<dyn Store>
    });
}

/// The suite on `PostgresStore`, its keys in a `PostgresKeyStore` on a schema of their own.
#[cfg(feature = "postgres")]
#[test]
fn sealed_on_postgres_with_a_postgres_key_store() {
    use crate::pg_common;
    use agentflow_store::PostgresStore;
    use agentflow_store::sealed::PostgresKeyStore;
    use std::sync::Mutex;

    let Some(url) = pg_common::url() else { return };
    let schemas = Mutex::new(Vec::new());
    conformance::run_all(&|| {
        let (schema, keys) = (pg_common::Schema::new(&url, "sealed"), pg_common::Schema::new(&url, "sealedkeys"));
        let store = PostgresStore::builder().schema(&schema.name).open(&url).expect("open the PostgreSQL store");
        let key_store = PostgresKeyStore::open(&url, &keys.name).expect("open the key store");
        schemas.lock().unwrap().extend([schema, keys]);
        Box::new(SealedStore::new(store, key_store, provider())) as Box<dyn Store>
    });
}

/// `PostgresKeyStore`: a second create keeps the first key, a re-wrap is a compare-and-set, a
/// destroyed key keeps its generation and a new key may replace it; two handles (two
/// processes) see one table.
#[cfg(feature = "postgres")]
#[test]
fn postgres_key_store_compare_and_sets() {
    use crate::pg_common;
    use agentflow_store::sealed::{KeyRecord, KeyStore, PostgresKeyStore};

    let Some(url) = pg_common::url() else { return };
    let schema = pg_common::Schema::new(&url, "keys");
    let (a, b) =
        (PostgresKeyStore::open(&url, &schema.name).unwrap(), PostgresKeyStore::open(&url, &schema.name).unwrap());
    let first = KeyRecord::new(1, "kek-1", vec![1; 56]);
    assert_eq!(a.create("t", first.clone()).unwrap(), first);
    assert_eq!(b.create("t", KeyRecord::new(1, "kek-1", vec![2; 56])).unwrap(), first);
    let rewrapped = KeyRecord::new(1, "kek-2", vec![3; 56]);
    assert!(b.replace("t", &first, rewrapped.clone()).unwrap());
    assert!(!a.replace("t", &first, KeyRecord::new(1, "kek-3", vec![4; 56])).unwrap());
    assert_eq!(a.get("t").unwrap(), Some(rewrapped));
    assert!(a.destroy("t").unwrap());
    assert!(!b.destroy("t").unwrap());
    let destroyed = b.get("t").unwrap().unwrap();
    assert!(destroyed.is_destroyed() && destroyed.generation == 1);
    let next = KeyRecord::new(2, "kek-2", vec![5; 56]);
    assert_eq!(b.create("t", next.clone()).unwrap(), next);
    assert_eq!(a.threads().unwrap(), vec!["t".to_string()]);
    assert!(a.get("nobody").unwrap().is_none());
    assert!(PostgresKeyStore::open(&url, "bad\"name").is_err());
}
