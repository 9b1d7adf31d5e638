use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

agentflow::mcp_tools! {
    pub mod everything from "../../../mcp/everything.json" {
        echo: read,
        get_annotated_message: read,
        get_env: read,
        get_resource_links: read,
        get_resource_reference: read,
        get_structured_content: read,
        get_sum: read,
        get_tiny_image: read,
        gzip_file_as_resource: external idempotent,
        toggle_simulated_logging: external,
        toggle_subscriber_updates: external,
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

    #[node(goto = [END], tools = [everything::get_sum])]
    async fn add(_s: &Sum, cx: &Ctx<()>) -> Result<Step<Sum>, NodeError> {
        let obs = cx.run_tool(everything::get_sum, everything::GetSumArgs { a: "1", b: 2.0 }).await?;
        let answer = obs.result().and_then(|v| v.as_str()).map(str::to_string);
        Ok(goto!(END, Sum::update().answer(answer)))
    }
}

fn main() {
    let _ = adder::graph();
}
