//! Threads parked on version 1 of a graph, by a process of version 1, resume on version 2 in
//! another process, through its declared migrations: one parked in `interrupt`, one on a durable
//! timer, one waiting for the approval of a tool whose name and arguments changed, one whose step
//! failed half-way (a finished write kept),
//! one in a map step with some instances' writes kept. Version 2 renames nodes, renames the
//! tool (arguments mapped), adds a state field and changes a field's type (a state
//! migration). Each thread completes as it would have, and says `graph.migrated` once. A
//! thread stored by a newer version, one parked in a node no migration maps, and one whose
//! arguments the mapping refuses are refused, and stay as they were.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::persist::ResumeError;
use agentflow::prelude::*;
use agentflow::{PendingKind, RunError, Store};
use serde_json::json;

use crate::support::process::own_test;
use crate::support::stores::{open_redb, store};
use crate::support::temp::temp_dir;

use crate::orders_versions::*;

/// Parks one thread of each kind on version 1; returns the old approval's id.
async fn park_all(store: &Arc<dyn Store>, deps: &Deps, prefix: &str) -> String {
    let old = old_app(store);
    let mut kinds = std::collections::BTreeMap::<&str, u32>::new();
    let mut approval = String::new();
    for kind in ["review", "wait", "pay", "crash", "map"] {
        let thread = format!("{prefix}-{kind}");
        let run = old.runner(deps).thread(thread.as_str()).owner(OWNER).run(order(kind, &thread)).await;
        let seen = match run {
            Ok(run) => match &run.outcome {
                Outcome::Interrupted { pending, .. } if pending[0].kind == PendingKind::Approval => {
                    approval = waits_for_approval(&run).0;
                    "approval"
                }
                Outcome::Interrupted { .. } => "interrupt",
                Outcome::Sleeping { .. } => "sleep",
                Outcome::Failed { .. } => "failed",
                other => panic!("{kind}: {other:?}"),
            },
            Err(e) => panic!("{kind}: {e}"),
        };
        *kinds.entry(seen).or_default() += 1;
    }
    let counts: Vec<_> = kinds.into_iter().collect();
    assert_eq!(counts, [("approval", 1), ("failed", 1), ("interrupt", 2), ("sleep", 1)]);
    approval
}

/// Set in the child process: the directory of the redb file it parks the threads in.
const PARK_DIR: &str = "AGENTFLOW_GRAPH_VERSIONS_PARK";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of `threads_parked_on_version_1_complete_on_version_2`: version 1 parks"]
async fn park_on_version_1_child() {
    let Ok(dir) = std::env::var(PARK_DIR) else { return };
    let dir = std::path::PathBuf::from(dir);
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("runs.redb")).expect("create the store file"));
    let deps = Deps::default();
    let old_approval = park_all(&store, &deps, "t").await;
    assert_eq!(deps.packs.load(Ordering::SeqCst), 1);
    assert_eq!(deps.plain_inspections.load(Ordering::SeqCst), 2);
    std::fs::write(dir.join("approval"), old_approval).expect("write the approval's id");
}

/// A process of version 1 parks one thread of each kind and exits; this process, of version 2,
/// completes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_parked_on_version_1_complete_on_version_2() {
    let dir = temp_dir("graph-versions");
    let status = own_test(module_path!(), "park_on_version_1_child").env(PARK_DIR, &dir).status().unwrap();
    assert!(status.success(), "the version 1 process failed: {status}");
    let old_approval = std::fs::read_to_string(dir.join("approval")).expect("the parked approval's id");
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("runs.redb")).expect("open the store file"));
    // This process's counters: what runs here ran on version 2.
    let deps = Deps::default();
    let new = new_app(&store);
    let fingerprint = new.graph().fingerprint().to_string();

    // In `interrupt`, in a node renamed.
    let done = new.runner(&deps).thread("t-review").resume_with("fine").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["reviewed: fine"]);
    assert_eq!(done.state.note, "reviewed", "the new field, from its default");
    assert_eq!(done.state.amount, 12.5, "the state migration ran");

    // On a durable timer: resumed early it keeps sleeping (moved, once), then wakes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let done = loop {
        let run = new.runner(&deps).thread("t-wait").resume().await.unwrap();
        match run.outcome {
            Outcome::Sleeping { .. } if Instant::now() < deadline => tokio::task::yield_now().await,
            _ => break run,
        }
    };
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["woke"]);

    // Waiting for the approval of a tool renamed, its arguments mapped: asked again under the
    // new name, the old request cancelled.
    let desk = new.approvals(authorizer()).unwrap();
    let again = new.runner(&deps).thread("t-pay").resume().await.unwrap();
    let (moved, payload) = waits_for_approval(&again);
    assert_ne!(moved, old_approval);
    assert_eq!(payload["tool"], "send_message");
    assert_eq!(payload["args"], json!({ "recipient": "t-pay", "text": body_for("t-pay") }));
    assert_eq!(desk.get(&old_approval).unwrap().unwrap().status, ApprovalStatus::Cancelled);
    desk.approve(&moved, &Approver::new("alice", ["payments"])).unwrap();
    let done = new.runner(&deps).thread("t-pay").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let expected = ("send_message".to_string(), json!({ "recipient": "t-pay", "text": body_for("t-pay") }));
    assert_eq!(sent_to("t-pay"), [expected], "sent once, under the new tool");
    assert_eq!(desk.get(&moved).unwrap().unwrap().status, ApprovalStatus::Succeeded);

    // A step that failed half-way: the write of the node renamed is kept, not run again.
    let done = new.runner(&deps).thread("t-crash").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["packed", "flaky ran"]);
    assert_eq!(deps.packs.load(Ordering::SeqCst), 0, "the kept write of `pack` served `boxing`");

    // A map step with two instances' writes kept.
    let done = new.runner(&deps).thread("t-map").resume_with("intact").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["a: ok", "fragile-b: intact", "c: ok"]);
    assert_eq!(deps.plain_inspections.load(Ordering::SeqCst), 0, "finished instances did not run again");

    for kind in ["review", "wait", "pay", "crash", "map"] {
        let thread = format!("t-{kind}");
        let entries = migrated_entries(&new, &thread);
        assert_eq!(entries.len(), 1, "{thread}: {entries:?}");
        assert_eq!((entries[0]["from"].as_u64(), entries[0]["to"].as_u64()), (Some(1), Some(2)));
        assert_eq!(store.thread(&thread).unwrap().unwrap().graph_fingerprint, fingerprint);
    }
    let by_kind = |kind: &str| migrated_entries(&new, &format!("t-{kind}")).remove(0);
    assert_eq!(by_kind("review")["nodes"], json!({ "review": "human_review" }));
    assert_eq!(by_kind("crash")["nodes"], json!({ "pack": "boxing" }));
    assert_eq!(by_kind("map")["nodes"], json!({ "inspect": "check" }));
    assert_eq!(by_kind("pay")["tools"], json!({ "send_email": "send_message" }));
    assert_eq!(by_kind("wait")["nodes"], json!({}));
}

#[tokio::test]
async fn a_thread_stored_by_a_newer_version_is_refused() {
    let store = store();
    let deps = Deps::default();
    old_app(&store).runner(&deps).thread("n").owner(OWNER).run(order("review", "n")).await.unwrap();
    // Opened by version 2 (moved there), the thread asks for its value.
    let err = new_app(&store).runner(&deps).thread("n").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { .. }), "{err}");
    let err = old_app(&store).runner(&deps).thread("n").resume_with("late").await.unwrap_err();
    let RunError::Resume(ResumeError::GraphNewer { stored: 2, current: 1, .. }) = &err else { panic!("{err}") };
    assert!(err.to_string().contains("version 2 or later"), "{err}");
    let done = new_app(&store).runner(&deps).thread("n").resume_with("ok").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(migrated_entries(&old_app(&store), "n").len(), 1);
}

#[tokio::test]
async fn a_node_no_migration_maps_is_refused_by_name_and_the_thread_stays() {
    let store = store();
    let deps = Deps::default();
    let old = old_app(&store);
    old.runner(&deps).thread("u").owner(OWNER).run(order("review", "u")).await.unwrap();
    let err = new_app_with(&store, &[]).runner(&deps).thread("u").resume_with("x").await.unwrap_err();
    let RunError::Resume(ResumeError::NodeUnmapped { node, .. }) = &err else { panic!("{err}") };
    assert_eq!(node, "review");
    assert!(err.to_string().contains("migrate(from = 1, nodes(review -> <node or END>))"), "{err}");
    assert!(migrated_entries(&old, "u").is_empty());
    // Still wholly on version 1.
    let done = old.runner(&deps).thread("u").resume_with("still here").await.unwrap();
    assert_eq!(done.state.log, ["reviewed: still here"]);
}

#[tokio::test]
async fn arguments_the_mapping_refuses_leave_the_thread_on_its_version() {
    let store = store();
    let deps = Deps::default();
    let old = old_app(&store);
    let paused = old.runner(&deps).thread("forbidden-1").owner(OWNER).run(order("pay", "forbidden-1")).await.unwrap();
    let (id, _) = waits_for_approval(&paused);
    let err = new_app(&store).runner(&deps).thread("forbidden-1").resume().await.unwrap_err();
    let RunError::Resume(ResumeError::ArgsRefused { approval, tool, reason, .. }) = &err else { panic!("{err}") };
    assert_eq!((approval.as_str(), tool.as_str()), (id.as_str(), "send_message"));
    assert!(reason.contains("cannot say that"), "{reason}");
    assert!(migrated_entries(&old, "forbidden-1").is_empty());
    let desk = old.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending, "the request is untouched");
    // Version 1 still runs it.
    desk.approve(&id, &Approver::new("alice", ["payments"])).unwrap();
    let done = old.runner(&deps).thread("forbidden-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(sent_to("forbidden-1").len(), 1);
}

#[tokio::test]
async fn a_thread_whose_only_node_maps_to_end_completes() {
    let store = store();
    let deps = Deps::default();
    old_app(&store).runner(&deps).thread("e").owner(OWNER).run(order("review", "e")).await.unwrap();
    let new = new_app_with(&store, &REVIEW_ENDS);
    let done = new.runner(&deps).thread("e").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(done.state.log.is_empty(), "{:?}", done.state.log);
    let entries = migrated_entries(&new, "e");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["nodes"], json!({ "review": "END" }));
    assert_eq!(store.thread("e").unwrap().unwrap().status.as_str(), "completed");
}

/// An answer given through the desk (as the inbox, the API and `agentflow answer` give it) while
/// the thread still stands on version 1 answers the question as version 2 asks it, in the node
/// renamed: the move records it again for the new checkpoint, by the person who gave it.
#[tokio::test]
async fn an_answer_recorded_before_the_move_answers_the_question_after_it() {
    let store = store();
    let deps = Deps::default();
    old_app(&store).runner(&deps).thread("early").owner(OWNER).run(order("review", "early")).await.unwrap();
    let desk = agentflow::approval::ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let (seq, _) = desk.waiting_interrupt("early").unwrap();
    desk.answer_interrupt("early", seq, json!("answered early"), &Approver::new("ops", ["x"])).unwrap();
    let new = new_app(&store);
    let done = new.runner(&deps).thread("early").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["reviewed: answered early"]);
    assert_eq!(migrated_entries(&new, "early").len(), 1);
    let answers: Vec<_> =
        new.audit_log("early").unwrap().into_iter().filter(|e| e.kind == agentflow::approval::ANSWER_KIND).collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!((answers[1].actor.as_str(), answers[1].detail["node"].as_str()), ("ops", Some("human_review")));
}
