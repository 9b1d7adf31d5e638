//! Property tests of the executor over random graphs built with the hidden
//! `CompiledGraph::from_spec` API (random graphs cannot be written with the macros).
//!
//! - Every random graph terminates within its step bound: `Completed` or
//!   `BudgetExhausted { Steps }`, never more steps than the bound, and the
//!   result equals a sequential reference model of the super-step semantics.
//! - Merging is deterministic: the same graph run again with other per-node
//!   timings ends in the same state, and appended items appear in the
//!   declaration order of the writing nodes whichever branch finishes first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentflow::__private::{GraphSpec, NodeFuture, NodeSpec};
use agentflow::{Budget, CompiledGraph, Ctx, NodeId, Outcome, RetryPolicy, State};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct P {
    #[reduce(append)]
    log: Vec<u32>,
    #[reduce(add)]
    count: u64,
}

const GUARD: Duration = Duration::from_secs(10);

/// splitmix64 over (seed, node, step): the random but reproducible choices.
fn mix(seed: u64, node: usize, step: u32) -> u64 {
    let mut z =
        seed ^ (node as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(step).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Waits a random, timing-only amount: nothing, a few yields or a short sleep.
async fn jitter(seed: u64, node: usize, step: u32) {
    let r = mix(seed, node, step);
    match r % 4 {
        0 => {}
        1 => {
            for _ in 0..(r >> 8) % 6 {
                tokio::task::yield_now().await;
            }
        }
        2 => tokio::time::sleep(Duration::from_micros(100 + (r >> 8) % 400)).await,
        _ => tokio::time::sleep(Duration::from_micros(500 + (r >> 8) % 1000)).await,
    }
}

/// What a node appends: who wrote it and the `count` of the snapshot it read.
fn entry(node: usize, seen_count: u64) -> u32 {
    node as u32 * 100_000 + seen_count as u32
}

// ---------------------------------------------------------------------------
// Random graphs.

/// A random graph: node 0 starts, `i -> i+1` keeps every node reachable and
/// able to reach `END` (the last node may end), extra edges add cycles,
/// self-loops and fan-outs.
#[derive(Debug, Clone)]
struct Desc {
    targets: Vec<Vec<usize>>,
    may_end: Vec<bool>,
    max_steps: u32,
    /// A lower bound set on the runner, if any.
    runner_max: Option<u32>,
    route_seed: u64,
}

fn desc() -> impl Strategy<Value = Desc> {
    (1usize..=8)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(prop::collection::vec(0..n, 0..=3), n),
                prop::collection::vec(any::<bool>(), n),
                1u32..=24,
                prop::option::of(1u32..=24),
                any::<u64>(),
            )
        })
        .prop_map(|(extra, ends, max_steps, runner_max, route_seed)| {
            let n = extra.len();
            let mut targets = Vec::with_capacity(n);
            let mut may_end = Vec::with_capacity(n);
            for (i, mut t) in extra.into_iter().enumerate() {
                if i + 1 < n {
                    t.push(i + 1);
                }
                t.sort_unstable();
                t.dedup();
                targets.push(t);
                may_end.push(ends[i] || i + 1 == n);
            }
            Desc {
                targets,
                may_end,
                max_steps,
                // Only ever lower the graph's bound through the runner.
                runner_max: runner_max.filter(|&r| r <= max_steps),
                route_seed,
            }
        })
}

fn ids(nodes: &[usize]) -> &'static [NodeId] {
    let v: Vec<NodeId> = nodes.iter().map(|&i| NodeId::new(i as u32)).collect();
    Box::leak(v.into_boxed_slice())
}

/// The routes each node may take: each single target, all targets at once,
/// the first two, and `END` (the empty route) where allowed.
fn route_options(d: &Desc) -> Vec<Vec<Vec<usize>>> {
    (0..d.targets.len())
        .map(|i| {
            let t = &d.targets[i];
            let mut opts: Vec<Vec<usize>> = t.iter().map(|&x| vec![x]).collect();
            if t.len() >= 2 {
                opts.push(t.clone());
            }
            if t.len() >= 3 {
                opts.push(t[..2].to_vec());
            }
            if d.may_end[i] {
                opts.push(Vec::new());
            }
            opts
        })
        .collect()
}

fn choose(route_seed: u64, options: &[Vec<usize>], node: usize, step: u32) -> usize {
    (mix(route_seed, node, step) % options.len() as u64) as usize
}

/// The deps of a random graph: its routing table and the run's seeds.
struct RandDeps {
    index: HashMap<&'static str, usize>,
    options: Vec<Vec<Vec<usize>>>,
    routes: Vec<Vec<&'static [NodeId]>>,
    route_seed: u64,
    timing_seed: u64,
}

fn rand_node<'a>(s: &'a P, cx: &'a Ctx<'a, RandDeps>) -> NodeFuture<'a, P> {
    Box::pin(async move {
        let d = cx.deps();
        let i = d.index[cx.node()];
        let step = cx.step();
        // Read the snapshot before waiting: all nodes of a step see the same one.
        let seen = s.count;
        jitter(d.timing_seed, i, step).await;
        let pick = choose(d.route_seed, &d.options[i], i, step);
        Ok(agentflow::__private::route(d.routes[i][pick], P::update().log(vec![entry(i, seen)]).count(1)))
    })
}

fn build(d: &Desc) -> (CompiledGraph<P, RandDeps>, Vec<Vec<&'static [NodeId]>>) {
    let names: Vec<&'static str> =
        (0..d.targets.len()).map(|i| &*Box::leak(format!("n{i}").into_boxed_str())).collect();
    let options = route_options(d);
    let routes = options.iter().map(|opts| opts.iter().map(|o| ids(o)).collect()).collect();
    let nodes = (0..d.targets.len())
        .map(|i| NodeSpec {
            name: names[i],
            targets: ids(&d.targets[i]),
            may_end: d.may_end[i],
            retry: RetryPolicy::none(),
            timeout: None,
            writes: None,
            interrupt: false,
            sleep: false,
            tools: &[],
            run: rand_node,
            parallel: None,
            subgraphs: &[],
        })
        .collect();
    let graph = agentflow::__private::compile(GraphSpec {
        name: "random",
        start: NodeId::new(0),
        max_steps: Some(d.max_steps),
        fingerprint: "proptest",
        nodes,
    });
    (graph, routes)
}

/// The reference: the super-step semantics run sequentially, no executor.
fn model(d: &Desc) -> (Outcome, u32, P) {
    let options = route_options(d);
    let bound = d.runner_max.unwrap_or(d.max_steps);
    let mut state = P::default();
    let mut active = vec![0usize];
    let mut step = 0u32;
    loop {
        if active.is_empty() {
            return (Outcome::Completed, step, state);
        }
        if step >= bound {
            let which = Budget::Steps;
            return (Outcome::BudgetExhausted { which }, step, state);
        }
        let seen = state.count;
        let mut next = Vec::new();
        for &i in &active {
            state.apply(P::update().log(vec![entry(i, seen)]).count(1));
            next.extend_from_slice(&options[i][choose(d.route_seed, &options[i], i, step)]);
        }
        next.sort_unstable();
        next.dedup();
        active = next;
        step += 1;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime")
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn random_graphs_terminate_within_the_bound_and_match_the_model(d in desc(), timing in any::<[u64; 2]>()) {
        let rt = runtime();
        let (graph, routes) = build(&d);
        let index = graph
            .node_names()
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, i))
            .collect::<HashMap<_, _>>();
        let (want_outcome, want_steps, want_state) = model(&d);
        let bound = d.runner_max.unwrap_or(d.max_steps);
        let mut states = Vec::new();
        for timing_seed in timing {
            let deps = RandDeps {
                index: index.clone(),
                options: route_options(&d),
                routes: routes.clone(),
                route_seed: d.route_seed,
                timing_seed,
            };
            let mut runner = graph.app().runner(&deps);
            if let Some(n) = d.runner_max {
                runner = runner.max_steps(n);
            }
            let run = rt
                .block_on(async { tokio::time::timeout(GUARD, runner.run(P::default())).await })
                .expect("a run within its step bound cannot hang")
                .expect("valid config");
            prop_assert!(
                matches!(
                    run.outcome,
                    Outcome::Completed | Outcome::BudgetExhausted { which: Budget::Steps }
                ),
                "unexpected outcome {:?}",
                run.outcome
            );
            prop_assert!(run.steps <= bound, "{} steps > bound {}", run.steps, bound);
            if !run.outcome.is_completed() {
                prop_assert_eq!(run.steps, bound);
            }
            prop_assert_eq!(&run.outcome, &want_outcome);
            prop_assert_eq!(run.steps, want_steps);
            prop_assert_eq!(&run.state, &want_state);
            states.push(run.state);
        }
        prop_assert_eq!(&states[0], &states[1], "same graph, other timings, other state");
    }
}

// ---------------------------------------------------------------------------
// Fan-out to N branches with random timings.

struct FanDeps {
    /// Microseconds each branch (node 1..=N) waits, and how many items it appends.
    delays: Vec<u64>,
    items: Vec<u32>,
    to_join: &'static [NodeId],
    branches: &'static [NodeId],
    joins: AtomicUsize,
}

fn fan_node<'a>(s: &'a P, cx: &'a Ctx<'a, FanDeps>) -> NodeFuture<'a, P> {
    Box::pin(async move {
        let d = cx.deps();
        let i: usize = cx.node()[1..].parse().expect("node names are n<index>");
        let last = d.delays.len() + 1;
        let step = if i == 0 {
            agentflow::__private::route(d.branches, P::update().log(vec![0]).count(1))
        } else if i == last {
            d.joins.fetch_add(1, Ordering::SeqCst);
            agentflow::__private::route(&[], P::update().log(vec![entry(i, s.count)]).count(1))
        } else {
            let delay = d.delays[i - 1];
            if delay > 0 {
                tokio::time::sleep(Duration::from_micros(delay)).await;
            } else {
                tokio::task::yield_now().await;
            }
            let items = (0..d.items[i - 1]).map(|j| i as u32 * 100 + j).collect();
            agentflow::__private::route(d.to_join, P::update().log(items).count(1))
        };
        Ok(step)
    })
}

fn fan_graph(n: usize) -> (CompiledGraph<P, FanDeps>, &'static [NodeId], &'static [NodeId]) {
    let join = n + 1;
    let branches = ids(&(1..=n).collect::<Vec<_>>());
    let to_join = ids(&[join]);
    let nodes = (0..=join)
        .map(|i| NodeSpec {
            name: &*Box::leak(format!("n{i}").into_boxed_str()),
            targets: if i == 0 {
                branches
            } else if i == join {
                &[]
            } else {
                to_join
            },
            may_end: i == join,
            retry: RetryPolicy::none(),
            timeout: None,
            writes: None,
            interrupt: false,
            sleep: false,
            tools: &[],
            run: fan_node,
            parallel: None,
            subgraphs: &[],
        })
        .collect();
    let graph = agentflow::__private::compile(GraphSpec {
        name: "fan",
        start: NodeId::new(0),
        max_steps: None,
        fingerprint: "proptest-fan",
        nodes,
    });
    (graph, branches, to_join)
}

fn fan_case() -> impl Strategy<Value = (Vec<u64>, Vec<u32>, bool)> {
    (2usize..=8).prop_flat_map(|n| {
        (
            prop::collection::vec(prop_oneof![Just(0u64), 0u64..3000], n),
            prop::collection::vec(0u32..4, n),
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn fan_out_appends_in_declaration_order_whoever_finishes_first((delays, items, multi) in fan_case()) {
        let n = delays.len();
        let (graph, branches, to_join) = fan_graph(n);
        let rt = if multi {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .expect("runtime")
        } else {
            runtime()
        };
        let mut expected = vec![0u32];
        for (b, k) in items.iter().enumerate() {
            expected.extend((0..*k).map(|j| (b as u32 + 1) * 100 + j));
        }
        // The join reads the merged branches: count = 1 + n.
        expected.push(entry(n + 1, 1 + n as u64));
        let mut states = Vec::new();
        // The same graph with the branch timings reversed must not change anything.
        for delays in [delays.clone(), delays.iter().rev().copied().collect()] {
            let deps = FanDeps {
                delays,
                items: items.clone(),
                to_join,
                branches,
                joins: AtomicUsize::new(0),
            };
            let run = rt
                .block_on(async { tokio::time::timeout(GUARD, graph.run(P::default(), &deps)).await })
                .expect("no hang")
                .expect("valid config");
            prop_assert_eq!(&run.outcome, &Outcome::Completed);
            prop_assert_eq!(run.steps, 3);
            prop_assert_eq!(deps.joins.load(Ordering::SeqCst), 1, "the join runs once");
            prop_assert_eq!(&run.state.log, &expected);
            prop_assert_eq!(run.state.count, n as u64 + 2);
            states.push(run.state);
        }
        prop_assert_eq!(&states[0], &states[1]);
    }
}
