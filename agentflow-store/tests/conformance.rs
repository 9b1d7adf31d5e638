//! The conformance suite on `RedbStore`, in memory and on a file.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use agentflow_store::{RedbStore, Store, conformance};
use common::TempDir;

#[test]
fn in_memory() {
    conformance::run_all(&|| Box::new(RedbStore::in_memory().expect("in-memory store")));
}

#[test]
fn on_file() {
    let dir = TempDir::new("conformance");
    let n = AtomicU64::new(0);
    conformance::run_all(&|| {
        let path = dir.file(&format!("store-{}.redb", n.fetch_add(1, Ordering::Relaxed)));
        Box::new(RedbStore::open(path).expect("file store")) as Box<dyn Store>
    });
}
