//! Durable runs on `PostgresStore`, against the server at `AGENTFLOW_PG_URL` (skipped with one
//! line when it is unset). Each store instance has a pool of its own, as a separate process
//! would: a thread paused by one is resumed by another, and a thread running in one is busy for
//! the other.

use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{Durability, PendingKind, RunError, Store};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Notify;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Draft {
    text: String,
    verdict: Option<String>,
    receipt: Option<String>,
    #[reduce(append)]
    trail: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Review {
    approve: bool,
    note: String,
}

#[derive(Default)]
pub struct Deps {
    sends: AtomicU32,
    /// Set by the test that holds a run inside `write`.
    hold: Option<(Notify, Notify)>,
}

#[graph(state = Draft, deps = Deps, start = write, max_steps = 10)]
mod review_flow {
    use super::*;

    #[node(goto = [review])]
    async fn write(_s: &Draft, deps: &Deps) -> Step<Draft> {
        if let Some((entered, release)) = &deps.hold {
            entered.notify_one();
            release.notified().await;
        }
        goto!(review, Draft::update().text("refund 199".into()).trail(vec!["write".into()]))
    }

    #[node(goto = [send, END], interrupt)]
    async fn review(s: &Draft, cx: &Ctx<Deps>) -> Result<Step<Draft>, NodeError> {
        let r: Review = cx.interrupt(json!({ "draft": s.text }))?;
        let u = Draft::update().verdict(Some(r.note)).trail(vec!["review".into()]);
        Ok(if r.approve { goto!(send, u) } else { goto!(END, u) })
    }

    #[node(goto = [END])]
    async fn send(s: &Draft, cx: &Ctx<Deps>) -> Result<Step<Draft>, NodeError> {
        let text = s.text.clone();
        let receipt = cx
            .effect("send", |key| async move {
                cx.deps().sends.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>(format!("sent '{text}' ({key})"))
            })
            .await?;
        Ok(goto!(END, Draft::update().receipt(Some(receipt)).trail(vec!["send".into()])))
    }
}
/// A graph on a new store instance (its own pool) on `schema`.
fn graph(url: &str, schema: &str) -> App<Draft, Deps> {
    let store = PostgresStore::builder().schema(schema).open(url).expect("open the PostgreSQL store");
    review_flow::graph().app().store(Arc::new(store) as Arc<dyn Store>)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_on_one_store_is_resumed_from_a_second_store_instance() {
    let Some(url) = pg::pg_url() else { return };
    let schema = pg::unique_schema("runs", "resume");
    let deps = Deps::default();

    let first = graph(&url, &schema);
    let run = first.runner(&deps).thread("r1").run(Draft::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Interrupt);
    drop(first);

    // Another "process": nothing in memory is shared, only the database.
    let second = graph(&url, &schema);
    let thread = second.thread("r1").unwrap().unwrap();
    assert_eq!(thread.status, ThreadStatus::Interrupted);
    assert_eq!(thread.lease, None, "the first run released its lease when it paused");
    assert_eq!(second.pending("r1").unwrap(), pending.clone());
    let done =
        second.runner(&deps).thread("r1").resume_with(Review { approve: true, note: "ship it".into() }).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.trail, ["write", "review", "send"]);
    assert_eq!(done.state.verdict.as_deref(), Some("ship it"));
    assert!(done.state.receipt.as_deref().is_some_and(|r| r.starts_with("sent 'refund 199'")));
    assert_eq!(deps.sends.load(Ordering::SeqCst), 1, "the effect ran once");

    // A third instance sees the finished thread and an unbroken history.
    let third = graph(&url, &schema);
    assert_eq!(third.thread("r1").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_eq!(third.state("r1").unwrap().unwrap().state, done.state);
    let history = third.history("r1").unwrap();
    assert!(history.len() >= 3, "{history:?}");
    for pair in history.windows(2) {
        assert_eq!(pair[1].parent, Some(pair[0].seq), "each checkpoint continues the previous one: {history:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_running_on_one_store_instance_is_busy_for_another() {
    let Some(url) = pg::pg_url() else { return };
    let schema = pg::unique_schema("runs", "busy");
    let holding = Arc::new(Deps { hold: Some((Notify::new(), Notify::new())), ..Deps::default() });

    let first = Arc::new(graph(&url, &schema));
    let running = {
        let (first, holding) = (first.clone(), holding.clone());
        tokio::spawn(async move { first.runner(&holding).thread("r2").run(Draft::default()).await })
    };
    let (entered, release) = holding.hold.as_ref().unwrap();
    entered.notified().await;

    let second = graph(&url, &schema);
    let deps = Deps::default();
    let err = second.runner(&deps).thread("r2").resume().await.unwrap_err();
    assert!(matches!(&err, RunError::ThreadBusy { thread, .. } if thread == "r2"), "{err}");

    release.notify_one();
    let run = running.await.unwrap().unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    // Once the first instance paused, the second one continues the thread.
    let done =
        second.runner(&deps).thread("r2").resume_with(Review { approve: false, note: "no".into() }).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(deps.sends.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durability_mode_runs_on_postgres() {
    let Some(url) = pg::pg_url() else { return };
    let schema = pg::unique_schema("runs", "durability");
    let g = graph(&url, &schema);
    let deps = Deps::default();
    for (i, durability) in [Durability::Sync, Durability::Async, Durability::Exit].into_iter().enumerate() {
        let thread = format!("d{i}");
        let run = g.runner(&deps).thread(&thread).durability(durability).run(Draft::default()).await.unwrap();
        assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{durability:?}: {:?}", run.outcome);
        let done = g
            .runner(&deps)
            .thread(&thread)
            .durability(durability)
            .resume_with(Review { approve: true, note: "ok".into() })
            .await
            .unwrap();
        assert_eq!(done.outcome, Outcome::Completed, "{durability:?}");
        let other = graph(&url, &schema);
        assert_eq!(other.state(&thread).unwrap().unwrap().state, done.state, "{durability:?}");
    }
    assert_eq!(deps.sends.load(Ordering::SeqCst), 3);
}

#[graph(state = Draft, start = call)]
mod binary_error_flow {
    use super::*;

    #[node(goto = [END])]
    async fn call(_s: &Draft) -> Result<Step<Draft>, NodeError> {
        // A body decoded from binary, as some HTTP errors are.
        Err(NodeError::fatal("the provider answered 500: \u{0}\u{1}PK\u{3}\u{4}"))
    }
}

/// A run that fails with a message holding a NUL byte is recorded as failed on PostgreSQL too
/// (whose `text` cannot hold NUL): the byte is stored as U+FFFD. The commit was refused before,
/// which left the thread `running` (and a compensation it should start, never started).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_message_with_a_nul_byte_is_recorded() {
    let Some(url) = pg::pg_url() else { return };
    let store = PostgresStore::builder()
        .schema(pg::unique_schema("runs", "nul"))
        .open(&url)
        .expect("open the PostgreSQL store");
    let app = binary_error_flow::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    let run = app.runner(&()).thread("nul").run(Draft::default()).await.expect("the run's end is recorded");
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    let record = app.thread("nul").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Failed);
    assert!(record.detail.contains("500: \u{FFFD}\u{1}PK"), "{:?}", record.detail);
}
