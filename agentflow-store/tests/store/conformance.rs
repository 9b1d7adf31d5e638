//! The conformance suite on `RedbStore`, in memory and on files.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentflow_store::{RedbStore, RedbStoreBuilder, Store, conformance};
use common::TempDir;

#[test]
fn in_memory() {
    conformance::run_all(&|| Box::new(RedbStore::in_memory().expect("in-memory store")));
}

/// The suite on fresh files opened with `builder`.
fn on_files(tag: &str, builder: &RedbStoreBuilder) {
    let dir = TempDir::new(tag);
    let n = AtomicU64::new(0);
    conformance::run_all(&|| {
        let path = dir.file(&format!("store-{}.redb", n.fetch_add(1, Ordering::Relaxed)));
        Box::new(builder.open(path).expect("file store")) as Box<dyn Store>
    });
}

#[test]
fn on_file() {
    on_files("conformance", &RedbStore::builder());
}

#[test]
fn on_file_with_a_writer_that_never_polls() {
    on_files("conformance-no-linger", &RedbStore::builder().linger(Duration::ZERO));
}
