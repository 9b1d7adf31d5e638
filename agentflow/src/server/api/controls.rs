//! Stopping runs: `POST /api/threads/{thread}/cancel` and `/pause`, through the library's run
//! controls in the caller's name (checked by the access policy, audited as asked by the caller).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::bodies::{Cancelled, Paused};
use super::caller::Caller;
use super::path::Path;
use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::Operation;
use crate::app::RunControls;

/// `POST /api/threads/{thread}/cancel`.
pub(crate) async fn cancel(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> Result<Json<Cancelled>, Problem> {
    let cancelled = control(&state, &caller, thread, Operation::Cancel).await?;
    Ok(Json(Cancelled { cancelled }))
}

/// `POST /api/threads/{thread}/pause`.
pub(crate) async fn pause(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> Result<Json<Paused>, Problem> {
    let paused = control(&state, &caller, thread, Operation::Pause).await?;
    Ok(Json(Paused { paused }))
}

/// Asks thread `thread`'s queued or running run to stop (`Cancel`) or pause; `false` when it has
/// none. A thread that is not there for the caller answers 404, also one whose run was queued
/// but not started yet when it is of another tenant.
async fn control(
    state: &Arc<ApiState>,
    caller: &Caller,
    thread: String,
    operation: Operation,
) -> Result<bool, Problem> {
    let (store, access) = (Arc::clone(&state.store), caller.access().clone());
    blocking(move || {
        let controls = RunControls::new(Arc::clone(&store), access.clone());
        let asked = match operation {
            Operation::Pause => controls.pause_run(&thread)?,
            _ => controls.cancel_run(&thread)?,
        };
        if !asked && access.lookup::<Problem>(store.as_ref(), operation, &thread)?.is_none() {
            return Err(Problem::no_thread(&thread));
        }
        Ok(asked)
    })
    .await
}
