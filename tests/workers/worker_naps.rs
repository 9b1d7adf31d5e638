//! The graphs the waiting-worker tests run (`Nap`: a first step that sleeps on a durable timer
//! or waits in `cx.interrupt`, some held at a gate), their stores and the helpers that start a
//! worker and wait for what it does.

use crate::support::hooked_store;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Store};
use agentflow::{Worker, WorkerError, WorkerReport};
use agentflow_store::{PostgresStore, RunWait};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub const LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Nap {
    /// Milliseconds the first step sleeps on a durable timer.
    pub sleep_ms: u64,
    /// Whether the first step waits in `cx.interrupt` instead.
    pub ask: bool,
    #[reduce(add)]
    pub steps: u64,
    pub answer: Option<String>,
}

/// The gated graph's first step waits here until the test opens the gate.
pub static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
pub static AT_GATE: AtomicBool = AtomicBool::new(false);

#[graph(state = Nap, start = first)]
pub mod naps {
    use super::*;

    #[node(goto = [second], interrupt, sleep)]
    async fn first(s: &Nap, cx: &Ctx<()>) -> Result<Step<Nap>, NodeError> {
        if s.sleep_ms > 0 {
            cx.sleep(Duration::from_millis(s.sleep_ms)).await?;
        }
        let answer = if s.ask { Some(cx.interrupt::<_, String>("name?")?) } else { None };
        Ok(goto!(second, Nap::update().steps(1).answer(answer)))
    }

    #[node(goto = [END])]
    async fn second(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().steps(1))
    }
}

#[graph(state = Nap, start = held)]
pub mod gated {
    use super::*;

    #[node(goto = [after])]
    async fn held(_s: &Nap) -> Step<Nap> {
        AT_GATE.store(true, Ordering::SeqCst);
        GATE.acquire().await.expect("the gate stays open").forget();
        goto!(after, Nap::update().steps(1))
    }

    #[node(goto = [END])]
    async fn after(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().steps(1))
    }
}

/// The gate of `gated_nap`, apart from `gated`'s: the tests run at the same time.
pub static NAP_GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
pub static AT_NAP_GATE: AtomicBool = AtomicBool::new(false);

#[graph(state = Nap, start = held)]
pub mod gated_nap {
    use super::*;

    /// Waits at the gate, then sleeps on a durable timer.
    #[node(goto = [after], sleep)]
    async fn held(s: &Nap, cx: &Ctx<()>) -> Result<Step<Nap>, NodeError> {
        AT_NAP_GATE.store(true, Ordering::SeqCst);
        NAP_GATE.acquire().await.expect("the gate stays open").forget();
        cx.sleep(Duration::from_millis(s.sleep_ms)).await?;
        Ok(goto!(after, Nap::update().steps(1)))
    }

    #[node(goto = [END])]
    async fn after(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().steps(1))
    }
}

pub fn postgres(url: &str, tag: &str) -> Arc<dyn Store> {
    let schema = format!("worker_waits_{tag}_{}", std::process::id());
    Arc::new(PostgresStore::builder().schema(&schema).open(url).expect("open the PostgreSQL store"))
}

pub fn start<D: Send + Sync + 'static>(
    app: &App<Nap, D>,
    deps: D,
) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>) {
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(deps)).poll_interval(Duration::from_millis(10));
    (stop.clone(), tokio::spawn(worker.run(stop)))
}

pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `store` behind a clock for claims that stops at `cap` (unix ms) until the test sets the
/// returned cap to `u64::MAX`: a claim sees no timer and no approval expiry due after `cap`.
/// The claim of a ready row does not look at the time (but for a lease, which the parked runs
/// here have released), so only the claim of a due row is held back: a test checks a parked
/// run, then lets it come due, however slowly it goes.
pub fn claims_held_at(store: Arc<dyn Store>, cap: u64) -> (Arc<dyn Store>, Arc<AtomicU64>) {
    let cap = Arc::new(AtomicU64::new(cap));
    let mut hooked = hooked_store::Hooked::new(store);
    hooked.claim_clock = Some({
        let cap = Arc::clone(&cap);
        Box::new(move |now: u64| now.min(cap.load(Ordering::SeqCst)))
    });
    (Arc::new(hooked), cap)
}

/// Whether thread `thread`'s run is queued, parked for an answer, with no lease held.
pub fn parked_for_an_answer<D>(app: &App<Nap, D>, thread: &str) -> bool {
    app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Answer && r.lease.is_none())
}
