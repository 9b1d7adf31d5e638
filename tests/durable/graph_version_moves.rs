//! What a thread's move to a newer version of its graph carries besides its position: the tool
//! calls of a model's journaled reply (renamed, arguments mapped, or withdrawn), the subgraph
//! child of a renamed node, the decisions taken on approvals of a renamed tool, and the
//! idempotency key of an effect tried under a renamed node.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentflow::approval::{ApprovalStatus, Approver};
use agentflow::prelude::*;
use agentflow::release::{GraphMigration, ToolMigration};
use serde_json::{Value, json};

use crate::orders_versions::*;
use crate::support::stores::store;

/// Version 2's node renames, with `send_email` withdrawn instead of renamed.
static EMAIL_WITHDRAWN: [GraphMigration; 1] = [GraphMigration::new(
    1,
    &[
        ("review", "human_review"),
        ("pack", "boxing"),
        ("inspect", "check"),
        ("delegate", "hand_off"),
        ("book", "booking"),
    ],
    &[("send_email", ToolMigration::Cancel)],
    &[],
)];

fn alice() -> Approver {
    Approver::new("alice", ["payments"])
}

fn message_to(customer: &str) -> (String, Value) {
    ("send_message".to_string(), json!({ "recipient": customer, "text": body_for(customer) }))
}

/// The model asked for `send_email` on version 1 and its call waits for approval; version 2
/// renamed the tool to `send_message` and maps its arguments. The journaled reply is replayed on
/// version 2 (the model is not asked again) and its call runs as version 2 names it, under the
/// approval the move asked again.
#[tokio::test]
async fn a_call_the_model_asked_for_runs_under_the_renamed_tool_after_the_move() {
    let (store, deps) = (store(), Deps::default());
    let paused = old_app(&store).runner(&deps).thread("ask-1").owner(OWNER).run(order("ask", "ask-1")).await.unwrap();
    let (old_id, payload) = waits_for_approval(&paused);
    assert_eq!(payload["tool"], "send_email");
    let new = new_app(&store);
    let again = new.runner(&deps).thread("ask-1").resume().await.unwrap();
    let (moved, payload) = waits_for_approval(&again);
    assert_ne!(moved, old_id);
    assert_eq!((payload["tool"].as_str(), &payload["args"]), (Some("send_message"), &message_to("ask-1").1));
    let desk = new.approvals(authorizer()).unwrap();
    desk.approve(&moved, &alice()).unwrap();
    let done = new.runner(&deps).thread("ask-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, [r#"send_message: {"ok":true,"result":{"sent":true}}"#]);
    assert_eq!(sent_to("ask-1"), [message_to("ask-1")], "sent once, under the new tool");
    assert_eq!(deps.asked.load(Ordering::SeqCst), 1, "the reply journaled on version 1 was replayed");
    let entry = migrated_entries(&new, "ask-1").remove(0);
    let calls = entry["calls"].as_array().expect("the moved calls are audited");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!((calls[0]["node"].as_str(), calls[0]["call"].as_str()), (Some("ask"), Some("call-1")));
    assert_eq!((calls[0]["tool"].as_str(), calls[0]["to"].as_str()), (Some("send_email"), Some("send_message")));
    assert_ne!(calls[0]["args_hash"], calls[0]["to_args_hash"], "both argument hashes: {calls:?}");
}

/// The reply holds two calls: the first ran on version 1 (approved there), the second waits for
/// its approval when the thread moves. The first is replayed from its journaled result, not sent
/// again under the new name; the second is sent under it.
#[tokio::test]
async fn a_call_of_the_reply_that_ran_before_the_move_is_not_run_again() {
    let (store, deps) = (store(), Deps::default());
    let old = old_app(&store);
    let desk = old.approvals(authorizer()).unwrap();
    let paused = old.runner(&deps).thread("two-1").owner(OWNER).run(order("ask", "two-1")).await.unwrap();
    desk.approve(&waits_for_approval(&paused).0, &alice()).unwrap();
    let second = old.runner(&deps).thread("two-1").resume().await.unwrap();
    let (second_id, payload) = waits_for_approval(&second);
    assert_eq!(payload["args"]["to"], "office of two-1");
    assert_eq!(sent_to("two-1").len(), 1, "the first call ran on version 1");
    let new = new_app(&store);
    let again = new.runner(&deps).thread("two-1").resume().await.unwrap();
    let (moved, _) = waits_for_approval(&again);
    assert_ne!(moved, second_id);
    new.approvals(authorizer()).unwrap().approve(&moved, &alice()).unwrap();
    let done = new.runner(&deps).thread("two-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let sent = sent_to("two-1");
    let office = "office of two-1";
    assert_eq!(sent.len(), 2, "each call sent once: {sent:?}");
    assert_eq!(sent[0], ("send_email".to_string(), json!({ "to": "two-1", "body": body_for("two-1") })));
    assert_eq!(sent[1], ("send_message".to_string(), json!({ "recipient": office, "text": body_for("two-1") })));
    assert_eq!(
        done.state.log,
        [r#"send_message: {"ok":true,"result":{"sent":true}}"#, r#"send_message: {"ok":true,"result":{"sent":true}}"#]
    );
    assert_eq!(deps.asked.load(Ordering::SeqCst), 1);
    let entry = migrated_entries(&new, "two-1").remove(0);
    let ran: Vec<_> = entry["calls"].as_array().unwrap().iter().map(|c| c["ran"].as_bool()).collect();
    assert_eq!(ran, [Some(true), Some(false)], "{entry}");
}

/// Version 2 withdraws `send_email`: the model's call does not run, and the model hears why (a
/// tool error naming the withdrawal), not that the tool is not allowed.
#[tokio::test]
async fn a_call_of_a_withdrawn_tool_does_not_run_and_the_model_hears_why() {
    let (store, deps) = (store(), Deps::default());
    let paused = old_app(&store).runner(&deps).thread("ask-2").owner(OWNER).run(order("ask", "ask-2")).await.unwrap();
    let (old_id, _) = waits_for_approval(&paused);
    let new = new_app_with(&store, &EMAIL_WITHDRAWN);
    let done = new.runner(&deps).thread("ask-2").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log.len(), 1, "{:?}", done.state.log);
    let said = &done.state.log[0];
    assert!(said.starts_with("send_email: permission_denied: the call of `send_email` was withdrawn"), "{said}");
    assert!(said.contains("version 1 to version 2 of graph `orders`"), "{said}");
    assert!(sent_to("ask-2").is_empty());
    assert_eq!(new.approvals(authorizer()).unwrap().get(&old_id).unwrap().unwrap().status, ApprovalStatus::Cancelled);
    let entry = migrated_entries(&new, "ask-2").remove(0);
    assert_eq!(entry["calls"][0]["to"], "cancel", "{entry}");
    assert_eq!(entry["tools"], json!({ "send_email": "cancel" }));
}

/// A node renamed by the move that runs a subgraph continues the child it parked in: the child
/// does not start again, and takes the answer.
#[tokio::test]
async fn a_renamed_node_continues_the_subgraph_child_it_parked_in() {
    let (store, deps) = (store(), Deps::default());
    let paused =
        old_app(&store).runner(&deps).thread("dl-1").owner(OWNER).run(order("delegate", "dl-1")).await.unwrap();
    assert!(matches!(paused.outcome, Outcome::Interrupted { .. }), "{:?}", paused.outcome);
    let children = |store: &Arc<dyn agentflow::Store>| store.child_threads("dl-1").unwrap().items.len();
    assert_eq!(children(&store), 1);
    let new = new_app(&store);
    let done = new.runner(&deps).thread("dl-1").resume_with("bob").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["received for dl-1", "signed by bob"]);
    assert_eq!(deps.child_starts.load(Ordering::SeqCst), 1, "the child did not start again");
    assert_eq!(children(&store), 1, "no second child");
    assert_eq!(migrated_entries(&new, "dl-1")[0]["nodes"], json!({ "delegate": "hand_off" }));
}

/// An idempotent effect tried under `book` on version 1 (its service went away) is tried again
/// under `booking` on version 2 with the same idempotency key, so the service can tell it is
/// the same request.
#[tokio::test]
async fn an_idempotent_effect_keeps_its_key_across_a_rename_of_its_node() {
    let (store, deps) = (store(), Deps::default());
    let failed = old_app(&store).runner(&deps).thread("bk-1").owner(OWNER).run(order("book", "bk-1")).await.unwrap();
    assert!(matches!(failed.outcome, Outcome::Failed { .. }), "{:?}", failed.outcome);
    let done = new_app(&store).runner(&deps).thread("bk-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let keys = reserved_for("bk-1");
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1], "the same idempotency key before and after the move");
    assert_eq!(done.state.log, [format!("reserved under {}", keys[0])]);
}

/// A call of `send_email` rejected on version 1 is not asked again as `send_message` after the
/// move: the rejection carries over to the question as version 2 asks it.
#[tokio::test]
async fn a_rejection_of_a_renamed_tool_is_not_asked_again_after_the_move() {
    let (store, deps) = (store(), Deps::default());
    let old = old_app(&store);
    let paused = old.runner(&deps).thread("rj-1").owner(OWNER).run(order("pay", "rj-1")).await.unwrap();
    let (old_id, _) = waits_for_approval(&paused);
    old.approvals(authorizer()).unwrap().reject(&old_id, &alice(), "not to this customer").unwrap();
    let new = new_app(&store);
    let done = new.runner(&deps).thread("rj-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "not asked again");
    assert!(done.state.log[0].contains("rejected by alice: not to this customer"), "{:?}", done.state.log);
    assert!(sent_to("rj-1").is_empty());
    let entry = migrated_entries(&new, "rj-1").remove(0);
    let moved = &entry["approvals"][0];
    assert_eq!((moved["from"].as_str(), moved["decision"].as_str()), (Some(old_id.as_str()), Some("REJECTED")));
    let desk = new.approvals(authorizer()).unwrap();
    let carried = desk.get(moved["to"].as_str().unwrap()).unwrap().unwrap();
    assert_eq!((carried.status, carried.tool.as_str()), (ApprovalStatus::Rejected, "send_message"));
    assert_eq!(desk.get(&old_id).unwrap().unwrap().status, ApprovalStatus::Rejected, "the rejection stays");
}

/// A call of `send_email` approved on version 1, whose arguments version 2 maps, runs after the
/// move as `send_message` with the mapped arguments without being asked again: the mapping is
/// declared, so the decision carries over. The move audits both argument hashes.
#[tokio::test]
async fn an_approval_with_mapped_arguments_carries_over_the_move() {
    let (store, deps) = (store(), Deps::default());
    let old = old_app(&store);
    let paused = old.runner(&deps).thread("ap-1").owner(OWNER).run(order("pay", "ap-1")).await.unwrap();
    let (old_id, _) = waits_for_approval(&paused);
    let approved = old.approvals(authorizer()).unwrap().approve(&old_id, &alice()).unwrap();
    let new = new_app(&store);
    let done = new.runner(&deps).thread("ap-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "not asked again");
    assert_eq!(sent_to("ap-1"), [message_to("ap-1")]);
    let entry = migrated_entries(&new, "ap-1").remove(0);
    let moved = &entry["approvals"][0];
    assert_eq!((moved["decision"].as_str(), moved["decided_by"].as_str()), (Some("APPROVED"), Some("alice")));
    assert_eq!(moved["args_hash"].as_str(), Some(approved.args_hash.as_str()), "what was approved");
    let desk = new.approvals(authorizer()).unwrap();
    let carried = desk.get(moved["to"].as_str().unwrap()).unwrap().unwrap();
    assert_eq!(moved["to_args_hash"].as_str(), Some(carried.args_hash.as_str()), "what ran");
    assert_ne!(carried.args_hash, approved.args_hash);
    assert_eq!(carried.status, ApprovalStatus::Succeeded);
    assert_eq!(desk.get(&old_id).unwrap().unwrap().status, ApprovalStatus::Cancelled);
}
