//! MCP tools under the crash matrix, on the reference server: a read, then a call that acts
//! (the server's `echo`, classed `external` here as the stand-in for a message sent) behind an
//! approval. Every durable boundary of the run is cut before and after; each resume ends as the
//! uncut run did, the acting call made once (a cut while it was with the server leaves it to a
//! person, as any call cut off mid-way).

use std::path::PathBuf;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::mcp::McpTransport;
use agentflow::prelude::*;
use agentflow::testing::{Answers, CrashMatrix, Ending};
use agentflow::tool::{Risk, RiskPolicy};
use serde::{Deserialize, Serialize};
use serde_json::Value;

agentflow::mcp_tools! {
    /// The reference server; `echo` stands in for a call that acts.
    pub mod everything from "../../mcp/everything.json" {
        echo: external,
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
pub struct Note {
    sum: Option<String>,
    sent: Option<String>,
}

#[graph(state = Note, start = add)]
pub mod notify {
    use super::*;

    #[node(goto = [send], tools = [everything::get_sum])]
    async fn add(_n: &Note, cx: &Ctx<()>) -> Result<Step<Note>, NodeError> {
        let obs = cx.run_tool(everything::get_sum, everything::GetSumArgs { a: 2.0, b: 3.0 }).await?;
        Ok(goto!(send, Note::update().sum(obs.result().and_then(Value::as_str).map(str::to_string))))
    }

    #[node(goto = [END], tools = [everything::echo])]
    async fn send(n: &Note, cx: &Ctx<()>) -> Result<Step<Note>, NodeError> {
        let message = n.sum.clone().unwrap_or_default();
        let obs = cx.run_tool(everything::echo, everything::EchoArgs { message }).await?;
        Ok(goto!(END, Note::update().sent(obs.result().and_then(Value::as_str).map(str::to_string))))
    }
}

fn server() -> Option<PathBuf> {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/node_modules/.bin/mcp-server-everything");
    if bin.exists() {
        return Some(bin);
    }
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "run `npm ci --prefix mcp` before cargo test");
    eprintln!("SKIPPED the MCP crash matrix: mcp/node_modules is not installed (run `npm ci --prefix mcp`)");
    None
}

#[test]
fn mcp_calls_survive_every_cut() {
    let Some(bin) = server() else { return };
    // The connection's tasks run on a runtime of their own, alive for the whole matrix.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let transport = McpTransport::stdio(bin.display().to_string()).arg("stdio");
    let client = rt.block_on(everything::connect(transport)).expect("connect to the reference server");
    let app = notify::graph().app().policy(RiskPolicy::default()).mcp(client);
    let authorizer = RoleAuthorizer::new().role_for(Risk::External, "ops");
    let answers = Answers::new().approvers(authorizer, [Approver::new("alice", ["ops"])]);
    let report = CrashMatrix::new(app, &())
        .thread("note-1")
        .owner("agent:notifier")
        .input(Note::default())
        .answers(answers)
        .run()
        .unwrap();
    println!("mcp: {report}");
    assert!(report.is_clean(), "{report}");
    let missed: Vec<String> =
        report.trials.iter().filter(|t| !t.reached).map(|t| format!("{} `{}`", t.cut, t.boundary)).collect();
    assert!(missed.is_empty(), "cuts not reached: {missed:?}\n{report}");
    let Ending::Finished { outcome, state } = &report.reference else { panic!("{}", report.reference) };
    assert_eq!(outcome, "completed");
    assert_eq!(state["sent"], "Echo: The sum of 2 and 3 is 5.", "{state}");
    assert!(report.trials.iter().any(|t| t.boundary.contains("echo")), "the acting call's journal was cut: {report}");
    drop(rt);
}
