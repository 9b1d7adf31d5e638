//! Metrics: what agentflow reports through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! agentflow records its figures with the `metrics` crate's macros and installs no
//! recorder: without one, recording costs a few nanoseconds and goes nowhere. To see
//! them, install any `metrics` recorder in your process, e.g. the Prometheus exporter:
//!
//! ```text
//! // metrics-exporter-prometheus = { version = "0.18", default-features = false }
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! // ... run graphs ...
//! println!("{}", handle.render()); // the text a `/metrics` endpoint serves
//! ```
//!
//! Every name below is a `pub const` here, so code that reads them does not repeat the
//! strings. Labels are low-cardinality by design: graph, node, tool, outcome, status,
//! durability, budget kind. Thread ids never appear in labels (there can be millions);
//! find a thread from the audit log or the store.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`RUNS_STARTED`] | counter | `graph`, `kind` (`start`, `resume`) | runs begun, fresh or continuing a thread |
//! | [`RUNS_FINISHED`] | counter | `graph`, `outcome` | runs ended, by how: `completed`, `failed`, `interrupted` and `sleeping` (waiting), `paused`, `cancelled`, `budget_exhausted`, `compensated`, `compensation_failed`, `error` (the run returned an `Err`) |
//! | [`RUN_SECONDS`] | histogram | `graph`, `outcome` | wall time of a run, start to end |
//! | [`STEP_SECONDS`] | histogram | `graph` | one super-step: its nodes and its checkpoint |
//! | [`NODE_SECONDS`] | histogram | `graph`, `node` | one node attempt, retries apart |
//! | [`NODE_RETRIES`] | counter | `graph`, `node` | node attempts retried after a transient error |
//! | [`TOOL_CALLS`] | counter | `tool`, `result` | tool calls through the gateway: `ok`, an observation code (`tool_error`, `permission_denied`, `invalid_argument`, `rejected`, ...), or `halted` (paused for approval, out of budget, or a fatal error) |
//! | [`TOOL_SECONDS`] | histogram | `tool` | one call through the gateway, journal included |
//! | [`APPROVALS_REQUESTED`] | counter | `tool` | approvals asked of a human |
//! | [`APPROVAL_DECISIONS`] | counter | `status` | decisions made through an `ApprovalDesk`: `approved`, `rejected`, `cancelled`, settlements (`succeeded`, `failed`, `approved` again) |
//! | [`APPROVAL_DECISION_SECONDS`] | histogram | `status` | from the request to the decision |
//! | [`CHECKPOINT_WRITE_SECONDS`] | histogram | `durability` (`immediate`, `eventual`) | one write of a step (or pause, or end) to the store, as the run waits for it |
//! | [`CHECKPOINT_BYTES`] | histogram | | state bytes a step writes: its delta, plus a snapshot when one is due |
//! | [`RECOVERIES`] | counter | `graph` | threads opened to continue (after a crash, a pause, a timer) |
//! | [`RECOVERY_SECONDS`] | histogram | `graph` | opening such a thread: lease, latest checkpoint, pending writes, state rebuilt |
//! | [`BUDGETS_EXHAUSTED`] | counter | `graph`, `budget` (`max_steps`, `deadline`, `model_calls`, `tool_calls`, `tokens`) | runs stopped by a budget |
//!
//! `agentflow serve` (the CLI's approval inbox, feature `cli`) installs the Prometheus recorder,
//! serves this text at `/metrics`, and adds one gauge of its own, not recorded by the library:
//! `agentflow_stuck_threads{kind}` (`waiting_on_human`, `lease_expired`, `timer_overdue`,
//! `step_overdue`, `parked`), the
//! threads `agentflow stuck` lists with the server's thresholds, refreshed every `--stuck-every`.

use std::time::Duration;

/// Counter: runs begun. Labels `graph`, `kind` (`start` or `resume`).
pub const RUNS_STARTED: &str = "agentflow_runs_started_total";
/// Counter: runs ended. Labels `graph`, `outcome`.
pub const RUNS_FINISHED: &str = "agentflow_runs_finished_total";
/// Histogram (seconds): a run's wall time. Labels `graph`, `outcome`.
pub const RUN_SECONDS: &str = "agentflow_run_seconds";
/// Histogram (seconds): one super-step, its checkpoint included. Label `graph`.
pub const STEP_SECONDS: &str = "agentflow_step_seconds";
/// Histogram (seconds): one node attempt. Labels `graph`, `node`.
pub const NODE_SECONDS: &str = "agentflow_node_seconds";
/// Counter: node attempts retried. Labels `graph`, `node`.
pub const NODE_RETRIES: &str = "agentflow_node_retries_total";
/// Counter: tool calls through the gateway. Labels `tool`, `result`.
pub const TOOL_CALLS: &str = "agentflow_tool_calls_total";
/// Histogram (seconds): one tool call through the gateway. Label `tool`.
pub const TOOL_SECONDS: &str = "agentflow_tool_seconds";
/// Counter: approvals requested. Label `tool`.
pub const APPROVALS_REQUESTED: &str = "agentflow_approvals_requested_total";
/// Counter: approval decisions and settlements. Label `status` (the status decided).
pub const APPROVAL_DECISIONS: &str = "agentflow_approval_decisions_total";
/// Histogram (seconds): request to decision. Label `status`.
pub const APPROVAL_DECISION_SECONDS: &str = "agentflow_approval_decision_seconds";
/// Histogram (seconds): one checkpoint write as the run waits for it. Label `durability`.
pub const CHECKPOINT_WRITE_SECONDS: &str = "agentflow_checkpoint_write_seconds";
/// Histogram (bytes): state bytes one step writes.
pub const CHECKPOINT_BYTES: &str = "agentflow_checkpoint_bytes";
/// Counter: threads opened to continue. Label `graph`.
pub const RECOVERIES: &str = "agentflow_recoveries_total";
/// Histogram (seconds): opening a thread to continue it. Label `graph`.
pub const RECOVERY_SECONDS: &str = "agentflow_recovery_seconds";
/// Counter: runs stopped by a budget. Labels `graph`, `budget`.
pub const BUDGETS_EXHAUSTED: &str = "agentflow_budgets_exhausted_total";

/// The handles one run records its steps and nodes with, registered once per
/// run (so a recorder installed before the run sees them, and a step costs no
/// key building).
pub(crate) struct RunMetrics {
    step: ::metrics::Histogram,
    node: Vec<::metrics::Histogram>,
    retries: Vec<::metrics::Counter>,
}

impl RunMetrics {
    pub(crate) fn new<'n>(graph: &'static str, nodes: impl Iterator<Item = &'n &'static str>) -> Self {
        let (mut node, mut retries) = (Vec::new(), Vec::new());
        for &name in nodes {
            node.push(::metrics::histogram!(NODE_SECONDS, "graph" => graph, "node" => name));
            retries.push(::metrics::counter!(NODE_RETRIES, "graph" => graph, "node" => name));
        }
        RunMetrics { step: ::metrics::histogram!(STEP_SECONDS, "graph" => graph), node, retries }
    }

    pub(crate) fn step(&self, took: Duration) {
        self.step.record(took.as_secs_f64());
    }

    pub(crate) fn node(&self, index: usize, took: Duration) {
        if let Some(h) = self.node.get(index) {
            h.record(took.as_secs_f64());
        }
    }

    pub(crate) fn retry(&self, index: usize) {
        if let Some(c) = self.retries.get(index) {
            c.increment(1);
        }
    }
}
