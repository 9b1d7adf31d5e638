//! Tools from an MCP server, checked at compile time: the reference server
//! `@modelcontextprotocol/server-everything` (pinned in `mcp/package-lock.json`), typed from
//! the committed snapshot `mcp/everything.json`.
//!
//! The graph adds two numbers with the server's `get-sum` (classed `read`: it runs at once),
//! then turns on the server's simulated logging with `toggle-simulated-logging` (classed
//! `external` here: the default policy asks a human first). The run pauses for the approval,
//! an approver decides at the approval desk, and the resumed run makes the call: once, through
//! the same gateway, journal and audit log as any tool.
//!
//! Run `npm ci --prefix mcp` once (`.ci/run` does), then `cargo run --example mcp_tools`.
//! No model is involved: the nodes call the tools themselves.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::mcp::McpTransport;
use agentflow::prelude::*;
use agentflow::tool::{Risk, RiskPolicy};
use agentflow::{PendingKind, RedbStore};
use serde::{Deserialize, Serialize};
use serde_json::Value;

agentflow::mcp_tools! {
    /// The MCP reference server, as its committed snapshot lists it. Every tool has the risk
    /// class this program gives it; the server's own hints are shown in each tool's docs.
    pub mod everything from "../mcp/everything.json" {
        echo: read,
        get_annotated_message: read,
        get_env: read,
        get_resource_links: read,
        get_resource_reference: read,
        get_structured_content: read,
        get_sum: read,
        get_tiny_image: read,
        gzip_file_as_resource: external,
        toggle_simulated_logging: external,
        toggle_subscriber_updates: external,
        trigger_long_running_operation: read,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Report {
    a: f64,
    b: f64,
    sum: Option<String>,
    logging: Option<String>,
}

#[graph(state = Report, start = add)]
mod ops {
    use super::*;

    /// A read: runs without asking anyone.
    #[node(goto = [toggle], tools = [everything::get_sum])]
    async fn add(r: &Report, cx: &Ctx<()>) -> Result<Step<Report>, NodeError> {
        let obs = cx.run_tool(everything::get_sum, everything::GetSumArgs { a: r.a, b: r.b }).await?;
        let sum = obs.result().and_then(Value::as_str).map(str::to_string);
        Ok(goto!(toggle, Report::update().sum(sum)))
    }

    /// Changes what the server does for every client: a person approves it first.
    #[node(goto = [END], tools = [everything::toggle_simulated_logging])]
    async fn toggle(_r: &Report, cx: &Ctx<()>) -> Result<Step<Report>, NodeError> {
        let obs = cx.run_tool(everything::toggle_simulated_logging, everything::ToggleSimulatedLoggingArgs {}).await?;
        let said = match obs.result() {
            Some(Value::String(text)) => text.clone(),
            _ => obs.body.to_string(),
        };
        Ok(goto!(END, Report::update().logging(Some(said))))
    }
}

const OWNER: &str = "agent:ops-bot";

fn server() -> Option<PathBuf> {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/node_modules/.bin/mcp-server-everything");
    bin.exists().then_some(bin)
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(run_with_args(std::env::args().skip(1).collect()))
}

/// The example's `main` with these command-line arguments (none).
pub async fn run_with_args(args: Vec<String>) -> ExitCode {
    let Some(bin) = server() else {
        eprintln!("the MCP reference server is not installed: run `npm ci --prefix mcp` first");
        return ExitCode::from(2);
    };
    let dir = std::env::temp_dir().join(format!("agentflow-mcp-tools-{}", std::process::id()));
    let result = if args.is_empty() { run(&bin, &dir).await } else { Err("usage: mcp_tools".into()) };
    std::fs::remove_dir_all(&dir).ok();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp_tools: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(bin: &Path, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    // Starts the server as a child process and compares its live tools with the snapshot the
    // program was compiled against: a changed tool would be refused here, naming it.
    let client = everything::connect(McpTransport::stdio(bin.display().to_string()).arg("stdio")).await?;
    println!("connected to MCP server `{}`: its tools match mcp/everything.json", client.server());
    if !client.new_tools().is_empty() {
        println!("  live tools not in the snapshot (ignored): {}", client.new_tools().join(", "));
    }

    let graph = ops::graph();
    for node in graph.nodes() {
        let tools: Vec<String> = node.tools.iter().map(|t| format!("{} ({})", t.name(), t.risk())).collect();
        println!("node `{}` may call: {}", node.name, tools.join(", "));
    }

    std::fs::create_dir_all(dir)?;
    let store = Arc::new(RedbStore::open(dir.join("ops.redb"))?);
    let app = graph.app().store(store).policy(RiskPolicy::default()).mcp(client);

    let thread = "ops-1";
    let run = app.runner(&()).owner(OWNER).thread(thread).run(Report { a: 2.0, b: 3.0, ..Report::default() }).await?;
    println!("\nrun `{thread}`: {}", run.outcome);
    println!("  get-sum answered: {:?}", run.state.sum);
    let Outcome::Interrupted { pending, .. } = &run.outcome else {
        return Err(format!("expected a pause for approval, got {}", run.outcome).into());
    };
    let waiting = pending.iter().find(|p| p.kind == PendingKind::Approval).ok_or("no approval pending")?;
    let id = waiting.payload["approval"].as_str().ok_or("the pause names no approval")?.to_string();
    println!(
        "  waiting for approval `{id}`: {} {} (risk {})",
        waiting.payload["tool"], waiting.payload["args"], waiting.payload["risk"]
    );

    // An approver decides at the desk (the CLI's `agentflow approve` and the inbox do the same).
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::External, "ops"))?;
    let decided = desk.approve(&id, &Approver::new("alice", ["ops"]))?;
    println!("  alice approved it: {}", decided.status);

    let done = app.runner(&()).thread(thread).resume().await?;
    println!("\nresumed `{thread}`: {}", done.outcome);
    println!("  toggle-simulated-logging answered: {:?}", done.state.logging);
    let kinds: Vec<String> = app.audit_log(thread)?.into_iter().map(|e| e.kind).collect();
    println!("  audit log: {}", kinds.join(", "));
    if done.outcome != Outcome::Completed {
        return Err("the resumed run did not complete".into());
    }
    Ok(())
}
