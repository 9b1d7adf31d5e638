// A tool that reads `&OtherDeps`, listed by a node of a graph whose deps are `Deps`.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

struct Deps {
    region: String,
}

struct OtherDeps {
    token: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Incident {
    metrics: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct Service {
    name: String,
}

/// Reads a service's metrics.
#[tool(risk = read)]
async fn get_metrics(args: Service, deps: &OtherDeps) -> Result<String, ToolError> {
    Ok(format!("{} with {}", args.name, deps.token))
}

/// Reads a service's logs.
#[tool(risk = read)]
async fn get_logs(args: Service, cx: &ToolCx<OtherDeps>) -> Result<String, ToolError> {
    Ok(format!("{} with {}", args.name, cx.deps().token))
}

#[graph(state = Incident, deps = Deps, start = investigate)]
mod oncall {
    use super::*;

    #[node(goto = [END], tools = [get_metrics, get_logs])]
    async fn investigate(_s: &Incident, deps: &Deps) -> Step<Incident> {
        goto!(END, Incident::update().metrics(Some(deps.region.clone())))
    }
}

fn main() {
    let _ = oncall::graph();
}
