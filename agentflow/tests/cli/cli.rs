//! The `agentflow` binary, run in subprocesses against stores this test fills by running a
//! small graph: a thread paused for an approval, a completed one, a failed one.
//!
//! Each test makes its own store file (in a fresh temporary directory), closes it, and runs
//! the real binary (`CARGO_BIN_EXE_agentflow`) on it, checking its exit code, its JSON output
//! and its messages. Where the CLI decides or changes something, the test then opens the store
//! again with the graph's types and checks what the library sees.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use agentflow::approval::{ApprovalStatus, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use agentflow_store::{NewRun, RunWait, StepCommit, ThreadRecord, ThreadStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
struct RefundArgs {
    order_id: String,
    amount: u32,
}

/// Refunds an order. Irreversible, so every call waits for a person.
#[tool(risk = irreversible)]
async fn refund(args: RefundArgs) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Pay {
    order: String,
    amount: u32,
    #[reduce(add)]
    steps: u32,
    #[reduce(append)]
    log: Vec<String>,
    receipt: Option<Value>,
}

#[graph(state = Pay, start = check)]
mod payments {
    use super::*;

    #[node(goto = [pay, END])]
    async fn check(s: &Pay) -> Result<Step<Pay>, NodeError> {
        if s.order == "broken" {
            return Err(NodeError::fatal("the order does not exist"));
        }
        let update = Pay::update().steps(1).log(vec!["checked".into()]);
        if s.amount == 0 { Ok(goto!(END, update)) } else { Ok(goto!(pay, update)) }
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().steps(1).log(vec!["paid".into()]).receipt(Some(obs.body))))
    }
}

/// `payments` as the child of a front desk: the refund waits for approval inside the child.
#[graph(state = Pay, start = delegate)]
mod front {
    use super::*;

    #[node(goto = [END], subgraphs = [payments])]
    async fn delegate(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let done =
            cx.subgraph(payments::graph(), Pay { order: s.order.clone(), amount: s.amount, ..Pay::default() }).await?;
        Ok(goto!(END, Pay::update().receipt(done.receipt)))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// A fresh directory for one test's store files.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn app(store: Arc<dyn Store>) -> App<Pay> {
    payments::graph().app().store(store)
}

/// Fills a store file: `t-paused` waits for an approval of a refund requested by `agent`,
/// `t-done` completed, `t-failed` failed. The store is closed when this returns.
fn fill(path: &Path) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(path).expect("open store"));
    let app = app(store);
    runtime().block_on(async {
        let run = |thread: &'static str, order: &'static str, amount: u32| {
            let app = app.clone();
            async move {
                let input = Pay { order: order.into(), amount, ..Pay::default() };
                app.runner(&()).thread(thread).owner("agent").run(input).await
            }
        };
        let paused = run("t-paused", "A-1", 40).await.expect("paused run");
        assert!(matches!(paused.outcome, Outcome::Interrupted { .. }), "{:?}", paused.outcome);
        let done = run("t-done", "A-2", 0).await.expect("completed run");
        assert_eq!(done.outcome, Outcome::Completed);
        let _ = run("t-failed", "broken", 5).await;
    });
}

/// Runs the binary on `store` with `args`.
/// The binary on `store` with `args`, free of the environment that would change what it does.
fn af_command(store: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentflow"));
    command
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("AGENTFLOW_STORE")
        .env_remove("AGENTFLOW_ROLES")
        .env_remove("AGENTFLOW_TWO_PERSON")
        .env_remove("AGENTFLOW_PG_SCHEMA");
    command
}

fn af(store: &Path, args: &[&str]) -> Output {
    af_command(store, args).output().expect("run the agentflow binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the binary, expects exit code 0, and parses its JSON output.
fn af_json(store: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = af(store, &all);
    assert_eq!(out.status.code(), Some(0), "agentflow {args:?} failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("agentflow {args:?}: not JSON ({e}): {}", stdout(&out)))
}

/// Expects the binary to exit with `code` and a message containing `needle` on stderr.
fn expect_refusal(out: &Output, code: i32, needle: &str) {
    assert_eq!(out.status.code(), Some(code), "stdout: {} stderr: {}", stdout(out), stderr(out));
    assert!(stderr(out).contains(needle), "expected `{needle}` in: {}", stderr(out));
}

#[path = "questions.rs"]
mod questions;

fn by_id<'a>(list: &'a Value, id: &str) -> &'a Value {
    list.as_array().expect("array").iter().find(|t| t["id"] == id).unwrap_or_else(|| panic!("no `{id}` in {list}"))
}

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
fn export_then_import_moves_a_thread_as_it_was() {
    let dir = temp_dir("export");
    let (first, second) = (dir.join("runs.redb"), dir.join("copy.redb"));
    fill(&first);
    let file = dir.join("t-paused.jsonl");
    let out = af(&first, &["export", "t-paused", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Standard output carries the same lines.
    let piped = af(&first, &["export", "t-paused"]);
    assert_eq!(piped.stdout, std::fs::read(&file).unwrap());

    let imported = af_json(&second, &["import", file.to_str().unwrap()]);
    assert_eq!(imported["imported"], json!(["t-paused"]));
    // Everything reads back the same: the export of the copy is the same file.
    assert_eq!(stdout(&af(&second, &["export", "t-paused"])), std::fs::read_to_string(&file).unwrap());
    assert_eq!(af_json(&second, &["show", "t-paused"]), af_json(&first, &["show", "t-paused"]));
    assert_eq!(af_json(&second, &["audit", "t-paused"]), af_json(&first, &["audit", "t-paused"]));
    assert_eq!(stdout(&af(&second, &["graph", "t-paused"])), payments::graph().mermaid());
    // Importing again is refused; nothing changes.
    expect_refusal(&af(&second, &["import", file.to_str().unwrap()]), 1, "exists already");

    // The copy is a working thread: approve it there, and the run completes there.
    let id = af_json(&second, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let ok = af(&second, &["approve", &id, "--as", "alice", "--role", "irreversible"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let app = app(Arc::new(RedbStore::open(&second).unwrap()));
    let done = runtime().block_on(app.runner(&()).thread("t-paused").resume()).unwrap();
    assert_eq!(done.outcome, Outcome::Completed);

    expect_refusal(&af(&first, &["export", "nope"]), 1, "no thread `nope`");
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, "{\"type\": \"thread\"}\n").unwrap();
    expect_refusal(
        &af(&dir.join("third.redb"), &["import", junk.to_str().unwrap()]),
        2,
        "no `agentflow.export` header",
    );
    assert!(!dir.join("third.redb").exists(), "a file that does not parse leaves no store behind");
}

/// A graph's description comes in with the threads that carry it: a refused import writes none,
/// and a graph line naming a fingerprint that is not its thread's is refused.
#[test]
fn import_writes_a_graph_description_only_with_its_threads() {
    let dir = temp_dir("import-graph");
    let first = dir.join("runs.redb");
    fill(&first);
    let file = dir.join("t-paused.jsonl");
    let out = af(&first, &["export", "t-paused", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let fingerprint = RedbStore::open(&first).unwrap().thread("t-paused").unwrap().unwrap().graph_fingerprint;

    // Refused (the id is taken by a thread of another graph): no description either.
    let taken = dir.join("taken.redb");
    {
        let store = RedbStore::open(&taken).unwrap();
        store.commit_step(StepCommit::new(ThreadRecord::new("t-paused", "x", "other", 1, 1))).unwrap();
    }
    expect_refusal(&af(&taken, &["import", file.to_str().unwrap()]), 1, "nothing of the file was imported");
    assert_eq!(RedbStore::open(&taken).unwrap().graph_description(&fingerprint).unwrap(), None);

    // A graph line naming another fingerprint than its thread's.
    let planted: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "graph" {
                v["fingerprint"] = json!("victim-fp");
            }
            v.to_string()
        })
        .collect();
    let planted_file = dir.join("planted.jsonl");
    std::fs::write(&planted_file, planted.join("\n") + "\n").unwrap();
    let fresh = dir.join("fresh.redb");
    expect_refusal(&af(&fresh, &["import", planted_file.to_str().unwrap()]), 2, "not the thread's");
    let fresh = RedbStore::open(&fresh).unwrap();
    assert_eq!(fresh.graph_description("victim-fp").unwrap(), None);
    assert!(fresh.thread("t-paused").unwrap().is_none());
}

/// A paused tree moves whole: the export of a parent holds its subgraph child (which holds
/// the waiting approval and the child's progress), so in the other store the approval is
/// there to decide and the resumed parent completes with the approved refund.
#[test]
fn export_of_a_parent_carries_its_subgraph_children() {
    let dir = temp_dir("export-tree");
    let (first, second) = (dir.join("runs.redb"), dir.join("copy.redb"));
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&first).expect("open store"));
        let app = front::graph().app().store(store);
        let input = Pay { order: "A-7".into(), amount: 70, ..Pay::default() };
        let run = runtime().block_on(app.runner(&()).thread("f-1").owner("agent").run(input.clone())).unwrap();
        assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
        // A thread of its own whose id has a child's shape, with a child of its own: not f-1's.
        let other = app.runner(&()).thread("f-1/delegate.0.1.payments").owner("bob").run(input);
        assert!(matches!(runtime().block_on(other).unwrap().outcome, Outcome::Interrupted { .. }));
    }
    let file = dir.join("f-1.jsonl");
    let out = af(&first, &["export", "f-1", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let records: Vec<Value> = export_lines(&first, "f-1")
        .into_iter()
        .filter(|l| l["type"] == "thread")
        .map(|l| l["record"].clone())
        .collect();
    assert_eq!(records.len(), 2, "the other thread and its child stay out: {records:?}");
    assert_eq!((&records[0]["parent"], &records[1]["parent"]), (&Value::Null, &json!("f-1")));
    // A store where the child's id is taken: nothing of the file is imported, not the parent
    // either (resumed without its child, it would start the child afresh and pay again).
    let taken = dir.join("taken.redb");
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&taken).expect("open store"));
        let app = front::graph().app().store(store);
        let input = Pay { order: "B-1".into(), amount: 5, ..Pay::default() };
        let squatter = app.runner(&()).thread("f-1/delegate.0.0.payments").owner("carol").run(input);
        assert!(matches!(runtime().block_on(squatter).unwrap().outcome, Outcome::Interrupted { .. }));
    }
    let refused = af(&taken, &["import", file.to_str().unwrap()]);
    expect_refusal(&refused, 1, "nothing of the file was imported");
    assert!(RedbStore::open(&taken).unwrap().thread("f-1").unwrap().is_none(), "the parent came without its child");
    let imported = af_json(&second, &["import", file.to_str().unwrap()]);
    assert_eq!(imported["imported"], json!(["f-1", "f-1/delegate.0.0.payments"]));
    let f1_approvals = |store: &Path| -> Vec<Value> {
        let all = af_json(store, &["pending"])["approvals"].as_array().unwrap().clone();
        all.into_iter().filter(|a| a["thread"] == "f-1/delegate.0.0.payments").collect()
    };
    assert_eq!(af_json(&second, &["pending"])["approvals"].as_array().unwrap().clone(), f1_approvals(&first));
    // An export of format 1, which named no parents: the child is told by its id's shape.
    let old = dir.join("f-1.format-1.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "agentflow.export" {
                v["format"] = json!(1);
            }
            if let Some(record) = v.get_mut("record").and_then(Value::as_object_mut) {
                record.remove("parent");
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&old, lines.join("\n") + "\n").unwrap();
    let third = dir.join("third.redb");
    assert_eq!(
        af_json(&third, &["import", old.to_str().unwrap()])["imported"],
        json!(["f-1", "f-1/delegate.0.0.payments"])
    );
    let child = RedbStore::open(&third).unwrap().thread("f-1/delegate.0.0.payments").unwrap().unwrap();
    assert_eq!(child.parent.as_deref(), Some("f-1"));

    let id = af_json(&second, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let ok = af(&second, &["approve", &id, "--as", "alice", "--role", "irreversible"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let app = front::graph().app().store(Arc::new(RedbStore::open(&second).unwrap()));
    let done = runtime().block_on(app.runner(&()).thread("f-1").resume()).unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 70);
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
    assert_eq!(desc["state"]["fields"][2], json!({ "name": "steps", "reducer": "add", "type": "u32" }));
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

/// PostgreSQL: a thread exported from a redb file imports into a PostgreSQL store and reads
/// back the same there (skipped without AGENTFLOW_PG_URL; `source .ci/postgres.sh`).
#[test]
fn postgres_smoke_import_and_read_back() {
    let Ok(url) = std::env::var("AGENTFLOW_PG_URL") else {
        eprintln!("skipped: AGENTFLOW_PG_URL is not set");
        return;
    };
    let dir = temp_dir("pg");
    let store = dir.join("runs.redb");
    fill(&store);
    let file = dir.join("t-paused.jsonl");
    assert_eq!(af(&store, &["export", "t-paused", "--output", file.to_str().unwrap()]).status.code(), Some(0));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("cli_smoke_{}_{nanos}", std::process::id());
    let pg = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_agentflow"))
            .args(["--store", &url, "--schema", &schema, "--json"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "agentflow {args:?} on PostgreSQL: {}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(pg(&["import", file.to_str().unwrap()])["imported"], json!(["t-paused"]));
    assert_eq!(pg(&["threads"])[0]["status"], "interrupted");
    assert_eq!(pg(&["show", "t-paused"]), af_json(&store, &["show", "t-paused"]));
    let id = pg(&["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(pg(&["approve", &id, "--as", "alice", "--role", "irreversible"])["status"], "APPROVED");
    // A run holding the thread (here: a lease taken by this process): changes wait for it.
    let held = agentflow_store::PostgresStore::builder().schema(schema.clone()).open(&url).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    held.acquire_lease("t-paused", "worker-elsewhere", 60_000, now).unwrap();
    let busy = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["--store", &url, "--schema", &schema, "update", "t-paused", "--set", r#"{"steps": 1}"#, "--as", "ops"])
        .output()
        .unwrap();
    expect_refusal(&busy, 3, "a run holds the thread");
    // An answer to a thread a run holds is busy too (exit 3), and nothing is recorded.
    let held: Arc<dyn Store> = Arc::new(held);
    let asked = asking::graph().app().store(Arc::clone(&held));
    let run =
        runtime().block_on(asked.runner(&()).thread("q-held").run(Ask { question: "how many?".into(), answer: None }));
    assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    held.acquire_lease("q-held", "worker-elsewhere", 60_000, now).unwrap();
    let busy = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["--store", &url, "--schema", &schema, "answer", "q-held", "--value", "3", "--as", "ops"])
        .output()
        .unwrap();
    expect_refusal(&busy, 3, "worker-elsewhere");
    assert!(!held.list_audit("q-held").unwrap().iter().any(|e| e.kind == "interrupt.answered"));
    let unreachable = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["--store", "postgres://agentflow:x@127.0.0.1:1/none", "threads"])
        .output()
        .unwrap();
    expect_refusal(&unreachable, 3, "cannot reach the PostgreSQL store");
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ask {
    question: String,
    answer: Option<u32>,
}

#[graph(state = Ask, start = ask)]
mod asking {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Ask, cx: &Ctx<()>) -> Result<Step<Ask>, NodeError> {
        let n: u32 = cx.interrupt(json!({ "question": s.question }))?;
        Ok(goto!(END, Ask::update().answer(Some(n))))
    }
}

#[test]
fn answer_records_the_value_the_apps_next_resume_continues_with() {
    let dir = temp_dir("answer");
    let path = dir.join("ask.redb");
    let ask = |path: &Path| asking::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    runtime().block_on(async {
        let run = ask(&path).runner(&()).thread("q").run(Ask { question: "how many?".into(), answer: None }).await;
        assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    });
    expect_refusal(&af(&path, &["answer", "q", "--value", "three", "--as", "ops"]), 2, "--value");
    expect_refusal(&af(&path, &["answer", "nope", "--value", "3", "--as", "ops"]), 1, "no thread `nope`");
    expect_refusal(
        &af(&path, &["answer", "q", "--value", "3", "--as", "ops", "--checkpoint", "42"]),
        1,
        "no longer waits at checkpoint 42",
    );
    // The question's id, as `show` and `pending` give it: an answer naming another question is
    // refused and records nothing.
    let question = af_json(&path, &["show", "q"])["pending"][0]["question"].as_str().unwrap().to_string();
    assert_eq!(af_json(&path, &["pending"])["interrupts"][0]["question"], json!(question));
    assert!(stdout(&af(&path, &["show", "q"])).contains(&format!("question:  {question}")));
    let other = "0".repeat(64);
    expect_refusal(
        &af(&path, &["answer", "q", "--value", "3", "--as", "ops", "--question", &other]),
        1,
        "asks another question at checkpoint",
    );
    assert!(!af_json(&path, &["audit", "q"]).to_string().contains("interrupt.answered"));
    let answered = af_json(&path, &["answer", "q", "--value", "3", "--as", "ops", "--question", &question]);
    assert_eq!(
        (answered["by"].as_str(), answered["node"].as_str(), &answered["value"]),
        (Some("ops"), Some("ask"), &json!(3))
    );
    expect_refusal(&af(&path, &["answer", "q", "--value", "4", "--as", "dev"]), 1, "already answered");
    let audit = af_json(&path, &["audit", "q"]);
    assert!(audit.to_string().contains("interrupt.answered"), "{audit}");
    runtime().block_on(async {
        let done = ask(&path).runner(&()).thread("q").resume().await.unwrap();
        assert_eq!(done.outcome, Outcome::Completed);
        assert_eq!(done.state.answer, Some(3));
    });
    expect_refusal(&af(&path, &["answer", "q", "--value", "5", "--as", "ops"]), 1, "not waiting in `interrupt`");
}

/// A thread that an answer of the wrong shape failed still waits where it asked: `pending` and
/// `show` list its question, and a right answer continues it.
#[test]
fn a_question_a_wrong_answer_failed_is_still_listed_and_can_be_answered_anew() {
    let dir = temp_dir("answer-wrong");
    let path = dir.join("ask.redb");
    let ask = |path: &Path| asking::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    runtime().block_on(async {
        let run = ask(&path).runner(&()).thread("q").run(Ask { question: "how many?".into(), answer: None }).await;
        assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    });
    af_json(&path, &["answer", "q", "--value", "\"three\"", "--as", "ops"]);
    runtime().block_on(async {
        let run = ask(&path).runner(&()).thread("q").resume().await.unwrap();
        assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    });
    let listed = af_json(&path, &["pending"])["interrupts"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(
        (&listed[0]["thread"], &listed[0]["node"], &listed[0]["kind"]),
        (&json!("q"), &json!("ask"), &json!("interrupt"))
    );
    assert_eq!(listed[0]["payload"], json!({ "question": "how many?" }));
    let shown = af_json(&path, &["show", "q"]);
    assert_eq!(shown["thread"]["status"], "failed");
    assert_eq!(shown["pending"][0]["payload"], json!({ "question": "how many?" }));
    af_json(&path, &["answer", "q", "--value", "3", "--as", "ops"]);
    runtime().block_on(async {
        let done = ask(&path).runner(&()).thread("q").resume().await.unwrap();
        assert_eq!((done.outcome, done.state.answer), (Outcome::Completed, Some(3)));
    });
    assert_eq!(af_json(&path, &["pending"])["interrupts"], json!([]));
}

/// The lines of an export of `thread` from `store`, parsed.
fn export_lines(store: &Path, thread: &str) -> Vec<Value> {
    let out = af(store, &["export", thread]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out).lines().map(|l| serde_json::from_str(l).expect("an export line is JSON")).collect()
}

/// Writes `lines` as an export file.
fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A `{"hex": ..}` blob that is not ASCII hex (here with a two-byte character, so its byte
/// length is even but a pair of bytes splits the character) is a usage error naming the line,
/// like any other bad blob, and nothing is imported.
#[test]
fn import_refuses_a_hex_blob_that_is_not_ascii_hex() {
    let dir = temp_dir("import-hex");
    let store = dir.join("runs.redb");
    fill(&store);
    let lines = export_lines(&store, "t-done");
    let at = lines.iter().position(|l| l["type"] == "checkpoint").expect("a checkpoint line");
    for (i, hex) in ["aé0", "éé", "zz", "+f"].into_iter().enumerate() {
        let mut bad = lines.clone();
        bad[at]["snapshot"] = json!({ "hex": hex });
        let file = dir.join(format!("bad-{i}.jsonl"));
        write_lines(&file, &bad);
        let copy = dir.join(format!("copy-{i}.redb"));
        let out = af(&copy, &["import", file.to_str().unwrap()]);
        expect_refusal(&out, 2, &format!("line {}: stored bytes must be", at + 1));
        assert!(!stderr(&out).contains("panicked"), "{hex}: {}", stderr(&out));
        assert!(!copy.exists(), "{hex}: nothing is imported, not even a new store");
    }
    // Well-formed hex, in either case, still imports byte for byte.
    let mut good = lines.clone();
    let snapshot = &lines[at]["snapshot"];
    let bytes = match (snapshot.get("json"), snapshot.get("text").and_then(Value::as_str)) {
        (Some(j), _) => serde_json::to_vec(j).unwrap(),
        (None, Some(text)) => text.as_bytes().to_vec(),
        _ => panic!("a snapshot written as JSON or text expected: {snapshot}"),
    };
    let hex: String = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| if i % 2 == 0 { format!("{b:02X}") } else { format!("{b:02x}") })
        .collect();
    good[at]["snapshot"] = json!({ "hex": hex });
    let file = dir.join("good.jsonl");
    write_lines(&file, &good);
    let copy = dir.join("copy-good.redb");
    assert_eq!(af_json(&copy, &["import", file.to_str().unwrap()])["imported"], json!(["t-done"]));
    assert_eq!(af_json(&copy, &["show", "t-done"])["state"], af_json(&store, &["show", "t-done"])["state"]);
}

/// Runs the binary with its standard output a pipe whose reading end is closed after
/// `read` bytes were read (0: before the binary writes anything); returns its status and
/// standard error.
fn af_into_closed_pipe(store: &Path, args: &[&str], read: usize) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let mut child = af_command(store, args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the agentflow binary");
    let mut reader = child.stdout.take().expect("piped stdout");
    let mut first = vec![0; read];
    reader.read_exact(&mut first).expect("the first bytes of the output");
    drop(reader);
    let out = child.wait_with_output().expect("wait for the agentflow binary");
    (out.status, stderr(&out))
}

/// A reader that stops reading (`agentflow audit | head -1`) ends the command quietly with
/// success, as it would a C tool's: no panic, no message, exit code 0.
#[test]
fn output_into_a_closed_pipe_ends_quietly_with_success() {
    let dir = temp_dir("pipe");
    let store = dir.join("runs.redb");
    fill(&store);
    {
        // Enough audit entries for every output below to be larger than a pipe's buffer.
        let s = RedbStore::open(&store).unwrap();
        for i in 0..2_000u64 {
            let detail = json!({ "note": format!("entry {i} of a long audit log, written to fill the pipe") });
            s.append_audit("t-done", agentflow_store::NewAuditEntry::new(1_700_000_000_000 + i, "ops", "note", detail))
                .unwrap();
        }
    }
    let big = af(&store, &["--json", "audit"]);
    assert_eq!(big.status.code(), Some(0), "{}", stderr(&big));
    assert!(big.stdout.len() > 256 * 1024, "{} bytes", big.stdout.len());
    for args in [
        &["--json", "audit"][..],
        &["audit"],
        &["audit", "t-done"],
        &["export", "t-done"],
        &["--json", "show", "t-done"],
    ] {
        for read in [0, 10] {
            let (status, err) = af_into_closed_pipe(&store, args, read);
            assert!(status.success(), "agentflow {args:?} (closed after {read} bytes): {status}, stderr: {err}");
            assert_eq!(err, "", "agentflow {args:?} (closed after {read} bytes)");
        }
    }
    // Any other write error is a failure that says so.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = af_command(&store, &["audit"]).stdout(full).output().expect("run the agentflow binary");
        expect_refusal(&out, 2, "cannot write to standard output");
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

/// Runs the binary, killing it after `limit`: `None` when it ran that long.
fn af_within(store: &Path, args: &[&str], limit: std::time::Duration) -> Option<Output> {
    let mut child = af_command(store, args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the agentflow binary");
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().expect("poll the agentflow binary").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("collect the output"))
}

/// A stored description whose field type nests very deeply (`Box<Box<..>>`, from an edited
/// export file) neither overflows the stack nor takes long when `update` checks a value
/// against it: past a depth the type counts as not understood, and the value is checked
/// against the kind the field holds now.
#[test]
fn update_against_a_deeply_nested_stored_type_neither_crashes_nor_hangs() {
    let dir = temp_dir("deep-type");
    let (store, copy) = (dir.join("runs.redb"), dir.join("copy.redb"));
    fill(&store);
    let mut lines = export_lines(&store, "t-done");
    let graph = lines.iter_mut().find(|l| l["type"] == "graph").expect("a graph line");
    let mut description: Value = serde_json::from_str(graph["description"].as_str().unwrap()).unwrap();
    let depth = 100_000;
    let deep = format!("{}u32{}", "Box<".repeat(depth), ">".repeat(depth));
    let fields = description["state"]["fields"].as_array_mut().unwrap();
    fields.iter_mut().find(|f| f["name"] == "amount").expect("the `amount` field")["type"] = json!(deep);
    graph["description"] = json!(description.to_string());
    let file = dir.join("deep.jsonl");
    write_lines(&file, &lines);
    assert_eq!(af_json(&copy, &["import", file.to_str().unwrap()])["imported"], json!(["t-done"]));

    let limit = std::time::Duration::from_secs(20);
    let set = ["--json", "update", "t-done", "--set", r#"{"amount": 7}"#, "--as", "ops"];
    let ok = af_within(&copy, &set, limit).expect("update finishes in time");
    assert_eq!(ok.status.code(), Some(0), "stderr: {}", stderr(&ok));
    assert_eq!(af_json(&copy, &["show", "t-done"])["state"]["amount"], 7);
    // A value of another kind than the field holds is still refused.
    let set = ["update", "t-done", "--set", r#"{"amount": "seven"}"#, "--as", "ops"];
    let refused = af_within(&copy, &set, limit).expect("update finishes in time");
    expect_refusal(&refused, 2, "`amount` holds an integer");
}

/// A state whose stored names are not its Rust field names (`#[serde(rename_all)]`): its
/// updates name `log_lines`, its snapshots `logLines`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
#[serde(rename_all = "camelCase")]
struct Notes {
    title: String,
    #[reduce(append)]
    log_lines: Vec<String>,
}

#[graph(state = Notes, start = first)]
mod noting {
    use super::*;

    #[node(goto = [second])]
    async fn first(_s: &Notes) -> Step<Notes> {
        goto!(second, Notes::update().log_lines(vec!["one".into()]))
    }

    #[node(goto = [END])]
    async fn second(_s: &Notes) -> Step<Notes> {
        goto!(END, Notes::update().log_lines(vec!["two".into()]))
    }
}

/// A state that leaves `None` out of its stored form: `verdict` is absent from the snapshot
/// until a node sets it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
struct Review {
    title: String,
    #[reduce(append)]
    notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verdict: Option<String>,
}

#[graph(state = Review, start = read)]
mod reviewing {
    use super::*;

    #[node(goto = [decide])]
    async fn read(_s: &Review) -> Step<Review> {
        goto!(decide, Review::update().notes(vec!["read".into()]))
    }

    #[node(goto = [END])]
    async fn decide(_s: &Review) -> Step<Review> {
        goto!(END, Review::update().notes(vec!["decided".into()]).verdict(Some("ship".into())))
    }
}

fn keep_longest(old: &mut String, new: String) {
    if new.len() > old.len() {
        *old = new;
    }
}

/// A state with a field folded by the user's own function, which the binary cannot run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
struct Draft {
    title: String,
    #[reduce(custom = keep_longest)]
    best: String,
}

#[graph(state = Draft, start = short)]
mod drafting {
    use super::*;

    #[node(goto = [long])]
    async fn short(_s: &Draft) -> Step<Draft> {
        goto!(long, Draft::update().best("brief".to_string()))
    }

    #[node(goto = [END])]
    async fn long(_s: &Draft) -> Step<Draft> {
        goto!(END, Draft::update().best("a longer draft".to_string()))
    }
}

/// A field with a custom reducer cannot be folded without the graph's Rust types: `show`
/// leaves it out with a warning (the rest of the state shown), and `compact` refuses with
/// exit code 5, changing nothing.
#[test]
fn a_custom_reducer_is_left_out_by_show_and_refused_by_compact_with_exit_code_5() {
    let dir = temp_dir("compact-custom");
    let path = dir.join("drafts.redb");
    let open = |path: &Path| drafting::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    // A long title keeps the small updates stored as deltas of the first snapshot.
    let input = Draft { title: "a title long enough to outweigh the updates ".repeat(8), best: String::new() };
    let expected = Draft { best: "a longer draft".into(), ..input.clone() };
    runtime().block_on(async {
        let run = open(&path).runner(&()).thread("d-1").run(input.clone()).await.expect("completed run");
        assert_eq!((&run.outcome, &run.state), (&Outcome::Completed, &expected));
    });
    let history = af_json(&path, &["history", "d-1"]);
    let shown = af_json(&path, &["show", "d-1"]);
    assert_eq!(shown["state"]["title"], input.title.as_str(), "{shown}");
    assert!(shown["state"].get("best").is_none(), "a custom-reduced field was shown: {shown}");
    let warnings = shown["warnings"].to_string();
    assert!(warnings.contains("`best` has a custom reducer"), "{shown}");
    let out = af(&path, &["compact", "d-1", "--keep", "1"]);
    expect_refusal(&out, 5, "`best` has a custom reducer");
    assert_eq!(af_json(&path, &["history", "d-1"]), history);
    assert_eq!(open(&path).state("d-1").unwrap().expect("a checkpoint").state, expected);
}

/// An update naming a key the stored state does not hold (here a field the state stores under
/// another name) cannot be folded without the state's types: `compact` refuses with exit code
/// 5 and changes nothing, so the app still reads every appended line.
#[test]
fn compact_refuses_updates_whose_keys_the_stored_state_does_not_hold() {
    let dir = temp_dir("compact-renamed");
    let path = dir.join("notes.redb");
    let open = |path: &Path| noting::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    // A long title keeps the small updates stored as deltas of the first snapshot.
    let input = Notes { title: "a title long enough to outweigh the updates ".repeat(8), log_lines: vec![] };
    let expected = Notes { log_lines: vec!["one".into(), "two".into()], ..input.clone() };
    runtime().block_on(async {
        let run = open(&path).runner(&()).thread("n-1").run(input.clone()).await.expect("completed run");
        assert_eq!((&run.outcome, &run.state), (&Outcome::Completed, &expected));
    });
    let history = af_json(&path, &["history", "n-1"]);
    let out = af(&path, &["compact", "n-1", "--keep", "1"]);
    expect_refusal(&out, 5, "`log_lines`");
    assert!(stderr(&out).contains("App::compact"), "{}", stderr(&out));
    assert_eq!(af_json(&path, &["history", "n-1"]), history);
    assert_eq!(open(&path).state("n-1").unwrap().expect("a checkpoint").state, expected);

    // A `None` left out of the snapshot is no such key: the compaction folds it.
    let path = dir.join("review.redb");
    let open = |path: &Path| reviewing::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    let input = Review { title: "a title long enough to outweigh the updates ".repeat(8), ..Review::default() };
    let expected =
        Review { notes: vec!["read".into(), "decided".into()], verdict: Some("ship".into()), ..input.clone() };
    runtime().block_on(async {
        let run = open(&path).runner(&()).thread("r-1").run(input).await.expect("completed run");
        assert_eq!((&run.outcome, &run.state), (&Outcome::Completed, &expected));
    });
    let report = af_json(&path, &["compact", "r-1", "--keep", "1"]);
    assert_eq!((report["dropped"].as_u64(), report["folded"].as_u64()), (Some(2), Some(1)), "{report}");
    assert_eq!(open(&path).state("r-1").unwrap().expect("a checkpoint").state, expected);
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

/// `asking` as the subgraph of a parent: the question is asked inside the child.
#[graph(state = Ask, start = delegate)]
mod delegating {
    use super::*;

    #[node(goto = [END], subgraphs = [asking])]
    async fn delegate(s: &Ask, cx: &Ctx<()>) -> Result<Step<Ask>, NodeError> {
        let answered = cx.subgraph(asking::graph(), s.clone()).await?;
        Ok(goto!(END, Ask::update().answer(answered.answer)))
    }
}

/// A question asked inside a subgraph is listed once, as the parent thread's (the one to
/// answer: its resume hands the answer down), by `pending` and by `stuck`.
#[test]
fn a_question_asked_inside_a_subgraph_is_listed_once_as_the_parents() {
    let dir = temp_dir("pending-child");
    let path = dir.join("ask.redb");
    runtime().block_on(async {
        let app = delegating::graph().app().store(Arc::new(RedbStore::open(&path).unwrap()) as Arc<dyn Store>);
        let run = app.runner(&()).thread("p").run(Ask { question: "how many?".into(), answer: None }).await;
        assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    });
    let threads = af_json(&path, &["threads"]);
    assert_eq!(threads.as_array().map(Vec::len), Some(2), "the parent and its child: {threads}");
    let listed = af_json(&path, &["pending"])["interrupts"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["thread"], "p", "{listed}");
    let stuck = af_json(&path, &["stuck", "--waiting", "0s"]);
    let stuck: Vec<&str> = stuck.as_array().unwrap().iter().map(|s| s["thread"].as_str().unwrap()).collect();
    assert_eq!(stuck, vec!["p"]);
}

/// Its fields in the order `serde_json` sorts keys, so `export` writes the stored documents
/// as JSON (not as text), nested inside the lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
struct Deep {
    doc: Value,
    label: String,
}

#[graph(state = Deep, start = copy)]
mod nesting {
    use super::*;

    #[node(goto = [END])]
    async fn copy(s: &Deep) -> Step<Deep> {
        goto!(END, Deep::update().label("copied".into()).doc(s.doc.clone()))
    }
}

/// A state nested as deep as a store accepts (`MAX_DOCUMENT_DEPTH`) exports, with the lines
/// around it, and imports back: the same state, the same export.
#[test]
fn export_then_import_keeps_a_state_nested_as_deep_as_stored() {
    let dir = temp_dir("export-deep");
    let (first, second) = (dir.join("first.redb"), dir.join("second.redb"));
    let open = |path: &Path| nesting::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    // The state object holds the value: one level more than the value's own nesting.
    let levels = agentflow::persist::MAX_DOCUMENT_DEPTH - 1;
    let doc = (0..levels).fold(json!("core"), |inner, _| json!([inner]));
    let input = Deep { doc: doc.clone(), label: "input".into() };
    runtime().block_on(async {
        let run = open(&first).runner(&()).thread("d-1").run(input).await.expect("completed run");
        assert_eq!(run.outcome, Outcome::Completed);
    });
    let file = dir.join("deep.jsonl");
    let out = af(&first, &["export", "d-1", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(af_json(&second, &["import", file.to_str().unwrap()])["imported"], json!(["d-1"]));
    assert_eq!(stdout(&af(&second, &["export", "d-1"])), std::fs::read_to_string(&file).unwrap());
    let copied = open(&second).state("d-1").unwrap().expect("a checkpoint").state;
    assert_eq!(copied, Deep { doc, label: "copied".into() });
    // A line nested deeper than any export writes (an edited file) is refused, not parsed.
    let text = std::fs::read_to_string(&file).unwrap();
    let deeper = format!("{}\"core\"{}", "[".repeat(100_000), "]".repeat(100_000));
    let edited = dir.join("deeper.jsonl");
    std::fs::write(&edited, text.replacen("\"core\"", &deeper, 1)).unwrap();
    let out = af(&dir.join("third.redb"), &["import", edited.to_str().unwrap()]);
    expect_refusal(&out, 2, "levels deep; an export line nests at most");
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
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
