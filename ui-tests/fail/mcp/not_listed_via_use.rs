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

    // Lists only `alpha::echo`; the body brings `beta::echo` in by `use`.
    #[node(goto = [END], tools = [alpha::echo])]
    async fn work(_s: &S, cx: &Ctx<()>) -> Result<Step<S>, NodeError> {
        use super::beta::echo;
        let obs = cx.run_tool(echo, beta::EchoArgs { message: "sneaky".into() }).await?;
        let out = obs.result().map(|v| v.to_string());
        Ok(goto!(END, S::update().out(out)))
    }
}

fn main() {
    let _ = g::graph();
}
