//! Circuit breakers: one record per tool, shared by every thread of the store (and, on
//! PostgreSQL, by every process), moved only by [`Store::update_breaker`](crate::Store::update_breaker).
//!
//! The states and their moves ([`step`] is the one rule both backends apply, inside one write
//! transaction, so concurrent callers are serialised):
//!
//! - `CLOSED`: calls run. Each failure adds one to the streak of consecutive failures, a success
//!   resets it; the failure that brings the streak to the rule's threshold opens the breaker
//!   until `now + cool_down`.
//! - `OPEN`: calls are refused until `open_until`. The first call admitted at or after it takes
//!   the probe: the breaker becomes `HALF_OPEN` with that caller as the probe holder, for
//!   `probe_ttl` (a probe whose caller died is taken over once that lease expires).
//! - `HALF_OPEN`: only the probe holder's call runs; others are refused until the probe lease
//!   ends. The probe's success closes the breaker (streak 0); its failure opens it again for
//!   another cool-down.
//!
//! Every change of state appends an audit entry `breaker.<state>` (lowercase: `breaker.open`,
//! `breaker.half_open`, `breaker.closed`) to the log of the thread named in the update, in the
//! same transaction.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{AuditError, StorageError};
use crate::record::NewAuditEntry;

/// Where a tool's circuit breaker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls run; failures are counted.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// One probe call runs; the others are refused until it ends.
    HalfOpen,
}

impl BreakerState {
    /// The stored name (`CLOSED`, `OPEN`, `HALF_OPEN`).
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "CLOSED",
            BreakerState::Open => "OPEN",
            BreakerState::HalfOpen => "HALF_OPEN",
        }
    }

    /// The state stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "CLOSED" => Some(BreakerState::Closed),
            "OPEN" => Some(BreakerState::Open),
            "HALF_OPEN" => Some(BreakerState::HalfOpen),
            _ => None,
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool's breaker as stored. A tool with no record is `CLOSED` with no failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BreakerRecord {
    /// The tool.
    pub tool: String,
    /// Its state.
    pub state: BreakerState,
    /// The streak of consecutive failures (reset by a success in `CLOSED` and by the probe's
    /// success).
    pub failures: u32,
    /// `OPEN`: when a probe may be let through; `HALF_OPEN`: when the probe's lease ends (unix
    /// millis). 0 when `CLOSED`.
    pub open_until: u64,
    /// `HALF_OPEN`: who holds the probe.
    pub probe: Option<String>,
    /// When it last changed (unix millis).
    pub updated_at: u64,
}

impl BreakerRecord {
    /// A closed breaker with no failures.
    pub fn closed(tool: &str) -> Self {
        BreakerRecord {
            tool: tool.to_string(),
            state: BreakerState::Closed,
            failures: 0,
            open_until: 0,
            probe: None,
            updated_at: 0,
        }
    }
}

/// When a breaker opens and for how long (chosen by the caller; the store keeps no rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerRule {
    /// The streak of consecutive failures that opens it (at least 1).
    pub threshold: u32,
    /// How long it stays open before a probe is let through (millis).
    pub cool_down_ms: u64,
    /// How long a probe holds the half-open breaker before another caller may take the probe
    /// over (millis).
    pub probe_ttl_ms: u64,
}

impl BreakerRule {
    /// Opens after `threshold` consecutive failures (0 counts as 1), for `cool_down_ms`; a
    /// probe holds the half-open breaker for `probe_ttl_ms`.
    pub fn new(threshold: u32, cool_down_ms: u64, probe_ttl_ms: u64) -> Self {
        BreakerRule { threshold: threshold.max(1), cool_down_ms, probe_ttl_ms }
    }
}

/// What a caller reports to a breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerOp {
    /// May this call run? Takes the probe when the cool-down is over.
    Admit,
    /// The call ran and succeeded.
    Succeeded,
    /// The call ran and failed.
    Failed,
}

/// One [`Store::update_breaker`](crate::Store::update_breaker) request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerUpdate {
    /// The tool whose breaker moves.
    pub tool: String,
    /// What happened.
    pub op: BreakerOp,
    /// The caller (a call's id, unique per call): the probe is held by one caller.
    pub holder: String,
    /// The rule to apply.
    pub rule: BreakerRule,
    /// The caller's clock (unix millis).
    pub now: u64,
    /// The thread whose audit log records a change of state.
    pub thread: String,
    /// Who is named in that audit entry.
    pub actor: String,
}

impl BreakerUpdate {
    /// A request; see the fields.
    pub fn new(
        tool: &str,
        op: BreakerOp,
        holder: &str,
        rule: BreakerRule,
        now: u64,
        thread: &str,
        actor: &str,
    ) -> Self {
        BreakerUpdate {
            tool: tool.to_string(),
            op,
            holder: holder.to_string(),
            rule,
            now,
            thread: thread.to_string(),
            actor: actor.to_string(),
        }
    }
}

/// What [`Store::update_breaker`](crate::Store::update_breaker) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerAnswer {
    /// The breaker after the update.
    pub record: BreakerRecord,
    /// Its state before.
    pub from: BreakerState,
    /// For [`BreakerOp::Admit`]: whether the call may run (`false` for the other ops).
    pub admitted: bool,
    /// Whether the caller holds the probe (its call decides whether the breaker closes).
    pub probe: bool,
}

impl BreakerAnswer {
    /// Whether the update changed the breaker's state.
    pub fn changed(&self) -> bool {
        self.from != self.record.state
    }
}

/// The breaker store refused or failed an update.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BreakerError {
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The audit entry of a change could not be written.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The store keeps no breakers (a `Store` implementation outside this crate that does not
    /// override the breaker methods).
    #[error(
        "this store keeps no circuit breakers ({detail}); use RedbStore or PostgresStore, or forward the breaker methods"
    )]
    Unsupported {
        /// Which store.
        detail: String,
    },
}

/// Applies `update` to the stored breaker (`None`: closed, no failures): the one transition rule
/// every backend uses. Pure, so a backend runs it between reading and writing the record in one
/// transaction.
pub fn step(current: Option<BreakerRecord>, update: &BreakerUpdate) -> BreakerAnswer {
    let mut r = current.unwrap_or_else(|| BreakerRecord::closed(&update.tool));
    let from = r.state;
    let now = update.now;
    let rule = update.rule;
    let holds = r.probe.as_deref() == Some(update.holder.as_str());
    let (mut admitted, mut probe) = (false, false);
    let open = |r: &mut BreakerRecord| {
        r.state = BreakerState::Open;
        r.open_until = now.saturating_add(rule.cool_down_ms);
        r.probe = None;
    };
    match (&update.op, r.state) {
        (BreakerOp::Admit, BreakerState::Closed) => admitted = true,
        (BreakerOp::Admit, BreakerState::HalfOpen) if holds => (admitted, probe) = (true, true),
        (BreakerOp::Admit, BreakerState::Open | BreakerState::HalfOpen) if now >= r.open_until => {
            // The cool-down is over (or the probe's lease ended): this caller probes.
            r.state = BreakerState::HalfOpen;
            r.probe = Some(update.holder.clone());
            r.open_until = now.saturating_add(rule.probe_ttl_ms);
            (admitted, probe) = (true, true);
        }
        (BreakerOp::Admit, _) => {}
        (BreakerOp::Succeeded, BreakerState::HalfOpen) if holds => {
            r.state = BreakerState::Closed;
            r.failures = 0;
            r.open_until = 0;
            r.probe = None;
            probe = true;
        }
        (BreakerOp::Succeeded, BreakerState::Closed) => r.failures = 0,
        (BreakerOp::Succeeded, _) => {}
        (BreakerOp::Failed, state) => {
            r.failures = r.failures.saturating_add(1);
            match state {
                BreakerState::Closed if r.failures >= rule.threshold => open(&mut r),
                BreakerState::HalfOpen if holds => {
                    open(&mut r);
                    probe = true;
                }
                _ => {}
            }
        }
    }
    r.updated_at = now;
    BreakerAnswer { record: r, from, admitted, probe }
}

/// The audit entry recording a change of state (`None` when the state did not change).
pub fn audit_entry(update: &BreakerUpdate, answer: &BreakerAnswer) -> Option<NewAuditEntry> {
    if !answer.changed() {
        return None;
    }
    let r = &answer.record;
    let detail = json!({
        "tool": r.tool,
        "from": answer.from.as_str(),
        "to": r.state.as_str(),
        "failures": r.failures,
        "open_until": r.open_until,
        "probe": r.probe,
    });
    let kind = format!("breaker.{}", r.state.as_str().to_ascii_lowercase());
    Some(NewAuditEntry::new(update.now, update.actor.clone(), kind, detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(op: BreakerOp, holder: &str, now: u64) -> BreakerUpdate {
        BreakerUpdate::new("t", op, holder, BreakerRule::new(3, 100, 50), now, "th", "a")
    }

    #[test]
    fn three_failures_open_one_probe_closes_and_a_failed_probe_reopens() {
        let mut r = None;
        for i in 1..=2 {
            let a = step(r, &up(BreakerOp::Failed, "c", 10));
            assert_eq!((a.record.state, a.record.failures), (BreakerState::Closed, i));
            r = Some(a.record);
        }
        // A success resets the streak: failures must be consecutive.
        let a = step(r.clone(), &up(BreakerOp::Succeeded, "c", 10));
        assert_eq!(a.record.failures, 0);
        let opened = step(r, &up(BreakerOp::Failed, "c", 10));
        assert_eq!(opened.record.state, BreakerState::Open);
        assert_eq!(opened.record.open_until, 110);
        assert!(opened.changed());
        assert!(audit_entry(&up(BreakerOp::Failed, "c", 10), &opened).is_some_and(|e| e.kind == "breaker.open"));
        // Refused during the cool-down.
        let refused = step(Some(opened.record.clone()), &up(BreakerOp::Admit, "x", 109));
        assert!(!refused.admitted && !refused.changed());
        // After it: one probe; another caller is refused while the probe's lease lasts.
        let probe = step(Some(opened.record.clone()), &up(BreakerOp::Admit, "p", 110));
        assert!(probe.admitted && probe.probe);
        assert_eq!(probe.record.state, BreakerState::HalfOpen);
        assert_eq!(probe.record.open_until, 160);
        let other = step(Some(probe.record.clone()), &up(BreakerOp::Admit, "q", 120));
        assert!(!other.admitted);
        // Another caller's success does not close it; the probe's does.
        let late = step(Some(probe.record.clone()), &up(BreakerOp::Succeeded, "q", 121));
        assert_eq!(late.record.state, BreakerState::HalfOpen);
        let closed = step(Some(probe.record.clone()), &up(BreakerOp::Succeeded, "p", 121));
        assert_eq!((closed.record.state, closed.record.failures), (BreakerState::Closed, 0));
        // The probe's failure opens it again for a full cool-down.
        let reopened = step(Some(probe.record.clone()), &up(BreakerOp::Failed, "p", 130));
        assert_eq!((reopened.record.state, reopened.record.open_until), (BreakerState::Open, 230));
        // A probe whose caller vanished is taken over once its lease ends.
        let taken = step(Some(probe.record), &up(BreakerOp::Admit, "q", 160));
        assert!(taken.admitted && taken.probe);
        assert_eq!(taken.record.probe.as_deref(), Some("q"));
    }
}
