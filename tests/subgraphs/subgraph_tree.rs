//! The subgraph fixtures shared by this area's tests: a three-level tree (supervisor ->
//! research -> review) over one set of counts, a worker running it, and the gated `Slow` state.

use crate::support::stores::store;
use agentflow::CancellationToken;
use agentflow::approval::RoleAuthorizer;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// What ran, counted across the tree.
#[derive(Default)]
pub struct Counts {
    pub searches: AtomicU32,
    pub reviews: AtomicU32,
    pub drafts: AtomicU32,
    /// `flaky_after_review` fails after its child while this is set.
    pub fail: AtomicBool,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Query {
    pub q: String,
}

/// Searches; read-only.
#[tool(risk = read)]
pub async fn search(args: Query, deps: &Counts) -> Result<Value, ToolError> {
    deps.searches.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "hits": [format!("about {}", args.q)] }))
}

// ------------------------------------------------ review: the deepest graph

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Review {
    pub draft: String,
    pub verdict: String,
}

#[graph(state = Review, deps = Counts, start = ask)]
pub mod review {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Review, cx: &Ctx<Counts>) -> Result<Step<Review>, NodeError> {
        cx.deps().reviews.fetch_add(1, Ordering::SeqCst);
        let verdict: String = cx.interrupt(json!({ "question": "publish?", "draft": s.draft }))?;
        Ok(goto!(END, Review::update().verdict(verdict)))
    }
}

// ------------------------------------------------ research: the middle

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Research {
    pub topic: String,
    pub hits: Vec<String>,
    pub verdict: String,
}

#[graph(state = Research, deps = Counts, start = gather)]
pub mod research {
    use super::*;

    #[node(goto = [END], tools = [search], subgraphs = [review])]
    async fn gather(s: &Research, cx: &Ctx<Counts>) -> Result<Step<Research>, NodeError> {
        let found = cx.run_tool(search, json!({ "q": s.topic })).await?;
        let hits: Vec<String> = serde_json::from_value(found.body["result"]["hits"].clone()).unwrap_or_default();
        let reviewed = cx.subgraph(review::graph(), Review { draft: hits.join("; "), verdict: String::new() }).await?;
        Ok(goto!(END, Research::update().hits(hits).verdict(reviewed.verdict)))
    }
}

// ------------------------------------------------ supervisor: the root

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Desk {
    pub topic: String,
    pub report: String,
}

#[graph(state = Desk, deps = Counts, start = write)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [research])]
    async fn write(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        cx.deps().drafts.fetch_add(1, Ordering::SeqCst);
        let input = Research { topic: s.topic.clone(), ..Research::default() };
        let done = cx.subgraph(research::graph(), input).await?;
        Ok(goto!(END, Desk::update().report(format!("{} ({})", done.hits.join(", "), done.verdict))))
    }
}

/// A worker running `graph` on a fresh store (polling every 10 ms), with `thread` submitted; the
/// approval desk answers its questions as the inbox does.
#[allow(clippy::type_complexity)]
pub fn worker_running(
    graph: CompiledGraph<Desk, Counts>,
    thread: &str,
    input: &Desk,
) -> (
    App<Desk, Counts>,
    agentflow::approval::ApprovalDesk,
    CancellationToken,
    tokio::task::JoinHandle<Result<agentflow::WorkerReport, agentflow::WorkerError>>,
) {
    let store = store();
    let app = graph.app().store(Arc::clone(&store));
    let approvals = agentflow::approval::ApprovalDesk::for_store(store, RoleAuthorizer::new());
    app.submit(thread, input).unwrap();
    let stop = CancellationToken::new();
    let worker = agentflow::Worker::new(app.clone(), Arc::new(Counts::default()))
        .poll_interval(std::time::Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    (app, approvals, stop, handle)
}

pub fn desk(topic: &str) -> Desk {
    Desk { topic: topic.into(), report: String::new() }
}
// ------------------------------------------------ cut off mid-child

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Slow {
    #[reduce(append)]
    pub done: Vec<String>,
}

/// Steps of `slow` run so far; the second blocks until released.
#[derive(Default)]
pub struct Gate {
    pub first: AtomicU32,
    pub second: AtomicU32,
    pub release: tokio::sync::Notify,
    pub blocked: tokio::sync::Notify,
}

/// Two steps; the second blocks the first time until `Gate::release`.
#[graph(state = Slow, deps = Gate, start = one)]
pub mod slow {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    #[node(goto = [END])]
    async fn two(_s: &Slow, gate: &Gate) -> Step<Slow> {
        if gate.second.fetch_add(1, Ordering::SeqCst) == 0 {
            gate.blocked.notify_one();
            gate.release.notified().await;
        }
        goto!(END, Slow::update().done(vec!["two".to_string()]))
    }
}

/// Runs `slow` as its one node's child.
#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod slow_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [slow])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(slow::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}
