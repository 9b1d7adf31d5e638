//! Promise (README, Subgraphs; `agentflow::subgraph` docs): "At most 8
//! children run at once per run" ([`agentflow::DEFAULT_PARALLEL`]).
//!
//! A parent starts 12 subgraph runs at once, from one node (`try_join_all`
//! of `cx.subgraph` calls) or from 12 map-worker instances allowed to run 12
//! at a time. Every child blocks on a shared gate until the test opens it, so
//! the number of children running at once climbs to whatever the runtime
//! allows. The test waits until 8 run, gives any further ones time to start,
//! opens the gate and checks that the peak was exactly 8 and all 12 finished.
//!
//! If the promise were false: without a bound all 12 children would be inside
//! the gate at once (peak 12); with a smaller bound the count would never reach
//! 8 and the test would report the lower peak; a bound that is never released
//! (a leaked permit) would leave the run hanging past the guard timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{DEFAULT_PARALLEL, Outcome, RedbStore, Run, RunError, Store};
use serde::{Deserialize, Serialize};

const CHILDREN: u32 = 12;
/// A bound on every wait, so a regression fails instead of hanging.
const GUARD: Duration = Duration::from_secs(30);

/// What the children share: how many run now, the most seen at once, and the gate.
pub struct Gate {
    running: AtomicUsize,
    peak: AtomicUsize,
    finished: AtomicUsize,
    release: tokio::sync::Semaphore,
}

impl Gate {
    fn new() -> Self {
        Gate {
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            release: tokio::sync::Semaphore::new(0),
        }
    }
}

// ------------------------------------------------ the child

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Leaf {
    n: u32,
    done: bool,
}

#[graph(state = Leaf, deps = Gate, start = work)]
pub mod leaf {
    use super::*;

    /// Counts itself in, waits at the gate, counts itself out.
    #[node(goto = [END])]
    async fn work(_s: &Leaf, gate: &Gate) -> Step<Leaf> {
        let now = gate.running.fetch_add(1, Ordering::SeqCst) + 1;
        gate.peak.fetch_max(now, Ordering::SeqCst);
        drop(gate.release.acquire().await.expect("the gate is never closed"));
        gate.running.fetch_sub(1, Ordering::SeqCst);
        gate.finished.fetch_add(1, Ordering::SeqCst);
        goto!(END, Leaf::update().done(true))
    }
}

// ------------------------------------------------ parents

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Fan {
    #[reduce(append)]
    done: Vec<u32>,
}

/// One node starts all 12 children at once.
#[graph(state = Fan, deps = Gate, start = fan_out)]
pub mod one_node {
    use super::*;

    #[node(goto = [END], subgraphs = [leaf])]
    async fn fan_out(_s: &Fan, cx: &Ctx<Gate>) -> Result<Step<Fan>, NodeError> {
        let calls = (0..CHILDREN).map(|n| cx.subgraph(leaf::graph(), Leaf { n, done: false }));
        let leaves = futures_util::future::try_join_all(calls).await?;
        Ok(goto!(END, Fan::update().done(leaves.into_iter().filter(|l| l.done).map(|l| l.n).collect())))
    }
}

/// 12 map-worker instances, all allowed at once (`parallel = 12`), each starts one child.
#[graph(state = Fan, deps = Gate, start = plan)]
pub mod map_workers {
    use super::*;

    #[node(goto = [worker])]
    async fn plan(_s: &Fan) -> Step<Fan> {
        goto!(each(worker, (0..CHILDREN).collect::<Vec<u32>>()))
    }

    #[node(goto = [END], subgraphs = [leaf], parallel = 12)]
    async fn worker(_s: &Fan, #[payload] n: &u32, cx: &Ctx<Gate>) -> Result<Step<Fan>, NodeError> {
        let leaf = cx.subgraph(leaf::graph(), Leaf { n: *n, done: false }).await?;
        Ok(goto!(END, Fan::update().done(if leaf.done { vec![leaf.n] } else { vec![] })))
    }
}

/// Starts `run`, waits until 8 children are inside the gate (or the guard
/// passes), gives any others time to start, opens the gate and returns the
/// run's result and the peak seen.
async fn peak_while<F>(gate: &Arc<Gate>, run: F) -> (Result<Run<Fan>, RunError>, usize)
where
    F: std::future::Future<Output = Result<Run<Fan>, RunError>> + Send + 'static,
{
    let task = tokio::spawn(run);
    let waited = tokio::time::timeout(GUARD, async {
        while gate.running.load(Ordering::SeqCst) < DEFAULT_PARALLEL {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // More children would have started by now if nothing held them back.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let peak = gate.peak.load(Ordering::SeqCst);
    assert!(waited.is_ok(), "never saw {DEFAULT_PARALLEL} children at once; peak {peak}");
    gate.release.add_permits(64);
    let result = tokio::time::timeout(GUARD, task).await.expect("the run hung after the gate opened").unwrap();
    (result, gate.peak.load(Ordering::SeqCst).max(peak))
}

fn check(result: Result<Run<Fan>, RunError>, peak: usize, gate: &Gate) {
    let run = result.expect("the run");
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.outcome);
    assert_eq!(DEFAULT_PARALLEL, 8, "the README's number");
    assert_eq!(peak, DEFAULT_PARALLEL, "children running at once");
    assert_eq!(gate.finished.load(Ordering::SeqCst), CHILDREN as usize, "every child finished");
    let mut done = run.state.done;
    done.sort_unstable();
    assert_eq!(done, (0..CHILDREN).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_children_of_one_node_run_at_most_eight_at_once_with_a_store() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = one_node::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::new());
    let run = {
        let (app, gate) = (app.clone(), Arc::clone(&gate));
        async move { app.runner(&*gate).thread("fan").run(Fan::default()).await }
    };
    let (result, peak) = peak_while(&gate, run).await;
    check(result, peak, &gate);
    // Each child was a thread of its own under the parent's.
    let children = store.list_threads().unwrap().into_iter().filter(|t| t.id.starts_with("fan/")).count();
    assert_eq!(children, CHILDREN as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_children_of_one_node_run_at_most_eight_at_once_in_memory() {
    let app = one_node::graph().app();
    let gate = Arc::new(Gate::new());
    let run = {
        let gate = Arc::clone(&gate);
        async move { app.runner(&*gate).run(Fan::default()).await }
    };
    let (result, peak) = peak_while(&gate, run).await;
    check(result, peak, &gate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_map_instances_each_with_a_child_run_at_most_eight_children_at_once() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = map_workers::graph().app().store(store);
    let gate = Arc::new(Gate::new());
    let run = {
        let gate = Arc::clone(&gate);
        async move { app.runner(&*gate).thread("map").run(Fan::default()).await }
    };
    let (result, peak) = peak_while(&gate, run).await;
    check(result, peak, &gate);
}
