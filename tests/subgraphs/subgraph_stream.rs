//! A child's items in its parent's stream (custom values, updates and events under the
//! child's namespace), and a child that sleeps.

use crate::subgraph_tree::*;
use crate::support::stores::store;
use agentflow::Outcome;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

// ------------------------------------------------ a child's items in the parent's stream

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Talk {
    said: String,
}

#[graph(state = Talk, deps = Counts, start = say)]
pub mod inner_talk {
    use super::*;

    #[node(goto = [END])]
    async fn say(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.emit(json!("from the grandchild")).await?;
        Ok(goto!(END, Talk::update().said("inner".to_string())))
    }
}

#[graph(state = Talk, deps = Counts, start = relay)]
pub mod middle_talk {
    use super::*;

    #[node(goto = [END], subgraphs = [inner_talk])]
    async fn relay(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.emit(json!("from the child")).await?;
        let inner = cx.subgraph(inner_talk::graph(), Talk::default()).await?;
        Ok(goto!(END, Talk::update().said(inner.said)))
    }
}

#[graph(state = Talk, deps = Counts, start = host)]
pub mod outer_talk {
    use super::*;

    #[node(goto = [END], subgraphs = [middle_talk])]
    async fn host(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.emit(json!("before")).await?;
        let child = cx.subgraph(middle_talk::graph(), Talk::default()).await?;
        cx.emit(json!("after")).await?;
        Ok(goto!(END, Talk::update().said(child.said)))
    }
}

#[tokio::test]
async fn a_childs_custom_values_reach_the_parents_stream_under_its_namespace() {
    use agentflow::{StreamMode, StreamPart};
    let counts = Counts::default();
    let app = outer_talk::graph().app().store(store());
    let mut stream = app.runner(&counts).thread("talk").stream_modes([StreamMode::Custom]).stream(Talk::default());
    let mut seen = Vec::new();
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item.part {
            StreamPart::Custom { node, value, .. } => seen.push((item.namespace, node, value)),
            StreamPart::Done(r) => result = Some(r),
            other => panic!("only custom items were asked for: {other:?}"),
        }
    }
    assert_eq!(result.unwrap().unwrap().state.said, "inner");
    let child = "host.0.0.middle_talk".to_string();
    let grandchild = "relay.0.0.inner_talk".to_string();
    assert_eq!(
        seen,
        vec![
            (vec![], "host", json!("before")),
            (vec![child.clone()], "relay", json!("from the child")),
            (vec![child, grandchild], "say", json!("from the grandchild")),
            (vec![], "host", json!("after")),
        ]
    );
}

// ------------------------------------------------ a child that sleeps

#[graph(state = Talk, deps = Counts, start = nap)]
pub mod napper {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn nap(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.sleep(std::time::Duration::from_millis(30)).await?;
        Ok(goto!(END, Talk::update().said("rested".to_string())))
    }
}

#[graph(state = Talk, deps = Counts, start = wait)]
pub mod nap_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [napper])]
    async fn wait(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        let child = cx.subgraph(napper::graph(), Talk::default()).await?;
        Ok(goto!(END, Talk::update().said(child.said)))
    }
}

#[tokio::test]
async fn a_sleeping_child_makes_the_parent_sleep_and_the_parents_scheduler_wakes_the_tree() {
    let store = store();
    let app = nap_parent::graph().app().store(Arc::clone(&store));
    let run = app.runner(&Counts::default()).thread("n").run(Talk::default()).await.unwrap();
    let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{}", run.outcome) };
    let until = u64::try_from(until.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap();
    let child = "n/wait.0.0.napper";
    assert_eq!(store.thread(child).unwrap().unwrap().status, ThreadStatus::Sleeping);
    assert_eq!(store.thread_timer(child).unwrap(), Some(until), "the parent sleeps until the child wakes");
    // The child's own timer is not the parent graph's to wake: nothing happens, no error.
    while agentflow::timer::now_ms() < until {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(app.wake(child, &Counts::default()).await.unwrap().is_none());

    let scheduler = app.scheduler(Arc::new(Counts::default()));
    let woken = scheduler.subscribe().wait_for("n").await.expect("the scheduler runs");
    assert_eq!(woken.result, Ok(Outcome::Completed));
    assert_eq!(app.state("n").unwrap().unwrap().state.said, "rested");
    assert_eq!(store.thread(child).unwrap().unwrap().status, ThreadStatus::Completed);
    scheduler.shutdown().await;
}

#[tokio::test]
async fn a_childs_values_updates_and_events_reach_the_parents_stream_as_json() {
    use agentflow::{StreamMode, StreamPart};
    let counts = Counts::default();
    let app = outer_talk::graph().app().store(store());
    let modes = [StreamMode::Values, StreamMode::Updates, StreamMode::Events];
    let mut stream = app.runner(&counts).thread("talk2").stream_modes(modes).stream(Talk::default());
    let (mut root_values, mut child_items) = (Vec::new(), Vec::new());
    while let Some(item) = stream.next().await {
        match item.part {
            StreamPart::Values { state, .. } => root_values.push(state.said),
            StreamPart::Child { mode, value } => child_items.push((item.namespace, mode, value)),
            _ => {}
        }
    }
    assert_eq!(root_values, ["inner"]);
    let child = vec!["host.0.0.middle_talk".to_string()];
    let grandchild = vec!["host.0.0.middle_talk".to_string(), "relay.0.0.inner_talk".to_string()];
    let of = |ns: &Vec<String>, mode| child_items.iter().filter(|(n, m, _)| n == ns && *m == mode).count();
    // One super-step each: one value, one update, and their events.
    for ns in [&child, &grandchild] {
        assert_eq!(of(ns, StreamMode::Values), 1, "{ns:?}: {child_items:?}");
        assert_eq!(of(ns, StreamMode::Updates), 1, "{ns:?}");
        assert!(of(ns, StreamMode::Events) >= 3, "{ns:?}: step started, node started, node finished, finished");
    }
    let value = |ns: &Vec<String>, mode| child_items.iter().find(|(n, m, _)| n == ns && *m == mode).unwrap().2.clone();
    assert_eq!(value(&grandchild, StreamMode::Values), json!({ "step": 1, "state": { "said": "inner" } }));
    let update = value(&child, StreamMode::Updates);
    assert_eq!((update["node"].clone(), update["update"]["said"].clone()), (json!("relay"), json!("inner")));
    assert!(value(&child, StreamMode::Events)["event"].is_string());
}
