//! The hosted graphs: `GET /api/graphs` and `GET /api/graphs/{graph}`, and the OpenAPI document
//! at `GET /openapi.json`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use super::bodies::GraphView;
use super::caller::Caller;
use super::path::Path;
use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::Operation;

/// `GET /api/graphs`: the hosted graphs, by name.
pub(crate) async fn list(State(state): State<Arc<ApiState>>, caller: Caller) -> Result<Json<Vec<GraphView>>, Problem> {
    caller.allow(Operation::List)?;
    let graphs = state
        .graphs
        .values()
        .map(|g| GraphView {
            name: g.name().to_string(),
            fingerprint: g.fingerprint().to_string(),
            description: g.description(),
        })
        .collect();
    Ok(Json(graphs))
}

/// `GET /api/graphs/{graph}`: a hosted graph's description, by name; or, by fingerprint, the
/// description the store keeps of a graph a thread ran with (an older version, a graph hosted
/// elsewhere).
pub(crate) async fn get(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(graph): Path<String>,
) -> Result<Json<Value>, Problem> {
    caller.allow(Operation::List)?;
    if let Some(hosted) = state.graph(&graph).or_else(|| state.graph_of(&graph)) {
        return Ok(Json(hosted.description()));
    }
    let store = Arc::clone(&state.store);
    let id = graph.clone();
    let stored = blocking(move || store.graph_description(&id).map_err(Problem::store)).await?;
    let text = stored.ok_or_else(|| {
        Problem::not_found(format!(
            "no graph `{graph}`: none hosted here has this name, and the store describes no graph with this \
             fingerprint; GET /api/graphs lists the hosted ones"
        ))
    })?;
    serde_json::from_str(&text)
        .map(Json)
        .map_err(|e| Problem::store(format!("the stored description of graph {graph} is not JSON: {e}")))
}

/// `GET /openapi.json`: the API's OpenAPI document.
pub(crate) async fn openapi() -> Json<Value> {
    Json(super::spec::document().clone())
}
