//! Failed attempts per key, as token buckets.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys kept before idle, refilled buckets are forgotten.
const PRUNE_AT: usize = 4096;

/// An attempt refused by an [`AttemptLimiter`]: wait this long before the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many failed attempts; try again in {} s", retry_after.as_secs().max(1))]
#[non_exhaustive]
pub struct TooManyAttempts {
    /// How long until one more attempt is allowed (for a `Retry-After` header).
    pub retry_after: Duration,
}

impl TooManyAttempts {
    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up (at least 1), as a
    /// `Retry-After` header carries it.
    pub fn retry_after_secs(&self) -> u64 {
        let d = self.retry_after;
        (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Failed attempts (logins with a wrong token) counted per key (a client address, a user
/// name): each key has `burst` attempts and gets one back every `refill`. Check every key an
/// attempt concerns with [`check`](Self::check) before trying it, and [`fail`](Self::fail)
/// them when it fails; successes cost nothing.
#[derive(Debug)]
pub struct AttemptLimiter {
    burst: f64,
    refill: Duration,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl AttemptLimiter {
    /// `burst` attempts per key (at least 1), one more each `refill` (at least 1 ms).
    pub fn new(burst: u32, refill: Duration) -> Self {
        AttemptLimiter {
            burst: f64::from(burst.max(1)),
            refill: refill.max(Duration::from_millis(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn level(&self, b: &Bucket, now: Instant) -> f64 {
        let earned = now.saturating_duration_since(b.at).as_secs_f64() / self.refill.as_secs_f64();
        (b.tokens + earned).min(self.burst)
    }

    /// Whether an attempt concerning `keys` may be made now.
    ///
    /// # Errors
    ///
    /// [`TooManyAttempts`] when a key has no attempt left, with the longest wait among them.
    pub fn check(&self, keys: &[&str]) -> Result<(), TooManyAttempts> {
        let now = Instant::now();
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait = Duration::ZERO;
        for key in keys {
            if let Some(b) = buckets.get(*key) {
                let level = self.level(b, now);
                if level < 1.0 {
                    wait = wait.max(self.refill.mul_f64(1.0 - level));
                }
            }
        }
        if wait > Duration::ZERO { Err(TooManyAttempts { retry_after: wait }) } else { Ok(()) }
    }

    /// Counts a failed attempt against each of `keys`.
    pub fn fail(&self, keys: &[&str]) {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= PRUNE_AT {
            let full = self.burst;
            buckets.retain(|_, b| self.level(b, now) < full);
        }
        for key in keys {
            let level = match buckets.get(*key) {
                Some(b) => self.level(b, now),
                None => self.burst,
            };
            buckets.insert((*key).to_string(), Bucket { tokens: (level - 1.0).max(0.0), at: now });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_runs_out_after_its_burst_and_others_do_not() {
        let limiter = AttemptLimiter::new(3, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(limiter.check(&["10.0.0.1", "alice"]), Ok(()));
            limiter.fail(&["10.0.0.1", "alice"]);
        }
        let refused = limiter.check(&["10.0.0.1"]).unwrap_err();
        assert!(refused.retry_after > Duration::from_secs(50), "{refused:?}");
        assert_eq!(refused.retry_after_secs(), 60);
        assert!(limiter.check(&["10.0.0.2", "alice"]).is_err(), "the name is out of attempts too");
        assert_eq!(limiter.check(&["10.0.0.2", "bob"]), Ok(()));
    }

    #[test]
    fn attempts_come_back_with_time() {
        let limiter = AttemptLimiter::new(1, Duration::from_millis(20));
        limiter.fail(&["k"]);
        assert!(limiter.check(&["k"]).is_err());
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(limiter.check(&["k"]), Ok(()));
    }
}
