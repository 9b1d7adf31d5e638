//! Executor integration tests: retries of transient errors, fatal errors,
//! per-node timeouts, panics, and the run-time write guards.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{ErrorClass, Event, RetryPolicy};
use serde::{Deserialize, Serialize};

const GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    #[reduce(append)]
    log: Vec<String>,
    result: Option<String>,
}

/// How each node should behave, and what it saw.
#[derive(Default)]
pub struct Script {
    /// Attempts of `work` that fail before it succeeds (`u32::MAX`: never succeeds).
    failures: u32,
    /// The class `work` fails with.
    fatal: bool,
    /// Calls of `work`.
    calls: AtomicU32,
    /// `Ctx::attempt()` of each call of `work`.
    attempts: Mutex<Vec<u32>>,
}

impl Script {
    fn failing(failures: u32) -> Self {
        Script { failures, ..Script::default() }
    }
}

#[graph(state = Job, deps = Script, start = prepare)]
mod job {
    use super::*;

    #[node(goto = [work])]
    async fn prepare(_s: &Job) -> Step<Job> {
        goto!(work, Job::update().log(vec!["prepare".into()]))
    }

    #[node(goto = [END], retry(attempts = 4, base = 1ms, max_delay = 5ms))]
    async fn work(_s: &Job, cx: &Ctx<Script>) -> Result<Step<Job>, NodeError> {
        let script = cx.deps();
        let call = script.calls.fetch_add(1, Ordering::SeqCst);
        script.attempts.lock().unwrap().push(cx.attempt());
        if call < script.failures {
            return Err(if script.fatal {
                NodeError::fatal("permission denied")
            } else {
                NodeError::transient(format!("rate limited (call {call})"))
            });
        }
        Ok(goto!(END, Job::update().log(vec![format!("work #{}", cx.attempt())]).result(Some("ok".into()))))
    }
}

fn retries(events: &[Event<Job>]) -> Vec<(u32, String, Duration)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::NodeRetrying { node, attempt, error, delay, .. } => {
                assert_eq!(*node, "work");
                Some((*attempt, error.message.clone(), *delay))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn transient_error_is_retried_until_it_succeeds() {
    let graph = job::graph();
    let deps = Script::failing(2);
    let mut events = Vec::new();
    let run = tokio::time::timeout(GUARD, graph.app().runner(&deps).on_event(|e| events.push(e)).run(Job::default()))
        .await
        .expect("no hang")
        .expect("valid config");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(deps.calls.load(Ordering::SeqCst), 3);
    assert_eq!(*deps.attempts.lock().unwrap(), [1, 2, 3]);
    assert_eq!(run.state.log, ["prepare", "work #3"]);
    assert_eq!(run.state.result.as_deref(), Some("ok"));
    // A retry happens inside its step: still two steps.
    assert_eq!(run.steps, 2);

    let r = retries(&events);
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!((r[0].0, r[0].1.as_str()), (1, "rate limited (call 0)"));
    assert_eq!((r[1].0, r[1].1.as_str()), (2, "rate limited (call 1)"));
    for (_, _, delay) in &r {
        assert!(*delay <= Duration::from_millis(5), "{delay:?}");
    }
    let starts: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::NodeStarted { node: "work", attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [1, 2, 3]);
    assert!(!events.iter().any(|e| matches!(e, Event::NodeFailed { .. })), "no NodeFailed for a node that recovered");
}

#[tokio::test]
async fn retries_exhausted_fail_the_run_with_the_node_name() {
    let graph = job::graph();
    let deps = Script::failing(u32::MAX);
    let mut events = Vec::new();
    let run = graph.app().runner(&deps).on_event(|e| events.push(e)).run(Job::default()).await.expect("valid config");
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("expected Failed, got {:?}", run.outcome);
    };
    assert_eq!(node, "work");
    assert_eq!(error.class, ErrorClass::Transient);
    assert_eq!(error.message, "rate limited (call 3)");
    assert_eq!(deps.calls.load(Ordering::SeqCst), 4, "retry attempts = 4");
    assert_eq!(retries(&events).len(), 3);
    // The state is the one before the failed step.
    assert_eq!(run.steps, 1);
    assert_eq!(run.state.log, ["prepare"]);
    assert_eq!(run.state.result, None);
    assert!(events.iter().any(|e| matches!(e, Event::NodeFailed { node: "work", .. })));
    assert!(matches!(events.last(), Some(Event::Finished { outcome: Outcome::Failed { .. }, steps: 1 })));
}

#[tokio::test]
async fn fatal_error_is_not_retried() {
    let graph = job::graph();
    let deps = Script { failures: u32::MAX, fatal: true, ..Script::default() };
    let mut events = Vec::new();
    let run = graph.app().runner(&deps).on_event(|e| events.push(e)).run(Job::default()).await.expect("valid config");
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("expected Failed, got {:?}", run.outcome);
    };
    assert_eq!(node, "work");
    assert_eq!(error.class, ErrorClass::Fatal);
    assert_eq!(error.message, "permission denied");
    assert_eq!(deps.calls.load(Ordering::SeqCst), 1);
    assert!(retries(&events).is_empty());
    assert_eq!(run.state.log, ["prepare"]);
}

// `retry = N` (default backoff) and other error classes.
#[derive(Default)]
pub struct Classes {
    class: Option<ErrorClass>,
    calls: AtomicU32,
}

#[graph(state = Job, deps = Classes, start = call)]
mod classes {
    use super::*;

    #[node(goto = [END], retry = 3)]
    async fn call(_s: &Job, deps: &Classes) -> Result<Step<Job>, NodeError> {
        deps.calls.fetch_add(1, Ordering::SeqCst);
        match deps.class {
            Some(class) => Err(NodeError::new(class, "nope").with_retry_after(Duration::from_millis(1))),
            None => Ok(goto!(END)),
        }
    }
}

#[tokio::test]
async fn only_transient_errors_are_retried() {
    let graph = classes::graph();
    assert_eq!(graph.nodes()[0].retry, RetryPolicy::attempts(3));
    for (class, calls) in
        [(ErrorClass::Correctable, 1), (ErrorClass::NeedsInput, 1), (ErrorClass::Fatal, 1), (ErrorClass::Transient, 3)]
    {
        let deps = Classes { class: Some(class), ..Classes::default() };
        let run = graph.run(Job::default(), &deps).await.expect("valid config");
        match &run.outcome {
            Outcome::Failed { node, error } => {
                assert_eq!(node, "call");
                assert_eq!(error.class, class);
            }
            other => panic!("{class:?}: expected Failed, got {other:?}"),
        }
        assert_eq!(deps.calls.load(Ordering::SeqCst), calls, "{class:?}");
    }
}

// ---------------------------------------------------------------------------
// Per-node timeout: transient, so retried.

#[derive(Default)]
pub struct Hang {
    /// Attempts that hang past the node's timeout.
    hangs: u32,
    calls: AtomicU32,
}

#[graph(state = Job, deps = Hang, start = fetch)]
mod timeouts {
    use super::*;

    #[node(goto = [END], timeout = 40ms, retry(attempts = 3, base = 1ms, max_delay = 2ms))]
    async fn fetch(_s: &Job, deps: &Hang) -> Step<Job> {
        let call = deps.calls.fetch_add(1, Ordering::SeqCst);
        if call < deps.hangs {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        goto!(END, Job::update().result(Some(format!("call {call}"))))
    }
}

#[tokio::test]
async fn node_timeout_is_transient_and_retried() {
    let graph = timeouts::graph();
    assert_eq!(graph.nodes()[0].timeout, Some(Duration::from_millis(40)));
    let deps = Hang { hangs: 2, ..Hang::default() };
    let mut retried = Vec::new();
    let run = tokio::time::timeout(
        GUARD,
        graph
            .app()
            .runner(&deps)
            .on_event(|e| {
                if let Event::NodeRetrying { error, .. } = e {
                    retried.push(error);
                }
            })
            .run(Job::default()),
    )
    .await
    .expect("the node timeout must fire")
    .expect("valid config");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.result.as_deref(), Some("call 2"));
    assert_eq!(deps.calls.load(Ordering::SeqCst), 3);
    assert_eq!(retried.len(), 2);
    for e in &retried {
        assert_eq!(e.class, ErrorClass::Transient);
        assert!(e.message.contains("timed out"), "{e}");
        assert!(e.message.contains("fetch"), "{e}");
    }
}

#[tokio::test]
async fn node_timeout_exhausting_retries_fails() {
    let graph = timeouts::graph();
    let deps = Hang { hangs: u32::MAX, ..Hang::default() };
    let started = std::time::Instant::now();
    let run = tokio::time::timeout(GUARD, graph.run(Job::default(), &deps))
        .await
        .expect("the node timeout must fire")
        .expect("valid config");
    assert!(started.elapsed() < Duration::from_secs(5));
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("expected Failed, got {:?}", run.outcome);
    };
    assert_eq!(node, "fetch");
    assert_eq!(error.class, ErrorClass::Transient);
    assert!(error.message.contains("timed out"), "{error}");
    assert_eq!(deps.calls.load(Ordering::SeqCst), 3);
}

// ---------------------------------------------------------------------------
// Panics.

#[graph(state = Job, start = before)]
mod panics {
    use super::*;

    #[node(goto = [explode, calm])]
    async fn before(_s: &Job) -> Step<Job> {
        goto!([explode, calm], Job::update().log(vec!["before".into()]))
    }

    #[node(goto = [END], retry(attempts = 3, base = 1ms, max_delay = 1ms))]
    async fn explode(s: &Job) -> Step<Job> {
        if s.result.is_none() {
            panic!("boom: invariant {} broken", 42);
        }
        goto!(END)
    }

    #[node(goto = [END])]
    async fn calm(_s: &Job) -> Step<Job> {
        goto!(END, Job::update().log(vec!["calm".into()]))
    }
}

#[tokio::test]
async fn panicking_node_fails_the_run_without_crashing() {
    let graph = panics::graph();
    let mut starts = 0;
    let run = graph
        .app()
        .runner(&())
        .on_event(|e| {
            if matches!(e, Event::NodeStarted { node: "explode", .. }) {
                starts += 1;
            }
        })
        .run(Job::default())
        .await
        .expect("valid config");
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("expected Failed, got {:?}", run.outcome);
    };
    assert_eq!(node, "explode");
    assert_eq!(error.class, ErrorClass::Fatal, "a panic is never retried");
    assert!(error.message.contains("boom: invariant 42 broken"), "{error}");
    assert_eq!(starts, 1);
    // The failed step merged nothing, not even the sibling's write.
    assert_eq!(run.steps, 1);
    assert_eq!(run.state.log, ["before"]);

    // The runtime is still usable afterwards.
    let again = graph.run(Job { result: Some("armed".into()), ..Job::default() }, &()).await.expect("valid config");
    assert_eq!(again.outcome, Outcome::Completed);
    assert_eq!(again.state.log, ["before", "calm"]);
}

// ---------------------------------------------------------------------------
// Run-time write guards: updates built where `#[graph]` cannot see them.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Guard {
    owner: String,
    secret: String,
    #[reduce(append)]
    log: Vec<String>,
}

#[graph(state = Guard, start = sneaky)]
mod outside_writes {
    use super::*;

    #[node(goto = [END], writes = [owner, log])]
    async fn sneaky(_s: &Guard) -> Step<Guard> {
        // Built away from the `goto!`, so the macro's `writes` check misses `secret`.
        let u = Guard::update();
        let u = u.owner("me".into()).secret("leaked".into());
        goto!(END, u)
    }
}

#[tokio::test]
async fn write_outside_the_writes_list_fails_naming_the_field() {
    let graph = outside_writes::graph();
    let mut failed = None;
    let input = Guard { owner: "root".into(), ..Guard::default() };
    let run = graph
        .app()
        .runner(&())
        .on_event(|e| {
            if let Event::NodeFailed { node, error, .. } = e {
                failed = Some((node, error));
            }
        })
        .run(input.clone())
        .await
        .expect("valid config");
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("expected Failed, got {:?}", run.outcome);
    };
    assert_eq!(node, "sneaky");
    assert_eq!(error.class, ErrorClass::Fatal);
    assert!(error.message.contains("`secret`"), "{error}");
    assert!(error.message.contains("writes"), "{error}");
    assert!(!error.message.contains("`owner`"), "only the offending field is named as set: {error}");
    // Nothing of the update was merged, not even the allowed field.
    assert_eq!(run.state, input);
    assert_eq!(run.steps, 0);
    assert_eq!(failed.map(|(n, _)| n), Some("sneaky"));
}

#[graph(state = Guard, start = split)]
mod clash {
    use super::*;

    #[node(goto = [left, right])]
    async fn split(_s: &Guard) -> Step<Guard> {
        goto!([left, right], Guard::update().log(vec!["split".into()]))
    }

    #[node(goto = [END])]
    async fn left(_s: &Guard) -> Step<Guard> {
        let u = Guard::update();
        goto!(END, u.owner("left".into()).log(vec!["left".into()]))
    }

    #[node(goto = [END])]
    async fn right(_s: &Guard) -> Step<Guard> {
        let u = Guard::update();
        goto!(END, u.owner("right".into()).log(vec!["right".into()]))
    }
}

#[tokio::test]
async fn two_branches_overwriting_one_plain_field_fail() {
    let graph = clash::graph();
    let run = graph.run(Guard::default(), &()).await.expect("valid config");
    let Outcome::Failed { node, error } = &run.outcome else {
        panic!("expected Failed, got {:?}", run.outcome);
    };
    assert_eq!(node, "right", "the later node of the clash is blamed");
    assert_eq!(error.class, ErrorClass::Fatal);
    assert!(error.message.contains("`owner`"), "{error}");
    assert!(error.message.contains("left"), "{error}");
    assert!(error.message.contains("right"), "{error}");
    assert!(!error.message.contains("`log`"), "log has a reducer: {error}");
    // The clashing step merged nothing: no branch wins silently.
    assert_eq!(run.steps, 1);
    assert_eq!(run.state.owner, "");
    assert_eq!(run.state.log, ["split"]);
}

// ---------------------------------------------------------------------------
// Hand-built graphs (`CompiledGraph::from_spec` skips the macro's checks):
// its doc promises "the executor still refuses illegal routes".

mod hand_built {
    use agentflow::__private::{GraphSpec, NodeFuture, NodeSpec};
    use agentflow::{CompiledGraph, Ctx, NodeId, Outcome, RetryPolicy};

    use super::Job;

    /// Where `n0` routes: a node id (declared or not), or `END` for `None`.
    pub struct Wrong {
        pub to: &'static [NodeId],
    }

    fn n0<'a>(_s: &'a Job, cx: &'a Ctx<'a, Wrong>) -> NodeFuture<'a, Job> {
        Box::pin(async move { Ok(agentflow::__private::route(cx.deps().to, Job::update().log(vec!["n0".into()]))) })
    }

    fn other<'a>(_s: &'a Job, cx: &'a Ctx<'a, Wrong>) -> NodeFuture<'a, Job> {
        Box::pin(async move { Ok(agentflow::__private::route(&[], Job::update().log(vec![cx.node().into()]))) })
    }

    /// `n0 -> n1 -> END`, plus `n2 -> END` that nothing routes to.
    fn graph() -> CompiledGraph<Job, Wrong> {
        let node = |name, targets, may_end, run| NodeSpec {
            name,
            targets,
            may_end,
            retry: RetryPolicy::none(),
            timeout: None,
            writes: None,
            interrupt: false,
            sleep: false,
            tools: &[],
            run,
            parallel: None,
            subgraphs: &[],
        };
        const N1: &[NodeId] = &[NodeId::new(1)];
        agentflow::__private::compile(GraphSpec {
            name: "hand_built",
            start: NodeId::new(0),
            max_steps: None,
            fingerprint: "hand-built",
            nodes: vec![
                node("n0", N1, false, n0 as _),
                node("n1", &[], true, other as _),
                node("n2", &[], true, other as _),
            ],
        })
    }

    async fn outcome(to: &'static [NodeId]) -> Outcome {
        let deps = Wrong { to };
        graph().run(Job::default(), &deps).await.expect("valid config").outcome
    }

    #[tokio::test]
    async fn a_declared_route_runs() {
        const N1: &[NodeId] = &[NodeId::new(1)];
        assert_eq!(outcome(N1).await, Outcome::Completed);
    }

    #[tokio::test]
    async fn an_undeclared_route_is_refused() {
        const N2: &[NodeId] = &[NodeId::new(2)];
        for to in [N2, &[]] {
            match outcome(to).await {
                Outcome::Failed { node, .. } => assert_eq!(node, "n0"),
                other => panic!("route {to:?}: expected Failed, got {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_route_to_a_missing_node_fails_the_run() {
        const MISSING: &[NodeId] = &[NodeId::new(99)];
        let handle = tokio::spawn(outcome(MISSING));
        match handle.await {
            Ok(Outcome::Failed { node, .. }) => assert_eq!(node, "n0"),
            Ok(other) => panic!("expected Failed, got {other:?}"),
            Err(e) => panic!("the run panicked: {e}"),
        }
    }
}
