//! Event streams: how fast a server sends a thread's event log as server-sent events, and what
//! writing the log adds to each super-step. One JSON line per figure on stdout.
//!
//! ```text
//! cargo bench --bench stream               # 4,000-step log, 1 and 100 clients; 50-step runs, 40 pairs
//! cargo bench --bench stream -- --quick    # 500-step log; 20-step runs, 10 and 30 pairs (CI)
//! cargo bench --bench stream -- sse        # only the streams
//! cargo bench --bench stream -- log_cost   # only the log's cost per step
//! ```
//!
//! Workloads:
//! - `sse`: a redb file holding one finished thread whose run took N super-steps, each adding
//!   one AI message and overwriting one field (its log: N + 1 entries, each step six AG-UI
//!   events). A [`Server`] hosting the graph serves it on 127.0.0.1 (its own two-thread tokio
//!   runtime); clients on another runtime read `GET /api/threads/T/stream?follow=false` (the
//!   stream ends once the reader caught up) to its end, counting events. Figures: the events
//!   of the stream, events/s to one client (the best of three reads), and to 100 clients
//!   reading at once (all their events over the wall time from the first request to the last
//!   stream's end), with the slowest client's time. Server and clients share the machine's
//!   cores: the figures include the clients' own reading.
//! - `log_cost`: the same durable run (a graph of K super-steps, each adding a message and
//!   overwriting a field, on one redb file) with `App::event_log(true)` and `(false)`, run in
//!   pairs, alternating which goes first, under `Durability::Sync` (each step's commit on disk
//!   before the next step) and then `Durability::Async` (redb's eventual commits, flushed in the
//!   background). Figures per durability: the median µs per step of each, the
//!   median of the pairs' ratios (on / off) and of their differences (µs the log adds per
//!   step).
//!
//! No figure is asserted; the bench checks that every client read the whole stream, ending
//! with `RUN_FINISHED`, and that every run completed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::message::Message;
use agentflow::prelude::*;
use agentflow::serve_limits::ServeLimits;
use agentflow::server::Server;
use agentflow::server::users::Users;
use agentflow::{CancellationToken, Durability, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

// ---------------------------------------------------------------------------
// The workload: a run of `target` super-steps, each a model's message and a counter.

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(default)]
struct Tally {
    /// How many steps the run takes.
    target: u32,
    /// Steps taken.
    n: u32,
    #[reduce(messages)]
    messages: Vec<Message>,
}

/// The most steps a run takes.
const MAX_STEPS: u32 = 4_000;

#[graph(state = Tally, start = tick, max_steps = 4_001)]
mod tally {
    use super::*;

    #[node(goto = [tick, END])]
    async fn tick(s: &Tally) -> Step<Tally> {
        let n = s.n + 1;
        let text = format!("Step {n} of {}: the counter moved on by one, as the plan said it would.", s.target);
        let update = Tally::update().n(n).messages(vec![Message::ai(text)]);
        if n >= s.target.min(MAX_STEPS) { goto!(END, update) } else { goto!(tick, update) }
    }
}

fn figure(workload: &str, name: &str, value: serde_json::Value) {
    println!("{}", json!({ "bench": "stream", "workload": workload, "figure": name, "value": value }));
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().expect("a tokio runtime")
}

/// A new, empty directory for this bench's files.
fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-bench-stream-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

// ---------------------------------------------------------------------------
// Streams.

/// The bench's reader.
const TOKEN: &str = "bench-reader-token";

/// Reads the stream at `url` to its end: how many events it had, and whether the last was
/// `RUN_FINISHED`. Counts the blank lines that end events (the stream ends before a keep-alive
/// comment could be sent), so the client's parsing is as cheap as it can be.
async fn read_stream(client: &reqwest::Client, url: &str) -> (u64, bool) {
    let mut response =
        client.get(url).header("authorization", format!("Bearer {TOKEN}")).send().await.expect("the stream's request");
    assert_eq!(response.status(), reqwest::StatusCode::OK, "the stream was refused");
    let (mut events, mut previous) = (0u64, 0u8);
    let mut tail: Vec<u8> = Vec::new();
    while let Some(chunk) = response.chunk().await.expect("the stream's body") {
        for &b in chunk.iter() {
            if b == b'\n' && previous == b'\n' {
                events += 1;
            }
            previous = b;
        }
        tail.extend_from_slice(&chunk);
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 1024);
        }
    }
    let text = String::from_utf8_lossy(&tail);
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
    (events, last.contains("\"RUN_FINISHED\""))
}

fn sse(steps: u32) {
    let w = "sse";
    let dir = temp_dir("sse");
    let users = dir.join("users.json");
    std::fs::write(&users, format!(r#"{{ "users": [ {{ "name": "reader", "token": "{TOKEN}", "roles": [] }} ] }}"#))
        .expect("the users file");
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("stream.redb")).expect("a redb file"));

    // The thread's log: one run of `steps` super-steps (written with the log on, as a server's
    // apps are).
    let server_rt = runtime(2);
    let began = Instant::now();
    let app = tally::graph().app().store(Arc::clone(&store)).event_log(true);
    let run = server_rt.block_on(async {
        app.runner(&())
            .thread("long")
            .durability(Durability::Async)
            .run(Tally { target: steps, ..Tally::default() })
            .await
            .expect("the long run")
    });
    assert_eq!(run.outcome, Outcome::Completed);
    store.flush().expect("a flush");
    let entries = store.read_events("long", None, usize::MAX).expect("the log").events.len();
    figure(w, "log_steps", json!(steps));
    figure(w, "log_events", json!(entries));
    figure(w, "log_write_s", json!(began.elapsed().as_secs_f64()));

    let users = Users::load(&users).expect("the users file");
    let running = server_rt.block_on(async {
        Server::new()
            .users(users)
            .limits(ServeLimits::default().streams_per_user(128))
            .concurrency(0)
            .app(app, ())
            .listen("127.0.0.1:0".parse().expect("an address"))
            .await
            .expect("the server")
    });
    let url = format!("http://{}/api/threads/long/stream?follow=false", running.local_addr().expect("an address"));
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let serving = server_rt.spawn(running.serve(async move { stopped.cancelled().await }));

    let clients = runtime(2);
    clients.block_on(async {
        let client = reqwest::Client::new();
        let (events, finished) = read_stream(&client, &url).await;
        assert!(finished, "the stream ends with RUN_FINISHED");
        figure(w, "events", json!(events));
        let mut best = Duration::MAX;
        for _ in 0..3 {
            let began = Instant::now();
            let (got, finished) = read_stream(&client, &url).await;
            best = best.min(began.elapsed());
            assert!(got == events && finished, "one client read {got} of {events} events");
        }
        figure(w, "one_client_events_per_s", json!(events as f64 / best.as_secs_f64()));
        figure(w, "one_client_ms", json!(best.as_secs_f64() * 1e3));

        let began = Instant::now();
        let readers: Vec<_> = (0..100)
            .map(|_| {
                let (client, url) = (reqwest::Client::new(), url.clone());
                tokio::spawn(async move {
                    let (got, finished) = read_stream(&client, &url).await;
                    (got, finished, began.elapsed())
                })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        let mut total = 0u64;
        for reader in readers {
            let (got, finished, took) = reader.await.expect("a client");
            assert!(got == events && finished, "a client read {got} of {events} events");
            total += got;
            slowest = slowest.max(took);
        }
        let wall = began.elapsed();
        figure(w, "hundred_clients_events_per_s", json!(total as f64 / wall.as_secs_f64()));
        figure(w, "hundred_clients_wall_ms", json!(wall.as_secs_f64() * 1e3));
        figure(w, "hundred_clients_slowest_ms", json!(slowest.as_secs_f64() * 1e3));
    });
    stop.cancel();
    server_rt.block_on(serving).expect("the server's task").expect("the server stops");
    drop(clients);
    drop(server_rt);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------
// The log's cost per step.

/// The median of `values` (sorted in place).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn log_cost(steps: u32, durability: Durability, name: &str, pairs: usize) {
    let w = format!("log_cost_{name}");
    let dir = temp_dir(name);
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("cost.redb")).expect("a redb file"));
    let with_log = tally::graph().app().store(Arc::clone(&store)).event_log(true);
    let without = tally::graph().app().store(Arc::clone(&store)).event_log(false);
    let rt = runtime(2);
    let input = Tally { target: steps, ..Tally::default() };
    // µs per step of one run of `app` on a new thread.
    let timed = |app: &App<Tally>, thread: String| -> f64 {
        let began = Instant::now();
        let run = rt
            .block_on(app.runner(&()).thread(thread).durability(durability).run(input.clone()))
            .expect("a durable run");
        let took = began.elapsed();
        assert_eq!(run.outcome, Outcome::Completed);
        took.as_secs_f64() * 1e6 / f64::from(steps)
    };
    // Warm up: the file's first pages, the runtime's threads.
    timed(&with_log, "warm-on".into());
    timed(&without, "warm-off".into());
    let (mut on, mut off, mut ratios, mut added) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for pair in 0..pairs {
        let (a, b) = if pair % 2 == 0 {
            let a = timed(&with_log, format!("on-{pair}"));
            (a, timed(&without, format!("off-{pair}")))
        } else {
            let b = timed(&without, format!("off-{pair}"));
            (timed(&with_log, format!("on-{pair}")), b)
        };
        on.push(a);
        off.push(b);
        ratios.push(a / b);
        added.push(a - b);
    }
    let logged = store.read_events("on-0", None, usize::MAX).expect("the log").events.len();
    let unlogged = store.read_events("off-0", None, usize::MAX).expect("the log").events.len();
    assert!(logged > steps as usize && unlogged == 0, "the log holds the logged run's steps only");
    figure(&w, "steps_per_run", json!(steps));
    figure(&w, "pairs", json!(pairs));
    figure(&w, "log_on_us_per_step", json!(median(&mut on)));
    figure(&w, "log_off_us_per_step", json!(median(&mut off)));
    figure(&w, "ratio_on_over_off", json!(median(&mut ratios)));
    figure(&w, "added_us_per_step", json!(median(&mut added)));
    drop((with_log, without));
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick") || std::env::var_os("AGENTFLOW_BENCH_QUICK").is_some();
    let only = |w: &str| {
        let named: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
        named.is_empty() || named.iter().any(|a| a.as_str() == w)
    };
    let began = Instant::now();
    if only("sse") {
        sse(if quick { 500 } else { MAX_STEPS });
    }
    if only("log_cost") {
        let (steps, sync_pairs, async_pairs) = if quick { (20, 10, 30) } else { (50, 40, 40) };
        log_cost(steps, Durability::Sync, "sync", sync_pairs);
        log_cost(steps, Durability::Async, "async", async_pairs);
    }
    eprintln!("stream bench done in {:.1} s", began.elapsed().as_secs_f64());
}
