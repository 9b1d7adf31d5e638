//! What a circuit breaker costs a tool call. One JSON line per figure on stdout.
//!
//! ```text
//! cargo bench --bench breaker                # 5,000 calls per case
//! cargo bench --bench breaker -- --quick     # 500
//! ```
//!
//! One redb store (a file, default durability). Each run is one thread whose
//! node calls a `read` tool (that does nothing) `CALLS_PER_RUN` times through
//! the gateway. Cases, each on its own store:
//! - `unguarded`: no breaker;
//! - `closed`: the tool's breaker is closed with no failures (one read of
//!   its record per call; no write);
//! - `open_observe`: the breaker is open, every call answers `CIRCUIT_OPEN`
//!   (decided from a read of the record; no write).
//!
//! Each case first makes as many runs again, unmeasured (warm-up).
//!
//! Figure: `us_per_call` (mean wall time of a call, the run's commits
//! included, divided by the calls). No figure is asserted; the bench checks
//! the observations it got.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agentflow::breaker::Breaker;
use agentflow::prelude::*;
use agentflow::{App, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

const CALLS_PER_RUN: u32 = 100;

#[derive(Default)]
struct Deps {
    runs: AtomicU32,
    failing: std::sync::atomic::AtomicBool,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Ping {
    n: u32,
}

/// Does nothing (or fails, to open the breaker).
#[tool(risk = read)]
async fn ping(args: Ping, cx: &ToolCx<Deps>) -> Result<u32, ToolError> {
    cx.deps().runs.fetch_add(1, Ordering::Relaxed);
    if cx.deps().failing.load(Ordering::Relaxed) {
        return Err(ToolError::Transient("down".into()));
    }
    Ok(args.n)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Calls {
    #[reduce(add)]
    ok: u32,
    #[reduce(add)]
    refused: u32,
}

#[graph(state = Calls, deps = Deps, start = call)]
mod calling {
    use super::*;

    #[node(goto = [END], tools = [ping])]
    async fn call(_s: &Calls, cx: &Ctx<Deps>) -> Result<Step<Calls>, NodeError> {
        let (mut ok, mut refused) = (0, 0);
        for n in 0..CALLS_PER_RUN {
            match cx.run_tool(ping, json!({ "n": n })).await {
                Ok(obs) if obs.is_ok() => ok += 1,
                Ok(_) => refused += 1,
                Err(_) => {}
            }
        }
        Ok(goto!(END, Calls::update().ok(ok).refused(refused)))
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let calls: u32 = if quick { 500 } else { 5_000 };
    let runs = calls / CALLS_PER_RUN;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        for case in ["unguarded", "closed", "open_observe"] {
            let dir = std::env::temp_dir().join(format!("agentflow-bench-breaker-{}-{case}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("runs.redb")).unwrap());
            let mut app: App<Calls, Deps> = calling::graph().app().store(Arc::clone(&store));
            if case != "unguarded" {
                let breaker = Breaker::after(1).cool_down(Duration::from_secs(3600));
                app = app.circuit_breaker("ping", breaker).unwrap();
            }
            let deps = Deps::default();
            if case == "open_observe" {
                deps.failing.store(true, Ordering::Relaxed);
                app.runner(&deps).thread("opener").run(Calls::default()).await.unwrap();
                deps.failing.store(false, Ordering::Relaxed);
            }
            // Warm-up (not measured): as many runs again, on their own threads.
            for r in 0..runs {
                app.runner(&deps).thread(format!("w-{r}")).run(Calls::default()).await.unwrap();
            }
            let before = deps.runs.load(Ordering::Relaxed);
            let started = Instant::now();
            let (mut ok, mut refused) = (0, 0);
            for r in 0..runs {
                let run = app.runner(&deps).thread(format!("t-{r}")).run(Calls::default()).await.unwrap();
                ok += run.state.ok;
                refused += run.state.refused;
            }
            let elapsed = started.elapsed();
            let ran = deps.runs.load(Ordering::Relaxed) - before;
            match case {
                "open_observe" => assert!(ok == 0 && refused == runs * CALLS_PER_RUN && ran == 0),
                _ => assert!(ok == runs * CALLS_PER_RUN && ran == ok),
            }
            let us = elapsed.as_secs_f64() * 1e6 / f64::from(runs * CALLS_PER_RUN);
            println!(
                "{}",
                json!({ "bench": "breaker", "case": case, "calls": runs * CALLS_PER_RUN, "us_per_call": (us * 10.0).round() / 10.0 })
            );
            drop(app);
            drop(store);
            std::fs::remove_dir_all(&dir).ok();
        }
    });
}
