//! Map-reduce: `goto!(each(worker, payloads))` runs one instance of the
//! worker per payload in one super-step.
//!
//! - Updates merge in payload order, whatever order the instances finish in
//!   (also as a property over random payload lists and finishing orders).
//! - The worker's successor runs once, after all instances.
//! - Each instance retries on its own and its events carry its index.
//! - A resume after a failed instance re-runs only the instances that did not
//!   finish; the sender does not run again and the payloads come from the store.
//! - At most `parallel` instances run at once.
//! - N = 0: no instance runs and the worker's successors do not run; the
//!   sender's other targets proceed.
//! - A cancel mid-map keeps the instances that finished; a resume runs only
//!   the others.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{CancellationToken, Event, Outcome, RedbStore};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// A bound on every test so a regression hangs no CI job.
const GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Market {
    tickers: Vec<String>,
    #[reduce(append)]
    signals: Vec<String>,
    #[reduce(add)]
    analysed: u32,
    summary: String,
}

/// One analyst task: which ticker, and its position (for the checks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    ticker: String,
}

/// What the test graphs share: call counts, the finishing order, and knobs.
#[derive(Default)]
pub struct Desk {
    /// Calls per ticker.
    calls: Mutex<HashMap<String, u32>>,
    /// Tickers in the order their instance finished.
    finished: Mutex<Vec<String>>,
    /// Calls of the sender and of the successor.
    plans: AtomicUsize,
    summaries: AtomicUsize,
    audits: AtomicUsize,
    /// Finish in reverse payload order: instance `i` waits for all `j > i`.
    reverse: bool,
    /// How many instances finished, for `reverse`.
    done: Option<watch::Sender<usize>>,
    /// The ticker whose first attempt fails with a transient error.
    flaky: Option<String>,
    /// The ticker that fails with a fatal error while this is set.
    broken: Option<(String, AtomicBool)>,
    /// Instances running now, and the most seen at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Desk {
    fn calls(&self, ticker: &str) -> u32 {
        self.calls.lock().unwrap().get(ticker).copied().unwrap_or(0)
    }
}

fn tasks(s: &Market) -> Vec<Task> {
    s.tickers.iter().map(|t| Task { ticker: t.clone() }).collect()
}

#[graph(state = Market, deps = Desk, start = plan)]
mod market {
    use super::*;

    #[node(goto = [analyst, audit])]
    async fn plan(s: &Market, desk: &Desk) -> Step<Market> {
        desk.plans.fetch_add(1, Ordering::SeqCst);
        goto!([each(analyst, tasks(s)), audit])
    }

    #[node(goto = [summarize], retry(attempts = 3, base = 1ms, jitter = false), parallel = 16)]
    async fn analyst(s: &Market, #[payload] task: &Task, cx: &Ctx<Desk>) -> Result<Step<Market>, NodeError> {
        analyse(s, task, cx).await?;
        Ok(goto!(summarize, Market::update().signals(vec![format!("{}:buy", task.ticker)]).analysed(1)))
    }

    #[node(goto = [END])]
    async fn audit(_s: &Market, desk: &Desk) -> Step<Market> {
        desk.audits.fetch_add(1, Ordering::SeqCst);
        goto!(END)
    }

    #[node(goto = [END])]
    async fn summarize(s: &Market, desk: &Desk) -> Step<Market> {
        desk.summaries.fetch_add(1, Ordering::SeqCst);
        goto!(END, Market::update().summary(s.signals.join(",")))
    }
}

async fn analyse(s: &Market, task: &Task, cx: &Ctx<'_, Desk>) -> Result<(), NodeError> {
    let desk = cx.deps();
    let i = cx.instance().expect("an instance of a map worker knows its index") as usize;
    assert_eq!(s.tickers[i], task.ticker, "instance {i} got the payload at its index");
    let attempt = {
        let mut calls = desk.calls.lock().unwrap();
        let n = calls.entry(task.ticker.clone()).or_default();
        *n += 1;
        *n
    };
    let now = desk.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    desk.max_in_flight.fetch_max(now, Ordering::SeqCst);
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    desk.in_flight.fetch_sub(1, Ordering::SeqCst);
    if desk.flaky.as_deref() == Some(task.ticker.as_str()) && attempt == 1 {
        return Err(NodeError::transient(format!("{} feed timed out", task.ticker)));
    }
    if let Some((ticker, on)) = &desk.broken
        && *ticker == task.ticker
        && on.load(Ordering::SeqCst)
    {
        return Err(NodeError::fatal(format!("{} data is corrupt", task.ticker)));
    }
    if let (true, Some(done)) = (desk.reverse, &desk.done) {
        let later = s.tickers.len() - 1 - i;
        let mut rx = done.subscribe();
        rx.wait_for(|n| *n >= later).await.expect("the sender lives in the deps");
        desk.finished.lock().unwrap().push(task.ticker.clone());
        done.send_modify(|n| *n += 1);
    } else {
        desk.finished.lock().unwrap().push(task.ticker.clone());
    }
    Ok(())
}

fn input(tickers: &[&str]) -> Market {
    Market { tickers: tickers.iter().map(|t| t.to_string()).collect(), ..Market::default() }
}

#[tokio::test]
async fn updates_merge_in_payload_order_when_instances_finish_in_reverse() {
    let tickers = ["AAPL", "MSFT", "NVDA", "TSLA", "AMZN"];
    let desk = Desk { reverse: true, done: Some(watch::channel(0).0), ..Desk::default() };
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let graph = market::graph();
    let run = tokio::time::timeout(
        GUARD,
        graph.app().runner(&desk).on_event(move |e| sink.lock().unwrap().push(e)).run(input(&tickers)),
    )
    .await
    .expect("no hang")
    .expect("run");
    assert_eq!(run.outcome, Outcome::Completed);
    let mut reversed: Vec<String> = tickers.iter().map(|t| t.to_string()).collect();
    reversed.reverse();
    assert_eq!(*desk.finished.lock().unwrap(), reversed, "the instances finished last to first");
    let expected: Vec<String> = tickers.iter().map(|t| format!("{t}:buy")).collect();
    assert_eq!(run.state.signals, expected, "merged in payload order");
    assert_eq!(run.state.analysed, 5);
    // The successor ran once, after all instances, and saw all their writes.
    assert_eq!(desk.summaries.load(Ordering::SeqCst), 1);
    assert_eq!(run.state.summary, expected.join(","));
    // plan, then [analyst x5, audit], then summarize.
    assert_eq!(run.steps, 3);
    // Each instance's events carry its index.
    let events = events.lock().unwrap();
    let mut finished: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::NodeFinished { node: "analyst", instance, .. } => *instance,
            _ => None,
        })
        .collect();
    finished.sort_unstable();
    assert_eq!(finished, vec![0, 1, 2, 3, 4]);
    let started = events.iter().find_map(|e| match e {
        Event::NodeStarted { node: "analyst", instance: Some(2), .. } => Some(e.to_string()),
        _ => None,
    });
    assert_eq!(started.as_deref(), Some("step 1: analyst[2] started (attempt 1)"));
    assert!(events.iter().all(|e| !matches!(e, Event::NodeStarted { node: "audit", instance: Some(_), .. })));
}

#[tokio::test]
async fn an_instance_retries_on_its_own() {
    let desk = Desk { flaky: Some("MSFT".into()), ..Desk::default() };
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let graph = market::graph();
    let run = tokio::time::timeout(
        GUARD,
        graph.app().runner(&desk).on_event(move |e| sink.lock().unwrap().push(e)).run(input(&["AAPL", "MSFT", "NVDA"])),
    )
    .await
    .expect("no hang")
    .expect("run");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!((desk.calls("AAPL"), desk.calls("MSFT"), desk.calls("NVDA")), (1, 2, 1));
    assert_eq!(run.state.signals, vec!["AAPL:buy", "MSFT:buy", "NVDA:buy"]);
    let retries: Vec<Option<u32>> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::NodeRetrying { node: "analyst", instance, .. } => Some(*instance),
            _ => None,
        })
        .collect();
    assert_eq!(retries, vec![Some(1)], "only instance 1 retried");
}

#[tokio::test]
async fn a_resume_reruns_only_the_instances_that_failed() {
    let desk = Desk { broken: Some(("NVDA".into(), AtomicBool::new(true))), ..Desk::default() };
    let store = Arc::new(RedbStore::in_memory().expect("store"));
    let app = market::graph().app().store(store);
    let tickers = ["AAPL", "MSFT", "NVDA", "TSLA"];
    let first = tokio::time::timeout(GUARD, app.runner(&desk).thread("map-1").run(input(&tickers)))
        .await
        .expect("no hang")
        .expect("run");
    match &first.outcome {
        Outcome::Failed { node, error } => {
            assert_eq!(node, "analyst");
            assert!(error.to_string().contains("NVDA data is corrupt"), "{error}");
        }
        other => panic!("expected the failed instance to fail the run, got {other:?}"),
    }
    assert_eq!(first.state.signals, Vec::<String>::new(), "nothing of the failed step was merged");
    // The data is fixed; the thread resumes from its last checkpoint.
    desk.broken.as_ref().unwrap().1.store(false, Ordering::SeqCst);
    let second = tokio::time::timeout(GUARD, app.runner(&desk).thread("map-1").resume())
        .await
        .expect("no hang")
        .expect("resume");
    assert_eq!(second.outcome, Outcome::Completed);
    assert_eq!(
        tickers.map(|t| desk.calls(t)),
        [1, 1, 2, 1],
        "the finished instances kept their stored writes; only NVDA ran again"
    );
    assert_eq!(desk.plans.load(Ordering::SeqCst), 1, "the sender did not run again");
    assert_eq!(desk.audits.load(Ordering::SeqCst), 1, "the sibling that finished did not run again");
    assert_eq!(second.state.signals, vec!["AAPL:buy", "MSFT:buy", "NVDA:buy", "TSLA:buy"]);
    assert_eq!(second.state.summary, "AAPL:buy,MSFT:buy,NVDA:buy,TSLA:buy");
    // The checkpoint after the sender stored the payloads; the one after the
    // map step names the worker once, not once per instance.
    let history = app.history("map-1").expect("history");
    let after_plan = history.iter().find(|c| c.metadata.nodes == ["plan"]).expect("the sender's checkpoint");
    assert_eq!(after_plan.cursor, ["analyst", "audit"]);
    assert_eq!(after_plan.metadata.extra["payloads"][0][0], "analyst");
    assert_eq!(after_plan.metadata.extra["payloads"][0][1][2], serde_json::json!({ "ticker": "NVDA" }));
    assert!(history.iter().any(|c| c.metadata.nodes == ["analyst", "audit"]), "{history:?}");
}

#[tokio::test]
async fn zero_payloads_run_no_instance_and_skip_the_workers_successor() {
    let desk = Desk::default();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let graph = market::graph();
    let run = tokio::time::timeout(
        GUARD,
        graph.app().runner(&desk).on_event(move |e| sink.lock().unwrap().push(e)).run(input(&[])),
    )
    .await
    .expect("no hang")
    .expect("run");
    assert_eq!(run.outcome, Outcome::Completed);
    // The sender's other target ran; no analyst, so no summarize.
    assert_eq!(desk.audits.load(Ordering::SeqCst), 1);
    assert_eq!(desk.summaries.load(Ordering::SeqCst), 0);
    assert_eq!(run.steps, 2);
    let steps: Vec<Vec<&str>> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::StepStarted { nodes, .. } => Some(nodes.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(steps, vec![vec!["plan"], vec!["audit"]]);
}

#[tokio::test]
async fn zero_payloads_as_the_only_target_end_the_branch() {
    let desk = Desk::default();
    let run =
        tokio::time::timeout(GUARD, bounded::graph().run(input(&[]), &desk)).await.expect("no hang").expect("run");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.steps, 1, "only the sender ran");
    assert!(desk.calls.lock().unwrap().is_empty());
}

#[graph(state = Market, deps = Desk, start = plan)]
mod bounded {
    use super::*;

    #[node(goto = [analyst])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(analyst, tasks(s)))
    }

    #[node(goto = [END], parallel = 3)]
    async fn analyst(s: &Market, #[payload] task: &Task, cx: &Ctx<Desk>) -> Result<Step<Market>, NodeError> {
        analyse(s, task, cx).await?;
        Ok(goto!(END, Market::update().signals(vec![task.ticker.clone()])))
    }
}

#[tokio::test]
async fn at_most_parallel_instances_run_at_once() {
    let desk = Desk::default();
    let tickers: Vec<String> = (0..10).map(|i| format!("T{i}")).collect();
    let input = Market { tickers: tickers.clone(), ..Market::default() };
    let run = tokio::time::timeout(GUARD, bounded::graph().run(input, &desk)).await.expect("no hang").expect("run");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.signals, tickers);
    assert_eq!(desk.max_in_flight.load(Ordering::SeqCst), 3, "`parallel = 3`: three at once, never more");
    assert_eq!(bounded::graph().nodes()[1].parallel, Some(3));
    assert_eq!(market::graph().nodes()[0].parallel, None, "a node without a payload is no map worker");
}

#[graph(state = Market, deps = Desk, start = plan)]
mod unbounded {
    use super::*;

    #[node(goto = [analyst])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(analyst, tasks(s)))
    }

    /// No `parallel`: the default bound.
    #[node(goto = [END])]
    async fn analyst(s: &Market, #[payload] task: &Task, cx: &Ctx<Desk>) -> Result<Step<Market>, NodeError> {
        analyse(s, task, cx).await?;
        Ok(goto!(END, Market::update().signals(vec![task.ticker.clone()])))
    }
}

/// Without `parallel`, a map worker runs at most 8 instances at once (`DEFAULT_PARALLEL`).
#[tokio::test]
async fn without_parallel_at_most_eight_instances_run_at_once() {
    let desk = Desk::default();
    let tickers: Vec<String> = (0..20).map(|i| format!("T{i}")).collect();
    let input = Market { tickers: tickers.clone(), ..Market::default() };
    let run = tokio::time::timeout(GUARD, unbounded::graph().run(input, &desk)).await.expect("no hang").expect("run");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.signals, tickers);
    assert_eq!(agentflow::DEFAULT_PARALLEL, 8);
    assert_eq!(desk.max_in_flight.load(Ordering::SeqCst), 8, "eight at once, never more");
}

// ---------------------------------------------------------------------------
// Property: for random payload lists and random finishing orders, the merged
// state equals a sequential fold in payload order.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Fold {
    items: Vec<u32>,
    #[reduce(append)]
    log: Vec<u32>,
    #[reduce(add)]
    total: u64,
    #[reduce(custom = digest)]
    digest: u64,
}

/// An order-sensitive reducer: a different order of the same writes gives
/// another value.
fn digest(acc: &mut u64, x: u64) {
    *acc = acc.wrapping_mul(1_000_003).wrapping_add(x);
}

/// The finishing order: `rank[i]` is when instance `i` finishes.
pub struct Order {
    rank: Vec<usize>,
    turn: watch::Sender<usize>,
    finished: Mutex<Vec<usize>>,
}

#[graph(state = Fold, deps = Order, start = split)]
mod fold {
    use super::*;

    #[node(goto = [work])]
    async fn split(s: &Fold) -> Step<Fold> {
        goto!(each(work, s.items.clone()))
    }

    #[node(goto = [END], parallel = 64)]
    async fn work(_s: &Fold, #[payload] item: u32, cx: &Ctx<Order>) -> Step<Fold> {
        let order = cx.deps();
        let i = cx.instance().unwrap_or_default() as usize;
        let mut rx = order.turn.subscribe();
        let _ = rx.wait_for(|t| *t == order.rank[i]).await;
        order.finished.lock().unwrap().push(i);
        order.turn.send_modify(|t| *t += 1);
        goto!(END, Fold::update().log(vec![item * 2]).total(u64::from(item)).digest(u64::from(item)))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn merged_state_is_a_fold_in_payload_order(
        (items, rank) in proptest::collection::vec(0u32..1000, 0..24)
            .prop_flat_map(|items| {
                let n = items.len();
                (Just(items), Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
            })
    ) {
        let order = Order { rank: rank.clone(), turn: watch::channel(0).0, finished: Mutex::new(Vec::new()) };
        let input = Fold { items: items.clone(), ..Fold::default() };
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        let run = rt
            .block_on(async { tokio::time::timeout(GUARD, fold::graph().run(input.clone(), &order)).await })
            .expect("no hang")
            .expect("run");
        prop_assert_eq!(&run.outcome, &Outcome::Completed);
        // The instances finished in the drawn order.
        let mut by_rank = vec![0; items.len()];
        for (i, r) in rank.iter().enumerate() {
            by_rank[*r] = i;
        }
        prop_assert_eq!(&*order.finished.lock().unwrap(), &by_rank);
        // A sequential fold in payload order.
        let mut expected = input;
        for item in &items {
            expected.log.push(item * 2);
            expected.total += u64::from(*item);
            digest(&mut expected.digest, u64::from(*item));
        }
        prop_assert_eq!(run.state, expected);
    }
}

// ---------------------------------------------------------------------------
// A plan built by hand skips the macro's checks; the executor still refuses
// instances that overwrite one plain field, instead of keeping the last write.

mod by_hand {
    use agentflow::__private::{GraphSpec, NodeFuture, NodeSpec};
    use agentflow::{Ctx, NodeId, Outcome, RetryPolicy};

    use super::Market;

    const WORKER: &[NodeId] = &[NodeId::new(1)];

    fn send<'a>(_s: &'a Market, _cx: &'a Ctx<'a, ()>) -> NodeFuture<'a, Market> {
        Box::pin(async move {
            Ok(agentflow::__private::each(
                agentflow::__private::route(&[], Market::update()),
                NodeId::new(1),
                ["a".to_string(), "b".to_string()],
            ))
        })
    }

    fn worker<'a>(_s: &'a Market, cx: &'a Ctx<'a, ()>) -> NodeFuture<'a, Market> {
        Box::pin(async move {
            let ticker: String = agentflow::__private::payload_of(cx)?;
            Ok(agentflow::__private::route(&[], Market::update().summary(ticker)))
        })
    }

    fn node(
        name: &'static str,
        targets: &'static [NodeId],
        run: agentflow::__private::NodeFn<Market, ()>,
    ) -> NodeSpec<Market, ()> {
        NodeSpec {
            name,
            targets,
            may_end: true,
            retry: RetryPolicy::none(),
            timeout: None,
            writes: None,
            interrupt: false,
            sleep: false,
            tools: &[],
            run,
            parallel: None,
            subgraphs: &[],
        }
    }

    #[tokio::test]
    async fn instances_overwriting_a_plain_field_fail_the_step() {
        let mut w = node("worker", &[], worker);
        w.parallel = Some(2);
        let graph = agentflow::__private::compile(GraphSpec {
            name: "by_hand",
            start: NodeId::new(0),
            max_steps: None,
            fingerprint: "by-hand-map",
            nodes: vec![node("send", WORKER, send), w],
        });
        let run = graph.run(Market::default(), &()).await.expect("run");
        match run.outcome {
            Outcome::Failed { node, error } => {
                assert_eq!(node, "worker");
                assert!(
                    error.to_string().contains("instances of map worker `worker` both overwrite `summary`"),
                    "{error}"
                );
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        assert_eq!(run.state.summary, "", "nothing of the step was merged");
    }
}

// ---------------------------------------------------------------- cancel mid-map

/// Instances of `slow` tickers wait until the run is cancelled (while `hold`
/// is set); the others finish at once and count themselves in `finished`.
#[derive(Default)]
pub struct Hold {
    hold: AtomicBool,
    slow: Vec<String>,
    /// How many instances finish at once (the others are slow).
    fast: usize,
    finished: AtomicUsize,
    calls: Mutex<HashMap<String, u32>>,
    fast_done: tokio::sync::Notify,
}

#[graph(state = Market, deps = Hold, start = plan)]
mod held {
    use super::*;

    #[node(goto = [analyst])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(analyst, tasks(s)))
    }

    #[node(goto = [END])]
    async fn analyst(_s: &Market, #[payload] task: &Task, cx: &Ctx<Hold>) -> Result<Step<Market>, NodeError> {
        let hold = cx.deps();
        *hold.calls.lock().unwrap().entry(task.ticker.clone()).or_default() += 1;
        if hold.slow.contains(&task.ticker) && hold.hold.load(Ordering::SeqCst) {
            cx.cancelled().await;
            return Err(NodeError::transient(format!("{} stopped: the run was cancelled", task.ticker)));
        }
        if hold.finished.fetch_add(1, Ordering::SeqCst) + 1 == hold.fast {
            hold.fast_done.notify_one();
        }
        Ok(goto!(END, Market::update().signals(vec![format!("{}:buy", task.ticker)]).analysed(1)))
    }
}

#[tokio::test]
async fn a_cancel_mid_map_keeps_the_finished_instances_and_a_resume_runs_only_the_others() {
    let tickers = ["AAPL", "MSFT", "NVDA", "TSLA"];
    let hold = Arc::new(Hold {
        hold: AtomicBool::new(true),
        slow: vec!["MSFT".into(), "TSLA".into()],
        fast: 2,
        ..Hold::default()
    });
    let app = held::graph().app().store(Arc::new(RedbStore::in_memory().expect("store")));
    let token = CancellationToken::new();
    let run = tokio::spawn({
        let (app, hold, token) = (app.clone(), Arc::clone(&hold), token.clone());
        async move { app.runner(&*hold).thread("c").cancel_token(token).run(input(&tickers)).await }
    });
    // The two fast instances finished; the two slow ones are waiting.
    tokio::time::timeout(GUARD, hold.fast_done.notified()).await.expect("the fast instances finish");
    token.cancel();
    let first = tokio::time::timeout(GUARD, run).await.expect("no hang").expect("task").expect("run");
    assert_eq!(first.outcome, Outcome::Cancelled);
    assert!(first.state.signals.is_empty(), "nothing of the cancelled step was merged");

    hold.hold.store(false, Ordering::SeqCst);
    let second = tokio::time::timeout(GUARD, app.runner(&*hold).thread("c").resume()).await.expect("no hang");
    let second = second.expect("resume");
    assert_eq!(second.outcome, Outcome::Completed);
    let calls = hold.calls.lock().unwrap().clone();
    assert_eq!(tickers.map(|t| calls[t]), [1, 2, 1, 2], "only the cancelled instances ran again");
    assert_eq!(second.state.signals, ["AAPL:buy", "MSFT:buy", "NVDA:buy", "TSLA:buy"]);
}

#[graph(state = Market, deps = Desk, start = plan)]
mod asking {
    use super::*;

    #[node(goto = [vet])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(vet, tasks(s)))
    }

    #[node(goto = [END], interrupt)]
    async fn vet(_s: &Market, #[payload] task: &Task, cx: &Ctx<Desk>) -> Result<Step<Market>, NodeError> {
        let ok: bool = cx.interrupt(serde_json::json!({ "ticker": task.ticker }))?;
        Ok(goto!(END, Market::update().signals(if ok { vec![task.ticker.clone()] } else { vec![] })))
    }
}

/// Instances of one map worker that ask for a value each say which instance they are: the
/// pending items of the run and of the stored thread name it, with that instance's question.
#[tokio::test]
async fn each_waiting_instance_is_named_in_its_pending_item() {
    let desk = Desk::default();
    let app = asking::graph().app().store(Arc::new(RedbStore::in_memory().unwrap()));
    let tickers = ["ACME", "BOLT", "CRUX"];
    let run = tokio::time::timeout(GUARD, app.runner(&desk).thread("vet").run(input(&tickers)))
        .await
        .expect("no hang")
        .expect("run");
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    for items in [pending.clone(), app.pending("vet").unwrap()] {
        let mut asked: Vec<(u32, String)> = items
            .iter()
            .map(|p| (p.instance.expect("a map worker's item names its instance"), p.payload["ticker"].to_string()))
            .collect();
        asked.sort();
        let expected: Vec<(u32, String)> =
            tickers.iter().enumerate().map(|(i, t)| (i as u32, format!("\"{t}\""))).collect();
        assert_eq!(asked, expected);
    }
}

// ------------------------------------------------ effects of instances are their own

/// What the charges did: the payload of every effect body that ran.
#[derive(Default)]
pub struct Till {
    bodies: Mutex<Vec<String>>,
    /// Instance `B` fails after its charge while set.
    broken: AtomicBool,
}

#[graph(state = Market, deps = Till, start = plan)]
mod charging {
    use super::*;

    #[node(goto = [charge])]
    async fn plan(s: &Market) -> Step<Market> {
        goto!(each(charge, tasks(s)))
    }

    /// Charges its payload under one effect key, the same in every instance.
    #[node(goto = [END])]
    async fn charge(_s: &Market, #[payload] task: &Task, cx: &Ctx<Till>) -> Result<Step<Market>, NodeError> {
        let till = cx.deps();
        let ticker = task.ticker.clone();
        let receipt: String = cx
            .effect("charge", |_key| async move {
                till.bodies.lock().unwrap().push(ticker.clone());
                Ok(format!("receipt-{ticker}"))
            })
            .await?;
        if task.ticker == "B" && till.broken.load(Ordering::SeqCst) {
            return Err(NodeError::fatal("B's ledger is down"));
        }
        Ok(goto!(END, Market::update().signals(vec![receipt])))
    }
}

/// Each instance of a map worker journals its effects under its own index: one key in the
/// worker's code is `charge[0]`, `charge[1]`, ... in the journal. Every payload's charge runs
/// once and returns its own receipt; the instance that failed after charging is run again on
/// resume and gets its own journaled receipt back, without charging again.
#[tokio::test]
async fn each_instance_journals_its_effects_under_its_own_index() {
    let store: Arc<dyn agentflow::Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = charging::graph().app().store(Arc::clone(&store));
    let till = Till { broken: AtomicBool::new(true), ..Till::default() };
    let input = Market { tickers: vec!["A".into(), "B".into(), "C".into()], ..Market::default() };
    let run = tokio::time::timeout(GUARD, app.runner(&till).thread("till").run(input)).await.unwrap().unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    let mut bodies = till.bodies.lock().unwrap().clone();
    bodies.sort();
    assert_eq!(bodies, ["A", "B", "C"], "each payload charged once");

    till.broken.store(false, Ordering::SeqCst);
    let run = tokio::time::timeout(GUARD, app.runner(&till).thread("till").resume()).await.unwrap().unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.signals, ["receipt-A", "receipt-B", "receipt-C"], "each instance its own receipt");
    assert_eq!(till.bodies.lock().unwrap().len(), 3, "B's charge was replayed, not made again");
}
