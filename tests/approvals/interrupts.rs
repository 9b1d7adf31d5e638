//! Human in the loop: `cx.interrupt`, resume with a value, static breakpoints.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{PendingKind, RedbStore, RunError, Store};
use serde::{Deserialize, Serialize};

/// How long the nodes' durable timers run: long enough that a loaded machine has parked the
/// node on its timer before it is due (a due timer does not pause the run).
const NAP: std::time::Duration = std::time::Duration::from_millis(1500);

/// Waits until the thread's durable timer is due.
async fn until_due(store: &Arc<dyn Store>, thread: &str) {
    until_past(store.thread_timer(thread).unwrap().expect("the thread has a timer armed")).await;
}

/// Waits until the wall-clock time `at` (unix ms) is due.
async fn until_past(at: u64) {
    while agentflow::timer::now_ms() < at {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

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

    #[node(goto = [send, END], interrupt)]
    async fn review(s: &Draft, cx: &Ctx<Deps>) -> Result<Step<Draft>, NodeError> {
        cx.deps().reviews.fetch_add(1, Ordering::SeqCst);
        let r: Review = cx.interrupt(serde_json::json!({ "draft": s.text }))?;
        let u = Draft::update().verdict(Some(r.note)).trail(vec!["review".into()]);
        Ok(if r.approve { goto!(send, u) } else { goto!(END, u) })
    }

    #[node(goto = [END])]
    async fn send(_s: &Draft, deps: &Deps) -> Step<Draft> {
        deps.sends.fetch_add(1, Ordering::SeqCst);
        goto!(END, Draft::update().trail(vec!["send".into()]))
    }
}

fn graph() -> App<Draft, Deps> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    review_flow::graph().app().store(store)
}

#[tokio::test]
async fn interrupt_pauses_and_resume_with_continues_the_same_thread() {
    let g = graph();
    let deps = Deps::default();
    let run = g.runner(&deps).thread("r1").run(Draft::default()).await.unwrap();
    let Outcome::Interrupted { thread, pending } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(thread.as_deref(), Some("r1"));
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].node, "review");
    assert_eq!(pending[0].kind, PendingKind::Interrupt);
    assert_eq!(pending[0].payload, serde_json::json!({ "draft": "hello" }));
    assert_eq!(g.thread("r1").unwrap().unwrap().status, agentflow::persist::ThreadStatus::Interrupted);
    assert_eq!(g.pending("r1").unwrap(), pending.clone());

    let done =
        g.runner(&deps).thread("r1").resume_with(Review { approve: true, note: "ship it".into() }).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.verdict.as_deref(), Some("ship it"));
    assert_eq!(done.state.trail, vec!["write", "review", "send"]);
    // The review node ran again from its start on resume.
    assert_eq!(deps.reviews.load(Ordering::SeqCst), 2);
    assert_eq!(deps.sends.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_waiting_thread_needs_a_value_and_a_running_one_takes_none() {
    let g = graph();
    let deps = Deps::default();
    g.runner(&deps).thread("r2").run(Draft::default()).await.unwrap();
    let err = g.runner(&deps).thread("r2").resume().await.unwrap_err();
    assert!(matches!(&err, RunError::ValueRequired { node, .. } if node == "review"), "{err}");
    // Refusals release the thread: the right call still works.
    let run = g.runner(&deps).thread("r2").resume_with(Review { approve: false, note: "no".into() }).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(deps.sends.load(Ordering::SeqCst), 0);
    let err = g.runner(&deps).thread("r2").resume_with("again").await.unwrap_err();
    assert!(matches!(err, RunError::Resume(_)), "{err}");
}

#[tokio::test]
async fn a_value_of_the_wrong_shape_is_a_clear_error_and_the_thread_can_be_resumed_again() {
    let g = graph();
    let deps = Deps::default();
    g.runner(&deps).thread("r3").run(Draft::default()).await.unwrap();
    let run = g.runner(&deps).thread("r3").resume_with(serde_json::json!({ "approve": "yes" })).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "review");
    assert!(error.message.contains("does not have the shape it expects"), "{error}");
    let run = g.runner(&deps).thread("r3").resume_with(Review { approve: true, note: "ok".into() }).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
}

#[tokio::test]
async fn breakpoints_pause_before_and_after_named_nodes() {
    let g = graph();
    let deps = Deps::default();
    let run = g.runner(&deps).thread("r4").interrupt_before(["review"]).run(Draft::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!((pending[0].node.as_str(), pending[0].kind), ("review", PendingKind::Before));
    assert_eq!(deps.reviews.load(Ordering::SeqCst), 0);
    // Continue with no value: the breakpoint is passed, the node's own interrupt comes next.
    let run = g.runner(&deps).thread("r4").interrupt_before(["review"]).resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Interrupt);
    let run = g
        .runner(&deps)
        .thread("r4")
        .interrupt_after(["send"])
        .resume_with(Review { approve: true, note: "ok".into() })
        .await
        .unwrap();
    // `send` is the last node: nothing is left to pause before, so the run completes.
    assert_eq!(run.outcome, Outcome::Completed);

    let err = g.runner(&deps).thread("r5").interrupt_before(["reveiw"]).run(Draft::default()).await.unwrap_err();
    assert!(err.to_string().contains("breakpoint on unknown node `reveiw`"), "{err}");
}

#[tokio::test]
async fn without_a_store_an_interrupt_still_ends_the_run() {
    let g = review_flow::graph();
    let deps = Deps::default();
    let run = g.run(Draft::default(), &deps).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { thread: None, .. }), "{:?}", run.outcome);
}

// ------------------------------------------------ an answer the node keeps

/// Disks the `wipe` tool actually wiped.
static WIPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Disk {
    disk: String,
}

/// Wipes a disk. Irreversible.
#[tool(risk = irreversible)]
async fn wipe(args: Disk) -> Result<serde_json::Value, ToolError> {
    WIPED.lock().unwrap().push(args.disk.clone());
    Ok(serde_json::json!({ "wiped": args.disk }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Chore {
    target: String,
    done: String,
}

#[derive(Default)]
pub struct Asks {
    asked: AtomicU32,
}

#[graph(state = Chore, deps = Asks, start = act)]
mod ask_then_wipe {
    use super::*;

    /// Asks which disk, then wipes it: the wipe waits for an approval.
    #[node(goto = [END], interrupt, tools = [wipe])]
    async fn act(s: &Chore, cx: &Ctx<Asks>) -> Result<Step<Chore>, NodeError> {
        cx.deps().asked.fetch_add(1, Ordering::SeqCst);
        let disk: String = cx.interrupt(serde_json::json!({ "which disk of": s.target }))?;
        let call = agentflow::message::ToolCall::new("w1", "wipe", serde_json::json!({ "disk": disk }));
        let seen = cx.call_tool(&call).await?;
        Ok(goto!(END, Chore::update().done(seen.body["result"]["wiped"].as_str().unwrap_or("").to_string())))
    }
}

#[graph(state = Chore, deps = Asks, start = act)]
mod ask_then_nap {
    use super::*;

    /// Asks when, then waits on a durable timer before acting.
    #[node(goto = [END], interrupt, sleep)]
    async fn act(s: &Chore, cx: &Ctx<Asks>) -> Result<Step<Chore>, NodeError> {
        cx.deps().asked.fetch_add(1, Ordering::SeqCst);
        let when: String = cx.interrupt(serde_json::json!({ "when for": s.target }))?;
        cx.sleep(NAP).await?;
        Ok(goto!(END, Chore::update().done(when)))
    }
}

/// The node's question is answered; its step then pauses for an approval. Approved, the node
/// runs again and gets the same answer back: it does not ask again, and the approved call runs.
#[tokio::test]
async fn an_answer_given_before_an_approval_pause_is_kept_for_the_nodes_rerun() {
    use agentflow::approval::{Approver, RoleAuthorizer};
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = ask_then_wipe::graph().app().store(store);
    let desk = app.approvals(RoleAuthorizer::new().role_for(agentflow::tool::Risk::Irreversible, "ops")).unwrap();
    let deps = Asks::default();
    let chore = Chore { target: "db-7".into(), done: String::new() };
    let run = app.runner(&deps).thread("wipe-1").owner("agent:janitor").run(chore).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Interrupt);

    let run = app.runner(&deps).thread("wipe-1").resume_with("sdb").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    assert_eq!(pending[0].payload["args"]["disk"], "sdb");
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    desk.approve(&id, &Approver::new("alice", ["ops"])).unwrap();

    let done = app.runner(&deps).thread("wipe-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "the node asked again instead of using its answer");
    assert_eq!(done.state.done, "sdb");
    assert_eq!(WIPED.lock().unwrap().iter().filter(|d| *d == "sdb").count(), 1);
    assert_eq!(deps.asked.load(Ordering::SeqCst), 3, "ran three times, asked once");
}

/// The same with a durable timer between the answer and the node's end.
#[tokio::test]
async fn an_answer_given_before_a_sleep_is_kept_for_the_nodes_rerun_after_it() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = ask_then_nap::graph().app().store(Arc::clone(&store));
    let deps = Asks::default();
    let chore = Chore { target: "backup".into(), done: String::new() };
    let run = app.runner(&deps).thread("nap-1").run(chore).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&deps).thread("nap-1").resume_with("tonight").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    until_due(&store, "nap-1").await;
    let done = app.runner(&deps).thread("nap-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "the node asked again instead of using its answer");
    assert_eq!(done.state.done, "tonight");
}

// ------------------------------------------------ an answer answers its own step

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Rounds {
    rounds: u32,
    #[reduce(append)]
    answers: Vec<String>,
}

#[graph(state = Rounds, deps = Asks, start = ask, max_steps = 20)]
mod ask_nap_loop {
    use super::*;

    /// Asks a question each round; in the first round it then waits on a durable timer.
    #[node(goto = [tally], interrupt, sleep)]
    async fn ask(s: &Rounds, cx: &Ctx<Asks>) -> Result<Step<Rounds>, NodeError> {
        cx.deps().asked.fetch_add(1, Ordering::SeqCst);
        let a: String = cx.interrupt(serde_json::json!({ "round": s.rounds }))?;
        if s.rounds == 0 {
            cx.sleep(NAP).await?;
        }
        Ok(goto!(tally, Rounds::update().answers(vec![a])))
    }

    #[node(goto = [ask, END])]
    async fn tally(s: &Rounds) -> Step<Rounds> {
        let u = Rounds::update().rounds(s.rounds + 1);
        if s.rounds + 1 < 2 { goto!(ask, u) } else { goto!(END, u) }
    }
}

#[graph(state = Rounds, deps = Asks, start = ask, max_steps = 20)]
mod ask_loop {
    use super::*;

    /// Asks a question each round, nothing else.
    #[node(goto = [tally], interrupt)]
    async fn ask(s: &Rounds, cx: &Ctx<Asks>) -> Result<Step<Rounds>, NodeError> {
        cx.deps().asked.fetch_add(1, Ordering::SeqCst);
        let a: String = cx.interrupt(serde_json::json!({ "round": s.rounds }))?;
        Ok(goto!(tally, Rounds::update().answers(vec![a])))
    }

    #[node(goto = [ask, END])]
    async fn tally(s: &Rounds) -> Step<Rounds> {
        let u = Rounds::update().rounds(s.rounds + 1);
        if s.rounds + 1 < 2 { goto!(ask, u) } else { goto!(END, u) }
    }
}

/// Round 0's answer was kept across a sleep. Round 1 (a later step, a new checkpoint) asks a
/// new question: it must pause for it, not get round 0's answer back.
#[tokio::test]
async fn a_kept_answer_does_not_answer_the_nodes_question_in_a_later_step() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = ask_nap_loop::graph().app().store(Arc::clone(&store));
    let deps = Asks::default();
    let run = app.runner(&deps).thread("l").run(Rounds::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&deps).thread("l").resume_with("first").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    until_due(&store, "l").await;
    let run = app.runner(&deps).thread("l").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else {
        panic!("round 1 did not ask: outcome {}, answers {:?}", run.outcome, run.state.answers)
    };
    assert_eq!(pending[0].payload, serde_json::json!({ "round": 1 }));
}

/// A value given with `resume_with` answers the question of the step it resumes, not the same
/// node's question in a later step.
#[tokio::test]
async fn a_resume_value_does_not_answer_the_nodes_question_in_a_later_step() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = ask_loop::graph().app().store(store);
    let deps = Asks::default();
    let run = app.runner(&deps).thread("l").run(Rounds::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&deps).thread("l").resume_with("first").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else {
        panic!("round 1 did not ask: outcome {}, answers {:?}", run.outcome, run.state.answers)
    };
    assert_eq!(pending[0].payload, serde_json::json!({ "round": 1 }));
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    amount: u64,
    #[reduce(append)]
    asked_about: Vec<u64>,
    approved: Option<u64>,
}

#[graph(state = Pay, deps = Asks, start = confirm)]
mod confirm_then_wait {
    use super::*;

    /// Asks a person to confirm the amount, then waits on a timer before paying.
    #[node(goto = [END], interrupt, sleep)]
    async fn confirm(s: &Pay, cx: &Ctx<Asks>) -> Result<Step<Pay>, NodeError> {
        let ok: bool = cx.interrupt(serde_json::json!({ "pay": s.amount }))?;
        cx.sleep(NAP).await?;
        Ok(goto!(END, Pay::update().approved(ok.then_some(s.amount))))
    }
}

/// The person confirmed 100. An operator then updates the paused thread to 1_000_000: the
/// node's question is now another one, so its re-run asks it instead of reusing `true`.
#[tokio::test]
async fn a_kept_answer_does_not_answer_a_question_changed_by_an_update_of_the_paused_state() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirm_then_wait::graph().app().store(Arc::clone(&store));
    let deps = Asks::default();
    let run = app.runner(&deps).thread("p").run(Pay { amount: 100, ..Pay::default() }).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, serde_json::json!({ "pay": 100 }));
    let run = app.runner(&deps).thread("p").resume_with(true).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    until_due(&store, "p").await;
    app.update_state("p", Pay::update().amount(1_000_000), "ops").unwrap();
    let run = app.runner(&deps).thread("p").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else {
        panic!("the new amount was never confirmed, yet: outcome {}, approved {:?}", run.outcome, run.state.approved)
    };
    assert_eq!(pending[0].payload, serde_json::json!({ "pay": 1_000_000 }));
    // Refused; the node run's timer is the one it set before, already due.
    let done = app.runner(&deps).thread("p").resume_with(false).await.unwrap();
    assert_eq!((done.outcome, done.state.approved), (Outcome::Completed, None));
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pair {
    picked: String,
    checked: String,
}

#[graph(state = Pair, deps = Asks, start = split)]
mod two_askers {
    use super::*;

    #[node(goto = [ask, check])]
    async fn split(_s: &Pair) -> Step<Pair> {
        goto!([ask, check], Pair::update())
    }

    /// Asks, then waits on a timer.
    #[node(goto = [END], interrupt, sleep, writes = [picked])]
    async fn ask(_s: &Pair, cx: &Ctx<Asks>) -> Result<Step<Pair>, NodeError> {
        let v: String = cx.interrupt(serde_json::json!({ "pick": "?" }))?;
        cx.sleep(NAP).await?;
        Ok(goto!(END, Pair::update().picked(v)))
    }

    /// Asks, and refuses a bad value.
    #[node(goto = [END], interrupt, writes = [checked])]
    async fn check(_s: &Pair, cx: &Ctx<Asks>) -> Result<Step<Pair>, NodeError> {
        let v: String = cx.interrupt(serde_json::json!({ "check": "?" }))?;
        if v == "bad" {
            return Err(NodeError::fatal("bad value"));
        }
        Ok(goto!(END, Pair::update().checked(v)))
    }
}

/// Each waiting node gets its own answer; `check` refuses its value and the step fails. The
/// thread still waits in `interrupt` for both (a failed step keeps no new answer, and the
/// answers given are spent): answered again, `ask` gets its answer too.
#[tokio::test]
async fn a_value_given_after_a_failed_step_reaches_every_node_that_waits_for_it() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = two_askers::graph().app().store(Arc::clone(&store));
    let deps = Asks::default();
    let run = app.runner(&deps).thread("t").run(Pair::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let id = |node: &str| pending.iter().find(|p| p.node == node).unwrap().question_id();
    let (ask, check) = (id("ask"), id("check"));
    let run = app.runner(&deps).thread("t").resume_answering(&ask, "good").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&deps).thread("t").resume_answering(&check, "bad").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    let waiting: Vec<String> = app.pending("t").unwrap().iter().map(|p| p.node.clone()).collect();
    assert_eq!(waiting, ["ask", "check"]);
    app.runner(&deps).thread("t").resume_answering(&ask, "good").await.unwrap();
    let run = app.runner(&deps).thread("t").resume_answering(&check, "good").await.unwrap();
    let run = match run.outcome {
        Outcome::Sleeping { .. } => {
            until_due(&store, "t").await;
            app.runner(&deps).thread("t").resume().await.unwrap()
        }
        _ => run,
    };
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!((run.state.picked.as_str(), run.state.checked.as_str()), ("good", "good"));
}

/// A runner that stops before `act` stops there once per step: resumed after the node asked
/// (or slept), the step goes on instead of stopping at the breakpoint again and dropping the
/// value (or the timer).
#[tokio::test]
async fn a_breakpoint_before_a_node_does_not_stop_the_step_again_once_the_node_paused_inside() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = ask_then_nap::graph().app().store(Arc::clone(&store));
    let deps = Asks::default();
    let runner = || app.runner(&deps).thread("bp").interrupt_before(["act"]);
    let run = runner().run(Chore { target: "logs".into(), done: String::new() }).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Before);
    let run = runner().resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Interrupt);
    let run = runner().resume_with("at noon").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "stopped at the breakpoint again: {}", run.outcome);
    until_due(&store, "bp").await;
    let done = runner().resume().await.unwrap();
    assert_eq!((done.outcome, done.state.done.as_str()), (Outcome::Completed, "at noon"));
}

#[derive(Default)]
pub struct Flaky {
    /// `nap` fails after its timer while this is set.
    fail: std::sync::atomic::AtomicBool,
}

#[graph(state = Pair, deps = Flaky, start = split)]
mod ask_beside_a_flaky_nap {
    use super::*;

    #[node(goto = [ask, nap])]
    async fn split(_s: &Pair) -> Step<Pair> {
        goto!([ask, nap], Pair::update())
    }

    #[node(goto = [END], interrupt, writes = [picked])]
    async fn ask(_s: &Pair, cx: &Ctx<Flaky>) -> Result<Step<Pair>, NodeError> {
        let v: String = cx.interrupt(serde_json::json!({ "pick": "?" }))?;
        Ok(goto!(END, Pair::update().picked(v)))
    }

    /// Waits on a timer, then fails while `fail` is set.
    #[node(goto = [END], sleep, writes = [checked])]
    async fn nap(_s: &Pair, cx: &Ctx<Flaky>) -> Result<Step<Pair>, NodeError> {
        cx.sleep(NAP).await?;
        if cx.deps().fail.load(Ordering::SeqCst) {
            return Err(NodeError::fatal("the service is down"));
        }
        Ok(goto!(END, Pair::update().checked("napped".to_string())))
    }
}

/// `ask` is answered and finishes in a step that then fails (its sibling's error). The thread no
/// longer waits for a value: `pending` stops showing the answered question, and a plain resume
/// re-runs only the failed node instead of asking for a value nobody reads.
#[tokio::test]
async fn a_question_answered_in_a_step_that_failed_is_no_longer_pending() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = ask_beside_a_flaky_nap::graph().app().store(Arc::clone(&store));
    let deps = Flaky::default();
    deps.fail.store(true, Ordering::SeqCst);
    let run = app.runner(&deps).thread("f").run(Pair::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending.len(), 2, "{pending:?}");
    let nap = pending.iter().find(|p| p.kind == PendingKind::Sleep).expect("`nap` waits on its timer");
    until_past(nap.payload["until"].as_u64().unwrap()).await;
    let run = app.runner(&deps).thread("f").resume_with("blue").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    let waits = stored_waits(&store, "f");
    assert!(waits.iter().all(|p| p["node"] != "ask"), "`ask` finished, yet it is recorded as waiting: {waits:?}");

    deps.fail.store(false, Ordering::SeqCst);
    let run = app.runner(&deps).thread("f").resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!((run.state.picked.as_str(), run.state.checked.as_str()), ("blue", "napped"));
}

/// What thread `thread` records it waits for at its latest checkpoint (what a resume, an answer
/// given from elsewhere and the `agentflow` tool read, whatever the thread's status).
fn stored_waits(store: &Arc<dyn Store>, thread: &str) -> Vec<serde_json::Value> {
    let seq = store.latest_checkpoint(thread).unwrap().unwrap().seq;
    let writes = store.pending_writes(thread, seq).unwrap();
    let w = writes.iter().find(|w| w.node == "__interrupts__").expect("what the thread waits for");
    serde_json::from_slice(&w.value).unwrap()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Item {
    ask: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Reviews {
    #[reduce(append)]
    verdicts: Vec<String>,
}

#[graph(state = Reviews, deps = Flaky, start = fan)]
mod map_of_askers {
    use super::*;

    #[node(goto = [review])]
    async fn fan(_s: &Reviews) -> Step<Reviews> {
        goto!(each(review, vec![Item { ask: false }, Item { ask: true }]))
    }

    /// An instance whose item says so asks, and refuses a bad value; the others finish at once.
    #[node(goto = [END], interrupt)]
    async fn review(_s: &Reviews, #[payload] item: &Item, cx: &Ctx<Flaky>) -> Result<Step<Reviews>, NodeError> {
        if !item.ask {
            return Ok(goto!(END, Reviews::update().verdicts(vec!["auto".to_string()])));
        }
        let v: String = cx.interrupt(serde_json::json!({ "review": "?" }))?;
        if v == "bad" {
            return Err(NodeError::fatal("bad value"));
        }
        Ok(goto!(END, Reviews::update().verdicts(vec![v])))
    }
}

/// One instance of a map worker finished, the other asked and then refused the value: the worker
/// still waits for a value (the finished instance does not make the node count as finished).
#[tokio::test]
async fn a_map_worker_with_one_instance_finished_still_waits_for_the_others_value() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = map_of_askers::graph().app().store(Arc::clone(&store));
    let deps = Flaky::default();
    let run = app.runner(&deps).thread("m").run(Reviews::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&deps).thread("m").resume_with("bad").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    assert!(stored_waits(&store, "m").iter().any(|p| p["node"] == "review"));
    let done = app.runner(&deps).thread("m").resume_with("good").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.verdicts, ["auto", "good"]);
}

#[derive(Default)]
pub struct Naps {
    /// `check` fails after its timer while this is set.
    fail: std::sync::atomic::AtomicBool,
    checks: AtomicU32,
}

#[graph(state = Pair, deps = Naps, start = split)]
mod two_sleepers {
    use super::*;

    #[node(goto = [long_nap, check])]
    async fn split(_s: &Pair) -> Step<Pair> {
        goto!([long_nap, check], Pair::update())
    }

    /// Sleeps briefly, then for an hour.
    #[node(goto = [END], sleep, writes = [picked])]
    async fn long_nap(_s: &Pair, cx: &Ctx<Naps>) -> Result<Step<Pair>, NodeError> {
        cx.sleep(NAP).await?;
        cx.sleep(std::time::Duration::from_secs(3600)).await?;
        Ok(goto!(END, Pair::update().picked("rested".to_string())))
    }

    /// Sleeps briefly, then fails while `fail` is set.
    #[node(goto = [END], sleep, writes = [checked])]
    async fn check(_s: &Pair, cx: &Ctx<Naps>) -> Result<Step<Pair>, NodeError> {
        cx.sleep(NAP).await?;
        cx.deps().checks.fetch_add(1, Ordering::SeqCst);
        if cx.deps().fail.load(Ordering::SeqCst) {
            return Err(NodeError::fatal("the service is down"));
        }
        Ok(goto!(END, Pair::update().checked("checked".to_string())))
    }
}

/// A step fails while a sibling sleeps on for an hour: the thread is `failed`, no timer of it
/// is armed, and a resume runs the failed node again at once instead of answering "asleep for an
/// hour" without running anything (which nothing would ever wake).
#[tokio::test]
async fn a_failed_step_beside_a_long_sleep_is_run_again_by_a_resume() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = two_sleepers::graph().app().store(Arc::clone(&store));
    let deps = Naps::default();
    deps.fail.store(true, Ordering::SeqCst);
    let run = app.runner(&deps).thread("s").run(Pair::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    until_due(&store, "s").await;
    let run = app.runner(&deps).thread("s").resume().await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    assert_eq!(deps.checks.load(Ordering::SeqCst), 1);

    deps.fail.store(false, Ordering::SeqCst);
    let run = app.runner(&deps).thread("s").resume().await.unwrap();
    assert_eq!(deps.checks.load(Ordering::SeqCst), 2, "the failed node did not run again");
    assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    assert_eq!(store.thread("s").unwrap().unwrap().status, agentflow::persist::ThreadStatus::Sleeping);
    assert!(store.thread_timer("s").unwrap().is_some(), "the hour-long timer is armed");
}
