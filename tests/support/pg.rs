//! The PostgreSQL server the tests of this package use: `AGENTFLOW_PG_URL`
//! (`source .ci/postgres.sh` starts one and sets it).
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server's URL, or `None` after printing once why the PostgreSQL tests
/// are skipped; under CI (`CI=true`) a missing URL fails.
pub fn pg_url() -> Option<String> {
    static SKIP: Once = Once::new();
    match std::env::var("AGENTFLOW_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "AGENTFLOW_PG_URL is not set under CI: source .ci/postgres.sh before cargo test"
            );
            SKIP.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED PostgreSQL tests: AGENTFLOW_PG_URL is not set (start a server with `source .ci/postgres.sh`)"
                );
            });
            None
        }
    }
}

/// A schema name no other test uses: `prefix` and `tag`, this process, a counter and the clock.
pub fn unique_schema(prefix: &str, tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{prefix}_{tag}_{}_{}_{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}
