// A tool that takes `cx: &ToolCx<Deps>`: the call's context and the graph's deps.
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

struct Deps {
    requests: AtomicU32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Incident {
    metrics: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Service {
    /// The service's name.
    name: String,
}

/// Reads a service's error rate.
#[tool(risk = read)]
async fn get_metrics(args: Service, cx: &ToolCx<Deps>) -> Result<String, ToolError> {
    let n = cx.deps().requests.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("{}: request {n} in {}", args.name, cx.node()))
}

/// The same, with the path and the lifetime written out.
#[tool(risk = read)]
async fn get_errors(args: Service, cx: &agentflow::tool::ToolCx<'_, Deps>) -> Result<String, ToolError> {
    let n = cx.deps().requests.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("{}: request {n}", args.name))
}

#[graph(state = Incident, deps = Deps, start = investigate)]
mod oncall {
    use super::*;

    #[node(goto = [END], tools = [get_metrics, get_errors])]
    async fn investigate(_s: &Incident, cx: &Ctx<Deps>) -> Result<Step<Incident>, NodeError> {
        let obs = cx.run_tool(get_metrics, Service { name: "checkout".into() }).await?;
        cx.run_tool(get_errors, Service { name: "checkout".into() }).await?;
        let metrics = obs.result().and_then(|v| v.as_str()).map(str::to_string);
        Ok(goto!(END, Incident::update().metrics(metrics)))
    }
}

fn main() {
    let deps = Deps { requests: AtomicU32::new(0) };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(oncall::graph().run(Incident::default(), &deps)).unwrap();
    assert_eq!(run.state.metrics.as_deref(), Some("checkout: request 1 in investigate"));
    assert_eq!(deps.requests.load(Ordering::SeqCst), 2);
}
