//! This process's name among the processes that share a store.

use crate::core::clock::now_ms;

/// Names this process among every process that shares a store, on this machine or another:
/// the host name, the pid, the start time and 64 random bits (a pid alone repeats across
/// machines and containers, and after a restart).
pub(crate) fn process_tag() -> &'static str {
    use std::hash::{BuildHasher, Hasher};
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.').collect())
            .filter(|h: &String| !h.is_empty())
            .unwrap_or_else(|| "host".to_string());
        // `RandomState` is seeded from the operating system's randomness.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(now_ms());
        format!("{host}-pid{}-{}-{:016x}", std::process::id(), now_ms(), hasher.finish())
    })
}

/// Who asked, when a control does not say: this process (host name, pid, start time, random
/// bits), as `process:<tag>`.
pub(crate) fn process_actor() -> String {
    format!("process:{}", process_tag())
}
