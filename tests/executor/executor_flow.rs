//! Executor integration tests: fan-out and join, real concurrency, conditional
//! routing, the event stream, `mermaid()` and spawning a run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{Event, Outcome};
use serde::{Deserialize, Serialize};

/// A bound on every test so a regression hangs no CI job.
const GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Fan {
    topic: String,
    #[reduce(append)]
    log: Vec<String>,
    #[reduce(add)]
    hits: u32,
    seen_at_join: usize,
}

/// What the fan-out nodes share: a join counter and per-branch delays.
pub struct FanDeps {
    joins: AtomicUsize,
    /// Milliseconds each branch sleeps, in declaration order a, b, c, d.
    delays: [u64; 4],
    /// What each branch saw of `log` (all read the same snapshot).
    seen: Mutex<Vec<(&'static str, usize)>>,
}

impl FanDeps {
    fn new(delays: [u64; 4]) -> Self {
        FanDeps { joins: AtomicUsize::new(0), delays, seen: Mutex::new(Vec::new()) }
    }
}

async fn branch(name: &'static str, i: usize, s: &Fan, deps: &FanDeps) -> Vec<String> {
    deps.seen.lock().unwrap().push((name, s.log.len()));
    tokio::time::sleep(Duration::from_millis(deps.delays[i])).await;
    vec![format!("{name}:1"), format!("{name}:2")]
}

#[graph(state = Fan, deps = FanDeps, start = split)]
mod fan {
    use super::*;

    #[node(goto = [a, b, c, d])]
    async fn split(_s: &Fan) -> Step<Fan> {
        goto!([d, b, a, c], Fan::update().log(vec!["split".into()]).hits(1))
    }

    #[node(goto = [join], writes = [log, hits])]
    async fn a(s: &Fan, deps: &FanDeps) -> Step<Fan> {
        let items = branch("a", 0, s, deps).await;
        goto!(join, Fan::update().log(items).hits(1))
    }

    #[node(goto = [join], writes = [log, hits])]
    async fn b(s: &Fan, deps: &FanDeps) -> Step<Fan> {
        let items = branch("b", 1, s, deps).await;
        goto!(join, Fan::update().log(items).hits(1))
    }

    #[node(goto = [join], writes = [log, hits])]
    async fn c(s: &Fan, deps: &FanDeps) -> Step<Fan> {
        let items = branch("c", 2, s, deps).await;
        goto!(join, Fan::update().log(items).hits(1))
    }

    #[node(goto = [join], writes = [log, hits])]
    async fn d(s: &Fan, deps: &FanDeps) -> Step<Fan> {
        let items = branch("d", 3, s, deps).await;
        goto!(join, Fan::update().log(items).hits(1))
    }

    #[node(goto = [END])]
    async fn join(s: &Fan, deps: &FanDeps) -> Step<Fan> {
        deps.joins.fetch_add(1, Ordering::SeqCst);
        goto!(END, Fan::update().seen_at_join(s.log.len()).log(vec!["join".into()]).hits(1))
    }
}

fn expected_fan_log() -> Vec<String> {
    let mut log = vec!["split".to_string()];
    for n in ["a", "b", "c", "d"] {
        log.push(format!("{n}:1"));
        log.push(format!("{n}:2"));
    }
    log.push("join".into());
    log
}

#[tokio::test]
async fn fan_out_runs_branches_in_one_step_and_the_join_once() {
    let graph = fan::graph();
    // The first-declared branch finishes last, the last-declared first.
    let deps = FanDeps::new([40, 25, 10, 0]);
    let mut steps_seen = Vec::new();
    let run = tokio::time::timeout(
        GUARD,
        graph
            .app()
            .runner(&deps)
            .on_event(|e| {
                if let Event::StepStarted { step, nodes } = e {
                    steps_seen.push((step, nodes));
                }
            })
            .run(Fan::default()),
    )
    .await
    .expect("no hang")
    .expect("valid config");

    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.steps, 3, "split, the four branches, join");
    assert_eq!(steps_seen, vec![(0, vec!["split"]), (1, vec!["a", "b", "c", "d"]), (2, vec!["join"]),]);
    assert_eq!(deps.joins.load(Ordering::SeqCst), 1, "the join runs once");
    // Merged in declaration order, not in completion or routing order.
    assert_eq!(run.state.log, expected_fan_log());
    assert_eq!(run.state.hits, 6);
    // The join saw every branch write (1 + 4 * 2 items).
    assert_eq!(run.state.seen_at_join, 9);
    // Every branch read the same snapshot: only split's write.
    let seen = deps.seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|(_, len)| *len == 1), "{seen:?}");
}

#[tokio::test]
async fn merge_order_does_not_depend_on_which_branch_finishes_first() {
    let graph = fan::graph();
    for delays in [[0, 0, 0, 0], [30, 0, 20, 10], [0, 30, 10, 20], [5, 10, 15, 20]] {
        let deps = FanDeps::new(delays);
        let run = tokio::time::timeout(GUARD, graph.run(Fan::default(), &deps))
            .await
            .expect("no hang")
            .expect("valid config");
        assert_eq!(run.outcome, Outcome::Completed, "{delays:?}");
        assert_eq!(run.state.log, expected_fan_log(), "{delays:?}");
        assert_eq!(deps.joins.load(Ordering::SeqCst), 1);
    }
}

// ---------------------------------------------------------------------------
// Branches of one step really run concurrently.

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Meet {
    #[reduce(append)]
    arrived: Vec<String>,
}

pub struct MeetDeps {
    barrier: tokio::sync::Barrier,
}

#[graph(state = Meet, deps = MeetDeps, start = go)]
mod meet {
    use super::*;

    #[node(goto = [left, right])]
    async fn go(_s: &Meet) -> Step<Meet> {
        goto!([left, right])
    }

    #[node(goto = [END])]
    async fn left(_s: &Meet, deps: &MeetDeps) -> Step<Meet> {
        // Returns only once `right` is waiting too: a sequential executor deadlocks here.
        deps.barrier.wait().await;
        goto!(END, Meet::update().arrived(vec!["left".into()]))
    }

    #[node(goto = [END])]
    async fn right(_s: &Meet, deps: &MeetDeps) -> Step<Meet> {
        deps.barrier.wait().await;
        goto!(END, Meet::update().arrived(vec!["right".into()]))
    }
}

async fn run_meet() {
    let graph = meet::graph();
    let deps = MeetDeps { barrier: tokio::sync::Barrier::new(2) };
    let run = tokio::time::timeout(Duration::from_secs(5), graph.run(Meet::default(), &deps))
        .await
        .expect("the branches of one step must run concurrently (barrier of 2 never released)")
        .expect("valid config");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.arrived, vec!["left", "right"]);
}

#[tokio::test]
async fn branches_run_concurrently_on_current_thread() {
    run_meet().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_run_concurrently_on_multi_thread() {
    run_meet().await;
}

// ---------------------------------------------------------------------------
// Conditional routing.

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Route {
    amount: u32,
    #[reduce(append)]
    path: Vec<String>,
    verdict: Option<String>,
}

#[graph(state = Route, start = classify)]
mod route {
    use super::*;

    #[node(goto = [small, large, END])]
    async fn classify(s: &Route) -> Step<Route> {
        let u = Route::update().path(vec!["classify".into()]);
        if s.amount == 0 {
            goto!(END, u)
        } else if s.amount < 100 {
            goto!(small, u)
        } else {
            goto!(large, u)
        }
    }

    #[node(goto = [END])]
    async fn small(_s: &Route) -> Step<Route> {
        goto!(END, Route::update().path(vec!["small".into()]).verdict(Some("auto-approve".into())))
    }

    #[node(goto = [review])]
    async fn large(_s: &Route) -> Step<Route> {
        goto!(review, Route::update().path(vec!["large".into()]))
    }

    #[node(goto = [END])]
    async fn review(_s: &Route) -> Step<Route> {
        goto!(END, Route::update().path(vec!["review".into()]).verdict(Some("human".into())))
    }
}

#[tokio::test]
async fn conditional_routing_takes_only_the_chosen_branch() {
    let graph = route::graph();
    let cases: [(u32, &[&str], Option<&str>, u32); 3] = [
        (5, &["classify", "small"], Some("auto-approve"), 2),
        (500, &["classify", "large", "review"], Some("human"), 3),
        (0, &["classify"], None, 1),
    ];
    for (amount, path, verdict, steps) in cases {
        let input = Route { amount, ..Route::default() };
        let run = graph.run(input, &()).await.expect("valid config");
        assert_eq!(run.outcome, Outcome::Completed, "amount {amount}");
        assert_eq!(run.state.path, path, "amount {amount}");
        assert_eq!(run.state.verdict.as_deref(), verdict, "amount {amount}");
        assert_eq!(run.state.amount, amount);
        assert_eq!(run.steps, steps, "amount {amount}");
    }
}

// ---------------------------------------------------------------------------
// The event stream.

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Ev {
    #[reduce(append)]
    log: Vec<String>,
}

#[graph(state = Ev, start = first)]
mod ev {
    use super::*;

    #[node(goto = [left, right])]
    async fn first(_s: &Ev) -> Step<Ev> {
        goto!([left, right], Ev::update().log(vec!["first".into()]))
    }

    #[node(goto = [last])]
    async fn left(_s: &Ev) -> Step<Ev> {
        // Finishes after `right`; its NodeFinished still comes first.
        tokio::time::sleep(Duration::from_millis(20)).await;
        goto!(last, Ev::update().log(vec!["left".into()]))
    }

    #[node(goto = [last])]
    async fn right(_s: &Ev) -> Step<Ev> {
        goto!(last, Ev::update().log(vec!["right".into()]))
    }

    #[node(goto = [END])]
    async fn last(_s: &Ev) -> Step<Ev> {
        goto!(END)
    }
}

/// A compact, comparable form of the events this test knows.
fn describe(e: &Event<Ev>) -> Option<String> {
    Some(match e {
        Event::StepStarted { step, nodes } => format!("step {step} [{}]", nodes.join(",")),
        Event::NodeStarted { step, node, attempt, .. } => format!("start {step} {node} #{attempt}"),
        Event::NodeFinished { step, node, update, next, .. } => {
            format!("finish {step} {node} -> [{}] log={:?}", next.join(","), update.log.clone().unwrap_or_default())
        }
        Event::NodeRetrying { node, .. } => format!("retry {node}"),
        Event::NodeFailed { node, .. } => format!("failed {node}"),
        Event::Finished { outcome, steps } => format!("finished {outcome} after {steps}"),
        // Variants added later (e.g. checkpoints) are not part of this check.
        _ => return None,
    })
}

#[tokio::test]
async fn events_come_in_step_order() {
    let graph = ev::graph();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = graph
        .app()
        .runner(&())
        .on_event(move |e| {
            let _ = tx.send(e);
        })
        .run(Ev::default())
        .await
        .expect("valid config");
    assert_eq!(run.outcome, Outcome::Completed);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.extend(describe(&e));
    }
    // Within step 1 both nodes start before either finishes; finishes are
    // reported in declaration order even though `right` completed first.
    let (head, rest) = events.split_at(4);
    assert_eq!(
        head,
        ["step 0 [first]", "start 0 first #1", "finish 0 first -> [left,right] log=[\"first\"]", "step 1 [left,right]",]
    );
    let mut starts: Vec<_> = rest[..2].to_vec();
    starts.sort();
    assert_eq!(starts, ["start 1 left #1", "start 1 right #1"]);
    assert_eq!(
        &rest[2..],
        [
            "finish 1 left -> [last] log=[\"left\"]",
            "finish 1 right -> [last] log=[\"right\"]",
            "step 2 [last]",
            "start 2 last #1",
            "finish 2 last -> [] log=[]",
            "finished Completed after 3",
        ]
    );
}

#[tokio::test]
async fn events_display_is_readable() {
    let graph = ev::graph();
    let mut lines = Vec::new();
    graph.app().runner(&()).on_event(|e| lines.push(e.to_string())).run(Ev::default()).await.expect("valid config");
    assert_eq!(lines.first().map(String::as_str), Some("step 0: [first]"));
    assert_eq!(lines.last().map(String::as_str), Some("finished after 3 steps: Completed"));
    assert!(lines.iter().any(|l| l.starts_with("step 2: last -> END")), "{lines:#?}");
}

// ---------------------------------------------------------------------------
// mermaid()

#[test]
fn mermaid_draws_the_routes() {
    let chart = route::graph().mermaid();
    let expected = "\
flowchart TD
    __start__([START])
    __end__([END])
    __start__ --> classify
    classify -.-> small
    classify -.-> large
    classify -.-> __end__
    small --> __end__
    large --> review
    review --> __end__
";
    assert_eq!(chart, expected);

    let chart = ev::graph().mermaid();
    assert!(chart.contains("    __start__ --> first\n"), "{chart}");
    assert!(chart.contains("    first -.-> left\n"), "{chart}");
    assert!(chart.contains("    first -.-> right\n"), "{chart}");
    assert!(chart.contains("    left --> last\n"), "{chart}");
    assert!(chart.contains("    last --> __end__\n"), "{chart}");
}

#[test]
fn compiled_graph_introspection() {
    let graph = route::graph();
    assert_eq!(graph.name(), "route");
    assert_eq!(graph.node_names(), ["classify", "small", "large", "review"]);
    assert_eq!(graph.node_name(graph.start()), "classify");
    // Acyclic: the step bound defaults to the node count.
    assert_eq!(graph.max_steps(), 4);
    assert_eq!(graph.node_id("review").map(|id| id.index()), Some(3));
    assert_eq!(graph.node_id("nope"), None);
    assert_eq!(graph.fingerprint().len(), 16);
    assert_eq!(graph.fingerprint(), route::graph().fingerprint());
    assert_ne!(graph.fingerprint(), ev::graph().fingerprint());
}

// ---------------------------------------------------------------------------
// A run is Send: it can be spawned.

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_can_be_spawned() {
    let graph = fan::graph();
    let deps = Arc::new(FanDeps::new([3, 2, 1, 0]));
    let handle = {
        let deps = Arc::clone(&deps);
        tokio::spawn(async move {
            let mut n = 0;
            graph.app().runner(&deps).on_event(|_| n += 1).timeout(GUARD).run(Fan::default()).await.map(|run| (run, n))
        })
    };
    let (run, events) = handle.await.expect("task ok").expect("valid config");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.log, expected_fan_log());
    assert!(events > 0);
    assert_eq!(deps.joins.load(Ordering::SeqCst), 1);

    // The plain `run` future is Send as well.
    let graph = route::graph();
    let fut = assert_send(graph.run(Route::default(), &()));
    assert!(fut.await.unwrap().outcome.is_completed());
}
