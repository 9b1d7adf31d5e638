//! Executor integration tests: the step budget, the wall-clock deadline and
//! cancellation from outside.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use agentflow::{Budget, CancellationToken, Event, RunError};
use serde::{Deserialize, Serialize};

const GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Loop {
    #[reduce(add)]
    ticks: u32,
    #[reduce(append)]
    seen: Vec<u32>,
    last_step: u32,
}

/// Per-tick delay, when `countdown` ends, and how many node runs began.
#[derive(Default)]
pub struct LoopDeps {
    tick_ms: u64,
    end_after: u32,
    started: AtomicU32,
}

// `tick` may end, but never does: only a budget or cancellation stops it.
#[graph(state = Loop, deps = LoopDeps, start = tick, max_steps = 5)]
mod forever {
    use super::*;

    #[node(goto = [tick, END])]
    async fn tick(s: &Loop, cx: &Ctx<LoopDeps>) -> Step<Loop> {
        cx.deps().started.fetch_add(1, Ordering::SeqCst);
        if cx.deps().tick_ms > 0 {
            tokio::time::sleep(Duration::from_millis(cx.deps().tick_ms)).await;
        }
        goto!(tick, Loop::update().ticks(1).seen(vec![s.ticks]).last_step(cx.step()))
    }
}

fn loop_state_after(steps: u32) -> Loop {
    Loop { ticks: steps, seen: (0..steps).collect(), last_step: steps.saturating_sub(1) }
}

#[tokio::test]
async fn graph_max_steps_bounds_an_infinite_loop() {
    let graph = forever::graph();
    assert_eq!(graph.max_steps(), 5);
    let deps = LoopDeps::default();
    let mut finished = None;
    let run = tokio::time::timeout(
        GUARD,
        graph
            .app()
            .runner(&deps)
            .on_event(|e| {
                if let Event::Finished { outcome, steps } = e {
                    finished = Some((outcome, steps));
                }
            })
            .run(Loop::default()),
    )
    .await
    .expect("no hang")
    .expect("valid config");
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Steps });
    assert!(!run.outcome.is_completed());
    assert_eq!(run.steps, 5);
    // The state of the last finished step: five ticks, no sixth started.
    assert_eq!(run.state, loop_state_after(5));
    assert_eq!(deps.started.load(Ordering::SeqCst), 5);
    assert_eq!(finished, Some((Outcome::BudgetExhausted { which: Budget::Steps }, 5)));
}

#[tokio::test]
async fn runner_max_steps_lowers_the_bound() {
    let graph = forever::graph();
    for n in [1, 2, 3, 4] {
        let deps = LoopDeps::default();
        let run = graph.app().runner(&deps).max_steps(n).run(Loop::default()).await.expect("valid config");
        assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Steps });
        assert_eq!(run.steps, n);
        assert_eq!(run.state, loop_state_after(n));
        assert_eq!(deps.started.load(Ordering::SeqCst), n);
    }
}

#[tokio::test]
async fn runner_max_steps_cannot_raise_the_graph_bound() {
    let graph = forever::graph();
    let deps = LoopDeps::default();
    let run = graph.app().runner(&deps).max_steps(50).run(Loop::default()).await.expect("valid config");
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Steps });
    assert_eq!(run.steps, 5, "the graph declared max_steps = 5");
}

/// `tick` ends once `deps.n` node runs are done.
#[graph(state = Loop, deps = LoopDeps, start = tick, max_steps = 4)]
mod countdown {
    use super::*;

    #[node(goto = [tick, END])]
    async fn tick(s: &Loop, cx: &Ctx<LoopDeps>) -> Step<Loop> {
        let n = cx.deps().started.fetch_add(1, Ordering::SeqCst) + 1;
        let u = Loop::update().ticks(1).seen(vec![s.ticks]).last_step(cx.step());
        if n >= cx.deps().end_after { goto!(END, u) } else { goto!(tick, u) }
    }
}

#[tokio::test]
async fn a_run_that_ends_in_its_last_allowed_step_completes() {
    let graph = countdown::graph();
    for (ticks, outcome) in
        [(3, Outcome::Completed), (4, Outcome::Completed), (5, Outcome::BudgetExhausted { which: Budget::Steps })]
    {
        let deps = LoopDeps { end_after: ticks, ..LoopDeps::default() };
        let run = graph.run(Loop::default(), &deps).await.expect("valid config");
        assert_eq!(run.outcome, outcome, "{ticks} ticks");
        let steps = ticks.min(4);
        assert_eq!(run.steps, steps, "{ticks} ticks");
        assert_eq!(run.state, loop_state_after(steps));
    }
}

/// `Duration::MAX` (how a config says "no limit") is past what the clock can represent: the run
/// gets no deadline instead of a panic.
#[tokio::test]
async fn a_timeout_too_far_ahead_for_the_clock_sets_no_deadline() {
    let deps = LoopDeps { end_after: 3, ..LoopDeps::default() };
    let run = countdown::graph().app().runner(&deps).timeout(Duration::MAX).run(Loop::default()).await.unwrap();
    assert_eq!((run.outcome, run.steps), (Outcome::Completed, 3));
}

#[tokio::test]
async fn zero_max_steps_is_an_invalid_config() {
    let graph = forever::graph();
    let deps = LoopDeps::default();
    let err =
        graph.app().runner(&deps).max_steps(0).run(Loop::default()).await.expect_err("max_steps(0) makes no sense");
    assert!(matches!(err, RunError::ZeroMaxSteps), "{err:?}");
    assert!(err.to_string().contains("max_steps"), "{err}");
    assert_eq!(deps.started.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------
// Wall-clock deadline.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Slow {
    #[reduce(append)]
    done: Vec<String>,
}

#[graph(state = Slow, start = quick)]
mod slow {
    use super::*;

    #[node(goto = [crawl])]
    async fn quick(_s: &Slow) -> Step<Slow> {
        goto!(crawl, Slow::update().done(vec!["quick".into()]))
    }

    #[node(goto = [END])]
    async fn crawl(_s: &Slow) -> Step<Slow> {
        tokio::time::sleep(Duration::from_secs(30)).await;
        goto!(END, Slow::update().done(vec!["crawl".into()]))
    }
}

#[tokio::test]
async fn deadline_ends_the_run_mid_step() {
    let graph = slow::graph();
    // `quick` must be done before the deadline (a stalled machine gets a second for it); `crawl`
    // sleeps 30 s, far past it, so only the deadline can end the run in time.
    let limit = Duration::from_secs(1);
    let began = Instant::now();
    let run = tokio::time::timeout(GUARD, graph.app().runner(&()).timeout(limit).run(Slow::default()))
        .await
        .expect("the deadline must interrupt the running step")
        .expect("valid config");
    let took = began.elapsed();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Deadline });
    assert!(took >= limit, "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // `quick` finished, `crawl` was cut off: its write is not in the state.
    assert_eq!(run.steps, 1);
    assert_eq!(run.state.done, vec!["quick"]);
}

#[tokio::test]
async fn deadline_already_past_runs_nothing() {
    let graph = slow::graph();
    let run = graph
        .app()
        .runner(&())
        .deadline(Instant::now() - Duration::from_millis(1))
        .run(Slow::default())
        .await
        .expect("valid config");
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Deadline });
    assert_eq!(run.steps, 0);
    assert_eq!(run.state, Slow::default());
}

#[tokio::test]
async fn deadline_between_steps_keeps_the_finished_steps() {
    let graph = forever::graph();
    // The first tick ends 300 ms in, leaving 1.1 s of stalls before the deadline; five ticks
    // take 1.5 s, past it, so the step budget cannot end the run first.
    let deps = LoopDeps { tick_ms: 300, ..LoopDeps::default() };
    let run = graph
        .app()
        .runner(&deps)
        .max_steps(5)
        .timeout(Duration::from_millis(1400))
        .run(Loop::default())
        .await
        .expect("valid config");
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Deadline });
    assert!(run.steps >= 1 && run.steps < 5, "steps {}", run.steps);
    assert_eq!(run.state, loop_state_after(run.steps));
}

// ---------------------------------------------------------------------------
// Cancellation.

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Spin {
    #[reduce(add)]
    ticks: u32,
}

#[derive(Default)]
pub struct SpinDeps {
    started: AtomicU32,
}

#[graph(state = Spin, deps = SpinDeps, start = spin, max_steps = 10000)]
mod spin {
    use super::*;

    #[node(goto = [spin, END])]
    async fn spin(_s: &Spin, deps: &SpinDeps) -> Step<Spin> {
        deps.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        goto!(spin, Spin::update().ticks(1))
    }
}

/// How many `spin` steps have started before the canceller cancels.
const SPIN_BEFORE_CANCEL: u32 = 3;

async fn cancel_from_another_task() {
    let graph = spin::graph();
    let deps = Arc::new(SpinDeps::default());
    let token = CancellationToken::new();
    // Cancels once the run is a few steps in (not after a fixed time, which a stalled run may not
    // have reached), and returns how many steps had started right after it cancelled.
    let canceller = {
        let token = token.clone();
        let deps = Arc::clone(&deps);
        tokio::spawn(async move {
            while deps.started.load(Ordering::SeqCst) < SPIN_BEFORE_CANCEL {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            token.cancel();
            deps.started.load(Ordering::SeqCst)
        })
    };
    let mut last_finished_step = None;
    let run = tokio::time::timeout(
        GUARD,
        graph
            .app()
            .runner(&deps)
            .cancel_token(token.clone())
            .on_event(|e| {
                if let Event::NodeFinished { step, .. } = e {
                    last_finished_step = Some(step);
                }
            })
            .run(Spin::default()),
    )
    .await
    .expect("cancellation must stop the run")
    .expect("valid config");
    let started_at_cancel = canceller.await.unwrap();
    assert!(token.is_cancelled());
    assert_eq!(run.outcome, Outcome::Cancelled);
    // The step in flight when the cancel came is stopped inside (its node dropped at its next
    // await, nothing of it merged) or had finished; at most one step can start after the cancel
    // (its start raced the cancel), none after it.
    assert!(
        run.steps + 1 >= started_at_cancel && run.steps <= started_at_cancel + 1,
        "steps {}, {started_at_cancel} started when cancelled",
        run.steps
    );
    assert!(run.steps + 1 >= SPIN_BEFORE_CANCEL, "steps {}", run.steps);
    // Every merged step is a finished one; a step that started and was stopped merged nothing.
    assert_eq!(run.state.ticks, run.steps);
    let started = deps.started.load(Ordering::SeqCst);
    assert!(started == run.steps || started == run.steps + 1, "{started} started, {} merged", run.steps);
    assert_eq!(last_finished_step, run.steps.checked_sub(1));
}

#[tokio::test]
async fn cancellation_stops_the_run_inside_its_step() {
    cancel_from_another_task().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_from_another_thread() {
    cancel_from_another_task().await;
}

#[tokio::test]
async fn cancelled_before_start_runs_nothing() {
    let graph = spin::graph();
    let deps = SpinDeps::default();
    let token = CancellationToken::new();
    token.cancel();
    let run = graph.app().runner(&deps).cancel_token(token).run(Spin { ticks: 7 }).await.expect("valid config");
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert_eq!(run.steps, 0);
    assert_eq!(run.state, Spin { ticks: 7 });
    assert_eq!(deps.started.load(Ordering::SeqCst), 0);
}

// A node waiting in a retry backoff is woken by the cancellation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Wait {
    #[reduce(add)]
    n: u32,
}

#[graph(state = Wait, deps = SpinDeps, start = warm)]
mod backoff {
    use super::*;

    #[node(goto = [stuck])]
    async fn warm(_s: &Wait) -> Step<Wait> {
        goto!(stuck, Wait::update().n(1))
    }

    #[node(goto = [END], retry(attempts = 5, base = 10s, max_delay = 10s))]
    async fn stuck(_s: &Wait, deps: &SpinDeps) -> Result<Step<Wait>, NodeError> {
        deps.started.fetch_add(1, Ordering::SeqCst);
        Err(NodeError::transient("upstream unavailable"))
    }
}

#[tokio::test]
async fn cancellation_interrupts_a_retry_backoff() {
    let graph = backoff::graph();
    let deps = SpinDeps::default();
    let token = CancellationToken::new();
    // Cancel only once `stuck` has failed and its 10 s backoff begins (not after a fixed time,
    // which a stalled run may not have reached).
    let retrying = Arc::new(tokio::sync::Notify::new());
    let t = token.clone();
    let r = Arc::clone(&retrying);
    let canceller = tokio::spawn(async move {
        r.notified().await;
        t.cancel();
    });
    let began = Instant::now();
    let run = tokio::time::timeout(
        GUARD,
        graph
            .app()
            .runner(&deps)
            .cancel_token(token)
            .on_event(|e| {
                if let Event::NodeRetrying { .. } = e {
                    retrying.notify_one();
                }
            })
            .run(Wait::default()),
    )
    .await
    .expect("cancellation must cut the 10 s backoff short")
    .expect("valid config");
    canceller.await.unwrap();
    assert!(began.elapsed() < Duration::from_secs(5));
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert_eq!(run.steps, 1);
    assert_eq!(run.state, Wait { n: 1 });
    assert_eq!(deps.started.load(Ordering::SeqCst), 1);
}

// ------------------------------------------------ a cancel and a budget in one step

#[derive(Deserialize, schemars::JsonSchema)]
pub struct PingArgs {}

/// Answers; each call counts against the thread's tool-call budget.
#[tool(risk = read)]
async fn ping(_args: PingArgs) -> Result<serde_json::Value, ToolError> {
    Ok(serde_json::json!("pong"))
}

/// The token the node cancels between its two calls.
pub struct Canceller {
    token: CancellationToken,
}

#[graph(state = Loop, deps = Canceller, start = twice)]
mod pinging {
    use super::*;

    #[node(goto = [END], tools = [ping])]
    async fn twice(_s: &Loop, cx: &Ctx<Canceller>) -> Result<Step<Loop>, NodeError> {
        cx.run_tool(ping, serde_json::json!({})).await?;
        cx.deps().token.cancel();
        cx.run_tool(ping, serde_json::json!({})).await?;
        Ok(goto!(END))
    }
}

/// A cancel comes while a step runs, and a node of that step then runs out of the thread's
/// budget: the cancel wins, as it does over a node's failure in that step. The run used to end
/// `BudgetExhausted`, leaving the thread resumable (once its limit was raised) although a cancel
/// had been asked; a worker settled the cancel request as handled with it.
#[tokio::test]
async fn a_cancel_wins_over_a_budget_that_runs_out_in_the_same_step() {
    use agentflow::persist::ThreadStatus;
    let store: Arc<dyn agentflow::Store> = Arc::new(agentflow::RedbStore::in_memory().unwrap());
    let app = pinging::graph().app().store(Arc::clone(&store));
    let deps = Canceller { token: CancellationToken::new() };
    let limits = agentflow::Limits::none().tool_calls(1);
    let run = app
        .runner(&deps)
        .thread("ping")
        .limits(limits)
        .cancel_token(deps.token.clone())
        .run(Loop::default())
        .await
        .unwrap();
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert_eq!(store.thread("ping").unwrap().unwrap().status, ThreadStatus::Cancelled);
    assert_eq!(run.usage.tool_calls, 1);
}
