//! Circuit breakers: a tool that keeps failing stops being called, for every
//! thread of the store at once, until a single trial call shows it works again.
//!
//! Configure one per tool with [`App::circuit_breaker`](crate::App::circuit_breaker)
//! (or one for every tool of the graph with
//! [`App::circuit_breakers`](crate::App::circuit_breakers)):
//!
//! ```
//! # use std::time::Duration;
//! # use agentflow::prelude::*;
//! use agentflow::breaker::{Breaker, OnOpen};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Deserialize, Serialize, schemars::JsonSchema)]
//! # struct Service { name: String }
//! /// Checks an upstream service.
//! #[tool(risk = read)]
//! async fn check_upstream(args: Service) -> Result<String, ToolError> {
//!     Ok(format!("{} is up", args.name))
//! }
//! # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! # struct S { n: u32 }
//! #[graph(state = S, start = check)]
//! mod ops {
//!     use super::*;
//!     #[node(goto = [END], tools = [check_upstream])]
//!     async fn check(_s: &S, cx: &Ctx<()>) -> Result<Step<S>, NodeError> {
//!         cx.run_tool(check_upstream, serde_json::json!({ "name": "payments" })).await?;
//!         Ok(goto!(END))
//!     }
//! }
//! # fn main() -> Result<(), agentflow::breaker::BreakerConfigError> {
//! let app = ops::graph()
//!     .app()
//!     .circuit_breaker("check_upstream", Breaker::after(5).cool_down(Duration::from_secs(30)))?;
//! // A name no node lists is refused when the App is built.
//! assert!(ops::graph().app().circuit_breaker("check_upstreem", Breaker::after(5)).is_err());
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! # The rule
//!
//! The breaker of a tool lives in the store ([`Store::update_breaker`](crate::Store::update_breaker)),
//! so every thread of the store, and with `PostgresStore` every process, shares it:
//!
//! - **Closed**: calls run. A call that *fails* adds one to the streak of
//!   consecutive failures; a call that succeeds resets it. The failure that
//!   brings the streak to [`Breaker::after`] opens the breaker.
//! - **Open** for [`Breaker::cool_down`]: calls do not run the tool. What
//!   they do instead is the breaker's [`OnOpen`] policy: the call answers an
//!   observation with code [`CIRCUIT_OPEN`](crate::tool::Code::CircuitOpen)
//!   (the default), or the run waits on a durable timer (the thread sleeps,
//!   and a [`Scheduler`](crate::timer::Scheduler) or a resume runs the node
//!   again once the cool-down is over).
//! - **Half-open**: the first call after the cool-down is the *probe*; it is
//!   taken with a compare-and-set in the store, so of concurrent callers (in
//!   any process) one probes and the others are refused as while open. The
//!   probe's success closes the breaker; its failure opens it for another
//!   cool-down. A probe that never reports (its process died) is taken over
//!   by the next call after [`Breaker::probe_timeout`].
//!
//! A call decides from a read of the record when the move would change
//! nothing: to a closed breaker it is admitted, to an open one in its
//! cool-down (or a half-open one whose probe another call holds) it is
//! refused, and a success on a breaker that was closed with no failures
//! when the call was admitted is not written (so a success does not break a
//! streak that began while it ran). Only failures, the probe's compare-and-set and the probe's
//! outcome write. So a call that read the breaker closed just before
//! another thread's failure opened it still runs.
//!
//! # What counts as a failure
//!
//! A call *fails* when the tool's body returns
//! [`ToolError::Transient`](crate::tool::ToolError::Transient) or
//! [`ToolError::Fatal`](crate::tool::ToolError::Fatal) (the dependency is
//! down or errored; a tool reports its own timeouts as transient errors),
//! or when the node's `timeout` cuts the call off before it ends (the
//! failure is then recorded by a blocking task just after the node is
//! dropped, so the next call may, rarely, still find the breaker closed).
//! Each failed run of the body counts, so a node retried after a
//! transient error counts once per attempt. A call stopped because its run
//! was cancelled is not a failure (a probe it held is taken over after
//! [`Breaker::probe_timeout`]).
//!
//! Not failures (they neither count nor reset the streak, and the tool's
//! body did not run): arguments that do not validate, a tool the node may
//! not use, a policy denial, an approval that is pending, rejected or
//! expired, an exhausted budget, and a call whose result is replayed from
//! the effect journal.
//!
//! Not asked at all: a call of a tool that is not idempotent that was cut
//! off mid-way (its run started and left no result). Whether it acted is
//! unknown, so the breaker cannot say "the tool did not run" of it: it
//! waits for a human as without a breaker (an approved call's record
//! becomes `OUTCOME_UNKNOWN`, never `FAILED`), and a call the human orders
//! run again runs as that person decided. [`ToolError::Correctable`](crate::tool::ToolError::Correctable)
//! is a success for the breaker: the tool ran and answered (e.g. "no such
//! order"); the model corrects its request.
//!
//! A breaker only guards runs that have a store (a thread): without one
//! there is no shared state, and calls run unguarded.
//!
//! # Events and audit
//!
//! Every change of state is an [`Activity::CircuitBreaker`](crate::Activity::CircuitBreaker)
//! event of the run whose call caused it, and an audit entry
//! (`breaker.open`, `breaker.half_open`, `breaker.closed`, with the tool,
//! the states and the streak) in that thread's log, written in the same
//! store transaction as the change.

use std::collections::BTreeMap;
use std::time::Duration;

use agentflow_store::BreakerRule;
pub use agentflow_store::{BreakerRecord, BreakerState};

/// What a call does while its tool's breaker is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnOpen {
    /// The call answers an observation with code
    /// [`CIRCUIT_OPEN`](crate::tool::Code::CircuitOpen) (and `retry_at`,
    /// when a probe may run) without running the tool; the model or node decides what next.
    #[default]
    Observe,
    /// The run waits on a durable timer until a probe may run: it ends as
    /// [`Outcome::Sleeping`](crate::Outcome::Sleeping), and when it is resumed
    /// (by a [`Scheduler`](crate::timer::Scheduler) or by hand) the node runs
    /// again from its start. A node that calls a model before the tool calls
    /// the model again.
    Wait,
}

/// A circuit breaker's configuration: opens after [`Breaker::after`]
/// consecutive failures, stays open for [`Breaker::cool_down`], then lets one
/// probe through. See the [module docs](self) for the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    after: u32,
    cool_down: Duration,
    probe_timeout: Duration,
    on_open: OnOpen,
}

impl Breaker {
    /// Opens after `failures` consecutive failures (0 counts as 1); cool-down
    /// 30 s, probe timeout 60 s, [`OnOpen::Observe`].
    pub fn after(failures: u32) -> Self {
        Breaker {
            after: failures.max(1),
            cool_down: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(60),
            on_open: OnOpen::Observe,
        }
    }

    /// How long the breaker stays open before a probe may run.
    #[must_use]
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down;
        self
    }

    /// How long a probe holds the half-open breaker: if its call has not
    /// reported by then (its process died), the next call takes the probe over.
    #[must_use]
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// What a call does while the breaker is open (default [`OnOpen::Observe`]).
    #[must_use]
    pub fn on_open(mut self, on_open: OnOpen) -> Self {
        self.on_open = on_open;
        self
    }

    /// The streak of failures that opens it.
    pub fn threshold(&self) -> u32 {
        self.after
    }

    /// The configured policy while open.
    pub fn policy(&self) -> OnOpen {
        self.on_open
    }

    pub(crate) fn cool_down_ms(&self) -> u64 {
        u64::try_from(self.cool_down.as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn rule(&self) -> BreakerRule {
        let probe = u64::try_from(self.probe_timeout.as_millis()).unwrap_or(u64::MAX);
        BreakerRule::new(self.after, self.cool_down_ms(), probe)
    }
}

/// A breaker configuration the [`App`](crate::App) refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BreakerConfigError {
    /// No node of the graph or of its subgraphs lists the tool, so the
    /// breaker would never act.
    #[error(
        "no node of graph `{graph}` or of its subgraphs lists a tool named `{tool}`, so its circuit breaker \
         would never act; the graph's tools: {}", if tools.is_empty() { "none".to_string() } else { tools.join(", ") }
    )]
    UnknownTool {
        /// The graph.
        graph: &'static str,
        /// The name given.
        tool: String,
        /// The tools the graph's nodes and its subgraphs' nodes list, sorted.
        tools: Vec<&'static str>,
    },
}

/// The breakers of an App: per tool, and one for every other tool.
#[derive(Debug, Clone, Default)]
pub(crate) struct Breakers {
    pub(crate) per_tool: BTreeMap<String, Breaker>,
    pub(crate) every: Option<Breaker>,
}

impl Breakers {
    /// The breaker guarding `tool`, if any.
    pub(crate) fn of(&self, tool: &str) -> Option<&Breaker> {
        self.per_tool.get(tool).or(self.every.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_s_own_breaker_takes_precedence_over_the_one_for_every_tool() {
        let mut breakers = Breakers::default();
        assert!(breakers.of("x").is_none());
        breakers.every = Some(Breaker::after(5));
        breakers.per_tool.insert("x".into(), Breaker::after(2).on_open(OnOpen::Wait));
        assert_eq!(breakers.of("x").map(|b| (b.threshold(), b.policy())), Some((2, OnOpen::Wait)));
        assert_eq!(breakers.of("y").map(|b| (b.threshold(), b.policy())), Some((5, OnOpen::Observe)));
    }

    #[test]
    fn the_rule_carries_the_configuration_and_zero_failures_counts_as_one() {
        let b = Breaker::after(0).cool_down(Duration::from_millis(1_500)).probe_timeout(Duration::from_secs(9));
        assert_eq!(b.threshold(), 1);
        assert_eq!(b.rule(), BreakerRule::new(1, 1_500, 9_000));
    }
}
