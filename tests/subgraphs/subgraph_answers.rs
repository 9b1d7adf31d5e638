//! Subgraph questions and their answers: one resume value per node run, answers given from
//! elsewhere or overtaken, and a child that moved on in a step that failed.

use crate::subgraph_tree::*;
use crate::support::stores::store;
use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{Outcome, PendingKind, Run, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;

// ------------------------------------------------ one resume value per node run

#[graph(state = Desk, deps = Counts, start = check)]
pub mod double_check {
    use super::*;

    /// The review child asks first; then the node asks on its own.
    #[node(goto = [END], subgraphs = [review], interrupt)]
    async fn check(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let reviewed = cx.subgraph(review::graph(), Review { draft: s.topic.clone(), verdict: String::new() }).await?;
        let publish: bool = cx.interrupt(json!({ "verdict": reviewed.verdict }))?;
        Ok(goto!(END, Desk::update().report(format!("{} {publish}", reviewed.verdict))))
    }
}

#[tokio::test]
async fn a_resume_value_goes_to_the_child_that_waits_and_the_nodes_own_question_waits_for_the_next() {
    let counts = Counts::default();
    let app = double_check::graph().app().store(store());
    let run = app.runner(&counts).thread("d").run(desk("draft")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "check/ask");

    // The value answers the child; the node's own question then pauses the run.
    let run = app.runner(&counts).thread("d").resume_with("fine").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "verdict": "fine" }));

    let done = app.runner(&counts).thread("d").resume_with(true).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "fine true");
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2, "the completed review ran again");
}

/// The same node run by a worker, its questions answered from elsewhere (as the inbox answers):
/// the first answer wakes the parked run and goes to the child; the node's own question then
/// parks the run again at the same checkpoint, and the used answer neither wakes it nor answers
/// that question. The second answer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gives_an_answer_once_and_the_next_question_at_the_same_checkpoint_waits_for_its_own() {
    use agentflow_store::RunWait;
    use std::time::{Duration, Instant};
    let (app, approvals, stop, handle) = worker_running(double_check::graph(), "w", &desk("draft"));
    let parked = |claims: u32| {
        let app = app.clone();
        async move {
            let began = Instant::now();
            loop {
                let runs = app.live_runs().unwrap();
                if runs.iter().any(|r| r.wait == RunWait::Answer && r.claims == claims && r.lease.is_none()) {
                    return;
                }
                assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for claim {claims} to park");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let answer = |value: Value| {
        let (seq, asks) = approvals.waiting_interrupt("w").unwrap();
        approvals.answer_interrupt("w", seq, value, &Approver::new("ops", ["x"])).unwrap();
        (seq, asks)
    };

    parked(1).await;
    let (first_seq, asks) = answer(json!("fine"));
    assert_eq!(asks.payload["path"], "check/ask");
    parked(2).await;
    // The node asks its own question where the child's was answered; nothing wakes the run.
    let (seq, asks) = approvals.waiting_interrupt("w").unwrap();
    assert_eq!((seq, &asks.payload), (first_seq, &json!({ "verdict": "fine" })));
    assert_eq!(approvals.recorded_answer("w").unwrap(), None, "the first answer is used");
    // And the log says so, once, naming the checkpoint whose answer it was.
    let used: Vec<_> = app.audit_log("w").unwrap().into_iter().filter(|e| e.kind == "interrupt.answer_used").collect();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0].detail["checkpoint"], first_seq, "{:?}", used[0].detail);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.live_runs().unwrap()[0].claims, 2, "parked, not claimed again");

    answer(json!(true));
    let began = Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for the run to complete");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.completed, report.failed), (3, 1, 0), "{report:?}");
    assert_eq!(app.state("w").unwrap().unwrap().state.report, "fine true");
}

/// An answer recorded from elsewhere, then overtaken by an explicit `resume_with`: when the run
/// asks again at the same checkpoint, the recorded answer answers neither that question nor the
/// next plain resume.
#[tokio::test]
async fn an_answer_overtaken_by_resume_with_does_not_answer_the_next_question() {
    use agentflow::approval::ApprovalDesk;
    let store = store();
    let counts = Counts::default();
    let app = double_check::graph().app().store(Arc::clone(&store));
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let run = app.runner(&counts).thread("o").run(desk("draft")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let (seq, _) = approvals.waiting_interrupt("o").unwrap();
    approvals.answer_interrupt("o", seq, json!("recorded"), &Approver::new("ops", ["x"])).unwrap();

    // The explicit value wins; the node's own question then waits at the same checkpoint.
    let run = app.runner(&counts).thread("o").resume_with("given").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "verdict": "given" }));
    assert_eq!(approvals.waiting_interrupt("o").unwrap().0, seq);
    assert_eq!(approvals.recorded_answer("o").unwrap(), None, "the recorded answer is used");
    let refused = app.runner(&counts).thread("o").resume().await;
    assert!(matches!(refused, Err(agentflow::RunError::ValueRequired { .. })), "{refused:?}");
    let done = app.runner(&counts).thread("o").resume_with(true).await.unwrap();
    assert_eq!(done.state.report, "given true");
}

/// An answer to the child's question that was never marked used (the process died right after
/// the child took it and asked its next question at the same checkpoint) names the question it
/// answers, so it does not answer the next one.
#[tokio::test]
async fn an_answer_left_unmarked_does_not_answer_the_next_question_at_its_checkpoint() {
    use agentflow::approval::{ANSWER_KIND, ApprovalDesk};
    use agentflow_store::NewAuditEntry;
    let store = store();
    let counts = Counts::default();
    let app = double_check::graph().app().store(Arc::clone(&store));
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let run = app.runner(&counts).thread("k").run(desk("draft")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let first_question = pending[0].payload.clone();
    let (seq, _) = approvals.waiting_interrupt("k").unwrap();
    let run = app.runner(&counts).thread("k").resume_with("fine").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(approvals.waiting_interrupt("k").unwrap().0, seq, "the next question waits at the same checkpoint");

    // The answer to the first question, as recorded, with no mark after it.
    let detail = json!({
        "checkpoint": seq, "node": "check", "value": "stale",
        "asks": agentflow::tool::args_hash(&first_question),
    });
    store.append_audit("k", NewAuditEntry::new(1, "ops", ANSWER_KIND, detail)).unwrap();
    assert_eq!(approvals.recorded_answer("k").unwrap(), None, "it answers another question");
    let refused = app.runner(&counts).thread("k").resume().await;
    assert!(matches!(refused, Err(agentflow::RunError::ValueRequired { .. })), "{refused:?}");
    // The question asked now takes its own answer.
    approvals.answer_interrupt("k", seq, json!(true), &Approver::new("ops", ["x"])).unwrap();
    let done = app.runner(&counts).thread("k").resume().await.unwrap();
    assert_eq!(done.state.report, "fine true");
}

/// An answer typed for the question a person read is not recorded for the next question the
/// thread asked at the same checkpoint meanwhile (as the inbox answers: `answer_question`).
#[tokio::test]
async fn an_answer_to_a_question_the_thread_no_longer_asks_is_refused() {
    use agentflow::approval::{AnswerError, ApprovalDesk};
    let store = store();
    let counts = Counts::default();
    let app = double_check::graph().app().store(Arc::clone(&store));
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    app.runner(&counts).thread("n").run(desk("draft")).await.unwrap();
    // A person reads the child's question ...
    let (seq, read) = approvals.waiting_interrupt("n").unwrap();
    assert_eq!(read.payload["path"], "check/ask");
    // ... while the app answers it and the node asks its own question at the same checkpoint.
    app.runner(&counts).thread("n").resume_with("fine").await.unwrap();
    let (now_seq, asks) = approvals.waiting_interrupt("n").unwrap();
    assert_eq!(now_seq, seq);
    let ops = Approver::new("ops", ["x"]);
    let refused = approvals.answer_question("n", seq, &read.question_id(), json!("meant for the child"), &ops);
    assert!(matches!(refused, Err(AnswerError::QuestionChanged { .. })), "{refused:?}");
    assert_eq!(approvals.recorded_answer("n").unwrap(), None, "nothing was recorded");
    approvals.answer_question("n", seq, &asks.question_id(), json!(true), &ops).unwrap();
    let done = app.runner(&counts).thread("n").resume().await.unwrap();
    assert_eq!(done.state.report, "fine true");
}

#[graph(state = Desk, deps = Counts, start = brief)]
pub mod ask_then_review {
    use super::*;

    /// The node asks first; then its review child asks.
    #[node(goto = [END], subgraphs = [review], interrupt)]
    async fn brief(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let angle: String = cx.interrupt(json!({ "angle for": s.topic }))?;
        let draft = format!("{} from {angle}", s.topic);
        let reviewed = cx.subgraph(review::graph(), Review { draft, verdict: String::new() }).await?;
        Ok(goto!(END, Desk::update().report(format!("{angle}: {}", reviewed.verdict))))
    }
}

/// A node that asks, then runs a subgraph that asks too: its own answer is kept when the child's
/// question pauses the step, so the next value answers the child instead of the node again.
#[tokio::test]
async fn a_nodes_own_answer_is_kept_when_its_subgraph_then_asks_and_the_next_value_goes_to_the_child() {
    let counts = Counts::default();
    let app = ask_then_review::graph().app().store(store());
    let run = app.runner(&counts).thread("b").run(desk("rates")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "angle for": "rates" }));

    let run = app.runner(&counts).thread("b").resume_with("savers").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "brief/ask", "{pending:?}");
    assert_eq!(pending[0].payload["draft"], "rates from savers");

    // Before the answer was kept, this value went to the node's own question again and the
    // child asked once more, for ever.
    let done = app.runner(&counts).thread("b").resume_with("publish").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "savers: publish");
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2, "the child asked once and ran once more");
}

/// After a manual update of the paused parent, its node asks its own question anew, and the
/// value given for the child's question shown before is not taken as the node's answer.
#[tokio::test]
async fn after_update_state_the_node_asks_anew_and_takes_no_value_meant_for_its_child() {
    let counts = Counts::default();
    let app = ask_then_review::graph().app().store(store());
    app.runner(&counts).thread("u").run(desk("rates")).await.unwrap();
    let run = app.runner(&counts).thread("u").resume_with("savers").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "brief/ask");

    app.update_state("u", Desk::update().topic("mortgages".into()), "ops").unwrap();
    let run = app.runner(&counts).thread("u").resume_with("publish").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "angle for": "mortgages" }), "the node asks anew");

    let run = app.runner(&counts).thread("u").resume_with("borrowers").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    // The child is the same thread (the update keeps the step's children), still asking.
    assert_eq!(
        (&pending[0].payload["path"], &pending[0].payload["draft"]),
        (&json!("brief/ask"), &json!("rates from savers"))
    );
    let done = app.runner(&counts).thread("u").resume_with("publish").await.unwrap();
    assert_eq!(done.state.report, "borrowers: publish");
}

/// The same answered from elsewhere (as the inbox answers) and run by a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_continues_a_node_that_asked_before_its_subgraph_asked() {
    use agentflow_store::RunWait;
    use std::time::{Duration, Instant};
    let (app, approvals, stop, handle) = worker_running(ask_then_review::graph(), "bw", &desk("rates"));
    // Asked, and the run parked for the answer (until then, the worker holds the thread).
    let asked = |what: &'static str| {
        let (approvals, app) = (&approvals, &app);
        async move {
            let began = Instant::now();
            loop {
                let parked = app.live_runs().unwrap().iter().any(|r| r.wait == RunWait::Answer && r.lease.is_none());
                if let Ok((seq, asks)) = approvals.waiting_interrupt("bw")
                    && asks.payload.to_string().contains(what)
                    && parked
                {
                    return seq;
                }
                assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for {what:?} to be asked");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let ops = Approver::new("ops", ["x"]);
    let seq = asked("angle for").await;
    approvals.answer_interrupt("bw", seq, json!("savers"), &ops).unwrap();
    let seq = asked("rates from savers").await;
    approvals.answer_interrupt("bw", seq, json!("publish"), &ops).unwrap();
    let began = Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for the run to complete");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.completed, report.failed), (1, 0), "{report:?}");
    assert_eq!(app.state("bw").unwrap().unwrap().state.report, "savers: publish");
}

// ------------------------------------------------ a child that moves on in a step that fails

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Two {
    #[reduce(append)]
    answers: Vec<String>,
}

#[graph(state = Two, deps = Counts, start = first)]
pub mod two_questions {
    use super::*;

    #[node(goto = [second], interrupt)]
    async fn first(_s: &Two, cx: &Ctx<Counts>) -> Result<Step<Two>, NodeError> {
        let a: String = cx.interrupt(json!({ "q": 1 }))?;
        Ok(goto!(second, Two::update().answers(vec![a])))
    }

    #[node(goto = [END], interrupt)]
    async fn second(_s: &Two, cx: &Ctx<Counts>) -> Result<Step<Two>, NodeError> {
        let a: String = cx.interrupt(json!({ "q": 2 }))?;
        Ok(goto!(END, Two::update().answers(vec![a])))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pair {
    child: Vec<String>,
    vetted: String,
}

#[graph(state = Pair, deps = Counts, start = split)]
pub mod beside_a_vet {
    use super::*;

    #[node(goto = [delegate, vet])]
    async fn split(_s: &Pair) -> Step<Pair> {
        goto!([delegate, vet], Pair::update())
    }

    #[node(goto = [END], subgraphs = [two_questions], writes = [child])]
    async fn delegate(_s: &Pair, cx: &Ctx<Counts>) -> Result<Step<Pair>, NodeError> {
        let done = cx.subgraph(two_questions::graph(), Two::default()).await?;
        Ok(goto!(END, Pair::update().child(done.answers)))
    }

    /// Asks, and refuses a bad value.
    #[node(goto = [END], interrupt, writes = [vetted])]
    async fn vet(_s: &Pair, cx: &Ctx<Counts>) -> Result<Step<Pair>, NodeError> {
        let v: String = cx.interrupt(json!({ "vet": "?" }))?;
        if v == "bad" {
            return Err(NodeError::fatal("bad value"));
        }
        Ok(goto!(END, Pair::update().vetted(v)))
    }
}

/// Answers each question thread `thread` waits on with `value`, one at a time by its id; the
/// run that the last answer continued.
async fn answer_each<S: State>(app: &App<S, Counts>, counts: &Counts, thread: &str, value: &str) -> Run<S> {
    let asked = app.pending(thread).unwrap();
    let mut last = None;
    for p in asked.iter().filter(|p| p.kind == PendingKind::Interrupt) {
        last = Some(app.runner(counts).thread(thread).resume_answering(&p.question_id(), value).await.unwrap());
    }
    last.expect("the thread asks something")
}

/// What thread `thread` waits for at its latest checkpoint, as stored (what the inbox, the
/// `agentflow` tool and an answer given from elsewhere read; `App::pending` shows it while the
/// thread is paused, and the questions of a failed thread).
fn stored_waits(store: &Arc<dyn Store>, thread: &str) -> Vec<Value> {
    let seq = store.latest_checkpoint(thread).unwrap().unwrap().seq;
    let writes = store.pending_writes(thread, seq).unwrap();
    let w = writes.iter().find(|w| w.node == "__interrupts__").expect("what the thread waits for");
    serde_json::from_slice(&w.value).unwrap()
}

/// The child's first question and the sibling are each answered with a value the sibling refuses:
/// the step fails, but the child moved on to its second question, durably. What the thread waits
/// for says so (an answer given from elsewhere is read against it), and the next answer to it
/// answers that one.
#[tokio::test]
async fn a_child_that_moved_on_in_a_step_that_failed_is_shown_waiting_at_its_new_question() {
    let counts = Counts::default();
    let store = store();
    let app = beside_a_vet::graph().app().store(Arc::clone(&store));
    let run = app.runner(&counts).thread("v").run(Pair::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending.len(), 2, "{pending:?}");
    let run = answer_each(&app, &counts, "v", "bad").await;
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);

    let waits = stored_waits(&store, "v");
    let child = waits.iter().find(|p| p["node"] == "delegate").expect("the child still waits");
    assert_eq!(child["payload"]["path"], "delegate/second", "{waits:?}");
    assert!(waits.iter().any(|p| p["node"] == "vet"), "{waits:?}");

    let done = answer_each(&app, &counts, "v", "good").await;
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.child, done.state.vetted.as_str()), (vec!["bad".to_string(), "good".to_string()], "good"));
}

#[graph(state = Desk, deps = Counts, start = publish)]
pub mod flaky_after_review {
    use super::*;

    /// The review child asks once; then the node calls a service that may be down.
    #[node(goto = [END], subgraphs = [review])]
    async fn publish(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let reviewed = cx.subgraph(review::graph(), Review { draft: s.topic.clone(), verdict: String::new() }).await?;
        if cx.deps().fail.load(Ordering::SeqCst) {
            return Err(NodeError::fatal("the publishing service is down"));
        }
        Ok(goto!(END, Desk::update().report(reviewed.verdict)))
    }
}

/// The child takes the value and completes, durably; then the node fails. Nothing waits for a
/// value any more: a plain resume (once the service is back) completes, with the child's answer.
#[tokio::test]
async fn a_node_that_fails_after_its_child_took_the_value_does_not_ask_for_another() {
    let counts = Counts::default();
    let store = store();
    let app = flaky_after_review::graph().app().store(Arc::clone(&store));
    let run = app.runner(&counts).thread("p").run(desk("draft")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    counts.fail.store(true, Ordering::SeqCst);
    let run = app.runner(&counts).thread("p").resume_with("ship it").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    assert!(stored_waits(&store, "p").is_empty(), "{:?}", stored_waits(&store, "p"));

    counts.fail.store(false, Ordering::SeqCst);
    let done = app.runner(&counts).thread("p").resume().await.unwrap();
    assert_eq!((done.outcome, done.state.report.as_str()), (Outcome::Completed, "ship it"));
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2, "the review asked, then took the value; no third run");
}

#[graph(state = Pair, deps = Counts, start = wrap)]
pub mod around_a_vet {
    use super::*;

    #[node(goto = [END], subgraphs = [beside_a_vet])]
    async fn wrap(_s: &Pair, cx: &Ctx<Counts>) -> Result<Step<Pair>, NodeError> {
        let done = cx.subgraph(beside_a_vet::graph(), Pair::default()).await?;
        Ok(goto!(END, Pair::update().child(done.child).vetted(done.vetted)))
    }
}

/// One level further down, the child's step fails while one of its nodes still waits for a value.
/// The child is `failed`, yet it waits: resuming the parent shows its question again (instead of
/// failing with "a value is required" on every resume), and the next value reaches it. The
/// child's step asks two questions; its parent asks them one after the other, each answer going
/// to its own question, and the child goes on once both have theirs.
#[tokio::test]
async fn a_child_whose_step_failed_while_it_waited_gets_the_next_value() {
    let counts = Counts::default();
    let app = around_a_vet::graph().app().store(store());
    let run = app.runner(&counts).thread("w").run(Pair::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "wrap/delegate/first", "{pending:?}");
    // The child's first question answered, its second (the vet's) is asked next.
    let run = app.runner(&counts).thread("w").resume_with("bad").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "wrap/vet", "{pending:?}");
    let run = app.runner(&counts).thread("w").resume_with("bad").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    let run = app.runner(&counts).thread("w").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].node, "wrap", "{pending:?}");
    let run = app.runner(&counts).thread("w").resume_with("good").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let done = app.runner(&counts).thread("w").resume_with("good").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.child, done.state.vetted.as_str()), (vec!["bad".to_string(), "good".to_string()], "good"));
}
