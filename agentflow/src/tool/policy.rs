//! Which tool calls run at once, which wait for a human, which never run.

use std::collections::BTreeMap;

use super::Risk;

/// What happens when a human rejects a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    fn tool_overrides_risk() {
        let p = RiskPolicy::default().tool("wipe_disk", Decision::Deny).tool("send_digest", Decision::Run);
        assert_eq!(p.decide("wipe_disk", Risk::Read), Decision::Deny);
        assert_eq!(p.decide("send_digest", Risk::External), Decision::Run);
        assert_eq!(p.decide("refund", Risk::Irreversible), Decision::NeedsApproval);
        assert_eq!(p.decide("lookup", Risk::Read), Decision::Run);
    }
}
