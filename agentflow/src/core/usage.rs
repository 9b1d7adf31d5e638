//! Token usage of one call, and of several.

use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// Tokens used by one model call.
///
/// Sums saturate at `u64::MAX` instead of overflowing: the counts come from
/// the server, and a server reporting absurd usage must not crash or wrap a
/// run's accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub input_tokens: u64,
    /// Tokens of the reply.
    pub output_tokens: u64,
}

impl Usage {
    /// A usage record.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage { input_tokens, output_tokens }
    }
    /// Input plus output tokens, saturating at `u64::MAX`.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl Add for Usage {
    type Output = Usage;
    fn add(self, rhs: Usage) -> Usage {
        Usage::new(
            self.input_tokens.saturating_add(rhs.input_tokens),
            self.output_tokens.saturating_add(rhs.output_tokens),
        )
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}

/// Usage summed over several calls, remembering how many calls did not report
/// it: a total with unknown calls is a lower bound, not the full cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UsageTally {
    /// Sum of the usage the calls reported.
    pub known: Usage,
    /// Number of calls recorded.
    pub calls: u32,
    /// Number of those calls whose usage was unknown.
    pub unknown_calls: u32,
}

impl UsageTally {
    /// Record one call's usage (`None` = unknown).
    pub fn record(&mut self, usage: Option<Usage>) {
        self.calls = self.calls.saturating_add(1);
        match usage {
            Some(usage) => self.known += usage,
            None => self.unknown_calls = self.unknown_calls.saturating_add(1),
        }
    }
    /// Whether every call reported its usage.
    pub fn is_complete(&self) -> bool {
        self.unknown_calls == 0
    }
}
