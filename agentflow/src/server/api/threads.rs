//! Reading threads: `GET /api/threads`, and one thread's record, state, history and what it
//! waits on. Every listing shows only the threads of the caller's tenants; a thread of another
//! tenant answers 404, as a missing one.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::bodies::{FailedFollowUpView, FollowUpsView, HistoryEntry, PendingView, StateView, ThreadView, ThreadWaits};
use super::caller::Caller;
use super::path::Path;
use super::problem::{Problem, blocking};
use super::reads::{approvals_waiting, pending_of, queued_run, state_view};
use super::state::ApiState;
use crate::access::Operation;
use crate::durable::restart::FOLLOW_UP_FAILED;
use crate::server::inspect::description::Names;
use crate::server::inspect::waits::waits;

/// `GET /api/threads`: the threads of the caller's tenants, the most recently changed first.
pub(crate) async fn list(State(state): State<Arc<ApiState>>, caller: Caller) -> Result<Json<Vec<ThreadView>>, Problem> {
    caller.allow(Operation::List)?;
    let access = caller.access().clone();
    blocking(move || {
        let store = state.store.as_ref();
        let runs = store.scan_runs().map_err(Problem::store)?.items;
        let mut names = Names::default();
        let mut threads: Vec<ThreadView> = store
            .scan_threads()?
            .items
            .into_iter()
            .filter(|t| access.sees(t))
            .map(|t| {
                let graph = names.of(store, &t);
                ThreadView::new(&t, graph, runs.iter().find(|r| r.thread == t.id))
            })
            .collect();
        threads.sort_by(|a, b| (b.updated_at, &a.id).cmp(&(a.updated_at, &b.id)));
        Ok(Json(threads))
    })
    .await
}

/// `GET /api/threads/{thread}`.
pub(crate) async fn get(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> Result<Json<ThreadView>, Problem> {
    let record = caller.thread(&state, Operation::ReadState, &thread).await?;
    blocking(move || {
        let graph = Names::default().of(state.store.as_ref(), &record);
        let run = queued_run(&state, &record.id)?;
        let mut view = ThreadView::new(&record, graph, run.as_ref());
        view.follow_ups = Some(follow_ups(&state, &record.id)?);
        Ok(Json(view))
    })
    .await
}

/// Thread `thread`'s follow-up runs: how many wait, and the last that could not run.
fn follow_ups(state: &ApiState, thread: &str) -> Result<FollowUpsView, Problem> {
    let waiting = state.store.list_follow_ups(thread).map_err(Problem::store)?.len();
    let audit = state.store.list_audit(thread).map_err(Problem::store)?;
    let last_failed = audit
        .into_iter()
        .rfind(|e| e.kind == FOLLOW_UP_FAILED)
        .map(|e| FailedFollowUpView { at: e.at, reason: e.detail["reason"].as_str().unwrap_or_default().to_string() });
    Ok(FollowUpsView { waiting, last_failed })
}

/// `GET /api/threads/{thread}/state`.
pub(crate) async fn state(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> Result<Json<StateView>, Problem> {
    let record = caller.thread(&state, Operation::ReadState, &thread).await?;
    let access = caller.access().clone();
    blocking(move || Ok(Json(state_view(&state, &access, &record)?))).await
}

/// `GET /api/threads/{thread}/history`: every checkpoint, oldest first.
pub(crate) async fn history(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> Result<Json<Vec<HistoryEntry>>, Problem> {
    let record = caller.thread(&state, Operation::ReadHistory, &thread).await?;
    blocking(move || {
        let checkpoints = state.store.list_checkpoints(&record.id)?;
        Ok(Json(checkpoints.iter().map(HistoryEntry::from).collect()))
    })
    .await
}

/// `GET /api/threads/{thread}/pending`: the questions, breakpoints, approvals and timers the
/// thread waits on, and its approvals waiting for a person.
pub(crate) async fn pending(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
) -> Result<Json<ThreadWaits>, Problem> {
    let record = caller.thread(&state, Operation::ReadState, &thread).await?;
    blocking(move || {
        let (seq, _) = waits(state.store.as_ref(), &record.id)?;
        let pending = pending_of(&state, &record)?;
        Ok(Json(ThreadWaits {
            thread: record.id.clone(),
            status: record.status.as_str().to_string(),
            seq,
            pending: pending.iter().map(PendingView::from).collect(),
            approvals: approvals_waiting(&state, &record.id)?,
        }))
    })
    .await
}
