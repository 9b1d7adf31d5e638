//! The decisions on an approval: a rejection (re-plan or end the run), conditions, and the
//! authorizer (roles, self-approval, the two-person rule).

use crate::approval_refunds::*;
use crate::support::stores::store;
use agentflow::approval::{ApprovalStatus, Approver, DecisionError};
use agentflow::model::ScriptedModel;
use agentflow::prebuilt::react::ReactDeps;
use agentflow::prelude::*;
use agentflow::tool::OnReject;
use serde_json::{Value, json};
use std::sync::{Arc, Barrier};

// ---------------------------------------------------------------- rejection

#[tokio::test]
async fn a_rejection_reaches_the_model_which_answers_without_refunding() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("query_order", json!({ "order_id": "J-1" }))
            .reply_tool_call("process_refund", json!({ "order_id": "J-1", "amount": 299 }))
            .respond_with(answer),
    );
    let deps = ReactDeps::new(model.clone());
    let id = waiting_for(&start(&graph, &deps, "J-1").await);
    desk.reject(&id, &alice(), "outside the 30-day refund window").unwrap();
    let done = graph.runner(&deps).thread("J-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(refunds_for("J-1").is_empty());
    // The model saw the REJECTED observation with the reason, and answered.
    let seen = model.last_request().unwrap();
    let rejected = seen.messages.iter().find(|m| m.content.contains("REJECTED")).expect("REJECTED observation");
    assert!(rejected.content.contains("rejected by alice: outside the 30-day refund window"), "{}", rejected.content);
    assert_eq!(
        done.state.answer.as_deref(),
        Some("No refund (REJECTED): rejected by alice: outside the 30-day refund window")
    );
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Rejected);
    assert!(kinds(&graph, "J-1").contains(&"approval.rejected".to_string()));
}

#[tokio::test]
async fn a_rejection_can_end_the_run() {
    let graph = refunds::graph().app().store(store()).on_reject(OnReject::EndRun);
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("J-2", 299);
    let id = waiting_for(&start(&graph, &deps, "J-2").await);
    desk.reject(&id, &alice(), "fraud suspected").unwrap();
    let done = graph.runner(&deps).thread("J-2").resume().await.unwrap();
    let Outcome::Failed { node, error } = &done.outcome else { panic!("{:?}", done.outcome) };
    assert_eq!(node, "tools");
    assert!(error.message.contains("rejected by alice: fraud suspected"), "{error}");
    assert!(done.state.answer.is_none());
    assert!(refunds_for("J-2").is_empty());
}

#[tokio::test]
async fn conditions_of_an_approval_reach_the_next_node() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("query_order", json!({ "order_id": "K-1" }))
            .reply_tool_call("process_refund", json!({ "order_id": "K-1", "amount": 80 }))
            .respond_with(answer),
    );
    let deps = ReactDeps::new(model.clone());
    let id = waiting_for(&start(&graph, &deps, "K-1").await);
    desk.approve_with_conditions(&id, &alice(), json!({ "notify": "customer", "note": "goodwill" })).unwrap();
    let done = graph.runner(&deps).thread("K-1").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["conditions"], json!({ "notify": "customer", "note": "goodwill" }));
    let seen = model.last_request().unwrap();
    assert!(seen.messages.iter().any(|m| m.content.contains("goodwill")));
    assert_eq!(refunds_for("K-1"), vec![80]);
}

// ---------------------------------------------------------------- the authorizer

#[tokio::test]
async fn the_authorizer_checks_roles_and_refuses_self_approval() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("Z-1", 40);
    let id = waiting_for(&start(&graph, &deps, "Z-1").await);

    let intern = Approver::new("ivan", ["support"]);
    let err = desk.approve(&id, &intern).unwrap_err();
    assert!(matches!(&err, DecisionError::NotAuthorized { approver, .. } if approver == "ivan"), "{err}");
    assert!(err.to_string().contains("deciding irreversible calls needs the `refund-approver` role"), "{err}");
    // Knowing the id (or the thread) grants nothing: not even a rejection or a cancel.
    assert!(matches!(desk.reject(&id, &intern, "x"), Err(DecisionError::NotAuthorized { .. })));
    assert!(matches!(desk.cancel(&id, &intern), Err(DecisionError::NotAuthorized { .. })));
    // The requester holds the role but may not approve its own request.
    let itself = Approver::new(OWNER, [ROLE]);
    let err = desk.approve(&id, &itself).unwrap_err();
    assert!(err.to_string().contains("cannot approve it"), "{err}");
    // Nor under its name cased otherwise (the inbox tells its users apart ignoring case).
    let shouted = Approver::new(OWNER.to_uppercase(), [ROLE]);
    let err = desk.approve(&id, &shouted).unwrap_err();
    assert!(err.to_string().contains("cannot approve it"), "{err}");
    let err = desk.approve("apr-does-not-exist", &alice()).unwrap_err();
    assert!(matches!(err, DecisionError::NotFound { .. }), "{err}");
    // Nobody without a name decides (the audit log would name no one).
    for blank in ["", "  "] {
        let err = desk.approve(&id, &Approver::new(blank, [ROLE])).unwrap_err();
        assert!(
            matches!(&err, DecisionError::NotAuthorized { reason, .. } if reason.contains("needs a name")),
            "{err}"
        );
    }
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending);
    assert!(refunds_for("Z-1").is_empty());

    // A request made in a resumed run is still the thread owner's: a runner
    // that resumes without naming the owner does not make it self-approvable.
    let model = ScriptedModel::new()
        .reply_tool_call("process_refund", json!({ "order_id": "Z-2", "amount": 5 }))
        .reply_tool_call("process_refund", json!({ "order_id": "Z-2", "amount": 6 }))
        .respond_with(answer);
    let deps = ReactDeps::new(Arc::new(model));
    let first = waiting_for(&start(&graph, &deps, "Z-2").await);
    desk.approve(&first, &alice()).unwrap();
    let run = graph.runner(&deps).thread("Z-2").resume().await.unwrap();
    let second = waiting_for(&run);
    assert_eq!(desk.get(&second).unwrap().unwrap().requester, OWNER);
    assert!(desk.approve(&second, &itself).is_err());
    assert_eq!(refunds_for("Z-2"), vec![5]);
}

#[tokio::test]
async fn the_two_person_rule_needs_two_distinct_approvers_of_the_same_arguments() {
    let graph = react();
    let desk = graph.approvals(authorizer().two_person_for_irreversible()).unwrap();
    let deps = bot("W-1", 500);
    let id = waiting_for(&start(&graph, &deps, "W-1").await);

    let first = desk.approve(&id, &alice()).unwrap();
    assert_eq!(first.status, ApprovalStatus::Pending, "one sign-off is not enough");
    let err = desk.approve(&id, &alice()).unwrap_err();
    assert!(matches!(&err, DecisionError::SameApprover { approver, .. } if approver == "alice"), "{err}");
    // One person under a name cased otherwise is still one person.
    let err = desk.approve(&id, &Approver::new("Alice", [ROLE])).unwrap_err();
    assert!(matches!(&err, DecisionError::SameApprover { approver, .. } if approver == "Alice"), "{err}");
    // Still pending: the run pauses again.
    assert_eq!(waiting_for(&graph.runner(&deps).thread("W-1").resume().await.unwrap()), id);
    let second = desk.approve(&id, &bob()).unwrap();
    assert_eq!((second.status, second.decided_by.as_deref()), (ApprovalStatus::Approved, Some("bob")));
    graph.runner(&deps).thread("W-1").resume().await.unwrap();
    assert_eq!(refunds_for("W-1"), vec![500]);
    let sign_offs: Vec<String> = graph
        .audit_log("W-1")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "approval.sign_off")
        .map(|e| e.actor)
        .collect();
    assert_eq!(sign_offs, ["alice", "bob"]);

    // A second person cannot change the arguments on the strength of the
    // first person's sign-off: an edit needs its own two sign-offs.
    let deps = bot("W-2", 500);
    let id = waiting_for(&start(&graph, &deps, "W-2").await);
    desk.approve(&id, &alice()).unwrap();
    let edited = desk.edit(&id, &bob(), json!({ "order_id": "W-2", "amount": 5000 })).unwrap();
    assert_eq!(edited.status, ApprovalStatus::Pending, "alice never saw 5000");
    let carol = Approver::new("carol", [ROLE]);
    let edited = desk.edit(&id, &carol, json!({ "order_id": "W-2", "amount": 5000 })).unwrap();
    assert_eq!(edited.status, ApprovalStatus::Approved);
    assert_eq!(edited.args, r#"{"amount":5000,"order_id":"W-2"}"#);
    // While it waited for carol, bob's edit was kept with his sign-off, not lost.
    let sign_offs = |thread: &str| -> Vec<Value> {
        let log = graph.audit_log(thread).unwrap();
        log.into_iter().filter(|e| e.kind == "approval.sign_off").map(|e| e.detail).collect()
    };
    assert_eq!(sign_offs("W-2")[1]["args"], r#"{"amount":5000,"order_id":"W-2"}"#);

    // The conditions are part of what is signed: a co-signer who leaves out the conditions the
    // first approver attached does not complete that approval (the call would run without them),
    // and the conditions are kept with the sign-off meanwhile.
    let deps = bot("W-3", 500);
    let id = waiting_for(&start(&graph, &deps, "W-3").await);
    let max = json!({ "max_amount": 10 });
    assert_eq!(desk.approve_with_conditions(&id, &alice(), max.clone()).unwrap().status, ApprovalStatus::Pending);
    assert_eq!(desk.approve(&id, &bob()).unwrap().status, ApprovalStatus::Pending, "bob left alice's conditions out");
    let approved = desk.approve_with_conditions(&id, &carol, max.clone()).unwrap();
    assert_eq!((approved.status, approved.conditions), (ApprovalStatus::Approved, Some(max.clone())));
    let kept: Vec<Value> = sign_offs("W-3").into_iter().map(|d| d["conditions"].clone()).collect();
    assert_eq!(kept, [max.clone(), Value::Null, max]);
}

#[tokio::test]
async fn two_concurrent_sign_offs_approve_the_call() {
    let graph = react();
    let desk = graph.approvals(authorizer().two_person_for_irreversible()).unwrap();
    for round in 0..8 {
        let thread = format!("W2-{round}");
        let deps = bot(&thread, 1);
        let id = waiting_for(&start(&graph, &deps, &thread).await);
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            for who in [alice(), bob()] {
                let (desk, id, barrier) = (&desk, &id, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let r = desk.approve(id, &who);
                    assert!(r.is_ok(), "{who:?}: {r:?}");
                });
            }
        });
        assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Approved, "round {round}");
    }
}
