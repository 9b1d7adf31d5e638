//! Deciding approvals: `POST /api/threads/{thread}/approvals/{approval}/approve`, `/reject` and
//! `/edit`, through the approval desk in the caller's name (the desk checks the access policy and
//! the server's authorizer, and audits the decision). A run a worker parked for the approval is
//! claimed again once it is decided; a thread run otherwise is resumed with
//! `POST /api/threads/{thread}/resume`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use super::bodies::{ApprovalView, Approve, Edit, Reject};
use super::body::{Body, MaybeBody};
use super::caller::Caller;
use super::path::Path;
use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::Operation;
use crate::approval::ApprovalDesk;
use crate::server::inspect::edit_check::{check_edit, tool_schema};

/// A decision.
enum Decision {
    Approve(Option<Value>),
    Reject(String),
    Edit(Value),
}

/// `POST /api/threads/{thread}/approvals/{approval}/approve`.
pub(crate) async fn approve(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((thread, approval)): Path<(String, String)>,
    MaybeBody(body): MaybeBody<Approve>,
) -> Result<Json<ApprovalView>, Problem> {
    decide(state, caller, thread, approval, Decision::Approve(body.conditions.filter(|c| !c.is_null()))).await
}

/// `POST /api/threads/{thread}/approvals/{approval}/reject`.
pub(crate) async fn reject(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((thread, approval)): Path<(String, String)>,
    Body(body): Body<Reject>,
) -> Result<Json<ApprovalView>, Problem> {
    if body.reason.trim().is_empty() {
        return Err(Problem::unprocessable(
            "a rejection needs a reason (it is handed to the model); nothing was changed",
        ));
    }
    decide(state, caller, thread, approval, Decision::Reject(body.reason)).await
}

/// `POST /api/threads/{thread}/approvals/{approval}/edit`.
pub(crate) async fn edit(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path((thread, approval)): Path<(String, String)>,
    Body(body): Body<Edit>,
) -> Result<Json<ApprovalView>, Problem> {
    decide(state, caller, thread, approval, Decision::Edit(body.args)).await
}

/// Decides approval `id` of thread `thread` for the caller.
async fn decide(
    state: Arc<ApiState>,
    caller: Caller,
    thread: String,
    id: String,
    decision: Decision,
) -> Result<Json<ApprovalView>, Problem> {
    let record = caller.thread(&state, Operation::Decide, &thread).await?;
    let actor = caller.actor().clone();
    blocking(move || {
        let store = Arc::clone(&state.store);
        let not_here = || {
            Problem::not_found(format!(
                "thread `{thread}` has no approval `{id}`; GET /api/threads/{thread}/pending lists what it waits on"
            ))
        };
        store.approval(&id)?.filter(|a| a.thread == thread).ok_or_else(not_here)?;
        // The desk of the hosted graph knows its tools, so an edit is checked by the tool itself;
        // without it, by the tool's schema as the store describes it.
        let hosted = state.graph_of(&record.graph_fingerprint);
        let desk = match hosted {
            Some(graph) => graph.desk(state.authorizer.clone())?,
            None => ApprovalDesk::for_store(Arc::clone(&store), state.authorizer.clone()),
        }
        .access_shared(Arc::clone(&state.access))
        .reading_as(actor.clone());
        let decided = match decision {
            Decision::Approve(None) => desk.approve(&id, &actor)?,
            Decision::Approve(Some(conditions)) => desk.approve_with_conditions(&id, &actor, conditions)?,
            Decision::Reject(reason) => desk.reject(&id, &actor, &reason)?,
            Decision::Edit(args) if hosted.is_some() => desk.edit(&id, &actor, args)?,
            Decision::Edit(args) => {
                let schema = tool_schema(store.as_ref(), &id)?;
                desk.edit_checked(&id, &actor, args, |tool, value| check_edit(tool, schema.as_ref(), value))?
            }
        };
        Ok(Json(ApprovalView::from(&decided)))
    })
    .await
}
