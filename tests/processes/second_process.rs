//! Human in the loop across OS processes: a thread pauses in one process and
//! is decided and resumed in others that open the same redb file. Nothing
//! is held in memory while it waits; the store is all they share.
//!
//! The test re-executes its own binary (as `tests/crash.rs` does): the child
//! runs the ignored `hitl_child` test with `AGENTFLOW_HITL_CHILD` naming its
//! part.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::persist::{ResumeError, ThreadStatus};
use agentflow::prelude::*;
use agentflow::{PendingKind, RedbStore, RunError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- an interrupt

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Draft {
    text: String,
    verdict: Option<String>,
    receipt: Option<String>,
    #[reduce(append)]
    trail: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Review {
    approve: bool,
    note: String,
}

#[graph(state = Draft, deps = (), start = write)]
mod review_flow {
    use super::*;

    #[node(goto = [review])]
    async fn write(_s: &Draft) -> Step<Draft> {
        goto!(review, Draft::update().text("refund approved, 199".into()).trail(vec!["write".into()]))
    }

    #[node(goto = [send, END], interrupt)]
    async fn review(s: &Draft, cx: &Ctx<()>) -> Result<Step<Draft>, NodeError> {
        let r: Review = cx.interrupt(json!({ "draft": s.text, "pid": std::process::id() }))?;
        let u = Draft::update().verdict(Some(format!("{} (pid {})", r.note, std::process::id())));
        Ok(if r.approve { goto!(send, u.trail(vec!["review".into()])) } else { goto!(END, u) })
    }

    #[node(goto = [END])]
    async fn send(s: &Draft, cx: &Ctx<()>) -> Result<Step<Draft>, NodeError> {
        let text = s.text.clone();
        let receipt =
            cx.effect("send", |key| async move { Ok::<_, NodeError>(format!("sent '{text}' ({key})")) }).await?;
        Ok(goto!(END, Draft::update().receipt(Some(receipt)).trail(vec!["send".into()])))
    }
}

// ---------------------------------------------------------------- an approval

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    amount: u32,
}

/// Refunds `amount` on an order. Irreversible. Appends to the ledger file
/// named by `AGENTFLOW_HITL_LEDGER`, so the parent can count executions.
#[tool(risk = irreversible)]
async fn process_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    if let Ok(path) = std::env::var("AGENTFLOW_HITL_LEDGER") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(f, "{} {} {} pid={}", args.order_id, args.amount, cx.idempotency_key(), std::process::id()).unwrap();
    }
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    order: String,
    amount: u32,
    receipt: Option<Value>,
}

#[graph(state = Pay, deps = (), start = pay)]
mod pay_flow {
    use super::*;

    #[node(goto = [END], tools = [process_refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(process_refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "refund-approver")
}

// ---------------------------------------------------------------- the child process

fn open(dir: &Path) -> Arc<RedbStore> {
    Arc::new(open_redb(dir.join("hitl.redb")).expect("open the store"))
}

/// The child process body. Not a test on its own: it only runs when the
/// tests below start this binary with `AGENTFLOW_HITL_CHILD` set.
#[tokio::test]
#[ignore = "child process of the tests in this file"]
async fn hitl_child() {
    let Ok(part) = std::env::var("AGENTFLOW_HITL_CHILD") else { return };
    let dir = PathBuf::from(std::env::var("AGENTFLOW_HITL_DIR").unwrap());
    let store = open(&dir);
    match part.as_str() {
        "resume_with" => {
            let graph = review_flow::graph().app().store(store);
            // A fresh process knows nothing but the thread id.
            let pending = graph.pending("draft-1").unwrap();
            assert_eq!(pending[0].kind, PendingKind::Interrupt);
            let err = graph.runner(&()).thread("draft-1").resume().await.unwrap_err();
            assert!(matches!(err, RunError::ValueRequired { .. }), "{err}");
            let run = graph
                .runner(&())
                .thread("draft-1")
                .resume_with(Review { approve: true, note: "approved in another process".into() })
                .await
                .unwrap();
            assert_eq!(run.outcome, Outcome::Completed);
        }
        "approve" => {
            let graph = pay_flow::graph().app().store(store);
            let desk = graph.approvals(authorizer()).unwrap();
            let pending = desk.pending().unwrap();
            assert_eq!(pending.len(), 1, "{pending:?}");
            let record = desk.approve(&pending[0].id, &Approver::new("alice", ["refund-approver"])).unwrap();
            assert_eq!(record.status, ApprovalStatus::Approved);
        }
        "resume" => {
            let graph = pay_flow::graph().app().store(store);
            let run = graph.runner(&()).thread("pay-1").resume().await.unwrap();
            assert_eq!(run.outcome, Outcome::Completed);
        }
        other => panic!("unknown child part `{other}`"),
    }
}

fn child(dir: &Path, part: &str) {
    let out = own_test(module_path!(), "hitl_child")
        .env("AGENTFLOW_HITL_CHILD", part)
        .env("AGENTFLOW_HITL_DIR", dir)
        .env("AGENTFLOW_HITL_LEDGER", dir.join("ledger.txt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child `{part}` failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

use crate::support::temp::temp_dir;

// ---------------------------------------------------------------- the tests

#[tokio::test]
async fn an_interrupt_is_resumed_with_a_value_in_another_process() {
    let dir = temp_dir("interrupt");
    {
        let graph = review_flow::graph().app().store(open(&dir));
        let run = graph.runner(&()).thread("draft-1").run(Draft::default()).await.unwrap();
        let Outcome::Interrupted { thread, pending } = &run.outcome else { panic!("{:?}", run.outcome) };
        assert_eq!(thread.as_deref(), Some("draft-1"));
        assert_eq!(pending[0].payload["draft"], "refund approved, 199");
        assert_eq!(pending[0].payload["pid"], std::process::id());
        // The graph and its store are dropped here: the file is closed.
    }
    child(&dir, "resume_with");

    let graph = review_flow::graph().app().store(open(&dir));
    let thread = graph.thread("draft-1").unwrap().unwrap();
    assert_eq!(thread.status, ThreadStatus::Completed);
    let state = graph.state("draft-1").unwrap().unwrap().state;
    let verdict = state.verdict.unwrap();
    assert!(verdict.starts_with("approved in another process (pid "), "{verdict}");
    assert!(!verdict.contains(&format!("pid {})", std::process::id())), "the child decided: {verdict}");
    assert_eq!(state.trail, ["write", "review", "send"]);
    assert!(state.receipt.unwrap().starts_with("sent 'refund approved, 199' (draft-1/"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_approval_decided_in_one_process_is_resumed_in_another() {
    let dir = temp_dir("approval");
    let id = {
        let graph = pay_flow::graph().app().store(open(&dir));
        let input = Pay { order: "P-1".into(), amount: 199, receipt: None };
        let run = graph.runner(&()).thread("pay-1").owner("agent:refund-bot").run(input).await.unwrap();
        let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
        assert_eq!(pending[0].kind, PendingKind::Approval);
        pending[0].payload["approval"].as_str().unwrap().to_string()
    };
    assert!(!dir.join("ledger.txt").exists(), "nothing ran before the decision");
    child(&dir, "approve"); // process 2 decides
    assert!(!dir.join("ledger.txt").exists(), "deciding does not run the call");
    child(&dir, "resume"); // process 3 resumes

    let graph = pay_flow::graph().app().store(open(&dir));
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!((record.status, record.decided_by.as_deref()), (ApprovalStatus::Succeeded, Some("alice")));
    let state = graph.state("pay-1").unwrap().unwrap().state;
    assert_eq!(state.receipt.unwrap()["result"], json!({ "refunded": 199, "order_id": "P-1" }));
    let ledger = std::fs::read_to_string(dir.join("ledger.txt")).unwrap();
    assert_eq!(ledger.lines().count(), 1, "{ledger}");
    assert!(ledger.starts_with("P-1 199 pay-1/"), "{ledger}");
    let kinds: Vec<String> = graph.audit_log("pay-1").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "approval.succeeded"]);
    // A finished thread does not run the refund again from this process either.
    let err = graph.runner(&()).thread("pay-1").resume().await.unwrap_err();
    assert!(matches!(err, RunError::Resume(ResumeError::Finished { .. })), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("ledger.txt")).unwrap().lines().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
