//! Store failures of claimed runs: how many in a row per thread, and the backoff before a
//! run that failed on the store is claimed again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use agentflow_store::QueuedRun;

/// A claimed run that fails on the store this many times in a row, in one worker, is taken out
/// of the queue. (Not [`QueuedRun::claims`]: a long-lived thread is claimed again at every
/// wake-up, and one passing store fault must not drop it.)
pub(super) const MAX_CLAIMS_ON_STORE_ERRORS: u32 = 5;

/// How long a run that failed on the store waits before it is claimed again: the first time,
/// then twice as long each time in a row (1, 2, 4, 8 s: about 15 s from the first failure to
/// the fifth, which takes it out of the queue), at most the worker's lease TTL. A passing fault
/// of the store (a restart, a failover) then has time to pass.
const STORE_FAILURE_BACKOFF: Duration = Duration::from_secs(1);

/// The wait after the `failures`-th store failure in a row (see [`STORE_FAILURE_BACKOFF`]).
pub(super) fn store_failure_backoff(failures: u32, ttl: Duration) -> Duration {
    let doubled = STORE_FAILURE_BACKOFF.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(ttl)
}

/// How many times in a row each thread's run failed on the store in this worker, the thread
/// not moving on in between: by where the thread stood at the last failure (its newest
/// checkpoint, if it could be read) and the count. A failure where the thread stands elsewhere
/// (a run, here or in another worker, moved it on) starts the count again; a run that ends
/// otherwise here clears it. (Over consecutive claims alone, a thread failing for good in two
/// workers taking turns would never reach the limit.)
#[derive(Clone, Default)]
pub(super) struct StoreFailures(Arc<std::sync::Mutex<HashMap<String, Standing>>>);

/// Where a thread stood at its last store failure in this worker, and how many in a row.
type Standing = (Option<u64>, u32);

impl StoreFailures {
    /// Counts a failure of `thread`'s run, the thread standing at checkpoint `at`; returns how
    /// many in a row.
    pub(super) fn failed(&self, thread: &str, at: Option<u64>) -> u32 {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (last, count) = counts.entry(thread.to_string()).or_default();
        *count = if *count > 0 && *last == at { count.saturating_add(1) } else { 1 };
        *last = at;
        *count
    }

    /// `thread`'s run ended otherwise than failing on the store.
    pub(super) fn clear(&self, thread: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(thread);
    }
}

#[cfg(test)]
mod tests {
    /// Store failures count in a row while the thread stands still: one where it moved on (a
    /// run elsewhere committed a step) starts the count again, whoever claimed in between.
    #[test]
    fn store_failures_count_while_the_thread_stands_still() {
        use super::StoreFailures;
        let failures = StoreFailures::default();
        assert_eq!([Some(3), Some(3), Some(3)].map(|at| failures.failed("t", at)), [1, 2, 3]);
        assert_eq!(failures.failed("t", Some(4)), 1, "the thread moved on");
        assert_eq!([None, None].map(|at| failures.failed("u", at)), [1, 2], "unreadable: still standing");
        failures.clear("t");
        assert_eq!(failures.failed("t", Some(4)), 1);
    }
}
