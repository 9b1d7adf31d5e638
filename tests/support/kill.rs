//! Shared by the SIGKILL tests: how many trials, and reproducible kill times
//! from one printed seed (`AGENTFLOW_CRASH_TRIALS`, `AGENTFLOW_CRASH_SEED`).
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::path::Path;

/// `AGENTFLOW_CRASH_TRIALS`, or `default`.
pub fn trials(default: u32) -> u32 {
    std::env::var("AGENTFLOW_CRASH_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(default)
}

/// `AGENTFLOW_CRASH_SEED`, or one from the clock (print it, so a failure can be replayed).
pub fn seed() -> u64 {
    std::env::var("AGENTFLOW_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    })
}

/// splitmix64: the next number of the sequence `seed` stands at.
pub fn next(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How many files in `dir` have names starting with `prefix`.
pub fn files_starting_with(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(prefix))
        .count()
}
