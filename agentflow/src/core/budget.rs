//! Budgets for agent loops: limits, usage, and what ran out.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::model::Usage;

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Budget {
    /// The super-step bound (`max_steps`).
    Steps,
    /// The wall-clock deadline of the run.
    Deadline,
    /// Model calls.
    ModelCalls,
    /// Tool calls.
    ToolCalls,
    /// Tokens, input and output.
    Tokens,
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Budget::Steps => "max_steps",
            Budget::Deadline => "deadline",
            Budget::ModelCalls => "model_calls",
            Budget::ToolCalls => "tool_calls",
            Budget::Tokens => "tokens",
        })
    }
}

/// Limits of a run, or of a persisted thread across its runs. `None` means unlimited.
///
/// Budgets for agent loops: model calls, tool calls and tokens, counted
/// across every node of a run, on top of the step bound and the deadline.
///
/// A persisted thread counts across runs: the usage is stored with each
/// checkpoint (and with every pause, failure or budget stop), a resume — in
/// this process or another — starts from the thread's stored totals, and the
/// limits are compared with those totals. The limits given when the thread
/// started are stored with it; a resume may tighten them for itself, but
/// raising them takes an explicit, audited call
/// ([`App::raise_limits`](crate::App::raise_limits)).
/// The usage of a step that was in flight when the process died is lost
/// with that step: at most one step's calls go uncounted per crash.
///
/// Tokens are reserved before a model call (its `max_output_tokens`, or
/// [`Limits::reserve_per_call`]) and settled with the usage the model
/// reports. A model that reports no usage keeps its reservation charged and
/// is counted in [`RunUsage::unknown_usage_calls`], so the totals are never
/// silently low.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Model calls in all.
    pub model_calls: Option<u32>,
    /// Tool calls in all (refused calls included: the model asked for them).
    pub tool_calls: Option<u32>,
    /// Tokens in all, input and output.
    pub tokens: Option<u64>,
    /// Tokens reserved for a call that sets no `max_output_tokens` (default 1024).
    pub reserve_per_call: Option<u32>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Self {
        Limits::default()
    }

    /// At most `n` model calls.
    #[must_use]
    pub fn model_calls(mut self, n: u32) -> Self {
        self.model_calls = Some(n);
        self
    }

    /// At most `n` tool calls.
    #[must_use]
    pub fn tool_calls(mut self, n: u32) -> Self {
        self.tool_calls = Some(n);
        self
    }

    /// At most `n` tokens.
    #[must_use]
    pub fn tokens(mut self, n: u64) -> Self {
        self.tokens = Some(n);
        self
    }
}

/// What a run (or a thread, over all its runs) consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RunUsage {
    /// Model calls made.
    pub model_calls: u32,
    /// Tool calls asked for.
    pub tool_calls: u32,
    /// Tokens charged (reported usage, or the reservation when unknown).
    pub tokens: u64,
    /// Model calls that reported no usage; their tokens are the reservation.
    pub unknown_usage_calls: u32,
}

impl RunUsage {
    /// Whether every model call reported its usage.
    pub fn usage_known(&self) -> bool {
        self.unknown_usage_calls == 0
    }

    /// What was consumed since `earlier` (field by field, never below zero).
    pub fn since(&self, earlier: &RunUsage) -> RunUsage {
        RunUsage {
            model_calls: self.model_calls.saturating_sub(earlier.model_calls),
            tool_calls: self.tool_calls.saturating_sub(earlier.tool_calls),
            tokens: self.tokens.saturating_sub(earlier.tokens),
            unknown_usage_calls: self.unknown_usage_calls.saturating_sub(earlier.unknown_usage_calls),
        }
    }
}

impl Limits {
    /// The first limit of `self` set higher than the same limit of `stored`,
    /// as `(budget, stored, asked)`. A limit `self` leaves unset raises nothing.
    pub(crate) fn raises(&self, stored: &Limits) -> Option<(Budget, u64, u64)> {
        let pairs = [
            (Budget::ModelCalls, self.model_calls.map(u64::from), stored.model_calls.map(u64::from)),
            (Budget::ToolCalls, self.tool_calls.map(u64::from), stored.tool_calls.map(u64::from)),
            (Budget::Tokens, self.tokens, stored.tokens),
        ];
        pairs.into_iter().find_map(|(which, asked, stored)| match (asked, stored) {
            (Some(a), Some(s)) if a > s => Some((which, s, a)),
            _ => None,
        })
    }

    /// The tighter of two limits, field by field; `reserve_per_call` from `self` when set.
    pub(crate) fn tightest(&self, other: &Limits) -> Limits {
        fn min<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Limits {
            model_calls: min(self.model_calls, other.model_calls),
            tool_calls: min(self.tool_calls, other.tool_calls),
            tokens: min(self.tokens, other.tokens),
            reserve_per_call: self.reserve_per_call.or(other.reserve_per_call),
        }
    }
}

/// A thread's limits and what it consumed so far, as stored with its checkpoints.
///
/// Every checkpoint carries it, so it is stored compact: limits that are not set and counters
/// at zero are left out (`{}` for a thread with no limits that used nothing). Reading fills
/// them in again, and reads the full form older checkpoints hold as well.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub(crate) struct ThreadBudget {
    pub(crate) limits: Limits,
    pub(crate) usage: RunUsage,
}

impl serde::Serialize for ThreadBudget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Limits { model_calls, tool_calls, tokens, reserve_per_call } = self.limits;
        let limits: [(&str, Option<u64>); 4] = [
            ("model_calls", model_calls.map(u64::from)),
            ("tool_calls", tool_calls.map(u64::from)),
            ("tokens", tokens),
            ("reserve_per_call", reserve_per_call.map(u64::from)),
        ];
        let RunUsage { model_calls, tool_calls, tokens, unknown_usage_calls } = self.usage;
        let usage: [(&str, u64); 4] = [
            ("model_calls", u64::from(model_calls)),
            ("tool_calls", u64::from(tool_calls)),
            ("tokens", tokens),
            ("unknown_usage_calls", u64::from(unknown_usage_calls)),
        ];
        let limits: Vec<(&str, u64)> = limits.iter().filter_map(|(k, v)| v.map(|v| (*k, v))).collect();
        let usage: Vec<(&str, u64)> = usage.into_iter().filter(|(_, v)| *v != 0).collect();
        let mut map = s.serialize_map(None)?;
        for (key, fields) in [("limits", limits), ("usage", usage)] {
            if !fields.is_empty() {
                map.serialize_entry(key, &Fields(fields))?;
            }
        }
        map.end()
    }
}

/// Named numbers, serialized as a JSON object.
struct Fields<'a>(Vec<(&'a str, u64)>);

impl serde::Serialize for Fields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (*k, *v)))
    }
}

/// The run's counters, shared by its nodes. They start at the thread's
/// stored totals (`base`), so the limits bound the thread, not one run.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub(crate) limits: Limits,
    base: RunUsage,
    model_calls: AtomicU32,
    tool_calls: AtomicU32,
    tokens: AtomicU64,
    reserved: AtomicU64,
    unknown: AtomicU32,
}

impl Meter {
    #[cfg(test)]
    pub(crate) fn new(limits: Limits) -> Self {
        Meter::resumed(limits, RunUsage::default())
    }

    /// Counters that start from what the thread already consumed.
    pub(crate) fn resumed(limits: Limits, base: RunUsage) -> Self {
        Meter {
            limits,
            base,
            model_calls: AtomicU32::new(base.model_calls),
            tool_calls: AtomicU32::new(base.tool_calls),
            tokens: AtomicU64::new(base.tokens),
            reserved: AtomicU64::new(0),
            unknown: AtomicU32::new(base.unknown_usage_calls),
        }
    }

    /// What this run consumed (the totals less what the thread had before).
    pub(crate) fn usage_this_run(&self) -> RunUsage {
        self.usage().since(&self.base)
    }

    /// Counts a model call and reserves its tokens; refuses if either would
    /// pass its limit.
    pub(crate) fn begin_model_call(&self, max_output: Option<u32>) -> Result<u64, Budget> {
        if !count_call(&self.model_calls, self.limits.model_calls) {
            return Err(Budget::ModelCalls);
        }
        let reserve = u64::from(max_output.or(self.limits.reserve_per_call).unwrap_or(1024));
        let held = self.reserved.fetch_add(reserve, Ordering::SeqCst).saturating_add(reserve);
        if self.limits.tokens.is_some_and(|max| self.tokens.load(Ordering::SeqCst).saturating_add(held) > max) {
            self.reserved.fetch_sub(reserve, Ordering::SeqCst);
            self.model_calls.fetch_sub(1, Ordering::SeqCst);
            return Err(Budget::Tokens);
        }
        Ok(reserve)
    }

    /// Settles a call's reservation with the usage it reported.
    pub(crate) fn end_model_call(&self, reserve: u64, usage: Option<Usage>) {
        self.reserved.fetch_sub(reserve, Ordering::SeqCst);
        match usage {
            Some(u) => saturating_add(&self.tokens, u.total()),
            None => {
                // The count starts from the thread's stored usage, which may be anything.
                saturating_add_u32(&self.unknown, 1);
                saturating_add(&self.tokens, reserve);
            }
        }
    }

    /// Releases a reservation of a call that failed before it was answered.
    pub(crate) fn abort_model_call(&self, reserve: u64) {
        self.reserved.fetch_sub(reserve, Ordering::SeqCst);
    }

    /// Counts a tool call; refuses past the limit.
    pub(crate) fn tool_call(&self) -> Result<(), Budget> {
        if !count_call(&self.tool_calls, self.limits.tool_calls) {
            return Err(Budget::ToolCalls);
        }
        Ok(())
    }

    /// What is left of each limit (unset limits stay unset).
    pub(crate) fn remaining(&self) -> Limits {
        let used = self.usage();
        Limits {
            model_calls: self.limits.model_calls.map(|n| n.saturating_sub(used.model_calls)),
            tool_calls: self.limits.tool_calls.map(|n| n.saturating_sub(used.tool_calls)),
            tokens: self.limits.tokens.map(|n| n.saturating_sub(used.tokens)),
            ..self.limits
        }
    }

    /// Counts what a child run consumed (its limits were what was left here).
    pub(crate) fn charge(&self, used: &RunUsage) {
        saturating_add_u32(&self.model_calls, used.model_calls);
        saturating_add_u32(&self.tool_calls, used.tool_calls);
        saturating_add(&self.tokens, used.tokens);
        saturating_add_u32(&self.unknown, used.unknown_usage_calls);
    }

    /// Whether the tokens spent already reach the limit.
    pub(crate) fn tokens_exhausted(&self) -> bool {
        self.limits.tokens.is_some_and(|max| self.tokens.load(Ordering::SeqCst) >= max)
    }

    pub(crate) fn usage(&self) -> RunUsage {
        RunUsage {
            model_calls: self.model_calls.load(Ordering::SeqCst),
            tool_calls: self.tool_calls.load(Ordering::SeqCst),
            tokens: self.tokens.load(Ordering::SeqCst),
            unknown_usage_calls: self.unknown.load(Ordering::SeqCst),
        }
    }
}

/// Adds `n` to `counter`, stopping at `u64::MAX` (a model reporting absurd
/// usage must neither wrap the count nor panic).
fn saturating_add(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v.saturating_add(n)));
}

/// Adds `n` to `counter`, stopping at `u32::MAX`.
fn saturating_add_u32(counter: &AtomicU32, n: u32) {
    let _ = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v.saturating_add(n)));
}

/// Counts one more call unless that passes `limit`, or the counter's range (it starts from the
/// thread's stored usage, which may be anything); `false` when refused, the count unchanged.
fn count_call(counter: &AtomicU32, limit: Option<u32>) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            n.checked_add(1).filter(|n| limit.is_none_or(|max| *n <= max))
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_at_the_end_of_their_range_refuse_the_next_call_instead_of_wrapping() {
        let full = RunUsage {
            model_calls: u32::MAX,
            tool_calls: u32::MAX,
            unknown_usage_calls: u32::MAX,
            ..RunUsage::default()
        };
        // No limits set: the stored counts alone are at the end of their range.
        let meter = Meter::resumed(Limits::default(), full);
        assert_eq!(meter.begin_model_call(Some(1)), Err(Budget::ModelCalls));
        assert_eq!(meter.tool_call(), Err(Budget::ToolCalls));
        let usage = meter.usage();
        assert_eq!((usage.model_calls, usage.tool_calls), (u32::MAX, u32::MAX));
        // A call that reports no usage counts as unknown, saturating.
        let meter =
            Meter::resumed(Limits::default(), RunUsage { unknown_usage_calls: u32::MAX, ..RunUsage::default() });
        let reserve = meter.begin_model_call(Some(1)).unwrap();
        meter.end_model_call(reserve, None);
        assert_eq!(meter.usage().unknown_usage_calls, u32::MAX);
        // A child's usage charged on top saturates too.
        let meter = Meter::resumed(Limits::default(), full);
        meter.charge(&RunUsage { model_calls: 3, tool_calls: 3, unknown_usage_calls: 3, tokens: 5 });
        let usage = meter.usage();
        assert_eq!((usage.model_calls, usage.tool_calls, usage.unknown_usage_calls), (u32::MAX, u32::MAX, u32::MAX));
        // Below the end, limits work as before.
        let meter = Meter::resumed(Limits { tool_calls: Some(2), ..Limits::default() }, RunUsage::default());
        assert_eq!((meter.tool_call(), meter.tool_call(), meter.tool_call()), (Ok(()), Ok(()), Err(Budget::ToolCalls)));
        assert_eq!(meter.usage().tool_calls, 2);
    }

    #[test]
    fn a_stored_budget_leaves_out_unset_limits_and_zero_counters_and_reads_back() {
        let none = ThreadBudget::default();
        assert_eq!(serde_json::to_string(&none).unwrap(), "{}");
        let some = ThreadBudget {
            limits: Limits::none().model_calls(3).tokens(5_000),
            usage: RunUsage { tool_calls: 2, tokens: u64::MAX, ..RunUsage::default() },
        };
        let text = serde_json::to_string(&some).unwrap();
        assert_eq!(
            text,
            r#"{"limits":{"model_calls":3,"tokens":5000},"usage":{"tool_calls":2,"tokens":18446744073709551615}}"#
        );
        for budget in
            [none, some, ThreadBudget { limits: Limits { reserve_per_call: Some(0), ..Limits::none() }, ..none }]
        {
            let back: ThreadBudget = serde_json::from_str(&serde_json::to_string(&budget).unwrap()).unwrap();
            assert_eq!(back, budget);
            let value = serde_json::to_value(budget).unwrap();
            assert_eq!(serde_json::from_value::<ThreadBudget>(value).unwrap(), budget);
        }
        // The full form earlier versions stored reads the same.
        let full = r#"{"limits":{"model_calls":3,"tool_calls":null,"tokens":5000,"reserve_per_call":null},
            "usage":{"model_calls":0,"tool_calls":2,"tokens":18446744073709551615,"unknown_usage_calls":0}}"#;
        assert_eq!(serde_json::from_str::<ThreadBudget>(full).unwrap(), some);
    }

    #[test]
    fn model_calls_and_tokens_are_bounded() {
        let m = Meter::new(Limits::none().model_calls(2).tokens(300));
        let r = m.begin_model_call(Some(100)).unwrap();
        m.end_model_call(r, Some(Usage { input_tokens: 50, output_tokens: 30 }));
        assert_eq!(m.usage().tokens, 80);
        let r = m.begin_model_call(Some(100)).unwrap();
        m.end_model_call(r, None);
        assert_eq!(m.usage().tokens, 180);
        assert_eq!(m.usage().unknown_usage_calls, 1);
        assert_eq!(m.begin_model_call(Some(1)), Err(Budget::ModelCalls));
    }

    #[test]
    fn a_reservation_past_the_token_limit_is_refused_before_the_call() {
        let m = Meter::new(Limits::none().tokens(100));
        assert_eq!(m.begin_model_call(Some(150)), Err(Budget::Tokens));
        assert_eq!(m.usage().model_calls, 0);
        let r = m.begin_model_call(Some(60)).unwrap();
        // A concurrent call cannot reserve past what is left.
        assert_eq!(m.begin_model_call(Some(60)), Err(Budget::Tokens));
        m.abort_model_call(r);
        assert!(m.begin_model_call(Some(60)).is_ok());
    }

    #[test]
    fn a_resumed_meter_counts_from_the_thread_totals() {
        let base = RunUsage { model_calls: 3, tool_calls: 1, tokens: 50, unknown_usage_calls: 0 };
        let m = Meter::resumed(Limits::none().model_calls(3).tool_calls(2), base);
        assert_eq!(m.begin_model_call(Some(1)), Err(Budget::ModelCalls));
        assert!(m.tool_call().is_ok());
        assert_eq!(m.tool_call(), Err(Budget::ToolCalls));
        assert_eq!(m.usage().tool_calls, 2);
        assert_eq!(m.usage_this_run(), RunUsage { tool_calls: 1, ..RunUsage::default() });
    }

    #[test]
    fn limits_know_when_they_raise_and_what_is_tightest() {
        let stored = Limits::none().model_calls(3);
        assert_eq!(Limits::none().model_calls(5).raises(&stored), Some((Budget::ModelCalls, 3, 5)));
        assert_eq!(Limits::none().raises(&stored), None);
        assert_eq!(Limits::none().model_calls(2).tokens(9).raises(&stored), None);
        let t = Limits::none().model_calls(2).tokens(9).tightest(&stored);
        assert_eq!((t.model_calls, t.tokens), (Some(2), Some(9)));
        assert_eq!(Limits::none().tightest(&stored).model_calls, Some(3));
    }

    #[test]
    fn tool_calls_are_bounded() {
        let m = Meter::new(Limits::none().tool_calls(1));
        assert!(m.tool_call().is_ok());
        assert_eq!(m.tool_call(), Err(Budget::ToolCalls));
    }
}
