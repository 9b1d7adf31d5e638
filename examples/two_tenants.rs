//! Two companies share one store: who sees which thread, who may decide which refund, and an
//! audit log that shows tampering.
//!
//! `cargo run --example two_tenants`
//!
//! A refund graph (an irreversible `refund` tool: every call waits for a person) runs for two
//! tenants, `acme` and `globex`, in one redb file (a temp file, deleted at the end). The access
//! policy, read from JSON as an operator would keep it, gives each operation the roles that may
//! perform it. The run shows:
//! - each company's agent starts a thread of its own tenant;
//! - a support person of acme lists only acme's threads; globex's approver cannot even find
//!   acme's approval, and acme's viewer finds it but may not decide it;
//! - acme's approver approves, and the run completes;
//! - every thread's audit log verifies, and the chain's head is printed (keep it elsewhere to
//!   detect a rewrite of the whole log).
//!
//! No model is involved. `--db PATH` keeps the store in PATH instead of a temp file.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::access::{Actor, RoleAccess};
use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::{PendingKind, RedbStore, Run, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    /// Whole currency units.
    amount: u32,
}

/// Refunds through the payment provider (here: echoes what it was given).
#[tool(risk = irreversible)]
async fn refund(args: RefundArgs) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount }))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Claim {
    pub amount: u32,
    pub outcome: Option<Value>,
}

#[graph(state = Claim, start = pay)]
pub mod refunds {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Claim, cx: &Ctx<()>) -> Result<Step<Claim>, NodeError> {
        let obs = cx.run_tool(refund, RefundArgs { amount: s.amount }).await?;
        Ok(goto!(END, Claim::update().outcome(Some(obs.body))))
    }
}

/// The access policy, as an operator keeps it in a file (`agentflow --access FILE` reads the
/// same): which roles may perform which operation.
pub const POLICY: &str = r#"{
    "start": ["agent"],
    "resume": ["agent"],
    "list": ["support", "approver", "auditor"],
    "read_state": ["support", "approver", "viewer"],
    "read_history": ["auditor"],
    "decide": ["approver"]
}"#;

/// Who decides refunds (the desk's authorizer, checked after the policy): `approver`s.
pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")
}

/// The approval a paused run waits for.
fn waiting_for(run: &Run<Claim>) -> Option<String> {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { return None };
    let p = pending.iter().find(|p| p.kind == PendingKind::Approval)?;
    Some(p.payload["approval"].as_str()?.to_string())
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(run_with_args(std::env::args().skip(1).collect()))
}

/// The example's `main` with these command-line arguments.
pub async fn run_with_args(args: Vec<String>) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("two_tenants: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let (path, temporary) = match args.as_slice() {
        [flag, path] if flag == "--db" => (std::path::PathBuf::from(path), false),
        [] => (std::env::temp_dir().join(format!("agentflow-two-tenants-{}.redb", std::process::id())), true),
        _ => return Err("usage: two_tenants [--db PATH]".into()),
    };
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path)?);
    let app = refunds::graph().app().store(Arc::clone(&store)).access(RoleAccess::from_json(POLICY)?);

    println!("1. each company's agent starts a refund of its own tenant");
    let mut approvals = Vec::new();
    for (tenant, thread, amount) in [("acme", "acme-refund-1", 40), ("globex", "globex-refund-1", 75)] {
        let agent = app.acting_as(Actor::new(format!("{tenant}-agent"), ["agent"]).for_tenants([tenant]));
        let run = agent.runner(&()).thread(thread).owner(format!("{tenant}-agent")).tenant(tenant);
        let run = run.run(Claim { amount, outcome: None }).await?;
        let approval = waiting_for(&run).ok_or("the refund did not wait for a person")?;
        println!("   {thread} ({tenant}): {}, waiting for approval {approval}", run.outcome);
        approvals.push(approval);
    }

    println!("2. acme's support lists threads");
    let sam = app.acting_as(Actor::new("sam", ["support"]).for_tenants(["acme"]));
    for t in sam.list_threads()? {
        println!("   {} (tenant {}, {})", t.id, t.tenant.as_deref().unwrap_or("none"), t.status);
    }

    println!("3. three people try to approve acme's refund, each at their own desk");
    let acme_refund = &approvals[0];
    let people = [
        Approver::new("gina", ["approver"]).for_tenants(["globex"]),
        Approver::new("vic", ["viewer"]).for_tenants(["acme"]),
        Approver::new("alice", ["approver"]).for_tenants(["acme"]),
    ];
    for who in &people {
        // A desk reads and decides as the app acting for its person.
        let desk = app.acting_as(who).approvals(authorizer())?;
        match desk.approve(acme_refund, who) {
            Ok(record) => println!("   {}: {}", who.id, record.status),
            Err(e) => println!("   {}: refused: {e}", who.id),
        }
    }
    let alices_desk = app.acting_as(&people[2]).approvals(authorizer())?;
    if alices_desk.get(acme_refund)?.map(|r| r.status) != Some(ApprovalStatus::Approved) {
        return Err("acme's refund was not approved".into());
    }
    let agent = app.acting_as(Actor::new("acme-agent", ["agent"]).for_tenants(["acme"]));
    let run = agent.runner(&()).thread("acme-refund-1").resume().await?;
    println!("   acme-refund-1 resumed: {} with {}", run.outcome, run.state.outcome.unwrap_or_default());

    println!("4. the auditor verifies each thread's audit log");
    let auditor = app.acting_as(Actor::new("audrey", ["auditor"]));
    for t in auditor.list_threads()? {
        match auditor.verify_audit(&t.id)? {
            Ok(report) => {
                let entries =
                    if report.entries == 1 { "1 entry".to_string() } else { format!("{} entries", report.entries) };
                println!("   {}: {entries}, intact; head {}", t.id, &report.head[..report.head.len().min(16)]);
            }
            Err(broken) => println!("   {}: BROKEN: {broken}", t.id),
        }
    }
    drop((app, alices_desk, store));
    if temporary {
        std::fs::remove_file(&path).ok();
    }
    Ok(())
}
