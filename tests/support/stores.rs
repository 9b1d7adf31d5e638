//! Stores the tests run on: a fresh in-memory redb store.

use std::sync::Arc;

use agentflow::{RedbStore, Store};

/// A fresh in-memory redb store.
pub fn store() -> Arc<dyn Store> {
    Arc::new(RedbStore::in_memory().expect("in-memory store"))
}
