//! Subgraphs stopped from outside or by a bound: a child cut off mid-run resumes from its own
//! checkpoint; cancelling or pausing the parent stops the child; a parent's timeout lets the
//! child's effect in flight finish; a child's step bound is its own.

use crate::subgraph_tree::*;
use crate::support::stores::store;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Outcome};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

#[tokio::test]
async fn a_child_cut_off_mid_run_resumes_from_its_last_checkpoint() {
    let store = store();
    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    // The run is dropped while the child waits in its second step, as if the
    // process had died there: its first step is committed, its second not.
    let task = tokio::spawn({
        let (app, gate) = (app.clone(), Arc::clone(&gate));
        async move { app.runner(&*gate).thread("s").run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(store.thread("s/run_it.0.0.slow").unwrap().unwrap().status, ThreadStatus::Running);

    let done = app.runner(&*gate).thread("s").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.done, ["one", "two"]);
    assert_eq!(gate.first.load(Ordering::SeqCst), 1, "the child's committed step ran again");
    assert_eq!(gate.second.load(Ordering::SeqCst), 2);
}

/// The child's thread names its parent; a thread of its own that merely has the id a child
/// would get is neither taken for the child (its state is not the child's result) nor run as it.
#[tokio::test]
async fn a_thread_of_its_own_with_a_childs_id_is_not_taken_for_the_child() {
    let store = store();
    let gate = Gate::default();
    gate.second.store(1, Ordering::SeqCst);
    // Run by hand, on the id `p`'s node would give its child.
    let own = slow::graph().app().store(Arc::clone(&store));
    assert_eq!(
        own.runner(&gate).thread("p/run_it.0.0.slow").run(Slow::default()).await.unwrap().outcome,
        Outcome::Completed
    );
    assert_eq!(store.thread("p/run_it.0.0.slow").unwrap().unwrap().parent, None);

    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let run = app.runner(&gate).thread("p").run(Slow::default()).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(node, "run_it");
    let error = error.to_string();
    assert!(error.contains("thread `p/run_it.0.0.slow`") && error.contains("is not a child of thread `p`"), "{error}");
    assert!(run.state.done.is_empty(), "the other thread's state was not taken: {:?}", run.state.done);
    assert_eq!(gate.first.load(Ordering::SeqCst), 1, "nothing ran as the child");

    // A real child names its parent.
    let run = app.runner(&gate).thread("q").run(Slow::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(store.thread("q/run_it.0.0.slow").unwrap().unwrap().parent.as_deref(), Some("q"));
}

/// `slow` with a step after the one that waits: a cancel that comes while it waits has a step
/// boundary to stop at.
#[graph(state = Slow, deps = Gate, start = one)]
pub mod slower {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    #[node(goto = [three])]
    async fn two(_s: &Slow, gate: &Gate) -> Step<Slow> {
        if gate.second.fetch_add(1, Ordering::SeqCst) == 0 {
            gate.blocked.notify_one();
            gate.release.notified().await;
        }
        goto!(three, Slow::update().done(vec!["two".to_string()]))
    }

    #[node(goto = [END])]
    async fn three(_s: &Slow) -> Step<Slow> {
        goto!(END, Slow::update().done(vec!["three".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod slower_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [slower])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(slower::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let store = store();
    let app = slower_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let (app, gate, token) = (app.clone(), Arc::clone(&gate), token.clone());
        async move { app.runner(&*gate).thread("k").cancel_token(token).run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    token.cancel();
    gate.release.notify_one();
    let run = task.await.unwrap().unwrap();
    assert_eq!(run.outcome, Outcome::Cancelled);
    let child = store.thread("k/run_it.0.0.slower").unwrap().unwrap();
    assert_eq!(child.status, ThreadStatus::Cancelled);
    assert_eq!(store.thread("k").unwrap().unwrap().status, ThreadStatus::Cancelled);
}

/// A cancel that comes during the child's last step, which is the parent's last step too, is too
/// late for both: the child's step commits it `completed`, and the parent's does the same.
#[tokio::test]
async fn a_cancel_during_the_last_step_of_child_and_parent_is_too_late_for_both() {
    let store = store();
    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let (app, gate, token) = (app.clone(), Arc::clone(&gate), token.clone());
        async move { app.runner(&*gate).thread("late").cancel_token(token).run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    token.cancel();
    gate.release.notify_one();
    let run = task.await.unwrap().unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.done, ["one", "two"]);
    assert_eq!(store.thread("late/run_it.0.0.slow").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_eq!(store.thread("late").unwrap().unwrap().status, ThreadStatus::Completed);
}

// ------------------------------------------------ pausing the parent pauses the child

#[graph(state = Slow, deps = Gate, start = one)]
pub mod waits_for_stop {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    /// Works until the run is told to stop (the first time), then finishes its step.
    #[node(goto = [three])]
    async fn two(_s: &Slow, cx: &Ctx<Gate>) -> Step<Slow> {
        if cx.deps().second.fetch_add(1, Ordering::SeqCst) == 0 {
            cx.deps().blocked.notify_one();
            cx.cancelled().await;
        }
        goto!(three, Slow::update().done(vec!["two".to_string()]))
    }

    #[node(goto = [END])]
    async fn three(_s: &Slow) -> Step<Slow> {
        goto!(END, Slow::update().done(vec!["three".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod pausable_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [waits_for_stop])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(waits_for_stop::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_parent_from_outside_pauses_its_child_and_a_resume_finishes_both() {
    use agentflow::Worker;
    let store = store();
    let app = pausable_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    app.submit("w", &Slow::default()).unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&gate)).poll_interval(std::time::Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    // The child works in its second step; the parent is paused meanwhile.
    tokio::time::timeout(std::time::Duration::from_secs(10), gate.blocked.notified()).await.unwrap();
    assert!(app.pause_run("w").unwrap());
    let status = |id: &str| store.thread(id).unwrap().map(|t| t.status);
    for _ in 0..1000 {
        if status("w") == Some(ThreadStatus::Paused) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status("w"), Some(ThreadStatus::Paused));
    // Paused, not cancelled: nothing would be compensated.
    assert_eq!(status("w/run_it.0.0.waits_for_stop"), Some(ThreadStatus::Paused));
    // The worker takes the paused run out of the queue just after writing the status.
    for _ in 0..1000 {
        if app.live_runs().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    app.submit_resume("w").unwrap();
    for _ in 0..1000 {
        if status("w") == Some(ThreadStatus::Completed) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status("w"), Some(ThreadStatus::Completed));
    assert_eq!(app.state("w").unwrap().unwrap().state.done, ["one", "two", "three"]);
    assert_eq!((gate.first.load(Ordering::SeqCst), gate.second.load(Ordering::SeqCst)), (1, 1), "a step ran twice");
    stop.cancel();
    handle.await.unwrap().unwrap();
}

// ---------------------------------------------------------------- a parent's timeout and a child's effect

/// Runs of the child's effect begun and ended.
#[derive(Default)]
pub struct Mailer {
    began: AtomicU32,
    ended: AtomicU32,
    /// Set: the child's node goes on working after its effect, past the parent's timeout.
    linger: AtomicBool,
}

#[graph(state = Slow, deps = Mailer, start = send)]
pub mod mailing {
    use super::*;

    #[node(goto = [END])]
    async fn send(_s: &Slow, cx: &Ctx<Mailer>) -> Result<Step<Slow>, NodeError> {
        let sent = cx
            .effect("send-mail", |_key| async {
                cx.deps().began.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                cx.deps().ended.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>("sent".to_string())
            })
            .await?;
        if cx.deps().linger.swap(false, Ordering::SeqCst) {
            // Without this the node could end in the same poll as its effect, and work that ends
            // while an effect holds the deadline off is kept: the run would complete.
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
        Ok(goto!(END, Slow::update().done(vec![sent])))
    }
}

#[graph(state = Slow, deps = Mailer, start = notify)]
pub mod mailing_parent {
    use super::*;

    // Long enough that the child's effect has begun when it falls, even on a loaded machine.
    #[node(goto = [END], subgraphs = [mailing], timeout = 1s)]
    async fn notify(_s: &Slow, cx: &Ctx<Mailer>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(mailing::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

/// A parent node's timeout that falls while its child's effect is in flight lets the effect
/// finish and be journaled, as it does for the node's own effects: the effect is never cut off
/// mid-call, and a resume replays it instead of asking about an unknown outcome.
#[tokio::test]
async fn a_parent_timeout_lets_its_childs_effect_in_flight_finish() {
    let store = store();
    let app = mailing_parent::graph().app().store(Arc::clone(&store));
    let mailer = Mailer { linger: AtomicBool::new(true), ..Mailer::default() };
    let run = app.runner(&mailer).thread("mail").run(Slow::default()).await.unwrap();
    assert_eq!(mailer.ended.load(Ordering::SeqCst), 1, "the child's effect was cut off mid-call");
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert!(error.message.contains("timed out"), "{error}");

    let again = app.runner(&mailer).thread("mail").resume().await.unwrap();
    assert_eq!(mailer.began.load(Ordering::SeqCst), 1, "the effect ran again");
    assert_eq!(again.outcome, Outcome::Completed, "a resume replays the journaled effect");
    assert_eq!(again.state.done, vec!["sent".to_string()]);
}

// ---------------------------------------------------------------- a child's own step bound

#[graph(state = Slow, deps = Gate, start = spin, max_steps = 3)]
pub mod spinner {
    use super::*;

    #[node(goto = [spin, END])]
    async fn spin(_s: &Slow) -> Step<Slow> {
        goto!(spin, Slow::update().done(vec!["spin".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = try_it)]
pub mod tolerant_parent {
    use super::*;

    /// Runs a child that never finishes, and carries on without it.
    #[node(goto = [END], subgraphs = [spinner])]
    async fn try_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let note = match cx.subgraph(spinner::graph(), Slow::default()).await {
            Ok(_) => "finished".to_string(),
            Err(e) => format!("gave up: {}", e.message),
        };
        Ok(goto!(END, Slow::update().done(vec![note])))
    }
}

/// A child's step bound is its own: the parent's node gets a plain error it may handle, and the
/// parent's run is not out of a budget (it would stay so on every resume).
#[tokio::test]
async fn a_child_that_reaches_its_own_step_bound_fails_the_call_not_the_parents_budget() {
    let app = tolerant_parent::graph().app().store(store());
    let run = app.runner(&Gate::default()).thread("spin").run(Slow::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
    assert!(run.state.done[0].contains("step bound"), "{:?}", run.state.done);
}
