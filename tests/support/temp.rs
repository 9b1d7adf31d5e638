//! Temporary directories of the tests: a new, empty one per call.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A new, empty directory under the system temp dir named after `name`, this process, the
/// clock and a counter (so no other test, and no earlier run, has it).
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("agentflow-{name}-{}-{nanos}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
