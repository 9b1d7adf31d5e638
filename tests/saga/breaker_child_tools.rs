//! The circuit-breaker docs say a subgraph's tools are guarded by its parent
//! App's breakers. A user who wants a breaker on one tool that only a child
//! graph lists configures it on the parent App by name: that must be
//! accepted (not refused as a tool no node lists), and it must guard the
//! child's calls: once open, the tool's body does not run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentflow::breaker::{Breaker, BreakerConfigError, BreakerState};
use agentflow::prelude::*;
use agentflow::{Outcome, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Default)]
pub struct Upstream {
    runs: AtomicU32,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Service {
    name: String,
}

/// Checks an upstream service, which is down.
#[tool(risk = read)]
async fn check_upstream(args: Service, cx: &ToolCx<Upstream>) -> Result<String, ToolError> {
    cx.deps().runs.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::Transient(format!("{} answered 503", args.name)))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Check {
    outcome: Option<String>,
}

#[graph(state = Check, deps = Upstream, start = check)]
pub mod probe {
    use super::*;

    #[node(goto = [END], tools = [check_upstream])]
    async fn check(_s: &Check, cx: &Ctx<Upstream>) -> Result<Step<Check>, NodeError> {
        let outcome = match cx.run_tool(check_upstream, json!({ "name": "payments" })).await {
            Ok(obs) => obs.code().map_or("ok".to_string(), |c| serde_json::to_value(c).unwrap().to_string()),
            Err(_) => "error".to_string(),
        };
        Ok(goto!(END, Check::update().outcome(Some(outcome))))
    }
}

#[graph(state = Check, deps = Upstream, start = delegate)]
pub mod watch {
    use super::*;

    #[node(goto = [END], subgraphs = [probe])]
    async fn delegate(_s: &Check, cx: &Ctx<Upstream>) -> Result<Step<Check>, NodeError> {
        let done = cx.subgraph(probe::graph(), Check::default()).await?;
        Ok(goto!(END, Check::update().outcome(done.outcome)))
    }
}

#[tokio::test]
async fn a_breaker_on_a_tool_only_a_child_lists_is_accepted_by_the_parent_app_and_guards_the_child() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = watch::graph()
        .app()
        .store(Arc::clone(&store))
        .circuit_breaker("check_upstream", Breaker::after(2).cool_down(Duration::from_secs(3600)))
        .expect("the parent's subgraph lists the tool");
    let up = Upstream::default();
    for thread in ["w-1", "w-2", "w-3", "w-4"] {
        let run = app.runner(&up).thread(thread).run(Check::default()).await.unwrap();
        assert_eq!(run.outcome, Outcome::Completed, "{thread}");
    }
    // Two failures open it; the next two calls are refused without running.
    assert_eq!(up.runs.load(Ordering::SeqCst), 2);
    assert_eq!(store.breaker("check_upstream").unwrap().unwrap().state, BreakerState::Open);

    // A name neither the graph nor its subgraphs list is still refused, and the
    // list names the child's tools.
    let err = watch::graph().app().circuit_breaker("check_upstreem", Breaker::after(2)).unwrap_err();
    let BreakerConfigError::UnknownTool { tools, .. } = &err else { panic!("{err:?}") };
    assert_eq!(tools, &["check_upstream"]);
}
