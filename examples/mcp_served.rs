//! A graph served as an MCP tool: an MCP host (Claude Desktop, an IDE, another agent) calls
//! `refund_claim` over standard input and output, and each call starts or resumes a durable
//! thread.
//!
//! `cargo run --example mcp_served -- [--store PATH]`
//!
//! The process speaks MCP on stdin/stdout until the client closes them; give it to an MCP host
//! as a stdio server (command `cargo`, args `run --example mcp_served -- --store claims.redb`).
//! A claim of at most 50 is credited at once: the call returns
//! `{"status": "done", "thread", "state"}`. A larger one calls the irreversible `refund` tool,
//! which the default policy holds for a person's approval: the call returns
//! `{"status": "waiting", "thread", "waiting_for": [{"kind": "approval", "id": ..}]}`. A person
//! decides it at the approval desk (`agentflow --store PATH approve ID --as NAME`, or the
//! inbox), and the host then calls again with `{"thread": .., "resume": {}}`.
//!
//! Every call acts as the actor `mcp-agent` (role `agent`, tenant `acme`), checked by the
//! access policy below; the customer's name is personal data (`#[state(pii)]`), shown masked
//! to that actor. No model is involved. Without `--store` the store is a temporary file,
//! removed when the client goes away. Diagnostics go to stderr: stdout is the protocol's.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::access::{Actor, RoleAccess};
use agentflow::approval::RoleAuthorizer;
use agentflow::mcp::{ServeOptions, serve_stdio};
use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
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

/// A customer's claim.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Claim {
    /// Who claims: personal data.
    #[state(pii)]
    #[serde(default)]
    pub customer: String,
    /// Whole currency units.
    pub amount: u32,
    /// What was done.
    #[serde(default)]
    pub outcome: Option<Value>,
}

/// The largest claim credited without a person.
pub const CREDIT_LIMIT: u32 = 50;

#[graph(state = Claim, start = assess)]
pub mod claims {
    use super::*;

    /// Small claims are credited; larger ones are refunded, which waits for an approval.
    #[node(goto = [pay, END])]
    async fn assess(c: &Claim) -> Step<Claim> {
        if c.amount <= CREDIT_LIMIT {
            goto!(END, Claim::update().outcome(Some(json!({ "credited": c.amount }))))
        } else {
            goto!(pay)
        }
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(c: &Claim, cx: &Ctx<()>) -> Result<Step<Claim>, NodeError> {
        let done = cx.run_tool(refund, RefundArgs { amount: c.amount }).await?;
        Ok(goto!(END, Claim::update().outcome(Some(done.body))))
    }
}

/// The access policy: the MCP caller (`agent`) starts, resumes and reads claims and answers
/// their questions; only `approver`s decide approvals, and nobody here sees personal data.
pub const POLICY: &str = r#"{
    "start": ["agent"],
    "resume": ["agent"],
    "answer": ["agent"],
    "read_state": ["agent", "approver"],
    "decide": ["approver"]
}"#;

/// Who decides refunds at the approval desk: `approver`s.
pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")
}

/// The actor every MCP call acts as.
pub fn mcp_actor() -> Actor {
    Actor::new("mcp-agent", ["agent"]).for_tenants(["acme"])
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    rt.block_on(run_with_args(std::env::args().skip(1).collect()))
}

/// The example's `main` with these command-line arguments.
pub async fn run_with_args(args: Vec<String>) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp_served: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let (path, temporary) = match args.as_slice() {
        [flag, path] if flag == "--store" => (std::path::PathBuf::from(path), false),
        [] => (std::env::temp_dir().join(format!("agentflow-mcp-served-{}.redb", std::process::id())), true),
        _ => return Err("usage: mcp_served [--store PATH]".into()),
    };
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path)?);
    let app = claims::graph().app().store(store).access(RoleAccess::from_json(POLICY)?);
    let options = ServeOptions::new(mcp_actor()).tool_name("refund_claim").description(format!(
        "Handles a customer's claim: at most {CREDIT_LIMIT} is credited at once; more is refunded after a \
         person approves. Start with {{\"thread\": id, \"input\": {{\"customer\": name, \"amount\": n}}}}; \
         when it waits for an approval, call again with {{\"thread\": id, \"resume\": {{}}}} once it is decided."
    ));
    eprintln!("mcp_served: serving `refund_claim` on stdio, store {}", path.display());
    let served = serve_stdio(app, (), options).await;
    if temporary {
        std::fs::remove_file(&path).ok();
    }
    served?;
    Ok(())
}
