//! Circuit breakers end to end, through the gateway: a failing local tool
//! and a failing local HTTP endpoint (a 127.0.0.1 server answering 500s,
//! called through reqwest).
//!
//! What is proved: N consecutive failures open the breaker; while it is open
//! the tool's body does not run (counted in the tool and, for HTTP, on the
//! server); the breaker is shared by every thread of the store; after the
//! cool-down one probe runs, its success closes the breaker and its failure
//! opens it again; while a probe is in flight other calls are refused; with
//! the `Wait` policy the run sleeps on a durable timer until the breaker
//! half-opens and the scheduler then completes it; a call cut off by the
//! node's timeout counts as a failure; every change of state is an event
//! and an audit entry of the thread whose call caused it; on PostgreSQL two
//! store instances (as two processes) share one breaker.
//!
//! No timing is asserted. The only waits on the clock are until the
//! cool-down end the store reports (`open_until`), which the breaker's own
//! rule compares with.

use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::time::Duration;

use agentflow::breaker::{Breaker, BreakerConfigError, BreakerState, OnOpen};
use agentflow::prelude::*;
use agentflow::timer::{SchedulerConfig, now_ms};
use agentflow::{Activity, App, ErrorClass, Event, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// The service the tools call, and what they did.
#[derive(Default)]
struct Upstream {
    /// Runs of `check_upstream`'s body.
    runs: AtomicU32,
    /// Whether `check_upstream` fails.
    failing: AtomicBool,
    /// While set, `check_upstream` waits for `release` (a call in flight).
    hold: AtomicBool,
    started: Notify,
    release: Notify,
    /// The HTTP endpoint `http_health` calls.
    url: String,
    client: reqwest::Client,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Service {
    name: String,
}

/// Checks whether an upstream service is healthy.
#[tool(risk = read)]
async fn check_upstream(args: Service, cx: &ToolCx<Upstream>) -> Result<String, ToolError> {
    let up = cx.deps();
    up.runs.fetch_add(1, Ordering::SeqCst);
    if up.hold.load(Ordering::SeqCst) {
        up.started.notify_one();
        up.release.notified().await;
    }
    if up.failing.load(Ordering::SeqCst) {
        return Err(ToolError::Transient(format!("{} answered 503", args.name)));
    }
    Ok(format!("{} is healthy", args.name))
}

/// Asks the service's HTTP health endpoint.
#[tool(risk = read)]
async fn http_health(args: Service, cx: &ToolCx<Upstream>) -> Result<String, ToolError> {
    let up = cx.deps();
    let response = up
        .client
        .get(format!("{}/health/{}", up.url, args.name))
        .send()
        .await
        .map_err(|e| ToolError::Transient(format!("request failed: {e}")))?;
    let status = response.status();
    if !status.is_success() {
        return Err(ToolError::Transient(format!("{} answered {status}", args.name)));
    }
    response.text().await.map_err(|e| ToolError::Transient(format!("reading the body: {e}")))
}

/// Checks an upstream that never answers (the node's timeout cuts it off).
#[tool(risk = read)]
async fn hang_upstream(_args: Service, cx: &ToolCx<Upstream>) -> Result<String, ToolError> {
    cx.deps().runs.fetch_add(1, Ordering::SeqCst);
    std::future::pending().await
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Check {
    /// Call `http_health` instead of `check_upstream`.
    http: bool,
    /// `ok`, the refusal code, or `error` (the tool failed).
    outcome: Option<String>,
}

#[graph(state = Check, deps = Upstream, start = check)]
mod checking {
    use super::*;

    #[node(goto = [END], tools = [check_upstream, http_health])]
    async fn check(s: &Check, cx: &Ctx<Upstream>) -> Result<Step<Check>, NodeError> {
        let args = json!({ "name": "payments" });
        let called =
            if s.http { cx.run_tool(http_health, args).await } else { cx.run_tool(check_upstream, args).await };
        let outcome = match called {
            Ok(obs) => match obs.code() {
                None => "ok".to_string(),
                Some(code) => serde_json::to_value(code).unwrap().as_str().unwrap().to_string(),
            },
            // A durable wait (the `Wait` policy) ends the run here.
            Err(e) if e.class == ErrorClass::NeedsInput => return Err(e),
            // The tool failed: recorded, so each run makes exactly one call.
            Err(_) => "error".to_string(),
        };
        Ok(goto!(END, Check::update().outcome(Some(outcome))))
    }
}

/// Long enough that the runs made while the breaker is open end before it
/// half-opens, even on a loaded machine; the tests wait for it once or twice.
const COOL_DOWN: Duration = Duration::from_secs(2);

#[graph(state = Check, deps = Upstream, start = check)]
mod hanging {
    use super::*;

    #[node(goto = [END], tools = [hang_upstream], timeout = 30ms, retry(attempts = 1))]
    async fn check(_s: &Check, cx: &Ctx<Upstream>) -> Result<Step<Check>, NodeError> {
        let obs = cx.run_tool(hang_upstream, json!({ "name": "payments" })).await?;
        let code = obs.code().map(|c| serde_json::to_value(c).unwrap().as_str().unwrap().to_string());
        Ok(goto!(END, Check::update().outcome(Some(code.unwrap_or_else(|| "ok".into())))))
    }
}

/// Restarts a service (external: the default policy asks a human first).
#[tool(risk = external, idempotent)]
async fn restart_service(args: Service, cx: &ToolCx<Upstream>) -> Result<String, ToolError> {
    cx.deps().runs.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{} restarted", args.name))
}

#[graph(state = Check, deps = Upstream, start = fix)]
mod fixing {
    use super::*;

    #[node(goto = [END], tools = [restart_service])]
    async fn fix(_s: &Check, cx: &Ctx<Upstream>) -> Result<Step<Check>, NodeError> {
        let obs = cx.run_tool(restart_service, json!({ "name": "payments" })).await?;
        let code = obs.code().map(|c| serde_json::to_value(c).unwrap().as_str().unwrap().to_string());
        Ok(goto!(END, Check::update().outcome(Some(code.unwrap_or_else(|| "ok".into())))))
    }
}

fn guarded(store: &Arc<dyn Store>, tool: &str, breaker: Breaker) -> App<Check, Upstream> {
    checking::graph().app().store(Arc::clone(store)).circuit_breaker(tool, breaker).expect("the graph lists the tool")
}

fn memory() -> Arc<dyn Store> {
    Arc::new(RedbStore::in_memory().expect("in-memory store"))
}

/// Runs thread `thread` once; its outcome and the breaker events it emitted.
async fn check(app: &App<Check, Upstream>, up: &Upstream, thread: &str, http: bool) -> (String, Vec<Activity>) {
    let mut moves = Vec::new();
    let run = app
        .runner(up)
        .thread(thread)
        .on_event(|e: Event<Check>| {
            if let Event::Activity(a @ Activity::CircuitBreaker { .. }) = e {
                moves.push(a);
            }
        })
        .run(Check { http, outcome: None })
        .await
        .expect("the run ends");
    assert_eq!(run.outcome, Outcome::Completed, "{thread}");
    (run.state.outcome.expect("the node recorded an outcome"), moves)
}

fn breaker_kinds(app: &App<Check, Upstream>, thread: &str) -> Vec<String> {
    app.audit_log(thread).unwrap().into_iter().filter(|e| e.kind.starts_with("breaker.")).map(|e| e.kind).collect()
}

/// Waits until the store's breaker of `tool` lets a probe through (the end of its cool-down).
async fn until_cool_down_ends(store: &Arc<dyn Store>, tool: &str) {
    let record = store.breaker(tool).unwrap().expect("the breaker moved");
    assert_eq!(record.state, BreakerState::Open);
    let left = record.open_until.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(left + 1)).await;
}

fn moved(from: BreakerState, to: BreakerState) -> impl Fn(&Activity) -> bool {
    move |a| matches!(a, Activity::CircuitBreaker { from: f, to: t, .. } if *f == from && *t == to)
}

#[tokio::test]
async fn failures_open_the_breaker_for_every_thread_and_one_probe_closes_it() {
    let store = memory();
    let up = Upstream::default();
    up.failing.store(true, Ordering::SeqCst);
    let app = guarded(&store, "check_upstream", Breaker::after(3).cool_down(COOL_DOWN));

    // Three threads fail once each: the third failure opens the breaker.
    for (i, thread) in ["a-1", "a-2", "a-3"].into_iter().enumerate() {
        let (outcome, moves) = check(&app, &up, thread, false).await;
        assert_eq!(outcome, "error");
        assert_eq!(up.runs.load(Ordering::SeqCst), i as u32 + 1);
        if i < 2 {
            assert!(moves.is_empty(), "{moves:?}");
        } else {
            assert_eq!(moves.len(), 1, "{moves:?}");
            assert!(moved(BreakerState::Closed, BreakerState::Open)(&moves[0]), "{moves:?}");
        }
    }
    assert_eq!(breaker_kinds(&app, "a-3"), ["breaker.open"]);
    let record = store.breaker("check_upstream").unwrap().unwrap();
    assert_eq!((record.state, record.failures), (BreakerState::Open, 3));

    // Another thread (and another App over the same store) is refused: the tool does not run.
    let other = guarded(&store, "check_upstream", Breaker::after(3).cool_down(COOL_DOWN));
    for thread in ["b-1", "b-2"] {
        let (outcome, _) = check(&other, &up, thread, false).await;
        assert_eq!(outcome, "CIRCUIT_OPEN");
    }
    assert_eq!(up.runs.load(Ordering::SeqCst), 3, "an open breaker does not run the tool");

    // After the cool-down one probe runs; it succeeds and closes the breaker.
    up.failing.store(false, Ordering::SeqCst);
    until_cool_down_ends(&store, "check_upstream").await;
    let (outcome, moves) = check(&app, &up, "c-1", false).await;
    assert_eq!(outcome, "ok");
    assert_eq!(up.runs.load(Ordering::SeqCst), 4);
    assert_eq!(moves.len(), 2, "{moves:?}");
    assert!(moved(BreakerState::Open, BreakerState::HalfOpen)(&moves[0]));
    assert!(moved(BreakerState::HalfOpen, BreakerState::Closed)(&moves[1]));
    assert_eq!(breaker_kinds(&app, "c-1"), ["breaker.half_open", "breaker.closed"]);
    let record = store.breaker("check_upstream").unwrap().unwrap();
    assert_eq!((record.state, record.failures), (BreakerState::Closed, 0));

    // Closed again: calls run.
    let (outcome, _) = check(&app, &up, "c-2", false).await;
    assert_eq!(outcome, "ok");
    assert_eq!(up.runs.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_failed_probe_opens_the_breaker_again() {
    let store = memory();
    let up = Upstream::default();
    up.failing.store(true, Ordering::SeqCst);
    let app = guarded(&store, "check_upstream", Breaker::after(2).cool_down(COOL_DOWN));
    for thread in ["a-1", "a-2"] {
        assert_eq!(check(&app, &up, thread, false).await.0, "error");
    }
    until_cool_down_ends(&store, "check_upstream").await;
    let (outcome, moves) = check(&app, &up, "probe", false).await;
    assert_eq!(outcome, "error");
    assert_eq!(up.runs.load(Ordering::SeqCst), 3, "the probe ran");
    assert!(moved(BreakerState::HalfOpen, BreakerState::Open)(&moves[1]), "{moves:?}");
    assert_eq!(breaker_kinds(&app, "probe"), ["breaker.half_open", "breaker.open"]);
    assert_eq!(check(&app, &up, "after", false).await.0, "CIRCUIT_OPEN");
    assert_eq!(up.runs.load(Ordering::SeqCst), 3, "open again: the tool does not run");
}

#[tokio::test]
async fn while_the_probe_is_in_flight_other_calls_are_refused() {
    let store = memory();
    let up = Upstream::default();
    up.failing.store(true, Ordering::SeqCst);
    let app = guarded(&store, "check_upstream", Breaker::after(1).cool_down(Duration::from_millis(50)));
    assert_eq!(check(&app, &up, "a-1", false).await.0, "error");
    up.failing.store(false, Ordering::SeqCst);
    until_cool_down_ends(&store, "check_upstream").await;

    // The probe's call waits inside the tool until released.
    up.hold.store(true, Ordering::SeqCst);
    let probe = check(&app, &up, "probe", false);
    let others = async {
        up.started.notified().await;
        up.hold.store(false, Ordering::SeqCst);
        let mut outcomes = Vec::new();
        for thread in ["b-1", "b-2", "b-3"] {
            outcomes.push(check(&app, &up, thread, false).await.0);
        }
        let record = store.breaker("check_upstream").unwrap().unwrap();
        up.release.notify_one();
        (outcomes, record)
    };
    let ((probed, _), (outcomes, during)) = tokio::join!(probe, others);
    assert_eq!(during.state, BreakerState::HalfOpen);
    assert_eq!(outcomes, ["CIRCUIT_OPEN"; 3]);
    assert_eq!(probed, "ok");
    assert_eq!(up.runs.load(Ordering::SeqCst), 2, "only the probe ran after the cool-down");
    assert_eq!(store.breaker("check_upstream").unwrap().unwrap().state, BreakerState::Closed);
}

#[tokio::test]
async fn with_the_wait_policy_a_run_sleeps_until_half_open_and_the_scheduler_completes_it() {
    let store = memory();
    let up = Arc::new(Upstream::default());
    up.failing.store(true, Ordering::SeqCst);
    let breaker = Breaker::after(2).cool_down(COOL_DOWN).on_open(OnOpen::Wait);
    let app = guarded(&store, "check_upstream", breaker);
    for thread in ["a-1", "a-2"] {
        assert_eq!(check(&app, &up, thread, false).await.0, "error");
    }
    let open_until = store.breaker("check_upstream").unwrap().unwrap().open_until;
    up.failing.store(false, Ordering::SeqCst);

    // Refused: the run sleeps on a durable timer until the cool-down ends; the tool did not run.
    let run = app.runner(&*up).thread("w").run(Check::default()).await.unwrap();
    let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(until, std::time::UNIX_EPOCH + Duration::from_millis(open_until));
    assert_eq!(store.thread_timer("w").unwrap(), Some(open_until));
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);

    // The scheduler resumes it when due; the call is the probe, it succeeds, the run completes.
    let scheduler = app.scheduler_with(Arc::clone(&up), SchedulerConfig::default().poll(Duration::from_millis(10)));
    let woken = scheduler.subscribe().wait_for("w").await.expect("the scheduler runs");
    scheduler.shutdown().await;
    assert_eq!(woken.result, Ok(Outcome::Completed));
    assert!(now_ms() >= open_until);
    assert_eq!(app.state("w").unwrap().unwrap().state.outcome.as_deref(), Some("ok"));
    assert_eq!(up.runs.load(Ordering::SeqCst), 3);
    assert_eq!(store.breaker("check_upstream").unwrap().unwrap().state, BreakerState::Closed);
    assert_eq!(breaker_kinds(&app, "w"), ["breaker.half_open", "breaker.closed"]);
}

/// A 127.0.0.1 HTTP server answering every request with `status`; counts the requests.
struct Server {
    url: String,
    requests: Arc<AtomicU32>,
    status: Arc<AtomicU16>,
}

async fn serve() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicU32::new(0));
    let status = Arc::new(AtomicU16::new(500));
    let (count, answer) = (Arc::clone(&requests), Arc::clone(&status));
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let (count, answer) = (Arc::clone(&count), Arc::clone(&answer));
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, Ordering::SeqCst);
                let status = answer.load(Ordering::SeqCst);
                let body = if status == 200 { "healthy" } else { "upstream timed out" };
                let response =
                    format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    Server { url, requests, status }
}

#[tokio::test]
async fn an_http_endpoint_answering_500_opens_the_breaker_and_sees_no_request_while_it_is_open() {
    let server = serve().await;
    let store = memory();
    // No proxy: the server is on this machine.
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let up = Upstream { url: server.url.clone(), client, ..Upstream::default() };
    let app = guarded(&store, "http_health", Breaker::after(3).cool_down(COOL_DOWN));

    for thread in ["a-1", "a-2", "a-3"] {
        assert_eq!(check(&app, &up, thread, true).await.0, "error");
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 3);
    assert_eq!(breaker_kinds(&app, "a-3"), ["breaker.open"]);

    // Open: the calls answer CIRCUIT_OPEN and no request reaches the server.
    for thread in ["b-1", "b-2", "b-3"] {
        assert_eq!(check(&app, &up, thread, true).await.0, "CIRCUIT_OPEN");
    }
    assert_eq!(server.requests.load(Ordering::SeqCst), 3, "no request while the breaker is open");
    // The other tool has its own breaker (none configured): it is not refused.
    assert_eq!(check(&app, &up, "local", false).await.0, "ok");

    // The endpoint recovers; after the cool-down one probe request closes the breaker.
    server.status.store(200, Ordering::SeqCst);
    until_cool_down_ends(&store, "http_health").await;
    assert_eq!(check(&app, &up, "probe", true).await.0, "ok");
    assert_eq!(server.requests.load(Ordering::SeqCst), 4);
    assert_eq!(store.breaker("http_health").unwrap().unwrap().state, BreakerState::Closed);
}

#[test]
fn a_breaker_for_a_tool_no_node_lists_is_refused_when_the_app_is_built() {
    let err = checking::graph().app().circuit_breaker("check_upstreem", Breaker::after(3)).unwrap_err();
    let BreakerConfigError::UnknownTool { tool, tools, .. } = &err else { panic!("{err:?}") };
    assert_eq!(tool, "check_upstreem");
    assert_eq!(tools, &["check_upstream", "http_health"]);
    let message = err.to_string();
    assert!(message.contains("no node of graph") && message.contains("check_upstream, http_health"), "{message}");
    // Every tool of the graph at once needs no name.
    let _app = checking::graph().app().circuit_breakers(Breaker::after(3));
}

#[tokio::test]
async fn a_call_cut_off_by_the_node_timeout_counts_as_a_failure() {
    let store = memory();
    let up = Upstream::default();
    let app = hanging::graph()
        .app()
        .store(Arc::clone(&store))
        .circuit_breaker("hang_upstream", Breaker::after(2).cool_down(COOL_DOWN))
        .unwrap();
    for thread in ["a-1", "a-2"] {
        let run = app.runner(&up).thread(thread).run(Check::default()).await;
        assert!(!matches!(&run, Ok(r) if r.outcome == Outcome::Completed), "the node timed out: {run:?}");
    }
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);
    // A call cut off mid-way is reported by a blocking task once the node is
    // dropped: wait (bounded) for the store to show it.
    let mut record = store.breaker("hang_upstream").unwrap();
    for _ in 0..2_000 {
        if record.as_ref().is_some_and(|r| r.state == BreakerState::Open) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        record = store.breaker("hang_upstream").unwrap();
    }
    let record = record.expect("the timeouts were reported");
    assert_eq!((record.state, record.failures), (BreakerState::Open, 2));
    let audit: Vec<String> = ["a-1", "a-2"].iter().flat_map(|t| breaker_kinds(&app_view(&store), t)).collect();
    assert_eq!(audit, ["breaker.open"]);

    // Open: the next call answers CIRCUIT_OPEN at once instead of waiting out the timeout.
    let run = app.runner(&up).thread("b-1").run(Check::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.outcome.as_deref(), Some("CIRCUIT_OPEN"));
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);
}

/// An App over `store` to read audit logs with.
fn app_view(store: &Arc<dyn Store>) -> App<Check, Upstream> {
    checking::graph().app().store(Arc::clone(store))
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_two_store_instances_share_the_breaker() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("breaker_{}_{}", std::process::id(), now_ms());
    // Two store instances, each with its own pool: as two processes would.
    let open = || -> Arc<dyn Store> {
        Arc::new(agentflow_store::PostgresStore::builder().schema(&schema).open(&url).unwrap())
    };
    let (first_store, second_store) = (open(), open());
    let breaker = Breaker::after(2).cool_down(COOL_DOWN);
    let (first, second) =
        (guarded(&first_store, "check_upstream", breaker), guarded(&second_store, "check_upstream", breaker));
    let up = Upstream::default();
    up.failing.store(true, Ordering::SeqCst);
    for thread in ["a-1", "a-2"] {
        assert_eq!(check(&first, &up, thread, false).await.0, "error");
    }
    assert_eq!(breaker_kinds(&first, "a-2"), ["breaker.open"]);
    // The other instance sees it open: its calls do not run the tool.
    assert_eq!(check(&second, &up, "b-1", false).await.0, "CIRCUIT_OPEN");
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);
    // After the cool-down, a probe through the other instance closes it for both.
    up.failing.store(false, Ordering::SeqCst);
    until_cool_down_ends(&second_store, "check_upstream").await;
    assert_eq!(check(&second, &up, "b-2", false).await.0, "ok");
    assert_eq!(first_store.breaker("check_upstream").unwrap().unwrap().state, BreakerState::Closed);
    assert_eq!(check(&first, &up, "a-3", false).await.0, "ok");
    assert_eq!(up.runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn an_approved_call_waits_for_the_breaker_and_runs_once_as_its_probe() {
    use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
    use agentflow_store::{BreakerOp, BreakerRule, BreakerUpdate};

    let store = memory();
    let up = Arc::new(Upstream::default());
    let breaker = Breaker::after(1).cool_down(COOL_DOWN).on_open(OnOpen::Wait);
    let app = fixing::graph().app().store(Arc::clone(&store)).circuit_breaker("restart_service", breaker).unwrap();
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::External, "sre")).unwrap();

    // The call waits for a human first.
    let run = app.runner(&*up).thread("fix").owner("agent:oncall").run(Check::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();

    // Meanwhile another process saw the service fail: the breaker is open.
    let rule = BreakerRule::new(1, 1_500, 60_000);
    let fail = BreakerUpdate::new("restart_service", BreakerOp::Failed, "elsewhere", rule, now_ms(), "other", "test");
    let open_until = store.update_breaker(fail).unwrap().record.open_until;

    // Approved, the call does not run while the breaker is open: the run
    // sleeps until it half-opens, and the approval is left unused.
    desk.approve(&id, &Approver::new("alice", ["sre"])).unwrap();
    let run = app.runner(&*up).thread("fix").resume().await.unwrap();
    let open_until = std::time::UNIX_EPOCH + Duration::from_millis(open_until);
    assert!(matches!(run.outcome, Outcome::Sleeping { until, .. } if until == open_until), "{:?}", run.outcome);
    assert_eq!(up.runs.load(Ordering::SeqCst), 0);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Approved);

    // Woken after the cool-down, the approved call is the probe: it runs once and closes the breaker.
    let scheduler = app.scheduler_with(Arc::clone(&up), SchedulerConfig::default().poll(Duration::from_millis(10)));
    let woken = scheduler.subscribe().wait_for("fix").await.expect("the scheduler runs");
    scheduler.shutdown().await;
    assert_eq!(woken.result, Ok(Outcome::Completed));
    assert_eq!(up.runs.load(Ordering::SeqCst), 1);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    assert_eq!(store.breaker("restart_service").unwrap().unwrap().state, BreakerState::Closed);
    assert_eq!(app.state("fix").unwrap().unwrap().state.outcome.as_deref(), Some("ok"));
}

#[graph(state = Check, deps = Upstream, start = check)]
mod observing {
    use super::*;

    /// Keeps the whole observation of the call, as a model would read it.
    #[node(goto = [END], tools = [check_upstream])]
    async fn check(_s: &Check, cx: &Ctx<Upstream>) -> Result<Step<Check>, NodeError> {
        let obs = cx.run_tool(check_upstream, json!({ "name": "payments" })).await?;
        Ok(goto!(END, Check::update().outcome(Some(obs.body.to_string()))))
    }
}

/// README: "with `OnOpen::Observe` the call answers an observation with code `CIRCUIT_OPEN`
/// and `retry_at`": the end of the cool-down the store holds.
#[tokio::test]
async fn a_circuit_open_observation_says_when_to_try_again() {
    use agentflow_store::{BreakerOp, BreakerRule, BreakerUpdate};
    let store = memory();
    let up = Upstream::default();
    let app = observing::graph()
        .app()
        .store(Arc::clone(&store))
        .circuit_breaker("check_upstream", Breaker::after(1).cool_down(COOL_DOWN))
        .unwrap();
    let rule = BreakerRule::new(1, 1_500, 60_000);
    let fail = BreakerUpdate::new("check_upstream", BreakerOp::Failed, "elsewhere", rule, now_ms(), "other", "test");
    let open_until = store.update_breaker(fail).unwrap().record.open_until;
    let run = app.runner(&up).thread("observed").run(Check::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let body: serde_json::Value = serde_json::from_str(run.state.outcome.as_deref().unwrap()).unwrap();
    assert_eq!(body["code"], "CIRCUIT_OPEN", "{body}");
    assert_eq!(body["retry_at"], open_until, "{body}");
    assert_eq!(up.runs.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------- replays and invalid calls

/// What `replayed` shares: the store (to open the breaker from the node) and the tool's runs.
pub struct Flips {
    store: Arc<dyn Store>,
    runs: AtomicU32,
    attempts: AtomicU32,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Flip {
    switch: String,
}

/// Flips a switch. Reversible: journaled.
#[tool(risk = reversible)]
async fn flip_switch(args: Flip, cx: &ToolCx<Flips>) -> Result<String, ToolError> {
    let n = cx.deps().runs.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("{} flipped ({n})", args.switch))
}

#[graph(state = Check, deps = Flips, start = flip)]
mod replayed {
    use super::*;

    /// Flips the switch; the first attempt then sees the breaker open (another thread's
    /// failure) and fails, so the retry replays the call from the journal.
    #[node(goto = [END], tools = [flip_switch], retry = 2)]
    async fn flip(_s: &Check, cx: &Ctx<Flips>) -> Result<Step<Check>, NodeError> {
        let obs = cx.run_tool(flip_switch, json!({ "switch": "main" })).await?;
        let deps = cx.deps();
        if deps.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
            use agentflow_store::{BreakerOp, BreakerRule, BreakerUpdate};
            let rule = BreakerRule::new(1, 3_600_000, 60_000);
            let fail = BreakerUpdate::new("flip_switch", BreakerOp::Failed, "other", rule, now_ms(), "b", "test");
            deps.store.update_breaker(fail).unwrap();
            return Err(NodeError::transient("after the call"));
        }
        // Invalid arguments are refused before the breaker is asked: no failure counted.
        let invalid = cx.run_tool(flip_switch, json!({ "lever": 1 })).await?;
        assert_eq!(invalid.code(), Some(agentflow::tool::Code::InvalidArgument), "{:?}", invalid.body);
        Ok(goto!(END, Check::update().outcome(Some(obs.body.to_string()))))
    }
}

/// README: "invalid arguments, denials, approvals and replayed results are neither" a failure
/// nor a success for a breaker. A call replayed from the journal while the breaker is open is
/// answered with its result (not `CIRCUIT_OPEN`, which would tell the model it did not run),
/// the tool not run again and the breaker left as it was.
#[tokio::test]
async fn a_replayed_result_and_invalid_arguments_leave_the_breaker_alone() {
    let store = memory();
    let deps = Flips { store: Arc::clone(&store), runs: AtomicU32::new(0), attempts: AtomicU32::new(0) };
    let app = replayed::graph()
        .app()
        .store(Arc::clone(&store))
        .circuit_breaker("flip_switch", Breaker::after(1).cool_down(Duration::from_secs(3600)))
        .unwrap();
    let run = app.runner(&deps).thread("flip").run(Check::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
    let body: serde_json::Value = serde_json::from_str(run.state.outcome.as_deref().unwrap()).unwrap();
    assert_eq!(body["ok"], true, "the replayed call was answered otherwise: {body}");
    assert_eq!(body["result"], "main flipped (1)");
    assert_eq!(deps.runs.load(Ordering::SeqCst), 1, "the tool ran again");
    let record = store.breaker("flip_switch").unwrap().unwrap();
    assert_eq!((record.state, record.failures), (BreakerState::Open, 1), "{record:?}");
}
