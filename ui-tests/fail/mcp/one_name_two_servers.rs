use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

agentflow::mcp_tools! {
    pub mod alpha from "echo.json" {
        echo: read,
    }
    pub mod beta from "echo.json" {
        echo: external,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct S {
    out: Option<String>,
}

#[graph(state = S, start = work)]
mod g {
    use super::*;

    #[node(goto = [END], tools = [alpha::echo, beta::echo])]
    async fn work(_s: &S, cx: &Ctx<()>) -> Result<Step<S>, NodeError> {
        let obs = cx.run_tool(beta::echo, beta::EchoArgs { message: "hi".into() }).await?;
        let out = obs.result().map(|v| v.to_string());
        Ok(goto!(END, S::update().out(out)))
    }
}

fn main() {
    let _ = g::graph();
}
