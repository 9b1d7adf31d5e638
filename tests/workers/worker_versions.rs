//! A queued run of a thread that a newer version of its graph already moved stays queued for a
//! worker of that version: a worker of the older build (a rolling deploy) leaves it, to be
//! claimed again later, and never removes it. So does a queued run of a thread whose journaled
//! model call the new version's argument mapping refuses (a fixed build may take it).

use std::sync::Arc;
use std::time::Duration;

use crate::support::worker_graph::{Job, job, wait_until};
use agentflow::__private::with_release;
use agentflow::message::ToolCall;
use agentflow::model::ChatReply;
use agentflow::prelude::*;
use agentflow::release::{ArgsMigration, GraphMigration, Release};
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_an_older_build_leaves_a_thread_of_a_newer_version_queued() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    // Version 2 runs the thread until it waits for the refund's approval.
    let newer = with_release(job::graph(), Release::new("job", 2, &[], "{}", "")).app().store(Arc::clone(&store));
    let run = newer.runner(&()).thread("t").owner("agent").run(Job::new(2, true, 0)).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let before = store.list_checkpoints("t").unwrap().len();

    // A resume queued, then claimed by a worker of version 1.
    let older = job::graph().app().store(Arc::clone(&store));
    older.submit_resume("t").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(older.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    // Claimed, or gone from the queue.
    let claimed = || store.list_runs().unwrap().iter().all(|r| r.thread != "t" || r.claims >= 1);
    wait_until("the older build's worker claims the run", LIMIT, claimed).await;
    stop.cancel();
    handle.await.unwrap().unwrap();

    let queued: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread == "t").collect();
    assert_eq!(queued.len(), 1, "the run left the queue: a worker of version 2 could not resume it");
    assert_eq!(store.list_checkpoints("t").unwrap().len(), before, "the older build wrote to the thread");
    assert_eq!(store.thread("t").unwrap().unwrap().graph_fingerprint, newer.graph().fingerprint());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Query {
    q: String,
}

/// Looks something up.
#[tool(risk = read)]
pub async fn lookup(args: Query) -> Result<Value, ToolError> {
    Ok(json!({ "found": args.q }))
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, State)]
pub struct Asked {
    pub n: u32,
}

/// The model's reply, journaled, asks for a look-up; then the node fails.
#[graph(state = Asked, start = ask, id = "asker")]
pub mod asker {
    use super::*;

    #[node(goto = [END], tools = [lookup])]
    async fn ask(_s: &Asked, cx: &Ctx<()>) -> Result<Step<Asked>, NodeError> {
        let reply = cx
            .effect("reply", |_| async {
                let mut reply = ChatReply::text("");
                reply.tool_calls = vec![ToolCall::new("call-1", "lookup", json!({ "q": "x" }))];
                Ok::<_, NodeError>(reply)
            })
            .await?;
        cx.call_tools(&reply.tool_calls).await?;
        Err(NodeError::fatal("the service went away"))
    }
}

fn refuse(_args: Value) -> Result<Value, String> {
    Err("this build cannot map a look-up".into())
}

/// Version 2 maps `lookup`'s arguments with a function that refuses them.
static REFUSING: [GraphMigration; 1] =
    [GraphMigration::new(1, &[], &[], &[("lookup", ArgsMigration::Map(refuse as agentflow::release::ArgsMap))])];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_whose_model_call_a_mapping_refuses_stays_queued() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    let older = asker::graph().app().store(Arc::clone(&store));
    let run = older.runner(&()).thread("m").run(Asked::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    let before = store.list_checkpoints("m").unwrap().len();

    // A resume queued, then claimed by a worker of version 2, whose mapping refuses the call.
    let newer =
        with_release(asker::graph(), Release::new("asker", 2, &REFUSING, "{}", "")).app().store(Arc::clone(&store));
    newer.submit_resume("m").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(newer.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let claimed = || store.list_runs().unwrap().iter().all(|r| r.thread != "m" || r.claims >= 1);
    wait_until("the worker claims the run", LIMIT, claimed).await;
    stop.cancel();
    handle.await.unwrap().unwrap();

    let queued: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread == "m").collect();
    assert_eq!(queued.len(), 1, "the run stays queued for a build whose mapping takes the call");
    assert_eq!(store.list_checkpoints("m").unwrap().len(), before, "the refused move wrote nothing");
    assert_eq!(store.thread("m").unwrap().unwrap().graph_fingerprint, older.graph().fingerprint());
}

/// A refusal the same build would make again (the mapping refuses the journaled call's
/// arguments): the worker lets the thread go at once, so a state update is not refused as busy,
/// and parks the run: it stays queued, not claimed again for a long while, with a `run.parked`
/// audit entry saying why. The update changed the thread: its run is claimed again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_a_mapping_refuses_lets_its_thread_go_and_is_tried_again_once_it_changes() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    let older = asker::graph().app().store(Arc::clone(&store));
    let run = older.runner(&()).thread("p").run(Asked::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    let newer =
        with_release(asker::graph(), Release::new("asker", 2, &REFUSING, "{}", "")).app().store(Arc::clone(&store));
    newer.submit_resume("p").unwrap();
    let parked = || {
        let audit = store.list_audit("p").unwrap();
        audit.iter().filter(|e| e.kind == "run.parked").map(|e| e.detail.clone()).collect::<Vec<_>>()
    };
    let stop = CancellationToken::new();
    let worker = Worker::new(newer.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the worker parks the run", LIMIT, || !parked().is_empty()).await;

    let entry = parked().remove(0);
    let reason = entry["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("this build cannot map a look-up"), "{entry}");
    let queued: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread == "p").collect();
    assert_eq!(queued.len(), 1, "the run stays queued");
    assert_eq!(queued[0].claims, 1);
    let until = queued[0].lease.as_ref().expect("parked").expires_at;
    assert_eq!(entry["until"].as_u64(), Some(until), "{entry}");
    let minutes = until.saturating_sub(entry_time(&store)) / 60_000;
    assert!(minutes >= 5, "parked for {minutes} minutes only");

    // Not busy: the update takes the thread at once, and lets it go.
    newer.update_state("p", Asked::update().n(7), "ada").unwrap();
    let claims = || store.list_runs().unwrap().iter().filter(|r| r.thread == "p").map(|r| r.claims).max();
    wait_until("the changed thread's run is claimed again", LIMIT, || claims() >= Some(2)).await;
    wait_until("and parked again", LIMIT, || parked().len() == 2).await;
    // A resume asked of the parked run lets it be claimed now, not when the parking ends.
    newer.submit_resume("p").unwrap();
    wait_until("the resumed run is claimed again", LIMIT, || claims() >= Some(3)).await;
    wait_until("and parked again", LIMIT, || parked().len() == 3).await;
    assert_eq!(store.list_runs().unwrap().iter().filter(|r| r.thread == "p").count(), 1, "still queued");
    // A cancel takes effect now: the run leaves the queue, the thread as it was.
    assert!(newer.cancel_run("p").unwrap());
    wait_until("the cancelled run leaves the queue", LIMIT, || {
        store.list_runs().unwrap().iter().all(|r| r.thread != "p")
    })
    .await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert_eq!(parked().len(), 3, "not parked again");
    assert_eq!(store.thread("p").unwrap().unwrap().graph_fingerprint, older.graph().fingerprint());
}

/// When the first `run.parked` entry of thread `p` was written.
fn entry_time(store: &Arc<dyn Store>) -> u64 {
    store.list_audit("p").unwrap().iter().find(|e| e.kind == "run.parked").map_or(0, |e| e.at)
}
