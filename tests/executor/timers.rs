//! Durable timers end to end: `cx.sleep` ends the run as `Sleeping` with the
//! wake time stored and indexed; a resume before it runs nothing; the
//! scheduler wakes the thread once it is due (also after a restart, on a new
//! store instance over the same file); two schedulers over one PostgreSQL
//! store wake each thread once; an approval's expiry wakes its thread and
//! the node routes on the `APPROVAL_EXPIRED` observation.
//!
//! No timing is asserted: the tests wait for outcomes (wake-ups reported by
//! the scheduler) and compare wake times with the clock the timers use.

use crate::support::pg;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::stores::open_redb;
use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use agentflow::timer::{SchedulerConfig, now_ms};
use agentflow::tool::Code;
use agentflow::{App, PendingKind, RedbStore, Store};
use agentflow_store::{PostgresStore, ThreadStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Nap {
    /// When the node's `sleep` returned (unix ms).
    woke_at: Option<u64>,
    done: bool,
}

/// What the nodes did, per thread.
#[derive(Default)]
struct Log {
    /// Runs of `nap` (each start of the node body).
    naps: Mutex<BTreeMap<String, u32>>,
    /// Runs of the journaled effect before the sleep.
    effects: AtomicU32,
    sleep_ms: AtomicU64,
}

impl Log {
    fn naps(&self, thread: &str) -> u32 {
        self.naps.lock().unwrap().get(thread).copied().unwrap_or(0)
    }
}

#[graph(state = Nap, deps = Log, start = nap)]
mod napping {
    use super::*;

    #[node(goto = [finish], sleep)]
    async fn nap(_s: &Nap, cx: &Ctx<Log>) -> Result<Step<Nap>, NodeError> {
        let log = cx.deps();
        *log.naps.lock().unwrap().entry(cx.thread().unwrap_or("").to_string()).or_default() += 1;
        cx.effect("before", |_| async move {
            log.effects.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .await?;
        cx.sleep(Duration::from_millis(log.sleep_ms.load(Ordering::SeqCst))).await?;
        Ok(goto!(finish, Nap::update().woke_at(Some(now_ms()))))
    }

    #[node(goto = [END])]
    async fn finish(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().done(true))
    }
}

/// How long the nodes sleep when a test needs the run to end `Sleeping`: long enough that a
/// loaded machine has parked the node before its timer is due (a due timer does not pause).
const NAP_MS: u64 = 1500;

fn log(sleep_ms: u64) -> Arc<Log> {
    let log = Log::default();
    log.sleep_ms.store(sleep_ms, Ordering::SeqCst);
    Arc::new(log)
}

fn app(store: Arc<dyn Store>) -> App<Nap, Log> {
    napping::graph().app().store(store)
}

fn fast() -> SchedulerConfig {
    SchedulerConfig::default().poll(Duration::from_millis(10))
}

/// `t` in unix millis, the form the store keeps timers in.
fn ms(t: std::time::SystemTime) -> u64 {
    u64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Waits (on the wall clock the timers use) until `at` has passed.
async fn until_past(at: u64) {
    while now_ms() <= at {
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()).clamp(1, 50))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_ends_the_run_with_its_wake_time_stored_and_the_scheduler_wakes_it() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = app(Arc::clone(&store));
    let log = log(NAP_MS);
    let before = now_ms();
    let run = app.runner(&*log).thread("t-1").run(Nap::default()).await.unwrap();
    let Outcome::Sleeping { thread, until } = run.outcome.clone() else { panic!("{:?}", run.outcome) };
    let until = ms(until);
    assert_eq!(thread, "t-1");
    assert!(until >= before + NAP_MS, "wakes {until}, slept at {before}");
    assert_eq!(run.state.woke_at, None);

    // The status says it sleeps; the timer is stored and indexed; the
    // pending entry says until when.
    assert_eq!(store.thread("t-1").unwrap().unwrap().status, ThreadStatus::Sleeping);
    assert_eq!(store.thread_timer("t-1").unwrap(), Some(until));
    let due: Vec<_> = store.due_timers(u64::MAX, 10).unwrap().into_iter().map(|t| (t.thread, t.wake_at)).collect();
    assert_eq!(due, vec![("t-1".to_string(), until)]);
    let pending = app.pending("t-1").unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!((pending[0].kind, pending[0].node.as_str()), (PendingKind::Sleep, "nap"));
    assert_eq!(pending[0].payload, json!({ "until": until }));

    let scheduler = app.scheduler_with(Arc::clone(&log), fast());
    let mut woken = scheduler.subscribe();
    let w = woken.wait_for("t-1").await.unwrap();
    assert_eq!(w.result, Ok(Outcome::Completed));
    scheduler.shutdown().await;

    let state = app.state("t-1").unwrap().unwrap().state;
    assert!(state.done);
    // Woken at or after the wake time, never before.
    assert!(state.woke_at.unwrap() >= until, "woke {:?} < {until}", state.woke_at);
    // The node ran again from its start; the effect before the sleep did not.
    assert_eq!(log.naps("t-1"), 2);
    assert_eq!(log.effects.load(Ordering::SeqCst), 1);
    // The thread moved on: its timer is gone.
    assert_eq!(store.thread("t-1").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_eq!(store.thread_timer("t-1").unwrap(), None);
    assert!(store.due_timers(u64::MAX, 10).unwrap().is_empty());
}

/// `usize::MAX` concurrency (how a config says "no limit") is past what a semaphore holds: the
/// scheduler still runs and wakes the thread instead of its loop dying unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_with_unbounded_concurrency_wakes_threads() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = app(Arc::clone(&store));
    let log = log(NAP_MS);
    let run = app.runner(&*log).thread("t-1").run(Nap::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    let scheduler = app.scheduler_with(Arc::clone(&log), fast().concurrency(usize::MAX));
    let mut woken = scheduler.subscribe();
    let w = tokio::time::timeout(Duration::from_secs(20), woken.wait_for("t-1")).await.expect("woken").unwrap();
    assert_eq!(w.result, Ok(Outcome::Completed));
    scheduler.shutdown().await;
}

#[tokio::test]
async fn resuming_before_the_wake_time_runs_nothing() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = app(Arc::clone(&store));
    // Long enough that the early resumes below surely come before it.
    let log = log(60_000);
    let run = app.runner(&*log).thread("early").run(Nap::default()).await.unwrap();
    let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{:?}", run.outcome) };
    assert!(run.outcome.remaining().is_some_and(|left| left > Duration::from_secs(50)), "{}", run.outcome);

    // Too early: the same outcome, the node does not run, nothing is written.
    let history = app.history("early").unwrap().len();
    let again = app.runner(&*log).thread("early").resume().await.unwrap();
    assert_eq!(again.outcome, Outcome::Sleeping { thread: "early".into(), until });
    assert_eq!(log.naps("early"), 1);
    assert_eq!(app.history("early").unwrap().len(), history);
    assert_eq!(store.thread_timer("early").unwrap(), Some(ms(until)));
    // The scheduler's entry point does nothing either.
    assert!(app.wake("early", &log).await.unwrap().is_none());
    assert_eq!(log.naps("early"), 1);

    // A person's edit of the state keeps the thread asleep, with its timer.
    app.update_state("early", Nap::update(), "tester").unwrap();
    assert_eq!(store.thread("early").unwrap().unwrap().status, ThreadStatus::Sleeping);
    assert_eq!(store.thread_timer("early").unwrap(), Some(ms(until)));
    let again = app.runner(&*log).thread("early").resume().await.unwrap();
    assert_eq!(again.outcome, Outcome::Sleeping { thread: "early".into(), until });
    assert_eq!(log.naps("early"), 1);
    // So does raising its limits.
    app.raise_limits("early", agentflow::Limits::none().tool_calls(5), "tester").unwrap();
    assert_eq!(store.thread("early").unwrap().unwrap().status, ThreadStatus::Sleeping);
    assert_eq!(store.thread_timer("early").unwrap(), Some(ms(until)));
}

#[tokio::test]
async fn the_wake_time_is_fixed_by_the_first_call() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = app(Arc::clone(&store));
    let log = log(NAP_MS);
    let run = app.runner(&*log).thread("fixed").run(Nap::default()).await.unwrap();
    let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{:?}", run.outcome) };
    let until = ms(until);
    until_past(until).await;
    // The re-run node asks for a much longer sleep; the journaled wake time
    // (now past) is what counts, so `sleep` returns at once.
    log.sleep_ms.store(120_000, Ordering::SeqCst);
    let done = app.runner(&*log).thread("fixed").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(log.naps("fixed"), 2);
    assert!(done.state.woke_at.unwrap() >= until);
}

#[tokio::test]
async fn without_a_store_a_sleep_waits_in_memory() {
    let log = log(20);
    let before = now_ms();
    let run = napping::graph().run(Nap::default(), &*log).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.woke_at.unwrap() >= before + 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_timer_fires_once_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("agentflow-timers-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.redb");
    let _ = std::fs::remove_file(&path);
    let log = log(NAP_MS);

    // First process: the run goes to sleep; the process "stops" (store closed).
    let until = {
        let store: Arc<dyn Store> = Arc::new(open_redb(&path).unwrap());
        let run = app(store).runner(&*log).thread("r-1").run(Nap::default()).await.unwrap();
        let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{:?}", run.outcome) };
        ms(until)
    };
    until_past(until).await;

    // Second process: a new store instance on the same file; the overdue
    // timer fires as soon as a scheduler starts.
    let store: Arc<dyn Store> = Arc::new(open_redb(&path).unwrap());
    let app = app(Arc::clone(&store));
    assert_eq!(store.thread_timer("r-1").unwrap(), Some(until));
    let scheduler = app.scheduler_with(Arc::clone(&log), fast());
    let mut woken = scheduler.subscribe();
    assert_eq!(woken.wait_for("r-1").await.unwrap().result, Ok(Outcome::Completed));
    scheduler.shutdown().await;
    assert_eq!(log.naps("r-1"), 2);

    // Once: no timer is left to fire, a second scheduler's entry point finds
    // nothing to do, and the node did not run again.
    assert!(store.due_timers(u64::MAX, 10).unwrap().is_empty());
    assert!(app.wake("r-1", &log).await.unwrap().is_none());
    assert_eq!(log.naps("r-1"), 2);
    assert_eq!(log.effects.load(Ordering::SeqCst), 1);
    drop(app);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_on_one_postgres_store_wake_each_thread_once() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("timers_race_{}_{}", std::process::id(), now_ms());
    // Two store instances, each with its own pool: as two processes would.
    let open = || -> Arc<dyn Store> { Arc::new(PostgresStore::builder().schema(&schema).open(&url).unwrap()) };
    let (first, second) = (app(open()), app(open()));
    let log = log(NAP_MS);
    let threads: Vec<String> = (0..12).map(|i| format!("pg-{i}")).collect();
    for t in &threads {
        let run = first.runner(&*log).thread(t).run(Nap::default()).await.unwrap();
        assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{:?}", run.outcome);
    }

    let a = first.scheduler_with(Arc::clone(&log), fast());
    let b = second.scheduler_with(Arc::clone(&log), fast());
    let (mut wa, mut wb) = (a.subscribe(), b.subscribe());
    let mut completed = Vec::new();
    let mut left: HashSet<&String> = threads.iter().collect();
    while !left.is_empty() {
        let w = tokio::select! {
            w = wa.next() => w.unwrap(),
            w = wb.next() => w.unwrap(),
        };
        assert_eq!(w.result, Ok(Outcome::Completed), "{}", w.thread);
        assert!(left.remove(&w.thread), "{} was woken twice", w.thread);
        completed.push(w.thread);
    }
    a.shutdown().await;
    b.shutdown().await;
    for t in &threads {
        // One first run and one wake-up each.
        assert_eq!(log.naps(t), 2, "{t}");
        assert!(first.state(t).unwrap().unwrap().state.done);
    }
    assert_eq!(log.effects.load(Ordering::SeqCst), threads.len() as u32);
    assert!(first.backing_store().unwrap().due_timers(u64::MAX, 100).unwrap().is_empty());
}

// ------------------------------------------------------------ approvals

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Refund {
    order: String,
    receipt: Option<Value>,
    escalated_to: Option<String>,
}

static REFUNDS: AtomicU32 = AtomicU32::new(0);

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    order_id: String,
}

/// Refunds an order. Irreversible, so the default policy asks a human first.
#[tool(risk = irreversible)]
async fn issue_refund(args: RefundArgs) -> Result<Value, ToolError> {
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "refunded": args.order_id }))
}

#[graph(state = Refund, start = refund)]
mod refunding {
    use super::*;

    /// Asks for the refund; when nobody decided in time, escalates.
    #[node(goto = [escalate, END], tools = [issue_refund])]
    async fn refund(s: &Refund, cx: &Ctx<()>) -> Result<Step<Refund>, NodeError> {
        let obs = cx.run_tool(issue_refund, json!({ "order_id": s.order })).await?;
        if obs.code() == Some(Code::ApprovalExpired) {
            return Ok(goto!(escalate));
        }
        Ok(goto!(END, Refund::update().receipt(Some(obs.body))))
    }

    #[node(goto = [END])]
    async fn escalate(_s: &Refund) -> Step<Refund> {
        goto!(END, Refund::update().escalated_to(Some("on-call manager".to_string())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_that_expires_wakes_its_thread_and_the_node_routes_on_it() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = refunding::graph().app().store(Arc::clone(&store)).approval_ttl(Duration::from_millis(150));
    let input = Refund { order: "A-1".into(), ..Refund::default() };
    let run = app.runner(&()).thread("a-1").owner("support-bot").run(input).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    let expires_at = pending[0].payload["expires_at"].as_u64().unwrap();
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    // Still a thread waiting for a person, with a timer at the expiry.
    assert_eq!(store.thread("a-1").unwrap().unwrap().status, ThreadStatus::Interrupted);
    assert_eq!(store.thread_timer("a-1").unwrap(), Some(expires_at));

    // Nobody decides: at the expiry the scheduler resumes the thread, the
    // call resolves as APPROVAL_EXPIRED, and the node escalates.
    let scheduler = app.scheduler_with(Arc::new(()), fast());
    let mut woken = scheduler.subscribe();
    assert_eq!(woken.wait_for("a-1").await.unwrap().result, Ok(Outcome::Completed));
    scheduler.shutdown().await;
    let state = app.state("a-1").unwrap().unwrap().state;
    assert_eq!(state.escalated_to.as_deref(), Some("on-call manager"));
    assert_eq!(state.receipt, None);
    assert_eq!(store.approval(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    assert!(now_ms() >= expires_at);
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
    assert_eq!(store.thread_timer("a-1").unwrap(), None);
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ask {
    answer: Option<String>,
}

#[graph(state = Ask, start = ask)]
mod asking {
    use super::*;
    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Ask, cx: &Ctx<()>) -> Result<Step<Ask>, NodeError> {
        let answer: String = cx.interrupt("which order?")?;
        Ok(goto!(END, Ask::update().answer(Some(answer))))
    }
}

#[tokio::test]
async fn a_pause_for_a_value_gets_no_timer() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = asking::graph().app().store(Arc::clone(&store));
    let run = app.runner(&()).thread("q-1").run(Ask::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }));
    assert_eq!(store.thread_timer("q-1").unwrap(), None);
    assert!(app.wake("q-1", &()).await.unwrap().is_none());
}

/// The wall-clock time `cx.sleep_until` names.
#[derive(Default)]
struct Alarm {
    at: AtomicU64,
    runs: AtomicU32,
}

#[graph(state = Nap, deps = Alarm, start = wait)]
mod alarm {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn wait(_s: &Nap, cx: &Ctx<Alarm>) -> Result<Step<Nap>, NodeError> {
        cx.deps().runs.fetch_add(1, Ordering::SeqCst);
        let at = std::time::UNIX_EPOCH + Duration::from_millis(cx.deps().at.load(Ordering::SeqCst));
        cx.sleep_until(at).await?;
        Ok(goto!(END, Nap::update().woke_at(Some(now_ms())).done(true)))
    }
}

/// `cx.sleep_until(t)` sleeps until exactly `t`: the run ends `Sleeping { until: t }`, the timer
/// stored is `t`, a resume before it runs nothing and does not move it, and the first resume
/// past it runs on. A time in the past returns at once.
#[tokio::test]
async fn sleep_until_sleeps_until_the_time_it_names() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = alarm::graph().app().store(Arc::clone(&store));
    let deps = Alarm::default();
    let at = now_ms() + NAP_MS;
    deps.at.store(at, Ordering::SeqCst);
    let run = app.runner(&deps).thread("alarm").run(Nap::default()).await.unwrap();
    assert_eq!(
        run.outcome,
        Outcome::Sleeping { thread: "alarm".into(), until: std::time::UNIX_EPOCH + Duration::from_millis(at) }
    );
    assert_eq!(store.thread_timer("alarm").unwrap(), Some(at));

    let early = app.runner(&deps).thread("alarm").resume().await.unwrap();
    assert_eq!(
        early.outcome,
        Outcome::Sleeping { thread: "alarm".into(), until: std::time::UNIX_EPOCH + Duration::from_millis(at) }
    );
    assert_eq!(deps.runs.load(Ordering::SeqCst), 1, "nothing ran before the time");
    assert_eq!(store.thread_timer("alarm").unwrap(), Some(at), "not moved");

    until_past(at).await;
    let done = app.runner(&deps).thread("alarm").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(done.state.woke_at.is_some_and(|woke| woke >= at));

    // Already past: no sleep at all.
    deps.at.store(now_ms().saturating_sub(10_000), Ordering::SeqCst);
    let run = app.runner(&deps).thread("past").run(Nap::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
}
