//! Leases: a running step keeps its thread, a lost lease cancels the step and
//! commits nothing, and a dropped or aborted run frees its thread at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentflow::prelude::*;
use agentflow::{RedbStore, RunError, Store};
use agentflow_store::{Checkpoint, CheckpointMetadata, CheckpointSource, CommitError, StepCommit, ThreadRecord};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

const GUARD: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Work {
    #[reduce(append)]
    log: Vec<String>,
}

/// `slow` announces that it started, then waits for `release` (forever if
/// never released) while `hold` is set.
#[derive(Default)]
pub struct Deps {
    hold: AtomicBool,
    started: Notify,
    release: Notify,
    runs: AtomicU32,
    finished: AtomicU32,
    dropped: AtomicU32,
    effects: AtomicU32,
}

/// Counts a node future dropped before it finished.
struct DropProbe<'a>(&'a AtomicU32, bool);

impl Drop for DropProbe<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[graph(state = Work, deps = Deps, start = slow, max_steps = 5)]
mod flow {
    use super::*;

    #[node(goto = [END])]
    async fn slow(_s: &Work, cx: &Ctx<Deps>) -> Result<Step<Work>, NodeError> {
        let deps = cx.deps();
        deps.runs.fetch_add(1, Ordering::SeqCst);
        let mut probe = DropProbe(&deps.dropped, false);
        if deps.hold.load(Ordering::SeqCst) {
            deps.started.notify_one();
            deps.release.notified().await;
        }
        let receipt = cx
            .effect("charge", |_| async move {
                deps.effects.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>("charged".to_string())
            })
            .await?;
        probe.1 = true;
        deps.finished.fetch_add(1, Ordering::SeqCst);
        Ok(goto!(END, Work::update().log(vec![receipt])))
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn setup() -> (Arc<dyn Store>, App<Work, Deps>) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    (Arc::clone(&store), flow::graph().app().store(store))
}

fn held_deps() -> Deps {
    let deps = Deps::default();
    deps.hold.store(true, Ordering::SeqCst);
    deps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_longer_than_the_lease_ttl_keeps_its_lease() {
    let (_, graph) = setup();
    let deps = held_deps();
    // Renewed every ttl/3 = 1 s, the lease survives a renewal up to 2 s late. Without renewal it
    // would lapse at 3 s: the probes at 4.5 s and 6 s would take the thread.
    let ttl = Duration::from_secs(3);
    let run = graph.runner(&deps).thread("long").lease_ttl(ttl).run(Work::default());
    let probe = async {
        deps.started.notified().await;
        // Two TTLs pass while the step runs; the thread stays taken.
        for _ in 0..4 {
            tokio::time::sleep(ttl / 2).await;
            let err = graph.runner(&deps).thread("long").resume().await.expect_err("the thread is busy");
            assert!(matches!(err, RunError::ThreadBusy { .. }), "{err}");
        }
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, probe) }).await.expect("no hang");
    let run = run.expect("the run kept its lease");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(deps.runs.load(Ordering::SeqCst), 1);
    assert_eq!(deps.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_over_mid_step_cancels_the_step_and_commits_nothing() {
    let (store, graph) = setup();
    let deps = held_deps();
    let ttl = Duration::from_millis(150);
    let run = graph.runner(&deps).thread("stolen").lease_ttl(ttl).run(Work::default());
    let thief = async {
        deps.started.notified().await;
        let before = graph.history("stolen").unwrap().len();
        // Another executor that sees the lease as expired (its clock is
        // ahead) takes the thread.
        store.acquire_lease("stolen", "thief", 60_000, now_ms() + 10_000).expect("the thief takes the expired lease");
        before
    };
    let (run, before) = tokio::time::timeout(GUARD, async { tokio::join!(run, thief) }).await.expect("no hang");
    let err = run.expect_err("the run lost its lease");
    assert!(
        matches!(&err, RunError::LeaseLost { thread, holder } if thread == "stolen" && holder.as_deref() == Some("thief")),
        "{err}"
    );
    // The node's future was dropped mid-step: it never finished, its effect never ran.
    assert_eq!(deps.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(deps.finished.load(Ordering::SeqCst), 0);
    assert_eq!(deps.effects.load(Ordering::SeqCst), 0);
    // Nothing was committed after the loss, and the thief's lease is intact.
    assert_eq!(graph.history("stolen").unwrap().len(), before);
    let record = graph.thread("stolen").unwrap().unwrap();
    assert_eq!(record.status, agentflow::persist::ThreadStatus::Running);
    assert_eq!(record.lease.map(|l| l.holder).as_deref(), Some("thief"));
}

/// A run that stalled past its lease (a stopped process, a long pause) and wakes inside a node
/// does not act: another holder took the thread meanwhile, and the effect's *started* marker,
/// fenced by the run's lease, is refused before the effect runs. (The run's own renewal is 20 s
/// away here, so nothing else notices the loss first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_wakes_after_losing_its_lease_does_not_start_an_effect() {
    let (store, graph) = setup();
    let deps = held_deps();
    let run = graph.runner(&deps).thread("stalled").lease_ttl(Duration::from_secs(60)).run(Work::default());
    let thief = async {
        deps.started.notified().await;
        // Another executor whose clock says the lease expired takes the thread, and the stalled
        // run wakes up.
        store.acquire_lease("stalled", "thief", 60_000, now_ms() + 120_000).expect("the thief takes the thread");
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, thief) }).await.expect("no hang");
    assert_eq!(deps.effects.load(Ordering::SeqCst), 0, "the stalled run charged the card");
    let said = match &run {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("thief"), "{said}");
    assert_eq!(graph.history("stalled").unwrap().len(), 1, "only the run's first checkpoint");
    let record = graph.thread("stalled").unwrap().unwrap();
    assert_eq!(record.lease.map(|l| l.holder).as_deref(), Some("thief"));
}

#[test]
fn the_store_refuses_a_commit_fenced_by_a_holder_that_lost_the_lease() {
    let store = RedbStore::in_memory().unwrap();
    let now = now_ms();
    store.acquire_lease("t", "first", 1_000, now).unwrap();
    let checkpoint = |seq| Checkpoint {
        thread: "t".into(),
        seq,
        parent: seq.checked_sub(1),
        cursor: vec!["slow".into()],
        snapshot: Some(b"{}".to_vec()),
        delta: vec![],
        metadata: CheckpointMetadata::new(seq, CheckpointSource::Loop, vec![]),
        created_at: now,
    };
    let commit = |seq, holder: &str, at| {
        StepCommit::new(ThreadRecord::new("t", "o", "fp", 1, now))
            .with_checkpoint(checkpoint(seq))
            .fenced_by(holder, at)
    };
    store.commit_step(commit(0, "first", now)).expect("the holder commits");
    // The lease expires and a second holder takes it.
    store.acquire_lease("t", "second", 60_000, now + 2_000).unwrap();
    let refused = store.commit_step(commit(1, "first", now + 2_000)).expect_err("the old holder is fenced off");
    assert!(matches!(refused, CommitError::LeaseLost { ref holder, .. } if holder == "first"), "{refused}");
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 1);
    store.commit_step(commit(1, "second", now + 2_000)).expect("the new holder commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_run_mid_step_frees_the_thread_at_once() {
    let (_, graph) = setup();
    let deps = held_deps();
    {
        let run = graph.runner(&deps).thread("dropped").run(Work::default());
        tokio::pin!(run);
        tokio::time::timeout(GUARD, async {
            tokio::select! {
                r = &mut run => panic!("the held step cannot finish: {r:?}"),
                () = deps.started.notified() => {}
            }
        })
        .await
        .expect("the step started");
    }
    assert_eq!(deps.dropped.load(Ordering::SeqCst), 1);
    // With the default 30 s TTL, only a released lease lets this through.
    deps.hold.store(false, Ordering::SeqCst);
    let resumed = tokio::time::timeout(GUARD, graph.runner(&deps).thread("dropped").resume())
        .await
        .expect("no hang")
        .expect("the thread is free");
    assert_eq!(resumed.outcome, Outcome::Completed);
    assert_eq!(deps.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_spawned_run_frees_the_thread_at_once() {
    let (_, graph) = setup();
    let graph = Arc::new(graph);
    let deps = Arc::new(held_deps());
    let (g, d) = (Arc::clone(&graph), Arc::clone(&deps));
    let task =
        tokio::spawn(async move { g.runner(&d).thread("aborted").run(Work::default()).await.map(|r| r.outcome) });
    tokio::time::timeout(GUARD, deps.started.notified()).await.expect("the step started");
    task.abort();
    let joined = task.await.expect_err("the task was aborted");
    assert!(joined.is_cancelled());
    assert_eq!(deps.dropped.load(Ordering::SeqCst), 1);
    deps.hold.store(false, Ordering::SeqCst);
    let resumed = tokio::time::timeout(GUARD, graph.runner(&deps).thread("aborted").resume())
        .await
        .expect("no hang")
        .expect("the thread is free");
    assert_eq!(resumed.outcome, Outcome::Completed);
}

#[tokio::test]
async fn a_lease_ttl_too_short_to_renew_is_refused() {
    let (_, graph) = setup();
    let deps = Deps::default();
    let err = graph.runner(&deps).thread("t").lease_ttl(Duration::from_millis(1)).run(Work::default()).await;
    assert!(matches!(err, Err(RunError::LeaseTtlTooShort { .. })), "{err:?}");
}

// ---------------------------------------------------------------- a stream read slowly

#[derive(Default)]
pub struct Steps {
    second: AtomicU32,
}

#[graph(state = Work, deps = Steps, start = first)]
mod two_steps {
    use super::*;

    #[node(goto = [second])]
    async fn first(_s: &Work) -> Step<Work> {
        goto!(second, Work::update().log(vec!["first".into()]))
    }

    #[node(goto = [END])]
    async fn second(_s: &Work, deps: &Steps) -> Step<Work> {
        deps.second.fetch_add(1, Ordering::SeqCst);
        goto!(END, Work::update().log(vec!["second".into()]))
    }
}

/// A streamed run drives its steps only while it is read. Its reader stalls between two steps
/// past the lease's TTL, and another runner takes the thread and finishes it. When the stream is
/// read again, the first run finds its lease gone before its next step and runs nothing more.
#[tokio::test]
async fn a_stream_read_too_slowly_loses_its_thread_before_the_next_step_not_after() {
    use agentflow::{StreamItem, StreamMode, StreamPart};

    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = two_steps::graph().app().store(Arc::clone(&store));
    let deps = Steps::default();
    let runner = app
        .runner(&deps)
        .thread("slow-reader")
        .lease_ttl(Duration::from_millis(60))
        .stream_modes([StreamMode::Values])
        .stream_buffer(1);
    let mut stream = runner.stream(Work::default());
    // The first step ran and committed; the run now waits for room to go on.
    let first = tokio::time::timeout(GUARD, stream.next()).await.expect("no hang").expect("an item");
    assert!(matches!(first.part, StreamPart::Values { step: 1, .. }), "{:?}", first.part);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let other = tokio::time::timeout(GUARD, app.runner(&deps).thread("slow-reader").resume())
        .await
        .expect("no hang")
        .expect("the lapsed thread is taken over");
    assert_eq!(other.outcome, Outcome::Completed);
    assert_eq!(deps.second.load(Ordering::SeqCst), 1);

    let mut rest: Vec<StreamItem<Work>> = Vec::new();
    while let Some(item) = tokio::time::timeout(GUARD, stream.next()).await.expect("no hang") {
        rest.push(item);
    }
    let Some(StreamItem { part: StreamPart::Done(result), .. }) = rest.pop() else { panic!("no Done") };
    assert!(matches!(result, Err(RunError::LeaseLost { .. })), "{result:?}");
    assert_eq!(deps.second.load(Ordering::SeqCst), 1, "the step ran again in the run that had lost the thread");
}

#[graph(state = Work, deps = Deps, start = charge)]
mod charge_child {
    use super::*;

    #[node(goto = [END])]
    async fn charge(_s: &Work, cx: &Ctx<Deps>) -> Result<Step<Work>, NodeError> {
        let deps = cx.deps();
        let receipt = cx
            .effect("charge", |_| async move {
                deps.effects.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>("charged".to_string())
            })
            .await?;
        Ok(goto!(END, Work::update().log(vec![receipt])))
    }
}

#[graph(state = Work, deps = Deps, start = delegate, max_steps = 5)]
mod delegating {
    use super::*;

    /// Waits like `slow`, then has its child charge the card.
    #[node(goto = [END], subgraphs = [charge_child])]
    async fn delegate(s: &Work, cx: &Ctx<Deps>) -> Result<Step<Work>, NodeError> {
        let deps = cx.deps();
        if deps.hold.load(Ordering::SeqCst) {
            deps.started.notify_one();
            deps.release.notified().await;
        }
        let done = cx.subgraph(charge_child::graph(), s.clone()).await?;
        Ok(goto!(END, Work::update().log(done.log)))
    }
}

/// The same inside a subgraph: the child runs under a lease of its own, but its effects are
/// fenced by its parent's lease too (every level up), so a parent run that wakes after losing
/// its thread cannot act through a child it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_wakes_after_losing_its_lease_starts_no_effect_in_a_subgraph_child() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = delegating::graph().app().store(Arc::clone(&store));
    let deps = held_deps();
    let run = graph.runner(&deps).thread("parent").lease_ttl(Duration::from_secs(60)).run(Work::default());
    let thief = async {
        deps.started.notified().await;
        store.acquire_lease("parent", "thief", 60_000, now_ms() + 120_000).expect("the thief takes the thread");
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, thief) }).await.expect("no hang");
    assert_eq!(deps.effects.load(Ordering::SeqCst), 0, "the stalled parent charged the card through its child");
    let said = match &run {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("thief") || said.contains("no longer holds"), "{said}");
    let record = graph.thread("parent").unwrap().unwrap();
    assert_eq!(record.lease.map(|l| l.holder).as_deref(), Some("thief"));
}

#[graph(state = Work, deps = Deps, start = draft)]
mod drafting_child {
    use super::*;

    #[node(goto = [polish])]
    async fn draft(_s: &Work) -> Step<Work> {
        goto!(polish, Work::update().log(vec!["draft".into()]))
    }

    #[node(goto = [END])]
    async fn polish(_s: &Work) -> Step<Work> {
        goto!(END, Work::update().log(vec!["polished".into()]))
    }
}

#[graph(state = Work, deps = Deps, start = delegate, max_steps = 5)]
mod drafting {
    use super::*;

    /// Waits like `slow`, then has its child draft something (no effect, only steps).
    #[node(goto = [END], subgraphs = [drafting_child])]
    async fn delegate(s: &Work, cx: &Ctx<Deps>) -> Result<Step<Work>, NodeError> {
        let deps = cx.deps();
        if deps.hold.load(Ordering::SeqCst) {
            deps.started.notify_one();
            deps.release.notified().await;
        }
        let done = cx.subgraph(drafting_child::graph(), s.clone()).await?;
        Ok(goto!(END, Work::update().log(done.log)))
    }
}

/// A child's checkpoints are fenced by its parents' leases too: a parent run that wakes after
/// losing its thread neither creates the child's thread nor moves it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_wakes_after_losing_its_lease_writes_no_subgraph_child() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = drafting::graph().app().store(Arc::clone(&store));
    let deps = held_deps();
    let run = graph.runner(&deps).thread("writer").lease_ttl(Duration::from_secs(60)).run(Work::default());
    let thief = async {
        deps.started.notified().await;
        store.acquire_lease("writer", "thief", 60_000, now_ms() + 120_000).expect("the thief takes the thread");
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, thief) }).await.expect("no hang");
    let said = match &run {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("thief") || said.contains("lease"), "{said}");
    let children = store.child_threads("writer").unwrap().items;
    assert!(children.is_empty(), "the stalled parent wrote its child's thread: {children:?}");
    assert_eq!(graph.history("writer").unwrap().len(), 1, "the stalled parent committed a step");
}

/// `fork`, `update_state` and `raise_limits` take the thread's lease for their one write: while
/// a run holds the thread, each is refused as busy and writes nothing (no checkpoint, no audit
/// entry); once the run let go, they go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_edits_are_refused_while_a_run_holds_the_thread() {
    use agentflow::persist::{HistoryError, PersistError};
    use agentflow_store::LeaseError;
    let (_, graph) = setup();
    let deps = held_deps();
    let run = graph.runner(&deps).thread("held").run(Work::default());
    let busy =
        |e: &HistoryError| matches!(e, HistoryError::Persist(PersistError::Lease(LeaseError::ThreadBusy { .. })));
    let edits = async {
        deps.started.notified().await;
        let (history, audit) = (graph.history("held").unwrap().len(), graph.audit_log("held").unwrap().len());
        let forked = graph.fork("held", 0, "operator").unwrap_err();
        assert!(busy(&forked), "{forked}");
        let updated = graph.update_state("held", Work::update().log(vec!["edit".into()]), "operator").unwrap_err();
        assert!(busy(&updated), "{updated}");
        let raised = graph.raise_limits("held", agentflow::Limits::none().model_calls(9), "operator").unwrap_err();
        assert!(busy(&raised), "{raised}");
        assert_eq!(graph.history("held").unwrap().len(), history, "no checkpoint written");
        assert_eq!(graph.audit_log("held").unwrap().len(), audit, "no audit entry written");
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, edits) }).await.expect("no hang");
    assert!(run.unwrap().outcome.is_completed());
    graph.update_state("held", Work::update().log(vec!["edit".into()]), "operator").unwrap();
    graph.fork("held", 0, "operator").unwrap();
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    /// The order.
    order: String,
}

/// Refunds an order (irreversible: the default policy asks a human first).
#[tool(risk = irreversible)]
async fn refund(args: Refund) -> Result<serde_json::Value, ToolError> {
    Ok(serde_json::json!({ "refunded": args.order }))
}

#[graph(state = Work, deps = Deps, start = ask, max_steps = 5)]
mod requesting {
    use super::*;

    /// Waits like `slow`, then calls a tool that needs a human's approval.
    #[node(goto = [END], tools = [refund])]
    async fn ask(_s: &Work, cx: &Ctx<Deps>) -> Result<Step<Work>, NodeError> {
        let deps = cx.deps();
        if deps.hold.load(Ordering::SeqCst) {
            deps.started.notify_one();
            deps.release.notified().await;
        }
        let obs = cx.run_tool(refund, serde_json::json!({ "order": "A-1" })).await?;
        Ok(goto!(END, Work::update().log(vec![obs.body.to_string()])))
    }
}

/// A run that wakes after losing its thread requests no approval: the request is created in a
/// batch fenced by the run's lease, so no stray request reaches the inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_wakes_after_losing_its_lease_requests_no_approval() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = requesting::graph().app().store(Arc::clone(&store));
    let deps = held_deps();
    let run =
        graph.runner(&deps).thread("asker").owner("agent").lease_ttl(Duration::from_secs(60)).run(Work::default());
    let thief = async {
        deps.started.notified().await;
        store.acquire_lease("asker", "thief", 60_000, now_ms() + 120_000).expect("the thief takes the thread");
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, thief) }).await.expect("no hang");
    let said = match &run {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("thief") || said.contains("no longer holds"), "{said}");
    assert_eq!(store.list_approvals("asker").unwrap(), vec![], "the stalled run requested an approval");
    assert!(store.list_pending_approvals().unwrap().is_empty());
}

/// Holds the effect's body until released, after announcing it started.
#[derive(Default)]
pub struct Charging {
    in_body: Notify,
    release: Notify,
    bodies: AtomicU32,
}

#[graph(state = Work, deps = Charging, start = charge)]
mod charging {
    use super::*;

    #[node(goto = [END])]
    async fn charge(_s: &Work, cx: &Ctx<Charging>) -> Result<Step<Work>, NodeError> {
        let deps = cx.deps();
        let receipt = cx
            .effect("charge", |_| async move {
                deps.bodies.fetch_add(1, Ordering::SeqCst);
                deps.in_body.notify_one();
                deps.release.notified().await;
                Ok::<_, NodeError>("charged".to_string())
            })
            .await?;
        Ok(goto!(END, Work::update().log(vec![receipt])))
    }
}

/// The lease is taken over while an effect's body runs: the body acted, so its result is
/// journaled anyway (whoever holds the lease), and the run that took the thread over replays it
/// instead of charging again or asking a person whether the charge happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_effect_returned_is_journaled_even_after_the_lease_was_lost() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = charging::graph().app().store(Arc::clone(&store));
    let deps = Charging::default();
    let run = app.runner(&deps).thread("mid-charge").lease_ttl(Duration::from_secs(60)).run(Work::default());
    let thief = async {
        deps.in_body.notified().await;
        store.acquire_lease("mid-charge", "thief", 60_000, now_ms() + 120_000).expect("the thief takes the thread");
        deps.release.notify_one();
    };
    let (run, ()) = tokio::time::timeout(GUARD, async { tokio::join!(run, thief) }).await.expect("no hang");
    assert!(matches!(run, Err(RunError::LeaseLost { .. })), "{:?}", run.map(|r| r.outcome));
    assert_eq!(deps.bodies.load(Ordering::SeqCst), 1);

    // The thief goes away; a run takes the thread again and finds the charge journaled.
    store.release_lease("mid-charge", "thief").unwrap();
    let done = tokio::time::timeout(GUARD, app.runner(&deps).thread("mid-charge").resume()).await.unwrap().unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["charged"]);
    assert_eq!(deps.bodies.load(Ordering::SeqCst), 1, "charged once");
    assert!(store.list_approvals("mid-charge").unwrap().is_empty(), "no outcome left for a person to settle");
}
