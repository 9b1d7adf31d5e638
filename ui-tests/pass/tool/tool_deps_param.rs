// A tool that takes `deps: &Deps`: the graph's deps, without the call's context.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

struct Deps {
    region: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Incident {
    owner: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Service {
    /// The service's name.
    name: String,
}

/// Looks up who is on call for a service.
#[tool(risk = read)]
async fn on_call(args: Service, deps: &Deps) -> Result<String, ToolError> {
    Ok(format!("owner of {} in {}", args.name, deps.region))
}

#[graph(state = Incident, deps = Deps, start = investigate)]
mod oncall {
    use super::*;

    #[node(goto = [END], tools = [on_call])]
    async fn investigate(_s: &Incident, cx: &Ctx<Deps>) -> Result<Step<Incident>, NodeError> {
        let obs = cx.run_tool(on_call, Service { name: "checkout".into() }).await?;
        let owner = obs.result().and_then(|v| v.as_str()).map(str::to_string);
        Ok(goto!(END, Incident::update().owner(owner)))
    }
}

fn main() {
    let deps = Deps { region: "eu-west".into() };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(oncall::graph().run(Incident::default(), &deps)).unwrap();
    assert_eq!(run.state.owner.as_deref(), Some("owner of checkout in eu-west"));
}
