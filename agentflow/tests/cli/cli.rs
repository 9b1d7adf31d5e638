//! The `agentflow` binary, run in subprocesses against stores this test fills by running a
//! small graph: a thread paused for an approval, a completed one, a failed one.
//!
//! Each test makes its own store file (in a fresh temporary directory), closes it, and runs
//! the real binary (`CARGO_BIN_EXE_agentflow`) on it, checking its exit code, its JSON output
//! and its messages. Where the CLI decides or changes something, the test then opens the store
//! again with the graph's types and checks what the library sees.

use crate::cli_common::*;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use agentflow::approval::{ApprovalStatus, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use agentflow_store::{NewRun, RunWait, StepCommit, ThreadRecord, ThreadStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[path = "questions.rs"]
mod questions;

#[path = "edges.rs"]
mod edges;

#[test]
fn threads_lists_each_thread_with_its_status_and_filters() {
    let dir = temp_dir("threads");
    let store = dir.join("runs.redb");
    fill(&store);

    let all = af_json(&store, &["threads"]);
    assert_eq!(all.as_array().unwrap().len(), 3);
    assert_eq!(by_id(&all, "t-paused")["status"], "interrupted");
    assert_eq!(by_id(&all, "t-done")["status"], "completed");
    assert_eq!(by_id(&all, "t-failed")["status"], "failed");
    assert_eq!(by_id(&all, "t-done")["graph"], "payments");
    assert_eq!(by_id(&all, "t-done")["owner"], "agent");
    assert_eq!(by_id(&all, "t-done")["fingerprint"], payments::graph().fingerprint());

    let failed = af_json(&store, &["threads", "--status", "failed"]);
    assert_eq!(failed.as_array().unwrap().iter().map(|t| t["id"].clone()).collect::<Vec<_>>(), vec![json!("t-failed")]);
    let two = af_json(&store, &["threads", "--status", "failed", "--status", "completed", "--graph", "payments"]);
    assert_eq!(two.as_array().unwrap().len(), 2);
    assert!(af_json(&store, &["threads", "--graph", "other"]).as_array().unwrap().is_empty());
    // Every thread was updated moments ago.
    assert!(af_json(&store, &["threads", "--older-than", "1h"]).as_array().unwrap().is_empty());
    assert_eq!(af_json(&store, &["threads", "--older-than", "0s"]).as_array().unwrap().len(), 3);

    // The table names the same threads.
    let table = af(&store, &["threads"]);
    assert_eq!(table.status.code(), Some(0));
    let text = stdout(&table);
    assert!(text.starts_with("THREAD"), "{text}");
    for id in ["t-paused", "t-done", "t-failed"] {
        assert!(text.contains(id), "{text}");
    }
    expect_refusal(&af(&store, &["threads", "--status", "asleep"]), 2, "unknown status `asleep`");
}

#[test]
fn show_history_and_diff_read_the_state_without_the_graphs_types() {
    let dir = temp_dir("show");
    let store = dir.join("runs.redb");
    fill(&store);

    let done = af_json(&store, &["show", "t-done"]);
    assert_eq!(done["thread"]["status"], "completed");
    assert_eq!(done["state"], json!({ "order": "A-2", "amount": 0, "steps": 1, "log": ["checked"], "receipt": null }));
    assert_eq!(done["warnings"], json!([]));
    assert_eq!(done["next"], json!([]));

    // The state the CLI folds (add and append reducers) is the one the library folds.
    let paused = af_json(&store, &["show", "t-paused"]);
    let lib = app(Arc::new(RedbStore::open(&store).unwrap())).state("t-paused").unwrap().unwrap();
    assert_eq!(paused["state"], serde_json::to_value(&lib.state).unwrap());
    assert_eq!(paused["seq"], json!(lib.seq));
    assert_eq!(paused["next"], json!(["pay"]));
    assert_eq!(paused["pending"][0]["kind"], "approval");
    assert_eq!(paused["pending"][0]["node"], "pay");
    assert_eq!(paused["approvals"][0]["tool"], "refund");
    assert_eq!(paused["approvals"][0]["arguments"], json!({ "order_id": "A-1", "amount": 40 }));
    // The budget is stored compact (unset limits and zero counters left out); `show` prints every
    // limit and counter, for a paused thread (a pending budget write) and a completed one (the
    // checkpoint's metadata) alike.
    for shown in [&paused, &done] {
        let budget = &shown["budget"];
        for key in ["model_calls", "tool_calls", "tokens", "reserve_per_call"] {
            assert!(budget["limits"].get(key).is_some(), "limits.{key} missing: {budget}");
        }
        for key in ["model_calls", "tool_calls", "tokens", "unknown_usage_calls"] {
            assert!(budget["usage"][key].is_u64(), "usage.{key} missing: {budget}");
        }
    }

    let history = af_json(&store, &["history", "t-done"]);
    let seqs: Vec<u64> = history.as_array().unwrap().iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![0, 1]);
    assert_eq!(history[0]["source"], "input");
    assert_eq!(history[1]["nodes"], json!(["check"]));

    let diff = af_json(&store, &["diff", "t-done", "0", "1"]);
    assert_eq!(diff["changed"], json!([{ "path": "/steps", "from": 0, "to": 1 }]));
    assert_eq!(diff["added"], json!([{ "path": "/log/0", "value": "checked" }]));
    assert_eq!(diff["removed"], json!([]));
    let text = stdout(&af(&store, &["diff", "t-done", "0", "1"]));
    assert!(text.contains("~ /steps: 0 -> 1") && text.contains("+ /log/0: checked"), "{text}");

    expect_refusal(&af(&store, &["show", "nope"]), 1, "no thread `nope`");
    expect_refusal(&af(&store, &["diff", "t-done", "0", "9"]), 1, "has no checkpoint 9");
}

#[test]
fn approve_goes_through_the_authorizer_and_the_run_completes() {
    let dir = temp_dir("approve");
    let store = dir.join("runs.redb");
    fill(&store);

    let pending = af_json(&store, &["pending"]);
    let approvals = pending["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1);
    let id = approvals[0]["id"].as_str().unwrap().to_string();
    assert_eq!(approvals[0]["thread"], "t-paused");
    assert_eq!(approvals[0]["requester"], "agent");
    assert_eq!(approvals[0]["risk"], "irreversible");
    assert_eq!(approvals[0]["status"], "PENDING");
    assert_eq!(pending["interrupts"], json!([]));

    let roles = ["--roles-for", "irreversible=refunds"];
    let decide = |args: &[&str]| {
        let mut all = vec!["approve", id.as_str()];
        all.extend_from_slice(args);
        all.extend_from_slice(&roles);
        af(&store, &all)
    };
    // The wrong role, and the requester approving their own call: refused, nothing changes.
    expect_refusal(&decide(&["--as", "bob", "--role", "support"]), 1, "needs the `refunds` role");
    expect_refusal(&decide(&["--as", "agent", "--role", "refunds"]), 1, "requested this call and cannot approve it");
    // The role of the risk's own name, when --roles-for does not say otherwise.
    expect_refusal(
        &af(&store, &["approve", &id, "--as", "bob", "--role", "refunds"]),
        1,
        "needs the `irreversible` role",
    );
    assert_eq!(af_json(&store, &["pending"])["approvals"].as_array().unwrap().len(), 1);

    let approved = decide(&["--as", "alice", "--role", "refunds", "--json"]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    let record: Value = serde_json::from_slice(&approved.stdout).unwrap();
    assert_eq!(record["status"], "APPROVED");
    assert_eq!(record["decided_by"], "alice");
    // Decided once: a second decision loses the compare-and-set.
    expect_refusal(&decide(&["--as", "carol", "--role", "refunds"]), 1, "already decided");
    assert!(af_json(&store, &["pending"])["approvals"].as_array().unwrap().is_empty());

    let audit = af_json(&store, &["audit", "t-paused"]);
    let decision = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "approval.approved")
        .unwrap_or_else(|| panic!("no approval.approved entry in {audit}"));
    assert_eq!(decision["actor"], "alice");
    assert_eq!(decision["detail"]["decided_by"], "alice");

    // The executor accepts the CLI's decision: the resumed run makes the call.
    let app = app(Arc::new(RedbStore::open(&store).unwrap()));
    let done = runtime().block_on(app.runner(&()).thread("t-paused").resume()).unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 40);
}

/// `--two-person` (and `AGENTFLOW_TWO_PERSON`) asks two distinct people to approve an
/// irreversible call; `AGENTFLOW_ROLES` says which role decides which risk class, as
/// `--roles-for` does.
#[test]
fn two_person_and_the_roles_from_the_environment_hold_for_the_cli() {
    let dir = temp_dir("two-person");
    let store = dir.join("runs.redb");
    fill(&store);
    let id = af_json(&store, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let approve = |user: &str, env: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec!["--json", "approve", id.as_str(), "--as", user, "--role", "refunds"];
        args.extend_from_slice(extra);
        let mut command = af_command(&store, &args);
        command.envs(env.iter().copied());
        command.output().expect("run the agentflow binary")
    };
    let roles = ("AGENTFLOW_ROLES", "irreversible=refunds");
    // Without the roles from the environment, `refunds` is not the role an irreversible call
    // needs.
    expect_refusal(&approve("alice", &[], &["--two-person"]), 1, "needs the `irreversible` role");
    // One sign-off is not enough: still pending, and the run still waits.
    let first = approve("alice", &[roles], &["--two-person"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let record: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(record["status"], "PENDING");
    assert_eq!(af_json(&store, &["pending"])["approvals"][0]["id"], id.as_str());
    // The same person again, under a name cased otherwise, is refused.
    expect_refusal(&approve("ALICE", &[roles, ("AGENTFLOW_TWO_PERSON", "true")], &[]), 1, "ALICE");
    let paused = app(Arc::new(RedbStore::open(&store).unwrap()));
    let again = runtime().block_on(paused.runner(&()).thread("t-paused").resume()).unwrap();
    assert!(matches!(again.outcome, Outcome::Interrupted { .. }), "{:?}", again.outcome);
    drop(paused);
    // A sign-off with other conditions does not complete alice's, and says what each approved.
    let mut other = af_command(
        &store,
        &["approve", id.as_str(), "--as", "bob", "--role", "refunds", "--two-person", "--conditions", r#"{"max":1}"#],
    );
    let other = other.env(roles.0, roles.1).output().expect("run the agentflow binary");
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    let said = stdout(&other);
    assert!(said.contains(r#"sign-offs so far: alice without conditions, bob with conditions {"max":1}"#), "{said}");
    // A second person approves it (the rule from the environment this time).
    let second = approve("carol", &[roles, ("AGENTFLOW_TWO_PERSON", "true")], &[]);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let record: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!((&record["status"], &record["decided_by"]), (&json!("APPROVED"), &json!("carol")));
    let sign_offs: Vec<Value> = af_json(&store, &["audit", "t-paused"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "approval.sign_off")
        .map(|e| e["actor"].clone())
        .collect();
    assert_eq!(sign_offs, [json!("alice"), json!("bob"), json!("carol")]);
    let app = app(Arc::new(RedbStore::open(&store).unwrap()));
    let done = runtime().block_on(app.runner(&()).thread("t-paused").resume()).unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 40);
}

#[test]
fn edit_checks_the_arguments_against_the_stored_schema_and_reject_needs_a_reason() {
    let dir = temp_dir("edit");
    let store = dir.join("runs.redb");
    fill(&store);
    let id = af_json(&store, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let who = ["--as", "alice", "--role", "irreversible"];
    let edit = |args: &str| {
        let mut all = vec!["edit", id.as_str(), "--args", args];
        all.extend_from_slice(&who);
        af(&store, &all)
    };
    expect_refusal(&edit(r#"{"order_id": "A-1", "amount": "ten"}"#), 1, "`args.amount` must be integer");
    expect_refusal(&edit(r#"{"order_id": "A-1"}"#), 1, "`args.amount` is required");
    // `amount` is a u32: an edit the tool could not decode is refused now, not when the call runs.
    expect_refusal(&edit(r#"{"order_id": "A-1", "amount": 4294967296}"#), 1, "`args.amount` must fit");
    expect_refusal(&edit("{not json"), 2, "--args is not valid JSON");
    let mut reject = vec!["reject", id.as_str()];
    reject.extend_from_slice(&who);
    expect_refusal(&af(&store, &reject), 2, "reject needs --reason");

    let edited = edit(r#"{"order_id": "A-1", "amount": 25}"#);
    assert_eq!(edited.status.code(), Some(0), "{}", stderr(&edited));
    let app = app(Arc::new(RedbStore::open(&store).unwrap()));
    let desk = app.approvals(RoleAuthorizer::new()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert_eq!(serde_json::from_str::<Value>(&record.args).unwrap(), json!({ "order_id": "A-1", "amount": 25 }));
    let done = runtime().block_on(app.runner(&()).thread("t-paused").resume()).unwrap();
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 25);
}

#[test]
fn reject_cancel_and_settle_move_the_record_and_are_audited() {
    let dir = temp_dir("settle");
    let store = dir.join("runs.redb");
    fill(&store);
    let id = af_json(&store, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let who = ["--as", "alice", "--role", "irreversible", "--json"];
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&who);
        af(&store, &all)
    };
    let rejected = run(&["reject", &id, "--reason", "duplicate order"]);
    assert_eq!(rejected.status.code(), Some(0), "{}", stderr(&rejected));
    let record: Value = serde_json::from_slice(&rejected.stdout).unwrap();
    assert_eq!(record["status"], "REJECTED");
    assert_eq!(record["decision_note"], "duplicate order");
    expect_refusal(&run(&["cancel", &id]), 1, "already decided: it is REJECTED");

    // A call whose outcome is unknown (its process died mid-call), settled by a person.
    {
        let s = RedbStore::open(&store).unwrap();
        let mut unknown = s.approval(&id).unwrap().unwrap();
        unknown.id = "unknown-1".into();
        unknown.status = ApprovalStatus::OutcomeUnknown;
        unknown.decided_by = None;
        unknown.decision_note = None;
        s.put_approval(unknown, "agent").unwrap();
    }
    let pending = af_json(&store, &["pending"]);
    assert_eq!(pending["approvals"][0]["status"], "OUTCOME_UNKNOWN");
    let table = stdout(&af(&store, &["pending"]));
    assert!(table.contains("outcome_unknown") && table.contains("unknown-1"), "{table}");
    expect_refusal(&run(&["settle", "unknown-1", "--failed"]), 2, "settle --failed needs --reason");
    expect_refusal(&run(&["settle", "unknown-1"]), 2, "exactly one of");
    let settled = run(&["settle", "unknown-1", "--failed", "--reason", "the provider shows no refund"]);
    assert_eq!(settled.status.code(), Some(0), "{}", stderr(&settled));
    let record: Value = serde_json::from_slice(&settled.stdout).unwrap();
    assert_eq!(record["status"], "FAILED");
    assert_eq!(record["decided_by"], "alice");
    let kinds: Vec<(String, String)> = af_json(&store, &["audit"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_string(), e["actor"].as_str().unwrap().to_string()))
        .collect();
    assert!(kinds.contains(&("approval.rejected".into(), "alice".into())), "{kinds:?}");
    assert!(kinds.contains(&("approval.failed".into(), "alice".into())), "{kinds:?}");

    // The other two settlements: it acted, with this result; run it again.
    {
        let s = RedbStore::open(&store).unwrap();
        for other in ["unknown-2", "unknown-3"] {
            let mut unknown = s.approval("unknown-1").unwrap().unwrap();
            unknown.id = other.into();
            unknown.status = ApprovalStatus::OutcomeUnknown;
            unknown.decided_by = None;
            unknown.decision_note = None;
            s.put_approval(unknown, "agent").unwrap();
        }
    }
    expect_refusal(&run(&["settle", "unknown-2", "--succeeded", "{not json"]), 2, "--succeeded");
    let settled = run(&["settle", "unknown-2", "--succeeded", r#"{"refund": "re_1"}"#]);
    assert_eq!(settled.status.code(), Some(0), "{}", stderr(&settled));
    let record: Value = serde_json::from_slice(&settled.stdout).unwrap();
    assert_eq!(record["status"], "SUCCEEDED");
    let result: Value = serde_json::from_str(record["decision_note"].as_str().unwrap()).unwrap();
    assert_eq!(result, json!({ "refund": "re_1" }), "the result the run goes on with");
    let again = run(&["settle", "unknown-3", "--run-again"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let record: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(record["status"], "APPROVED", "{record}");
    expect_refusal(&run(&["settle", "unknown-3", "--run-again"]), 1, "already decided");
}

#[test]
fn update_fork_and_compact_write_audited_checkpoints() {
    let dir = temp_dir("update");
    let store = dir.join("runs.redb");
    fill(&store);

    // A finished thread: keep the newest checkpoint; its state stays readable.
    let before = af_json(&store, &["show", "t-done"])["state"].clone();
    let report = af_json(&store, &["compact", "t-done", "--keep", "1"]);
    assert_eq!(report["dropped"], 1, "{report}");
    assert_eq!(af_json(&store, &["history", "t-done"]).as_array().unwrap().len(), 1);
    assert_eq!(af_json(&store, &["show", "t-done"])["state"], before);
    expect_refusal(&af(&store, &["compact", "t-paused"]), 1, "not finished");

    // Through the reducers: `steps` adds, `log` appends.
    let upd =
        af_json(&store, &["update", "t-done", "--set", r#"{"steps": 5, "log": ["fixed by hand"]}"#, "--as", "ops"]);
    assert_eq!(upd["seq"], 2);
    let lib = app(Arc::new(RedbStore::open(&store).unwrap())).state("t-done").unwrap().unwrap();
    assert_eq!(lib.state.steps, 6);
    assert_eq!(lib.state.log, ["checked", "fixed by hand"]);
    assert_eq!(af_json(&store, &["show", "t-done"])["state"], serde_json::to_value(&lib.state).unwrap());
    expect_refusal(
        &af(&store, &["update", "t-done", "--set", r#"{"colour": 1}"#, "--as", "ops"]),
        2,
        "`colour` is not a field of the thread's state",
    );
    expect_refusal(&af(&store, &["update", "t-done", "--set", "[1]", "--as", "ops"]), 2, "must be a JSON object");
    // A value the app could not decode when it resumes is refused before anything is written.
    expect_refusal(
        &af(&store, &["update", "t-done", "--set", r#"{"steps": "many"}"#, "--as", "ops"]),
        2,
        "`steps` must be an integer that fits `u32`",
    );
    assert_eq!(af_json(&store, &["history", "t-done"]).as_array().unwrap().len(), 2);

    // Back to checkpoint 1, before the update.
    let fork = af_json(&store, &["fork", "t-done", "1", "--as", "ops"]);
    assert_eq!(fork["seq"], 3);
    assert_eq!(af_json(&store, &["show", "t-done"])["state"]["steps"], 1);
    let kinds: Vec<(String, String)> = af_json(&store, &["audit", "t-done"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_string(), e["actor"].as_str().unwrap().to_string()))
        .collect();
    assert!(kinds.contains(&("state.updated".into(), "ops".into())), "{kinds:?}");
    assert!(kinds.contains(&("state.forked".into(), "ops".into())), "{kinds:?}");
    expect_refusal(&af(&store, &["fork", "t-done", "0", "--as", "ops"]), 1, "has no checkpoint 0");
}

/// `update --set` checks each value against the field's Rust type as the stored description
/// names it, not only its JSON kind: an array of numbers for a `Vec<String>`, a negative or
/// too large number for a `u32` would be written and then break every read of the thread.
#[test]
fn update_refuses_a_value_the_fields_rust_type_cannot_hold() {
    let dir = temp_dir("update-types");
    let store = dir.join("runs.redb");
    fill(&store);
    let checkpoints = af_json(&store, &["history", "t-paused"]).as_array().unwrap().len();
    for (set, needle) in [
        (r#"{"log": [1, 2]}"#, "`log`[0] must be a string"),
        (r#"{"amount": -5}"#, "`amount` must be an integer that fits `u32`"),
        (r#"{"amount": 4294967296}"#, "`amount` must be an integer that fits `u32`"),
        (r#"{"order": ["A-1"]}"#, "`order` must be a string"),
        // `null` sets the value null, which a `u32` cannot hold.
        (r#"{"amount": null}"#, "`amount` must be an integer that fits `u32`"),
    ] {
        expect_refusal(&af(&store, &["update", "t-paused", "--set", set, "--as", "ops"]), 2, needle);
    }
    // Nothing was written, and the app still reads the thread.
    assert_eq!(af_json(&store, &["history", "t-paused"]).as_array().unwrap().len(), checkpoints);
    // A value of the right type is written and reads back.
    af_json(&store, &["update", "t-paused", "--set", r#"{"amount": 4294967295, "log": ["by hand"]}"#, "--as", "ops"]);
    let lib = app(Arc::new(RedbStore::open(&store).unwrap())).state("t-paused").unwrap().unwrap();
    assert_eq!((lib.state.amount, lib.state.log.last().map(String::as_str)), (u32::MAX, Some("by hand")));
    // `null` clears an `Option` field, in the app as in `show`.
    af_json(&store, &["update", "t-paused", "--set", r#"{"receipt": {"manual": true}}"#, "--as", "ops"]);
    af_json(&store, &["update", "t-paused", "--set", r#"{"receipt": null}"#, "--as", "ops"]);
    let lib = app(Arc::new(RedbStore::open(&store).unwrap())).state("t-paused").unwrap().unwrap();
    assert_eq!(lib.state.receipt, None);
    assert_eq!(af_json(&store, &["show", "t-paused"])["state"]["receipt"], Value::Null);
}

#[test]
fn graph_prints_the_mermaid_drawing_stored_with_the_thread() {
    let dir = temp_dir("graph");
    let store = dir.join("runs.redb");
    fill(&store);
    let out = af(&store, &["graph", "t-failed"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), payments::graph().mermaid());
    assert!(stdout(&out).contains("check -.-> pay"), "{}", stdout(&out));
    let desc: Value = serde_json::from_str(
        &RedbStore::open(&store).unwrap().graph_description(payments::graph().fingerprint()).unwrap().unwrap(),
    )
    .unwrap();
    let steps = json!({ "name": "steps", "reducer": "add", "type": "u32", "personal": false, "credential": false });
    assert_eq!(desc["state"]["fields"][2], steps);
    assert_eq!(desc["tools"][0]["name"], "refund");
    assert_eq!(desc["tools"][0]["risk"], "irreversible");
}

/// A thread written before graph descriptions were stored: `graph` draws from the outline
/// kept in its checkpoint 0, and `show` folds its updates as overwrites, saying so.
#[test]
fn a_thread_without_a_stored_description_still_draws_and_shows() {
    let dir = temp_dir("old");
    let store = dir.join("runs.redb");
    {
        let s = RedbStore::open(&store).unwrap();
        let record = ThreadRecord::new("t-old", "agent", "0123456789abcdef", 1, 1_700_000_000_000);
        let mut root = agentflow_store::Checkpoint {
            thread: "t-old".into(),
            seq: 0,
            parent: None,
            cursor: vec!["a".into()],
            snapshot: Some(br#"{"n": 1}"#.to_vec()),
            delta: vec![],
            metadata: agentflow_store::CheckpointMetadata::new(0, agentflow_store::CheckpointSource::Input, vec![]),
            created_at: 1_700_000_000_000,
        };
        root.metadata.extra = json!({ "graph": { "name": "old", "nodes": { "a": ["b", "END"], "b": ["END"] } } });
        s.commit_step(StepCommit::new(record.clone()).with_checkpoint(root)).unwrap();
        let step = agentflow_store::Checkpoint {
            thread: "t-old".into(),
            seq: 1,
            parent: Some(0),
            cursor: vec![],
            snapshot: None,
            delta: vec![br#"{"n": 5}"#.to_vec()],
            metadata: agentflow_store::CheckpointMetadata::new(
                1,
                agentflow_store::CheckpointSource::Loop,
                vec!["a".into()],
            ),
            created_at: 1_700_000_000_001,
        };
        s.commit_step(StepCommit::new(record).with_checkpoint(step)).unwrap();
    }
    let drawing = stdout(&af(&store, &["graph", "t-old"]));
    assert_eq!(
        drawing,
        "flowchart TD\n    __start__([START])\n    __end__([END])\n    __start__ --> a\n    a -.-> b\n    a -.-> __end__\n    b --> __end__\n"
    );
    let shown = af_json(&store, &["show", "t-old"]);
    assert_eq!(shown["state"], json!({ "n": 5 }));
    assert!(shown["warnings"][0].as_str().unwrap().contains("no description"), "{shown}");
    // Compacting would have to guess the reducers: refused with exit code 5.
    let mut done = ThreadRecord::new("t-old", "agent", "0123456789abcdef", 1, 1_700_000_000_000);
    done.status = ThreadStatus::Completed;
    RedbStore::open(&store).unwrap().commit_step(StepCommit::new(done)).unwrap();
    expect_refusal(&af(&store, &["compact", "t-old"]), 5, "no description of thread `t-old`'s graph");
}

#[test]
fn stuck_lists_long_waits_dead_runs_and_overdue_timers() {
    let dir = temp_dir("stuck");
    let store = dir.join("runs.redb");
    fill(&store);
    {
        // A run whose process died mid-step (running, no lease), and a thread whose timer
        // came due ten minutes ago with nobody to wake it.
        let s = RedbStore::open(&store).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let dead = ThreadRecord::new("t-dead", "agent", payments::graph().fingerprint(), 1, now - 5_000);
        s.commit_step(StepCommit::new(dead)).unwrap();
        let mut sleepy = ThreadRecord::new("t-sleepy", "agent", payments::graph().fingerprint(), 1, now - 700_000);
        sleepy.status = ThreadStatus::Sleeping;
        s.commit_step(StepCommit::new(sleepy).with_wake_at(now - 600_000)).unwrap();
    }
    let stuck = af_json(&store, &["stuck", "--waiting", "0s"]);
    let reasons: Vec<(String, String)> = stuck
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["thread"].as_str().unwrap().to_string(), s["reason"].as_str().unwrap().to_string()))
        .collect();
    assert!(reasons.contains(&("t-paused".into(), "waiting_on_human".into())), "{reasons:?}");
    assert!(reasons.contains(&("t-dead".into(), "lease_expired".into())), "{reasons:?}");
    assert!(reasons.contains(&("t-sleepy".into(), "timer_overdue".into())), "{reasons:?}");
    assert!(!reasons.iter().any(|(t, _)| t == "t-done" || t == "t-failed"), "{reasons:?}");
    // Waiting moments ago is not stuck under the default hour; the overdue timer is not
    // stuck when ten minutes late is allowed.
    let lenient = af_json(&store, &["stuck", "--overdue", "1h"]);
    let threads: Vec<&str> = lenient.as_array().unwrap().iter().map(|s| s["thread"].as_str().unwrap()).collect();
    assert_eq!(threads, vec!["t-dead"]);
}

#[test]
fn a_store_held_by_another_process_gives_exit_code_3_and_says_what_to_do() {
    let dir = temp_dir("busy");
    let store = dir.join("runs.redb");
    fill(&store);
    let held = RedbStore::open(&store).expect("hold the store open");
    expect_refusal(&af(&store, &["threads"]), 3, "another process (a running app or worker) has this redb file open");
    expect_refusal(&af(&store, &["threads"]), 3, "stop that process and run the command again");
    drop(held);
    assert_eq!(af(&store, &["threads"]).status.code(), Some(0));
}

/// Exit code 4 is a store error: a damaged record (here a thread record's bytes overwritten)
/// is reported, naming the file, not taken for a missing thread or a usage error.
#[test]
fn a_damaged_record_gives_exit_code_4() {
    let dir = temp_dir("damaged");
    let store = dir.join("runs.redb");
    fill(&store);
    {
        let db = redb::Database::open(&store).unwrap();
        let txn = db.begin_write().unwrap();
        let threads: redb::TableDefinition<&str, &[u8]> = agentflow_store::tables::THREADS;
        txn.open_table(threads).unwrap().insert("t-done", b"\x01\xff\xff".as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let out = af(&store, &["show", "t-done"]);
    expect_refusal(&out, 4, "cannot be decoded");
    assert!(stderr(&out).contains("runs.redb"), "{}", stderr(&out));
}

#[test]
fn usage_errors_and_missing_stores_have_their_exit_codes() {
    let dir = temp_dir("usage");
    let missing = dir.join("missing.redb");
    expect_refusal(&af(&missing, &["threads"]), 1, "no such store file");
    assert!(!missing.exists(), "a read must not create a store");
    let no_store =
        Command::new(env!("CARGO_BIN_EXE_agentflow")).arg("threads").env_remove("AGENTFLOW_STORE").output().unwrap();
    expect_refusal(&no_store, 2, "no store given");
    expect_refusal(&af(&missing, &["frobnicate"]), 2, "unrecognized subcommand");
    let help = af(&missing, &["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("Exit codes:") && stdout(&help).contains("3  store busy or unreachable"));
}

/// A run a worker parked (its thread waits for an approval: the queue row keeps its worker,
/// the lease is released) waits on a person; only a claimed run whose worker stopped is
/// `lease_expired`.
#[test]
fn stuck_does_not_take_a_parked_run_for_one_whose_worker_died() {
    let dir = temp_dir("stuck-parked");
    let path = dir.join("runs.redb");
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
        let app = app(Arc::clone(&store));
        runtime().block_on(async {
            app.submit_as("t-parked", &Pay { order: "A-9".into(), amount: 40, ..Pay::default() }, "agent").unwrap();
            let stop = CancellationToken::new();
            let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(std::time::Duration::from_millis(10));
            let worker = tokio::spawn(worker.run(stop.clone()));
            let start = std::time::Instant::now();
            let parked =
                || app.live_runs().unwrap().iter().any(|r| r.thread == "t-parked" && r.wait == RunWait::Approval);
            while !parked() {
                assert!(start.elapsed() < std::time::Duration::from_secs(60), "the run was not parked in time");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            stop.cancel();
            worker.await.unwrap().expect("the worker stops");
        });
        let run = app.live_runs().unwrap().into_iter().find(|r| r.thread == "t-parked").expect("still queued");
        assert!(run.holder.is_some(), "a parked row keeps its worker: {run:?}");
        // A run claimed by a worker that died without a heartbeat since.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let graph = payments::graph().name();
        store.enqueue_run(NewRun::new("t-claimed", graph, None, "agent", now - 60_000)).unwrap();
        assert_eq!(store.claim_runs(graph, "w-dead", 1_000, now - 50_000, 1).unwrap().len(), 1);
    }
    let stuck = af_json(&path, &["stuck", "--waiting", "0s"]);
    let reasons: Vec<(&str, &str)> = stuck
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["thread"].as_str().unwrap(), s["reason"].as_str().unwrap()))
        .collect();
    assert!(reasons.contains(&("t-parked", "waiting_on_human")), "{reasons:?}");
    assert!(!reasons.contains(&("t-parked", "lease_expired")), "{reasons:?}");
    assert!(reasons.contains(&("t-claimed", "lease_expired")), "{reasons:?}");
}

/// Text a model or a user put in a thread (here its id and owner) reaches the terminal with its
/// control characters escaped: it cannot clear the screen or retitle the window.
#[test]
fn control_characters_in_stored_text_are_printed_escaped() {
    let dir = temp_dir("escapes");
    let store = dir.join("runs.redb");
    {
        let s = RedbStore::open(&store).unwrap();
        s.commit_step(StepCommit::new(ThreadRecord::new("t\u{1b}[2J", "\u{1b}]0;pwned\u{7}", "fp", 1, 1))).unwrap();
    }
    for args in [&["threads"][..], &["threads", "--json"][..]] {
        let out = af(&store, args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{7}'), "{text:?}");
        assert!(text.contains("\\u001b[2J"), "{text}");
    }
    let listed = af_json(&store, &["threads"]);
    assert_eq!(listed[0]["id"], "t\u{1b}[2J", "JSON output reads back the same");
}
