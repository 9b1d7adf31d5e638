//! Which tool calls run at once, which wait for a human, which never run.

use std::collections::BTreeMap;

use super::Risk;

/// What happens when a human rejects a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnReject {
    /// The model gets a `REJECTED` observation with the reason and may re-plan.
    #[default]
    Replan,
    /// The run ends as failed, naming the rejection.
    EndRun,
}

/// What the gateway does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Run it.
    Run,
    /// Record an approval request and pause the run until a human decides.
    NeedsApproval,
    /// Refuse it (the model is told; nothing runs).
    Deny,
}

/// Maps a call (tool name and risk) to a [`Decision`].
pub trait Policy: Send + Sync + 'static {
    /// Decides for one call.
    fn decide(&self, tool: &str, risk: Risk) -> Decision;

    /// Whether a call of `tool` (of risk class `risk`) may ever be held for a human's approval
    /// ([`Decision::NeedsApproval`]): asked before a persisted run starts, so that a run with a
    /// tool the policy may gate and no owner to request the approval for is refused at once
    /// ([`OwnerRequired`]), not at the gated call after earlier work.
    ///
    /// The default asks [`Policy::decide`], which is exact for a policy that decides on the
    /// tool and its risk alone ([`RiskPolicy`]). A policy whose decision depends on anything else
    /// (the time, a counter) overrides it to answer `true` whenever `decide` may say
    /// `NeedsApproval` for this tool.
    fn may_gate(&self, tool: &str, risk: Risk) -> bool {
        self.decide(tool, risk) == Decision::NeedsApproval
    }
}

/// A persisted run was started with no owner while one of its tools, or one of its subgraphs'
/// tools, may be held for a human's approval ([`Policy::may_gate`]). Without an owner there is
/// no one to request the approval for (nobody may approve a call they requested), so the run
/// would fail at that call, after earlier work; it is refused before anything runs or is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "node `{node}` of graph `{graph}` may call `{tool}` ({risk} risk), which the tool policy may hold for a \
     human's approval, but the run has no owner to request it for; set `.owner(\"..\")` on the runner \
     (or submit with `App::submit_as`) naming the agent or user the run acts for"
)]
pub struct OwnerRequired {
    /// The graph whose node lists the tool (the run's own, or a subgraph's).
    pub graph: &'static str,
    /// The node that lists it.
    pub node: &'static str,
    /// The tool.
    pub tool: &'static str,
    /// Its risk class.
    pub risk: Risk,
}

/// The default policy: read and reversible tools run, external and
/// irreversible ones need approval; tools can be set one by one.
#[derive(Debug, Clone)]
pub struct RiskPolicy {
    by_risk: BTreeMap<Risk, Decision>,
    by_tool: BTreeMap<String, Decision>,
}

impl Default for RiskPolicy {
    fn default() -> Self {
        RiskPolicy {
            by_risk: BTreeMap::from([
                (Risk::Read, Decision::Run),
                (Risk::Reversible, Decision::Run),
                (Risk::External, Decision::NeedsApproval),
                (Risk::Irreversible, Decision::NeedsApproval),
            ]),
            by_tool: BTreeMap::new(),
        }
    }
}

impl RiskPolicy {
    /// Every risk class runs without approval (for tests and read-only agents).
    pub fn allow_all() -> Self {
        let mut p = RiskPolicy::default();
        for risk in [Risk::Read, Risk::Reversible, Risk::External, Risk::Irreversible] {
            p.by_risk.insert(risk, Decision::Run);
        }
        p
    }

    /// Sets the decision for a risk class.
    #[must_use]
    pub fn risk(mut self, risk: Risk, decision: Decision) -> Self {
        self.by_risk.insert(risk, decision);
        self
    }

    /// Sets the decision for one tool, whatever its risk.
    #[must_use]
    pub fn tool(mut self, name: impl Into<String>, decision: Decision) -> Self {
        self.by_tool.insert(name.into(), decision);
        self
    }
}

impl Policy for RiskPolicy {
    fn decide(&self, tool: &str, risk: Risk) -> Decision {
        self.by_tool.get(tool).or_else(|| self.by_risk.get(&risk)).copied().unwrap_or(Decision::Deny)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn may_gate_answers_what_decide_may_hold() {
        let p = RiskPolicy::default().tool("send_digest", Decision::Run).tool("lookup", Decision::NeedsApproval);
        assert!(p.may_gate("refund", Risk::Irreversible));
        assert!(p.may_gate("post", Risk::External));
        assert!(!p.may_gate("send_digest", Risk::External));
        assert!(p.may_gate("lookup", Risk::Read));
        assert!(!p.may_gate("search", Risk::Read));
        assert!(!RiskPolicy::allow_all().may_gate("refund", Risk::Irreversible));
    }

    #[test]
    fn tool_overrides_risk() {
        let p = RiskPolicy::default().tool("wipe_disk", Decision::Deny).tool("send_digest", Decision::Run);
        assert_eq!(p.decide("wipe_disk", Risk::Read), Decision::Deny);
        assert_eq!(p.decide("send_digest", Risk::External), Decision::Run);
        assert_eq!(p.decide("refund", Risk::Irreversible), Decision::NeedsApproval);
        assert_eq!(p.decide("lookup", Risk::Read), Decision::Run);
    }
}
