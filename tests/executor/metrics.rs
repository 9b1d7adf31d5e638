//! The figures agentflow reports through the `metrics` facade, read back from
//! a recorder installed for the test: runs by outcome, steps, nodes and their
//! retries, tool calls by result, approvals requested and decided, checkpoint
//! writes, recoveries and exhausted budgets. And the same figures rendered by
//! the Prometheus exporter, as a `/metrics` endpoint would serve them.

use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::metrics as m;
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Outcome, RedbStore, Store};
use metrics::{SharedString, Unit};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    amount: u32,
}

/// Refunds. Irreversible, so every call needs an approval.
#[tool(risk = irreversible)]
async fn refund(args: Refund) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Lookup {
    order: String,
}

/// Reads an order; refuses an empty id.
#[tool(risk = read)]
async fn lookup(args: Lookup) -> Result<Value, ToolError> {
    if args.order.is_empty() {
        return Err(ToolError::Correctable("an order id is needed".into()));
    }
    Ok(json!({ "order": args.order }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    receipt: Option<Value>,
    #[reduce(add)]
    looked_up: u32,
}

#[graph(state = Pay, deps = (), start = look)]
pub mod pay_flow {
    use super::*;

    #[node(goto = [flaky], tools = [lookup])]
    async fn look(_s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let found = cx.run_tool(lookup, json!({ "order": "o-1" })).await?;
        let refused = cx.run_tool(lookup, json!({ "order": "" })).await?;
        assert!(found.code().is_none() && refused.code().is_some());
        Ok(goto!(flaky, Pay::update().looked_up(1)))
    }

    #[node(goto = [pay], retry(attempts = 2, base = 1ms, jitter = false))]
    async fn flaky(_s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        if cx.attempt() == 1 {
            return Err(NodeError::transient("the first attempt times out"));
        }
        Ok(goto!(pay))
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(_s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "amount": 10 })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Loop {
    #[reduce(add)]
    n: u32,
}

#[graph(state = Loop, deps = (), start = again, max_steps = 100)]
pub mod forever {
    use super::*;

    #[node(goto = [again, END])]
    async fn again(s: &Loop) -> Step<Loop> {
        if s.n > 1000 { goto!(END) } else { goto!(again, Loop::update().n(1)) }
    }
}

/// Runs the approval scenario and a budget-stopped run with `recorder` as this
/// thread's recorder (a current-thread runtime keeps every task on it).
fn scenario(recorder: &dyn metrics::Recorder) {
    metrics::with_local_recorder(recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
            let app = pay_flow::graph().app().store(Arc::clone(&store));
            let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
            let run = app.runner(&()).thread("t1").owner("agent").run(Pay::default()).await.unwrap();
            let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
            let id = pending[0].payload["approval"].as_str().unwrap().to_string();
            desk.approve(&id, &Approver::new("alice", ["approver"])).unwrap();
            let done = app.runner(&()).thread("t1").resume().await.unwrap();
            assert_eq!(done.outcome, Outcome::Completed);

            let run = forever::graph().app().runner(&()).max_steps(5).run(Loop::default()).await.unwrap();
            assert!(matches!(run.outcome, Outcome::BudgetExhausted { .. }), "{}", run.outcome);
        });
    });
}

/// Everything recorded, read once (reading resets what it read).
type Taken = Vec<(CompositeKey, Option<Unit>, Option<SharedString>, DebugValue)>;

/// Value of the metric `name` with these labels (others may exist).
fn value<'a>(snapshot: &'a Taken, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    snapshot.iter().find_map(|(key, _, _, v)| {
        let key = key.key();
        let matches = key.name() == name
            && labels.iter().all(|(k, want)| key.labels().any(|l| l.key() == *k && l.value() == *want));
        matches.then_some(v)
    })
}

fn counter(snapshotter: &Taken, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snapshotter, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

/// Samples of the histogram `name` with these labels, summed over the other labels.
fn samples(snapshot: &Taken, name: &str, labels: &[(&str, &str)]) -> usize {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            let key = key.key();
            key.name() == name
                && labels.iter().all(|(k, want)| key.labels().any(|l| l.key() == *k && l.value() == *want))
        })
        .map(|(.., v)| match v {
            DebugValue::Histogram(v) => v.len(),
            other => panic!("{name} is not a histogram: {other:?}"),
        })
        .sum()
}

#[test]
fn a_run_reports_its_runs_steps_nodes_tools_approvals_checkpoints_and_budgets() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    scenario(&recorder);
    let snap = snapshotter.snapshot().into_vec();

    let g = ("graph", "pay_flow");
    assert_eq!(counter(&snap, m::RUNS_STARTED, &[g, ("kind", "start")]), 1);
    assert_eq!(counter(&snap, m::RUNS_STARTED, &[g, ("kind", "resume")]), 1);
    assert_eq!(counter(&snap, m::RUNS_FINISHED, &[g, ("outcome", "interrupted")]), 1);
    assert_eq!(counter(&snap, m::RUNS_FINISHED, &[g, ("outcome", "completed")]), 1);
    assert_eq!(samples(&snap, m::RUN_SECONDS, &[g, ("outcome", "completed")]), 1);
    // look, flaky, then pay on resume: three steps that completed.
    assert_eq!(samples(&snap, m::STEP_SECONDS, &[g]), 3);
    // flaky: a failed attempt, retried once, then one that succeeded.
    assert_eq!(counter(&snap, m::NODE_RETRIES, &[g, ("node", "flaky")]), 1);
    assert_eq!(samples(&snap, m::NODE_SECONDS, &[g, ("node", "flaky")]), 2);
    // pay ran twice: paused for the approval, then ran the approved call.
    assert_eq!(samples(&snap, m::NODE_SECONDS, &[g, ("node", "pay")]), 2);
    assert_eq!(counter(&snap, m::TOOL_CALLS, &[("tool", "lookup"), ("result", "ok")]), 1);
    assert_eq!(counter(&snap, m::TOOL_CALLS, &[("tool", "lookup"), ("result", "tool_error")]), 1);
    assert_eq!(counter(&snap, m::TOOL_CALLS, &[("tool", "refund"), ("result", "halted")]), 1);
    assert_eq!(counter(&snap, m::TOOL_CALLS, &[("tool", "refund"), ("result", "ok")]), 1);
    // The time of each call through the gateway: both lookups, and the approved refund.
    assert_eq!(samples(&snap, m::TOOL_SECONDS, &[("tool", "lookup")]), 2);
    assert!(samples(&snap, m::TOOL_SECONDS, &[("tool", "refund")]) >= 1);
    assert_eq!(counter(&snap, m::APPROVALS_REQUESTED, &[("tool", "refund")]), 1);
    assert_eq!(counter(&snap, m::APPROVAL_DECISIONS, &[("status", "approved")]), 1);
    assert_eq!(samples(&snap, m::APPROVAL_DECISION_SECONDS, &[("status", "approved")]), 1);
    assert_eq!(counter(&snap, m::RECOVERIES, &[g]), 1);
    assert_eq!(samples(&snap, m::RECOVERY_SECONDS, &[g]), 1);
    // Every write the runs waited for: the input, three steps, the pause and the two ends.
    assert!(samples(&snap, m::CHECKPOINT_WRITE_SECONDS, &[]) >= 4);
    assert!(samples(&snap, m::CHECKPOINT_BYTES, &[]) >= 4);

    let f = ("graph", "forever");
    assert_eq!(counter(&snap, m::RUNS_FINISHED, &[f, ("outcome", "budget_exhausted")]), 1);
    assert_eq!(counter(&snap, m::BUDGETS_EXHAUSTED, &[f, ("budget", "max_steps")]), 1);
    assert_eq!(samples(&snap, m::STEP_SECONDS, &[f]), 5);

    // Labels are graph, node, tool, outcome, status and the like: never a thread id, whose
    // number is unbounded (the runs above are of thread `t1`, owned by `agent`).
    for (key, _, _, _) in &snap {
        for label in key.key().labels() {
            assert!(!["thread", "owner"].contains(&label.key()), "{:?} has a `{}` label", key.key(), label.key());
            assert!(!["t1", "agent"].contains(&label.value()), "{:?} carries `{}`", key.key(), label.value());
        }
    }
}

#[test]
fn the_prometheus_exporter_renders_them_for_a_metrics_endpoint() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    scenario(&recorder);
    let text = handle.render();
    for line in [
        "agentflow_runs_finished_total{graph=\"pay_flow\",outcome=\"completed\"} 1",
        "agentflow_tool_calls_total{tool=\"refund\",result=\"ok\"} 1",
        "agentflow_approval_decisions_total{status=\"approved\"} 1",
        "agentflow_budgets_exhausted_total{graph=\"forever\",budget=\"max_steps\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "`{line}` not in:\n{text}");
    }
    assert!(text.contains("agentflow_step_seconds"), "{text}");
}
