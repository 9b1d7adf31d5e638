//! Tools that reach the graph's deps: `cx: &ToolCx<Deps>` and `deps: &Deps`,
//! in a real run through the gateway, and a tool's body run on its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

/// What the tools reach: a client stand-in that counts its requests and
/// remembers the idempotency keys it was sent.
#[derive(Default)]
struct Deps {
    requests: AtomicUsize,
    keys: Mutex<Vec<String>>,
    region: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Incident {
    metrics: Option<String>,
    owner: Option<String>,
    pinged: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Service {
    /// The service's name.
    name: String,
}

/// Reads a service's error rate from the metrics backend.
#[tool(risk = read)]
async fn get_metrics(args: Service, cx: &ToolCx<Deps>) -> Result<String, ToolError> {
    let n = cx.deps().requests.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("{} in {}: request {n} from {}", args.name, cx.deps().region, cx.node()))
}

/// Looks up who is on call for a service.
#[tool(risk = read)]
async fn on_call(args: Service, deps: &Deps) -> Result<String, ToolError> {
    deps.requests.fetch_add(1, Ordering::SeqCst);
    if args.name.is_empty() {
        return Err(ToolError::Correctable("name a service".into()));
    }
    Ok(format!("owner of {}", args.name))
}

/// Labels the incident with its owner; the tracker deduplicates on the idempotency key.
#[tool(risk = reversible)]
async fn page(args: Service, cx: &ToolCx<Deps>) -> Result<String, ToolError> {
    cx.deps().keys.lock().unwrap().push(cx.idempotency_key().to_string());
    Ok(format!("paged {}", args.name))
}

/// Echoes the service name; needs no deps, so it fits any graph.
#[tool(risk = read)]
async fn echo(args: Service) -> Result<String, ToolError> {
    Ok(args.name)
}

#[graph(state = Incident, deps = Deps, start = investigate)]
mod oncall {
    use super::*;

    #[node(goto = [END], tools = [get_metrics, on_call, page, echo])]
    async fn investigate(_s: &Incident, cx: &Ctx<Deps>) -> Result<Step<Incident>, NodeError> {
        let svc = || Service { name: "checkout".into() };
        let metrics = cx.run_tool(get_metrics, svc()).await?;
        let owner = cx.run_tool(on_call, svc()).await?;
        let pinged = cx.run_tool(page, svc()).await?;
        let echoed = cx.run_tool(echo, svc()).await?;
        assert_eq!(echoed.result().and_then(|v| v.as_str()), Some("checkout"));
        let text = |o: &agentflow::tool::Observation| o.result().and_then(|v| v.as_str()).map(str::to_string);
        Ok(goto!(END, Incident::update().metrics(text(&metrics)).owner(text(&owner)).pinged(text(&pinged))))
    }
}

#[tokio::test]
async fn tools_reach_the_graphs_deps_in_a_run() {
    let deps = Deps { region: "eu-west".into(), ..Deps::default() };
    let run = oncall::graph().run(Incident::default(), &deps).await.unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.metrics.as_deref(), Some("checkout in eu-west: request 1 from investigate"));
    assert_eq!(run.state.owner.as_deref(), Some("owner of checkout"));
    assert_eq!(run.state.pinged.as_deref(), Some("paged checkout"));
    // Both deps-reading tools used the one `Deps` the run was given.
    assert_eq!(deps.requests.load(Ordering::SeqCst), 2);
    let keys = deps.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0].starts_with("investigate/"), "{keys:?}");
}

#[tokio::test]
async fn a_tool_body_runs_on_its_own_with_test_deps() {
    let deps = Deps { region: "us-east".into(), ..Deps::default() };
    let out = get_metrics.test_call(Service { name: "search".into() }, &deps).await;
    assert_eq!(out, Ok("search in us-east: request 1 from test".to_string()));
    assert_eq!(on_call.test_call(Service { name: "search".into() }, &deps).await, Ok("owner of search".into()));
    assert_eq!(
        on_call.test_call(Service { name: String::new() }, &deps).await,
        Err(ToolError::Correctable("name a service".into()))
    );
    assert_eq!(deps.requests.load(Ordering::SeqCst), 3);
    assert_eq!(page.test_call(Service { name: "search".into() }, &deps).await, Ok("paged search".into()));
    assert_eq!(deps.keys.lock().unwrap().as_slice(), ["page".to_string()]);
    assert_eq!(echo.test_call(Service { name: "x".into() }).await, Ok("x".into()));
}

/// A deps-free tool listed in a graph whose deps are `()`, the same tool as
/// in the `Deps` graph above.
#[graph(state = Incident, start = only)]
mod plain {
    use super::*;

    #[node(goto = [END], tools = [echo])]
    async fn only(_s: &Incident, cx: &Ctx<()>) -> Result<Step<Incident>, NodeError> {
        let obs = cx.run_tool(echo, Service { name: "plain".into() }).await?;
        Ok(goto!(END, Incident::update().owner(obs.result().and_then(|v| v.as_str()).map(str::to_string))))
    }
}

#[tokio::test]
async fn a_tool_without_deps_fits_a_graph_with_any_deps() {
    let run = plain::graph().run(Incident::default(), &()).await.unwrap();
    assert_eq!(run.state.owner.as_deref(), Some("plain"));
}
