//! The graph the worker tests run: a cycle `a -> b -> c -> a` of `n` steps, each step one
//! journaled effect that appends a line to a ledger file (so a test counts how often each
//! effect really ran, across processes), optionally followed by an irreversible refund that
//! waits for a human's approval.
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentflow::approval::RoleAuthorizer;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    /// Steps to run before ending (or paying).
    pub n: u64,
    /// Whether the job ends with a refund that needs an approval.
    pub pay: bool,
    /// Milliseconds each step waits (an I/O wait).
    pub wait_ms: u64,
    /// Steps done.
    #[reduce(add)]
    pub counter: u64,
    /// For each step, the process that ran it and the effect's journaled result.
    #[reduce(append)]
    pub trail: Vec<String>,
    pub receipt: Option<serde_json::Value>,
    /// A step held until the run is asked to stop.
    pub hold: Option<Hold>,
}

/// A step that, once it started, creates its marker file, then waits until the run is asked to
/// stop (a pause or cancel request, its worker's shutdown), and only then runs its effect and
/// ends. A stop the test asks for once the marker exists lands at the boundary right after this
/// step, however slowly the machine goes. It waits at most [`HOLD_LIMIT`], so a stop that
/// never reaches the run lets it go on (and the test fail).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    /// The step, by the count of steps done before it.
    pub at: u64,
    /// Created when the step starts to wait. A step that finds it there already (the step run
    /// again after the stop) is not held; the test removes it at its end.
    pub marker: PathBuf,
}

/// How long a held step waits for its run to be asked to stop.
pub const HOLD_LIMIT: Duration = Duration::from_secs(30);

impl Job {
    pub fn new(n: u64, pay: bool, wait_ms: u64) -> Self {
        Job { n, pay, wait_ms, ..Job::default() }
    }

    /// The step after `done` steps is held until the run is asked to stop (see [`Hold`]).
    pub fn held_at(self, done: u64, marker: &Path) -> Self {
        Job { hold: Some(Hold { at: done, marker: marker.to_path_buf() }), ..self }
    }
}

/// A path for a [`Hold`]'s marker no other test uses (not created).
pub fn hold_marker(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("agentflow-hold-{tag}-{}-{n}-{nanos}", std::process::id()))
}

/// Where the effects write their ledger lines (`thread key pid`), if anywhere.
pub fn ledger() -> Option<PathBuf> {
    std::env::var_os("AGENTFLOW_WORKER_LEDGER").map(PathBuf::from)
}

fn append_ledger(line: &str) {
    if let Some(path) = ledger() {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open the ledger");
        // One write of a short line to a file opened for appending: lines never interleave.
        f.write_all(format!("{line}\n").as_bytes()).expect("append to the ledger");
    }
}

/// A refund: irreversible, so it waits for an approval. Ledgered like the effects.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    pub order_id: String,
    pub amount: u32,
}

/// Refunds `amount` on an order (irreversible).
#[tool(risk = irreversible)]
pub async fn refund(args: Refund, cx: &ToolCx) -> Result<serde_json::Value, ToolError> {
    append_ledger(&format!("{} refund {}", args.order_id, std::process::id()));
    let _ = cx;
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

async fn tick(s: &Job, cx: &Ctx<'_, ()>, node: &str) -> Result<JobUpdate, NodeError> {
    if s.wait_ms > 0 {
        tokio::time::sleep(Duration::from_millis(s.wait_ms)).await;
    }
    // Held once: the step run again after the stop (on resume) finds its marker and goes on.
    let first = |h: &Hold| std::fs::OpenOptions::new().write(true).create_new(true).open(&h.marker).is_ok();
    if s.hold.as_ref().is_some_and(|h| h.at == s.counter && first(h)) {
        tokio::select! {
            () = cx.cancelled() => {}
            () = tokio::time::sleep(HOLD_LIMIT) => {}
        }
    }
    let thread = cx.thread().unwrap_or("-").to_string();
    let key = format!("step{}", s.counter);
    let result = cx
        .effect(&key, |_| {
            let (thread, key) = (thread.clone(), key.clone());
            async move {
                let pid = std::process::id();
                append_ledger(&format!("{thread} {key} {pid}"));
                Ok::<_, NodeError>(format!("{key}@{pid}"))
            }
        })
        .await?;
    Ok(Job::update().counter(1).trail(vec![format!("{node}:{}:{result}", std::process::id())]))
}

fn next(s: &Job) -> Option<()> {
    (s.counter + 1 < s.n).then_some(())
}

#[graph(state = Job, deps = (), start = a, max_steps = 100000)]
pub mod job {
    use super::*;

    #[node(goto = [b, pay, END])]
    async fn a(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let u = tick(s, cx, "a").await?;
        Ok(match next(s) {
            Some(()) => goto!(b, u),
            None if s.pay => goto!(pay, u),
            None => goto!(END, u),
        })
    }

    #[node(goto = [c, pay, END])]
    async fn b(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let u = tick(s, cx, "b").await?;
        Ok(match next(s) {
            Some(()) => goto!(c, u),
            None if s.pay => goto!(pay, u),
            None => goto!(END, u),
        })
    }

    #[node(goto = [a, pay, END])]
    async fn c(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let u = tick(s, cx, "c").await?;
        Ok(match next(s) {
            Some(()) => goto!(a, u),
            None if s.pay => goto!(pay, u),
            None => goto!(END, u),
        })
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(_s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let order = cx.thread().unwrap_or("-").to_string();
        let obs = cx.run_tool(refund, json!({ "order_id": order, "amount": 10 })).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

/// Who may approve refunds.
pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "refund-approver")
}
/// A schema no other test uses.
pub fn fresh_schema(tag: &str) -> String {
    super::pg::unique_schema("workers", tag)
}

/// Waits (polling every 10 ms, at most `limit`) until `done` holds; panics with `what` if it
/// never does.
pub async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks that `thread`'s history is one unbranched chain `0 <- 1 <- .. <- last`: no step was
/// committed twice (by two workers) from the same parent.
pub fn assert_linear_history(store: &dyn agentflow::Store, thread: &str) -> usize {
    let history = store.list_checkpoints(thread).expect("list checkpoints");
    assert!(!history.is_empty(), "{thread} has no checkpoints");
    for (i, cp) in history.iter().enumerate() {
        assert_eq!(cp.seq, i as u64, "{thread}: seqs are 0..n without gaps: {history:?}");
        let parent = if i == 0 { None } else { Some(i as u64 - 1) };
        assert_eq!(cp.parent, parent, "{thread}: checkpoint {} has parent {:?}", cp.seq, cp.parent);
    }
    history.len()
}
