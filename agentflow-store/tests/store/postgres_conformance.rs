//! The conformance suite on `PostgresStore`, against the server at `AGENTFLOW_PG_URL` (skipped
//! with one line when it is unset). Every case gets a store on a fresh schema.

#![cfg(feature = "postgres")]

use crate::pg_common;

use std::sync::Mutex;

use agentflow_store::{PostgresStore, Store, conformance};
use pg_common::Schema;

fn suite(tag: &str, max_connections: usize, server_options: &str) {
    let Some(url) = pg_common::url() else { return };
    let url = if server_options.is_empty() {
        url
    } else {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}options={server_options}")
    };
    let schemas = Mutex::new(Vec::new());
    conformance::run_all(&|| {
        let schema = Schema::new(&url, tag);
        let store = PostgresStore::builder()
            .schema(&schema.name)
            .max_connections(max_connections)
            .open(&url)
            .expect("open the PostgreSQL store");
        schemas.lock().unwrap().push(schema);
        Box::new(store) as Box<dyn Store>
    });
}

#[test]
fn conformance_suite_on_postgres() {
    suite("conf", 8, "");
}

/// Races of 16 and 32 callers on one connection: they queue for it and the rules still hold.
#[test]
fn conformance_suite_on_postgres_with_one_connection() {
    suite("conf1", 1, "");
}

/// With every transaction SERIALIZABLE (a server or role default some deployments set), the
/// races of the suite end in serialization failures, which the store retries until each caller
/// gets the answer the suite expects.
#[test]
fn conformance_suite_on_postgres_when_transactions_default_to_serializable() {
    suite("confser", 8, "-c%20default_transaction_isolation%3Dserializable");
}
