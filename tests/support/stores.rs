//! Stores the tests run on: a fresh in-memory redb store, or a redb store on a file.
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use agentflow::{RedbStore, Store};
use agentflow_store::OpenError;

/// A fresh in-memory redb store.
pub fn store() -> Arc<dyn Store> {
    Arc::new(RedbStore::in_memory().expect("in-memory store"))
}

/// The redb store on the file at `path` (created when missing): what a process opens after
/// another one, killed or done, left its file behind.
pub fn open_redb(path: impl AsRef<Path>) -> Result<RedbStore, OpenError> {
    RedbStore::open(path)
}
