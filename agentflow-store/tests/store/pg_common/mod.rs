//! Helpers of the PostgreSQL tests: the server from `AGENTFLOW_PG_URL`, a fresh schema per test
//! (dropped at the end), and raw SQL for setting up and inspecting a schema.

#![allow(dead_code)]

use std::io::Write;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use agentflow_store::PostgresStore;

/// The server's URL, or `None` after printing (once per test binary) why the test is skipped.
/// Under CI (`CI=true`) a missing URL fails instead: there the tests must run.
pub fn url() -> Option<String> {
    static SKIP: Once = Once::new();
    match std::env::var("AGENTFLOW_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "AGENTFLOW_PG_URL is not set under CI: source .ci/postgres.sh before cargo test"
            );
            SKIP.call_once(|| {
                // Straight to stderr, past the test harness's capture, so the skip is seen.
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED PostgreSQL tests: AGENTFLOW_PG_URL is not set (start a server with `source .ci/postgres.sh`)"
                );
            });
            None
        }
    }
}

/// A schema name no other test uses.
pub fn fresh_schema(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("t_{tag}_{}_{}_{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Runs `sql` on the server and returns the first column of every row, as text.
pub fn sql(url: &str, sql: &str) -> Vec<Option<String>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
        let task = tokio::spawn(connection);
        let mut out = Vec::new();
        for message in client.simple_query(sql).await.expect("query") {
            if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                out.push(row.get(0).map(str::to_string));
            }
        }
        drop(client);
        let _ = task.await;
        out
    })
}

/// A fresh schema, dropped with everything in it when the value is dropped.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new(url: &str, tag: &str) -> Self {
        Schema { url: url.to_string(), name: fresh_schema(tag) }
    }

    /// A store on this schema (a pool of its own, as another process would have).
    pub fn open(&self) -> PostgresStore {
        PostgresStore::builder().schema(&self.name).open(&self.url).expect("open the PostgreSQL store")
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ =
            std::panic::catch_unwind(|| sql(&self.url, &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name)));
    }
}
