//! Deciding approvals on the inbox (`agentflow serve` as a subprocess, as in `serve.rs`):
//! approving, rejecting with a reason, approving with conditions or edited arguments checked
//! against the tool's schema, and who may decide (the role, not the requester, two people
//! when `--two-person` asks for it). Each refusal leaves the record pending with its arguments.
//! The store is read once the server is stopped (it may hold the redb file while it runs).

use crate::inbox_common;

use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use agentflow::tool::args_hash;
use inbox_common::http::*;
use inbox_common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn a_user_without_the_role_and_the_requester_are_refused() {
    let (store, serve, approval) = setup("roles").await;
    let base = serve.base.as_str();
    let id = approval.id;

    let bob = login(base, "bob-token").await;
    let (status, page) = post(base, Some(&bob), &format!("/approvals/{id}/approve"), &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("deciding irreversible calls needs the `irreversible` role"), "{page}");
    let (status, page) = post(base, Some(&bob), &format!("/approvals/{id}/reject"), &[("reason", "no")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");

    // `agent` holds the role but requested the call: the library's authorizer refuses it.
    let agent = login(base, "agent-token").await;
    let (status, page) = post(base, Some(&agent), &format!("/approvals/{id}/approve"), &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("`agent` requested this call and cannot approve it"), "{page}");

    // An unknown approval, an unknown decision.
    let alice = login(base, "alice-token").await;
    let (status, page) = post(base, Some(&alice), "/approvals/nope/approve", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
    assert!(page.contains("no approval `nope`"), "{page}");
    let (status, _) = post(base, Some(&alice), &format!("/approvals/{id}/settle"), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // None of them changed the record (a decision cannot be undone).
    serve.stop();
    assert_untouched(&store);
}

#[tokio::test]
async fn an_approval_is_recorded_and_audited_with_the_user_and_the_run_goes_on() {
    let (store, serve, a) = setup("approve").await;
    let base = serve.base.as_str();
    let id = a.id.clone();
    let alice = login(base, "alice-token").await;

    // The inbox shows what is needed to judge the call.
    let (status, inbox) = get(base, Some(&alice), "/").await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        "refund",
        "risk-irreversible",
        "&quot;order_id&quot;: &quot;A-1&quot;",
        "&quot;amount&quot;: 40",
        a.args_hash.as_str(),
        "Requested by</td><td class=\"requester\">agent",
        "left (expires in",
        "checked order A-1",
        "data-node=\"pay\"",
        "Refunds an order.",
    ] {
        assert!(inbox.contains(needle), "the inbox lacks {needle}: {inbox}");
    }

    let (status, to) = post(base, Some(&alice), &format!("/approvals/{id}/approve"), &[("conditions", "")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    assert_eq!(to, format!("/?decided={id}"));
    let (_, page) = get(base, Some(&alice), &to).await;
    assert!(page.contains(&format!("Approval {id} (refund) is APPROVED by alice")), "{page}");
    assert!(page.contains("Nothing waits for a decision"), "{page}");
    // The audit page names her.
    let (_, audit_page) = get(base, Some(&alice), "/audit").await;
    assert!(audit_page.contains("<td class=\"actor\">alice</td><td>approval.approved</td>"), "{audit_page}");

    // Deciding again loses the compare-and-set.
    let (status, page) = post(base, Some(&alice), &format!("/approvals/{id}/reject"), &[("reason", "late")]).await;
    assert_eq!(status, StatusCode::CONFLICT, "{page}");
    assert!(page.contains("already decided"), "{page}");

    // The decision reached the metrics (this server's) through the library's desk.
    let (status, text) = get(base, None, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains("agentflow_approval_decisions_total{status=\"approved\"} 1"), "{text}");

    serve.stop();
    let a = the_approval(&store);
    assert_eq!(a.status, ApprovalStatus::Approved);
    assert_eq!(a.decided_by.as_deref(), Some("alice"));
    let audit = with_redb(&store, |s| s.scan_audit("t-paused").unwrap().items);
    let entry = audit.iter().find(|e| e.kind == "approval.approved").unwrap_or_else(|| panic!("{audit:?}"));
    assert_eq!(entry.actor, "alice");

    // The executor accepts the decision: the resumed run makes the call.
    let done = resume(&store).await;
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.unwrap()["result"], json!({ "refunded": 40, "order_id": "A-1" }));
}

#[tokio::test]
async fn edits_are_checked_against_the_schema_and_rejections_need_a_reason() {
    let (store, serve, approval) = setup("edit").await;
    let base = serve.base.as_str();
    let id = approval.id;
    let alice = login(base, "alice-token").await;
    let edit = format!("/approvals/{id}/edit");

    let (status, page) = post(base, Some(&alice), &edit, &[("args", r#"{"order_id": "A-1", "amount": "lots"}"#)]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{page}");
    assert!(page.contains("`args.amount` must be integer"), "{page}");
    // The page offers the edit again, with the arguments as sent.
    assert!(page.contains("&quot;amount&quot;: &quot;lots&quot;}</textarea>"), "{page}");
    let (status, page) = post(base, Some(&alice), &edit, &[("args", r#"{"order_id": "A-1"}"#)]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(page.contains("`args.amount` is required"), "{page}");
    let (status, page) = post(base, Some(&alice), &edit, &[("args", "{not json")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(page.contains("not valid JSON"), "{page}");
    let (status, page) = post(base, Some(&alice), &format!("/approvals/{id}/reject"), &[("reason", "  ")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(page.contains("A rejection needs a reason"), "{page}");
    // Nothing changed; the inbox goes on on a server started again.
    let stopped = serve.stop();
    assert_untouched(&store);
    let serve = stopped.start();
    let alice = login(&serve.base, "alice-token").await;

    let (status, to) =
        post(&serve.base, Some(&alice), &edit, &[("args", r#"{"order_id": "A-1", "amount": 25}"#)]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    serve.stop();
    let a = the_approval(&store);
    assert_eq!(a.status, ApprovalStatus::Approved);
    assert_eq!(a.decided_by.as_deref(), Some("alice"));
    let edited = json!({ "order_id": "A-1", "amount": 25 });
    assert_eq!(serde_json::from_str::<Value>(&a.args).unwrap(), edited);
    assert_eq!(a.args_hash, args_hash(&edited), "the record is re-hashed for the edited arguments");
    let done = resume(&store).await;
    assert_eq!(done.state.receipt.unwrap()["result"], json!({ "refunded": 25, "order_id": "A-1" }));
}

#[tokio::test]
async fn a_rejection_with_a_reason_and_conditions_on_an_approval_are_recorded() {
    let dir = temp_dir("reject");
    let store = filled_redb(&dir).await;
    let id = the_approval(&store).id;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (status, _) =
        post(&serve.base, Some(&alice), &format!("/approvals/{id}/reject"), &[("reason", "wrong order")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    serve.stop();
    let a = the_approval(&store);
    assert_eq!(a.status, ApprovalStatus::Rejected);
    assert_eq!(a.decision_note.as_deref(), Some("wrong order"));
    assert_eq!(a.decided_by.as_deref(), Some("alice"));

    // Conditions: JSON as given, plain text as a JSON string.
    let dir = temp_dir("conditions");
    let store = filled_redb(&dir).await;
    let id = the_approval(&store).id;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (status, _) = post(
        &serve.base,
        Some(&alice),
        &format!("/approvals/{id}/approve"),
        &[("conditions", "only after the customer confirms")],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    serve.stop();
    let a = the_approval(&store);
    assert_eq!(a.status, ApprovalStatus::Approved);
    assert_eq!(a.conditions, Some(json!("only after the customer confirms")));
}

#[tokio::test]
async fn roles_for_and_the_two_person_rule_apply_as_in_the_cli() {
    // Irreversible calls need the `refunds` role here, and two approvers.
    let dir = temp_dir("two-person");
    let store = filled_redb(&dir).await;
    let id = the_approval(&store).id;
    let serve = Serve::start(
        store.to_str().unwrap(),
        &users_file(&dir),
        &["--roles-for", "irreversible=refunds", "--two-person"],
    );
    let base = serve.base.as_str();
    let approve = format!("/approvals/{id}/approve");

    let alice = login(base, "alice-token").await;
    let (status, page) = post(base, Some(&alice), &approve, &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("needs the `refunds` role"), "{page}");

    // Carol's sign-off is the first of two: the record still waits.
    let carol = login(base, "carol-token").await;
    let (status, to) = post(base, Some(&carol), &approve, &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    let (_, page) = get(base, Some(&carol), &to).await;
    assert!(page.contains("Your sign-off is recorded (sign-offs so far: carol without conditions)"), "{page}");
    assert!(page.contains("the same arguments with the same conditions"), "{page}");
    let (status, page) = post(base, Some(&carol), &approve, &[]).await;
    assert_eq!(status, StatusCode::CONFLICT, "{page}");
    assert!(page.contains("needs a second approver other than `carol`"), "{page}");
    // Alice's refusal changed nothing, carol's one sign-off decided nothing: still pending.
    serve.stop();
    assert_untouched(&store);
}
