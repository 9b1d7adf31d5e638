// Every tool of the reference server's committed snapshot, classed.
use agentflow::prelude::*;
use agentflow::tool::{Risk, Tool};
use serde::{Deserialize, Serialize};
use serde_json::json;

agentflow::mcp_tools! {
    /// The MCP reference server.
    pub mod everything from "../../../mcp/everything.json" {
        echo: read,
        get_annotated_message: read,
        get_env: read,
        get_resource_links: read,
        get_resource_reference: read,
        get_structured_content: read,
        get_sum: read idempotent,
        get_tiny_image: read,
        gzip_file_as_resource: external idempotent,
        toggle_simulated_logging: reversible,
        toggle_subscriber_updates: reversible,
        trigger_long_running_operation: read,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Sum {
    answer: Option<String>,
}

#[graph(state = Sum, start = add)]
mod adder {
    use super::*;

    #[node(goto = [END], tools = [everything::get_sum, everything::echo])]
    async fn add(_s: &Sum, cx: &Ctx<()>) -> Result<Step<Sum>, NodeError> {
        let obs = cx.run_tool(everything::get_sum, everything::GetSumArgs { a: 1.0, b: 2.0 }).await?;
        let answer = obs.result().and_then(|v| v.as_str()).map(str::to_string);
        Ok(goto!(END, Sum::update().answer(answer)))
    }
}

fn main() {
    let names: Vec<&str> = everything::TOOLS.iter().map(|t| t.name()).collect();
    assert_eq!(names.len(), 12);
    assert!(names.contains(&"trigger-long-running-operation"), "{names:?}");
    assert_eq!(everything::get_sum.name(), "get-sum");
    assert_eq!(everything::get_sum.risk(), Risk::Read);
    assert!(everything::get_sum.idempotent());
    assert_eq!(everything::toggle_simulated_logging.risk(), Risk::Reversible);
    assert!(!everything::toggle_simulated_logging.idempotent());
    assert_eq!(everything::gzip_file_as_resource.risk(), Risk::External);
    // Optional fields with the server's defaults, and an enum as a string.
    let _ = everything::GetResourceReferenceArgs { resource_type: None, resource_id: Some(2.0) };
    let _ = everything::GetAnnotatedMessageArgs { message_type: "error".into(), include_image: None };
    let _ = everything::GetEnvArgs {};
    assert_eq!(everything::echo.validate(&json!({ "message": "hi" })), Ok(()));
    assert!(everything::echo.validate(&json!({ "message": 1 })).is_err());

    // In memory, without a connection, the call fails and says how to connect.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(adder::graph().run(Sum::default(), &())).unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "add");
    assert!(error.to_string().contains("`get-sum` is a tool of the MCP server `everything`"), "{error}");
    assert!(error.to_string().contains("`everything::connect(..)`"), "{error}");
}
