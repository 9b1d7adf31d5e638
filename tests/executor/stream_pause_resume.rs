//! Streaming a run whose subgraph child pauses for an approval, then
//! streaming its resume: each stream ends with `Done` carrying the run's
//! outcome (interrupted, then completed), the approved call runs once, and
//! the child's items come under its namespace in both streams.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Outcome, RedbStore, Run, RunError, Store, StreamItem, StreamMode, StreamPart};
use serde_json::{Value, json};

use crate::support::refund_subgraph;
use refund_subgraph::{Case, Counts, support};

async fn collect<S: State>(stream: agentflow::RunStream<'_, S>) -> Vec<StreamItem<S>> {
    let all = futures_util::StreamExt::collect(stream);
    tokio::time::timeout(Duration::from_secs(60), all).await.expect("no hang")
}

fn done<S: State>(items: &mut Vec<StreamItem<S>>) -> Result<Run<S>, RunError> {
    let Some(StreamItem { part: StreamPart::Done(result), .. }) = items.pop() else {
        panic!("the last item is `Done`");
    };
    assert!(items.iter().all(|i| !matches!(i.part, StreamPart::Done(_))), "`Done` comes once, last");
    result
}

fn child_customs<S: State>(items: &[StreamItem<S>]) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i.namespace == ["settle.0.0.payer"])
        .filter_map(|i| match &i.part {
            StreamPart::Custom { value, .. } => Some(value.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_run_that_pauses_in_a_child_and_a_streamed_resume_each_end_with_their_outcome() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = support::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let counts = Counts::default();
    let modes = [StreamMode::Values, StreamMode::Events, StreamMode::Custom];

    let runner = app.runner(&counts).thread("s").owner("agent").stream_modes(modes).stream_buffer(1);
    let mut items = collect(runner.stream(Case { amount: 40, outcome: None })).await;
    let run = done(&mut items).unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    assert_eq!(child_customs(&items), [json!({ "paying": 40 })]);
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 0);

    desk.approve(&id, &Approver::new("alice", ["approver"])).unwrap();
    let runner = app.runner(&counts).thread("s").stream_modes(modes).stream_buffer(1);
    let mut items = collect(runner.stream_resume()).await;
    let run = done(&mut items).unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
    assert_eq!(run.state.outcome.as_ref().unwrap()["result"]["refunded"], 40);
    // The child's node ran again on resume (its emit with it); the call did not.
    assert_eq!(child_customs(&items), [json!({ "paying": 40 })]);
    // The root's last value is the final state.
    let last = items.iter().rev().find_map(|i| match &i.part {
        StreamPart::Values { state, .. } if i.namespace.is_empty() => Some(state.clone()),
        _ => None,
    });
    assert_eq!(last.unwrap(), run.state);

    // A third stream of the finished thread runs nothing and still ends with `Done`.
    let runner = app.runner(&counts).thread("s").stream_modes(modes);
    let mut items = collect(runner.stream_resume()).await;
    assert!(done(&mut items).is_err());
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
}
