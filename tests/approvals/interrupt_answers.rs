//! Answers to `cx.interrupt` recorded by a process that does not run the graph
//! (`ApprovalDesk::answer_interrupt`, used by the inbox and `agentflow answer`),
//! then used by the next plain `resume()` wherever the graph runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use agentflow::approval::{ANSWER_KIND, AnswerError, ApprovalDesk, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{PendingKind, RunError, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::hooked_store;
use crate::support::pg;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Draft {
    text: String,
    verdict: Option<String>,
    #[reduce(append)]
    trail: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Review {
    approve: bool,
    note: String,
}

#[derive(Default)]
pub struct Deps {
    reviews: AtomicU32,
    sends: AtomicU32,
}

#[graph(state = Draft, deps = Deps, start = write, max_steps = 10)]
mod review_flow {
    use super::*;

    #[node(goto = [review])]
    async fn write(_s: &Draft) -> Step<Draft> {
        goto!(review, Draft::update().text("hello".into()).trail(vec!["write".into()]))
    }

    #[node(goto = [send, recheck], interrupt)]
    async fn review(s: &Draft, cx: &Ctx<Deps>) -> Result<Step<Draft>, NodeError> {
        cx.deps().reviews.fetch_add(1, Ordering::SeqCst);
        let r: Review = cx.interrupt(json!({ "draft": s.text }))?;
        let u = Draft::update().verdict(Some(r.note)).trail(vec!["review".into()]);
        Ok(if r.approve { goto!(send, u) } else { goto!(recheck, u) })
    }

    /// Asks a second time, at a later checkpoint.
    #[node(goto = [send], interrupt)]
    async fn recheck(_s: &Draft, cx: &Ctx<Deps>) -> Result<Step<Draft>, NodeError> {
        let r: Review = cx.interrupt(json!({ "again": true }))?;
        Ok(goto!(send, Draft::update().verdict(Some(r.note)).trail(vec!["recheck".into()])))
    }

    #[node(goto = [END])]
    async fn send(_s: &Draft, deps: &Deps) -> Step<Draft> {
        deps.sends.fetch_add(1, Ordering::SeqCst);
        goto!(END, Draft::update().trail(vec!["send".into()]))
    }
}

use crate::support::stores::store;

fn app(store: &Arc<dyn Store>) -> App<Draft, Deps> {
    review_flow::graph().app().store(Arc::clone(store))
}

/// A desk without the graph, as the inbox and the CLI open one.
fn desk(store: &Arc<dyn Store>) -> ApprovalDesk {
    ApprovalDesk::for_store(Arc::clone(store), RoleAuthorizer::new())
}

fn alice() -> Approver {
    Approver::new("alice", ["reviewer"])
}

#[tokio::test]
async fn a_recorded_answer_is_what_the_next_plain_resume_continues_with() {
    let store = store();
    let deps = Deps::default();
    let run = app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);

    // Without an answer a plain resume still asks for a value.
    let err = app(&store).runner(&deps).thread("t").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { ref node, .. } if node == "review"), "{err}");

    let desk = desk(&store);
    let (seq, asks) = desk.waiting_interrupt("t").unwrap();
    assert_eq!(asks.node, "review");
    assert_eq!(asks.payload, json!({ "draft": "hello" }));
    assert_eq!(desk.recorded_answer("t").unwrap(), None);
    let answer = desk.answer_interrupt("t", seq, json!({ "approve": true, "note": "ship it" }), &alice()).unwrap();
    assert_eq!((answer.by.as_str(), answer.checkpoint, answer.node.as_str()), ("alice", seq, "review"));
    assert_eq!(desk.recorded_answer("t").unwrap(), Some(answer));

    // A fresh App on the same store, as in the process that runs the graph.
    let done = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.verdict.as_deref(), Some("ship it"));
    assert_eq!(done.state.trail, vec!["write", "review", "send"]);
    assert_eq!(deps.sends.load(Ordering::SeqCst), 1);

    let audit = store.list_audit("t").unwrap();
    let entry = audit.iter().find(|e| e.kind == ANSWER_KIND).expect("the answer is in the audit log");
    assert_eq!(entry.actor, "alice");
    assert_eq!(entry.detail["value"], json!({ "approve": true, "note": "ship it" }));

    // Finished: nothing to answer any more.
    let err = desk.answer_interrupt("t", seq, json!({}), &alice()).unwrap_err();
    assert!(matches!(err, AnswerError::NotWaiting { .. }), "{err}");
}

#[tokio::test]
async fn the_first_answer_wins_and_an_answer_applies_to_its_checkpoint_only() {
    let store = store();
    let deps = Deps::default();
    app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    let desk = desk(&store);
    let (seq, _) = desk.waiting_interrupt("t").unwrap();

    let err = desk.answer_interrupt("t", seq + 7, json!({}), &alice()).unwrap_err();
    assert!(matches!(err, AnswerError::Stale { latest, .. } if latest == seq), "{err}");
    let err = desk.answer_interrupt("t", seq, json!({}), &Approver::new(" ", ["x"])).unwrap_err();
    assert!(matches!(err, AnswerError::Anonymous), "{err}");
    let err = desk.answer_interrupt("nope", 1, json!({}), &alice()).unwrap_err();
    assert!(matches!(err, AnswerError::NotFound { .. }), "{err}");

    desk.answer_interrupt("t", seq, json!({ "approve": false, "note": "look again" }), &alice()).unwrap();
    let bob = Approver::new("bob", ["reviewer"]);
    let err = desk.answer_interrupt("t", seq, json!({ "approve": true, "note": "bob" }), &bob).unwrap_err();
    assert!(matches!(err, AnswerError::AlreadyAnswered { ref by, .. } if by == "alice"), "{err}");

    // The answer takes the thread to `recheck`, which asks again at a later checkpoint:
    // the old answer does not answer that question.
    let run = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].node, "recheck");
    assert_eq!(run.state.verdict.as_deref(), Some("look again"));
    let err = app(&store).runner(&deps).thread("t").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { ref node, .. } if node == "recheck"), "{err}");
    let err = desk.answer_interrupt("t", seq, json!({}), &bob).unwrap_err();
    assert!(matches!(err, AnswerError::Stale { .. }), "{err}");

    let (later, asks) = desk.waiting_interrupt("t").unwrap();
    assert!(later > seq);
    assert_eq!(asks.payload, json!({ "again": true }));
    desk.answer_interrupt("t", later, json!({ "approve": true, "note": "bob checked" }), &bob).unwrap();
    let done = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.verdict.as_deref(), Some("bob checked"));
    assert_eq!(done.state.trail, vec!["write", "review", "recheck", "send"]);
}

#[tokio::test]
async fn answers_given_at_the_same_moment_have_one_winner_and_the_run_uses_it() {
    let store = store();
    let deps = Deps::default();
    app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    let (seq, _) = desk(&store).waiting_interrupt("t").unwrap();

    let barrier = Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let who = Approver::new(format!("user{i}"), ["reviewer"]);
                barrier.wait();
                desk(&store).answer_interrupt("t", seq, json!({ "approve": true, "note": format!("user{i}") }), &who)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, AnswerError::AlreadyAnswered { by, .. } if *by == winners[0].by), "{e}");
        }
    }
    let done = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert_eq!(done.state.verdict.as_deref(), Some(winners[0].by.as_str()));
}

#[tokio::test]
async fn an_explicit_resume_with_value_wins_over_a_recorded_answer() {
    let store = store();
    let deps = Deps::default();
    app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    let desk = desk(&store);
    let (seq, _) = desk.waiting_interrupt("t").unwrap();
    desk.answer_interrupt("t", seq, json!({ "approve": true, "note": "from the inbox" }), &alice()).unwrap();
    let done = app(&store)
        .runner(&deps)
        .thread("t")
        .resume_with(Review { approve: true, note: "from the app".into() })
        .await
        .unwrap();
    assert_eq!(done.state.verdict.as_deref(), Some("from the app"));
}

/// A recorded answer of the wrong shape fails the node on resume (as `resume_with` would); the
/// answer is then spent: the next plain resume asks for a value again instead of failing with
/// the same answer, and a person can answer the same checkpoint anew.
#[tokio::test]
async fn a_recorded_answer_of_the_wrong_shape_can_be_replaced_by_a_new_answer() {
    let store = store();
    let deps = Deps::default();
    app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    let desk = desk(&store);
    let (seq, _) = desk.waiting_interrupt("t").unwrap();
    desk.answer_interrupt("t", seq, json!("not a review"), &alice()).unwrap();
    let failed = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert!(matches!(failed.outcome, Outcome::Failed { .. }), "{:?}", failed.outcome);

    // A person can give the right value now, from the inbox or the CLI.
    let (seq, asks) = desk.waiting_interrupt("t").expect("the thread still waits for its answer");
    assert_eq!(asks.node, "review");
    // The app shows the question too, though the thread failed.
    let pending = app(&store).pending("t").unwrap();
    assert_eq!(
        pending.iter().map(|p| (p.kind, p.node.as_str())).collect::<Vec<_>>(),
        [(PendingKind::Interrupt, "review")]
    );
    assert_eq!(pending[0].payload, asks.payload);
    assert_eq!(desk.recorded_answer("t").unwrap(), None, "the failed answer is spent");
    let err = app(&store).runner(&deps).thread("t").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { .. }), "{err}");
    desk.answer_interrupt("t", seq, json!({ "approve": true, "note": "fixed" }), &alice()).unwrap();
    let done = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert_eq!(done.state.verdict.as_deref(), Some("fixed"));
}

/// Holds `gated::ask` before it asks, while armed: a run that holds the thread, caught in the act.
pub struct Gate {
    armed: AtomicBool,
    reached: AtomicBool,
    open: tokio::sync::Semaphore,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { armed: AtomicBool::new(false), reached: AtomicBool::new(false), open: tokio::sync::Semaphore::new(0) }
    }
}

impl Gate {
    /// Waits until the node reached the gate.
    async fn reached(&self, what: &str) {
        let began = std::time::Instant::now();
        while !self.reached.load(Ordering::SeqCst) {
            assert!(began.elapsed() < Duration::from_secs(60), "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[graph(state = Draft, deps = Gate, start = ask)]
mod gated {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Draft, cx: &Ctx<Gate>) -> Result<Step<Draft>, NodeError> {
        let gate = cx.deps();
        if gate.armed.load(Ordering::SeqCst) {
            gate.reached.store(true, Ordering::SeqCst);
            gate.open.acquire().await.expect("the gate stays open").forget();
        }
        let r: Review = cx.interrupt(json!({ "draft": "hello" }))?;
        Ok(goto!(END, Draft::update().verdict(Some(r.note))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_while_resume_with_runs_the_thread_is_refused_and_not_recorded() {
    let store = store();
    let app = gated::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    app.runner(&*gate).thread("g").run(Draft::default()).await.unwrap();
    let desk = desk(&store);
    let (seq, _) = desk.waiting_interrupt("g").unwrap();

    // The app resumes the thread with its own value; its node is held before it asks again.
    gate.armed.store(true, Ordering::SeqCst);
    let resuming = {
        let (app, gate) = (app.clone(), Arc::clone(&gate));
        tokio::spawn(async move {
            app.runner(&*gate).thread("g").resume_with(Review { approve: true, note: "from the app".into() }).await
        })
    };
    gate.reached("the resumed node never ran").await;
    // The page still shows the form for this checkpoint; the answer would be left behind by
    // the run that holds the thread, so it is refused, and nothing is written.
    let err =
        desk.answer_interrupt("g", seq, json!({ "approve": false, "note": "from the inbox" }), &alice()).unwrap_err();
    assert!(matches!(err, AnswerError::Busy { ref thread, .. } if thread == "g"), "{err}");
    assert!(store.list_audit("g").unwrap().iter().all(|e| e.kind != ANSWER_KIND));

    gate.open.add_permits(1);
    let done = resuming.await.unwrap().unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.verdict.as_deref(), Some("from the app"));
}

fn postgres(url: &str, tag: &str) -> Arc<dyn Store> {
    let schema = format!("interrupt_answers_{tag}_{}", std::process::id());
    Arc::new(agentflow_store::PostgresStore::builder().schema(&schema).open(url).expect("open the PostgreSQL store"))
}

/// Eight people answer the same checkpoint at the same moment, each through their own
/// `PostgresStore` (as eight processes would): one answer wins, every other is refused naming
/// the winner, and the run continues with the winner's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_from_separate_store_instances_at_the_same_moment_have_one_winner() {
    let Some(url) = pg::pg_url() else { return };
    let store = postgres(&url, "race");
    let deps = Deps::default();
    app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    let (seq, _) = desk(&store).waiting_interrupt("t").unwrap();

    let stores: Vec<_> = (0..8).map(|_| postgres(&url, "race")).collect();
    let barrier = Arc::new(std::sync::Barrier::new(stores.len()));
    let handles: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let who = Approver::new(format!("user{i}"), ["reviewer"]);
                barrier.wait();
                desk(&store).answer_interrupt("t", seq, json!({ "approve": true, "note": format!("user{i}") }), &who)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, AnswerError::AlreadyAnswered { by, .. } if *by == winners[0].by), "{e}");
        }
    }
    let done = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert_eq!(done.state.verdict.as_deref(), Some(winners[0].by.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_answer_while_a_worker_resumes_with_the_first_is_refused_and_the_first_is_used() {
    let store = store();
    let app = gated::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    app.runner(&*gate).thread("w").run(Draft::default()).await.unwrap();
    let desk = desk(&store);
    let (seq, _) = desk.waiting_interrupt("w").unwrap();
    desk.answer_interrupt("w", seq, json!({ "approve": true, "note": "first" }), &alice()).unwrap();

    // A worker takes the answered thread; its node is held before it asks again.
    gate.armed.store(true, Ordering::SeqCst);
    app.submit_resume("w").unwrap();
    let stop = agentflow::CancellationToken::new();
    let worker = agentflow::Worker::new(app.clone(), Arc::clone(&gate)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    gate.reached("the worker never resumed the thread").await;
    let began = std::time::Instant::now();
    let bob = Approver::new("bob", ["reviewer"]);
    let err = desk.answer_interrupt("w", seq, json!({ "approve": true, "note": "second" }), &bob).unwrap_err();
    assert!(matches!(err, AnswerError::Busy { .. } | AnswerError::AlreadyAnswered { .. }), "{err}");
    assert_eq!(store.list_audit("w").unwrap().iter().filter(|e| e.kind == ANSWER_KIND).count(), 1);

    gate.open.add_permits(1);
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(60), "the worker never finished the thread");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!(app.state("w").unwrap().unwrap().state.verdict.as_deref(), Some("first"));
}

/// An answer nested deeper than a `resume_with` value may be is refused when it is given, with
/// nothing recorded: recorded, it would stop every plain resume of the thread.
#[tokio::test]
async fn an_answer_nested_deeper_than_a_resume_value_may_be_is_refused_and_not_recorded() {
    let store = store();
    let deps = Deps::default();
    app(&store).runner(&deps).thread("t").run(Draft::default()).await.unwrap();
    let desk = desk(&store);
    let (seq, _) = desk.waiting_interrupt("t").unwrap();
    let mut deep = json!("bottom");
    for _ in 0..agentflow::persist::MAX_JSON_DEPTH + 1 {
        deep = json!([deep]);
    }
    // The app could not resume with it either.
    let err = app(&store).runner(&deps).thread("t").resume_with(deep.clone()).await.unwrap_err();
    assert!(err.to_string().contains("nests deeper"), "{err}");

    let err = desk.answer_interrupt("t", seq, deep, &alice()).unwrap_err();
    assert!(matches!(err, AnswerError::Value(_)), "{err}");
    assert!(err.to_string().contains("nests deeper"), "{err}");
    assert!(store.list_audit("t").unwrap().iter().all(|e| e.kind != ANSWER_KIND));
    // A value of the right shape is still taken.
    desk.answer_interrupt("t", seq, json!({ "approve": true, "note": "ok" }), &alice()).unwrap();
    let done = app(&store).runner(&deps).thread("t").resume().await.unwrap();
    assert_eq!(done.state.verdict.as_deref(), Some("ok"));
}

/// The answer holds the thread while it checks and writes: a `resume_with` that starts between
/// the answer's checks and its write is refused as busy (before, it took the thread and moved
/// it on with its own value while the person was told their answer was recorded); once the
/// answer is written, a plain resume continues with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cannot_take_the_thread_while_an_answer_is_being_recorded() {
    let inner = store();
    let app = gated::graph().app().store(Arc::clone(&inner));
    let gate = Arc::new(Gate::default());
    app.runner(&*gate).thread("g").run(Draft::default()).await.unwrap();
    let (seq, _) = desk(&inner).waiting_interrupt("g").unwrap();

    // Just before the answer's audit entry is written, the app resumes the thread with its own
    // value.
    let tried = Arc::new(std::sync::Mutex::new(None));
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&inner));
    hooked.before_audit = Some({
        let (app, gate, tried) = (app.clone(), Arc::clone(&gate), Arc::clone(&tried));
        let handle = tokio::runtime::Handle::current();
        Box::new(move |_thread: &str, _entry: &agentflow_store::NewAuditEntry| {
            let (app, gate) = (app.clone(), Arc::clone(&gate));
            let run = handle.block_on(async move {
                tokio::spawn(async move {
                    app.runner(&*gate)
                        .thread("g")
                        .resume_with(Review { approve: true, note: "from the app".into() })
                        .await
                })
                .await
                .unwrap()
            });
            *tried.lock().unwrap() = Some(run.map(|r| r.outcome));
        })
    });
    let hooked: Arc<dyn Store> = Arc::new(hooked);
    let answered = tokio::task::spawn_blocking(move || {
        desk(&hooked).answer_interrupt("g", seq, json!({ "approve": false, "note": "from the inbox" }), &alice())
    })
    .await
    .unwrap();
    answered.expect("the answer is recorded");
    let tried = tried.lock().unwrap().take().expect("the app tried to resume while the answer was recorded");
    assert!(
        matches!(tried, Err(RunError::ThreadBusy { ref holder, .. }) if holder.starts_with("answer:")),
        "{tried:?}"
    );

    // The thread is free again, and continues with the recorded answer.
    let done = app.runner(&*gate).thread("g").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.verdict.as_deref(), Some("from the inbox"));
}
