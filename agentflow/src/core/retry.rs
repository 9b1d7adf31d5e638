//! Retry policy for transient node errors: capped exponential backoff with jitter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often and how patiently a node is retried after a transient error.
///
/// Written on a node as `retry = 3` (3 attempts in all) or
/// `retry(attempts = 5, base = 50ms, max_delay = 2s)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 means no retry.
    pub max_attempts: u32,
    /// The delay before the first retry; doubles on each further retry.
    pub base_delay: Duration,
    /// The cap on any one delay.
    pub max_delay: Duration,
    /// Whether each delay is scaled by a random factor in [0.5, 1.0].
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::none()
    }
}

impl RetryPolicy {
    /// One attempt, no retry.
    pub const fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            jitter: true,
        }
    }

    /// `attempts` attempts in all with the default backoff (100 ms doubling, capped at 10 s).
    pub const fn attempts(attempts: u32) -> Self {
        RetryPolicy { max_attempts: attempts, ..RetryPolicy::none() }
    }

    /// Sets the first delay.
    pub const fn base(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// Sets the cap on any delay.
    pub const fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Turns jitter on or off.
    pub const fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// The delay after failed attempt `attempt` (from 1), before jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// The delay after failed attempt `attempt`, jitter applied, never below
    /// what the source asked for (`retry_after`) and never above
    /// [`max_delay`](Self::max_delay): a source that asks for a longer wait
    /// (a `Retry-After` of a day) gets `max_delay`.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let mut d = self.backoff(attempt);
        if self.jitter {
            d = d.mul_f64(0.5 + 0.5 * unit_random());
        }
        retry_after.map_or(d, |r| d.max(r.min(self.max_delay)))
    }
}

/// A number in [0, 1) from a splitmix64 sequence; good enough for jitter.
fn unit_random() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut seed = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    if seed == 0 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        STATE.store(now, Ordering::Relaxed);
        seed = now;
    }
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy::attempts(10).base(Duration::from_millis(10)).max_delay(Duration::from_millis(50));
        assert_eq!(p.backoff(1), Duration::from_millis(10));
        assert_eq!(p.backoff(2), Duration::from_millis(20));
        assert_eq!(p.backoff(3), Duration::from_millis(40));
        assert_eq!(p.backoff(4), Duration::from_millis(50));
        assert_eq!(p.backoff(60), Duration::from_millis(50));
    }

    #[test]
    fn jitter_stays_within_half_to_full() {
        let p = RetryPolicy::attempts(3).base(Duration::from_millis(100));
        for _ in 0..1000 {
            let d = p.delay(1, None);
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(100), "{d:?}");
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let p = RetryPolicy::attempts(3).base(Duration::from_millis(10)).jitter(false);
        assert_eq!(p.delay(1, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(p.delay(1, Some(Duration::from_millis(1))), Duration::from_millis(10));
    }

    #[test]
    fn retry_after_is_capped_by_max_delay() {
        let p = RetryPolicy::attempts(3).base(Duration::from_millis(10)).max_delay(Duration::from_secs(2));
        assert_eq!(p.delay(1, Some(Duration::from_secs(86_400))), Duration::from_secs(2));
        assert_eq!(p.delay(1, Some(Duration::MAX)), Duration::from_secs(2));
        assert_eq!(p.jitter(false).delay(1, Some(Duration::from_secs(1))), Duration::from_secs(1));
    }
}
