//! A pool of worker processes sharing one PostgreSQL store.
//!
//! Start a local server (prints `AGENTFLOW_PG_URL`), then in one or more terminals a worker
//! pool, and in another submit runs and watch them:
//!
//! ```text
//! source .ci/postgres.sh                                   # or export AGENTFLOW_PG_URL=postgres://...
//! cargo run --example workers -- work 8                    # a worker running up to 8 threads at once (Enter stops it)
//! cargo run --example workers -- submit 20                 # queue 20 runs (from any process)
//! cargo run --example workers -- status                    # queued and running threads, their worker and heartbeat
//! cargo run --example workers -- cancel digest-3           # stop a thread at its next step boundary
//! ```
//!
//! The graph fetches, summarises and files a digest; each node waits a little, as a model or
//! HTTP call would (no model is called: the waits stand in for them).

use std::sync::Arc;
use std::time::Duration;

use agentflow::Worker;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Store};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Digest {
    topic: String,
    #[reduce(append)]
    notes: Vec<String>,
}

async fn io_wait() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[graph(state = Digest, start = fetch)]
pub mod digest {
    use super::*;

    #[node(goto = [summarise])]
    async fn fetch(s: &Digest) -> Step<Digest> {
        io_wait().await;
        goto!(summarise, Digest::update().notes(vec![format!("fetched {} (pid {})", s.topic, std::process::id())]))
    }

    #[node(goto = [file])]
    async fn summarise(_s: &Digest) -> Step<Digest> {
        io_wait().await;
        goto!(file, Digest::update().notes(vec![format!("summarised (pid {})", std::process::id())]))
    }

    #[node(goto = [END])]
    async fn file(_s: &Digest) -> Step<Digest> {
        io_wait().await;
        goto!(END, Digest::update().notes(vec![format!("filed (pid {})", std::process::id())]))
    }
}

/// The `i`th run of a batch.
pub fn job(i: usize) -> Digest {
    Digest { topic: format!("topic {i}"), ..Digest::default() }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("AGENTFLOW_PG_URL")
        .map_err(|_| "set AGENTFLOW_PG_URL (start a local server with `source .ci/postgres.sh`)")?;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::open(&url)?);
    let app = digest::graph().app().store(store);
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("work") => {
            let n = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(4);
            let worker = Worker::new(app, Arc::new(())).concurrency(n);
            println!("worker {} running up to {n} threads; press Enter to stop it gracefully", worker.id());
            let stop = CancellationToken::new();
            let on_enter = stop.clone();
            std::thread::spawn(move || {
                let _ = std::io::stdin().read_line(&mut String::new());
                on_enter.cancel();
            });
            let report = worker.run(stop).await?;
            println!("{report:?}");
        }
        Some("submit") => {
            let n: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(10);
            let batch = now_ms();
            for i in 0..n {
                let thread = format!("digest-{batch}-{i}");
                app.submit(&thread, &job(i))?;
                println!("queued {thread}");
            }
        }
        Some("status") => {
            let now = now_ms();
            for run in app.live_runs()? {
                let worker = run.lease.as_ref().map_or("-", |l| l.holder.as_str());
                let beat = run.heartbeat_at.map_or("-".to_string(), |h| format!("{} ms ago", now.saturating_sub(h)));
                println!("{:<28} {:<9} worker {worker} heartbeat {beat}", run.thread, format!("{:?}", run.wait));
            }
        }
        Some("cancel") => {
            let thread = args.get(1).ok_or("cancel THREAD")?;
            println!("{}", if app.cancel_run(thread)? { "cancel requested" } else { "not queued" });
        }
        _ => eprintln!("usage: workers (work [N] | submit [N] | status | cancel THREAD)"),
    }
    Ok(())
}
