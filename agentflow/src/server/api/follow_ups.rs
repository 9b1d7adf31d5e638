//! `POST /api/threads` naming a thread that exists: a follow-up run of it, and the webhook URL a
//! start or follow-up names, checked against what the operator allows.
//!
//! A follow-up's `input` is an update of the thread's state; `multitask_strategy` says what
//! happens to the run the thread has in the queue ([`Multitask`], `enqueue` by default). The
//! answer is 202 with where the run stands: `queued` (the thread had no run in the queue) or
//! `behind` (after the thread's run, with `ahead` other follow-ups before it); 409
//! `follow_up_refused` for `reject` while the thread has a run, and for a thread another graph
//! (or another version of this one) wrote.
//!
//! With `wait`, a follow-up queued behind the thread's run is waited for until it becomes the
//! thread's run (then its own run is waited for, as a start's); while the run before it waits
//! for a person or its timer (or is held for a thread that does), the answer is 202 at once with
//! status `behind_waiting`: the follow-up runs only once that run ended.

use std::sync::Arc;
use std::time::Duration;

use agentflow_store::{FollowUpQueued, IdempotencyKey, RunWait};
use axum::http::StatusCode;
use serde_json::Value;
use tokio::time::Instant;

use super::bodies::RunView;
use super::problem::{Problem, blocking};
use super::reads::queued_run;
use super::state::ApiState;
use crate::access::Access;
use crate::app::follow_up::{QueuedFollowUp, is_follow_up};
use crate::app::{Multitask, WorkerError};
use crate::server::hosted::{Hosted, SubmitError};
use crate::server::inspect::description::Names;

/// `webhook`, if the server takes it: 422 `webhook_not_allowed` naming the allowed prefixes (or
/// saying the server takes none); the URL kept as it is written once parsed.
pub(crate) fn allowed_webhook(state: &ApiState, webhook: Option<String>) -> Result<Option<String>, Problem> {
    let Some(url) = webhook else { return Ok(None) };
    let refused = |message: String| Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "webhook_not_allowed", message);
    let Some(config) = &state.webhooks else {
        return Err(refused(
            "this server takes no webhooks (its operator configures them with `Server::webhooks`); leave `webhook` \
             out; nothing was started"
                .to_string(),
        ));
    };
    let url = config.checked(&url).map_err(|e| refused(format!("{e}; nothing was started")))?;
    Ok(Some(url))
}

/// Whether thread `thread` is there for `access`'s actor to follow up: it exists, or a run
/// submitted for it waits in the queue, of a tenant the actor acts for.
pub(crate) async fn is_there(state: &Arc<ApiState>, access: &Access, thread: &str) -> Result<bool, Problem> {
    let (shared, access, id) = (Arc::clone(state), access.clone(), thread.to_string());
    blocking(move || {
        if let Some(record) = shared.store.thread(&id)? {
            return Ok(access.sees(&record));
        }
        Ok(queued_run(&shared, &id)?.is_some_and(|run| access.actor().acts_for(run.tenant.as_deref())))
    })
    .await
}

/// What a follow-up request asks.
pub(crate) struct FollowUp {
    /// The thread.
    pub(crate) thread: String,
    /// The update (JSON).
    pub(crate) input: Value,
    /// The strategy.
    pub(crate) strategy: Multitask,
    /// The webhook URL, checked.
    pub(crate) webhook: Option<String>,
    /// The start's idempotency key, if the request sent one.
    pub(crate) key: Option<IdempotencyKey>,
    /// The tenant the request named, if any.
    pub(crate) tenant: Option<String>,
}

/// Queues follow-up `ask` of graph `graph` for `access`'s actor: 202 with where it stands. A
/// request under an `Idempotency-Key` is a start sent again when that key started the thread
/// (answered as the first was, queueing nothing); a follow-up is not deduplicated by a key (422
/// `idempotency_key_not_supported`).
/// With the view, the queued run's own mark ([`QueuedFollowUp::mark`], as the store queued it)
/// for [`wait_for_turn`] and the wait for its run; `None` for a start sent again.
pub(crate) async fn follow_up(
    state: &Arc<ApiState>,
    access: &Access,
    graph: Arc<dyn Hosted>,
    ask: FollowUp,
) -> Result<(RunView, Option<String>), Problem> {
    let tenant_named = |thread: &str| {
        Problem::unprocessable(format!(
            "thread `{thread}` exists: a follow-up run keeps its thread's tenant; leave `tenant` out"
        ))
    };
    if ask.tenant.is_some() && ask.key.is_none() {
        return Err(tenant_named(&ask.thread));
    }
    let (shared, access) = (Arc::clone(state), access.clone());
    blocking(move || {
        let FollowUp { thread, input, strategy, webhook, key, tenant } = ask;
        same_graph(&shared, graph.as_ref(), &thread)?;
        if let Some(key) = key {
            // The start of this thread sent again under its key (the same body, so the same
            // tenant) answers as the first did, before anything a follow-up refuses.
            let keyed = graph.submit_keyed(&access, &thread, input, tenant.as_deref(), Some(key), webhook.as_deref());
            return match keyed {
                Err(SubmitError::Worker(WorkerError::KeyUsed { thread, same_request: true, .. })) => {
                    Ok((RunView::queued(thread), None))
                }
                Err(SubmitError::Worker(e @ WorkerError::KeyUsed { .. })) => Err(e.into()),
                Ok(()) => Ok((RunView::queued(thread), None)),
                Err(_) if tenant.is_some() => Err(tenant_named(&thread)),
                Err(_) => Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_not_supported",
                    format!(
                        "thread `{thread}` exists and this key did not start it: a follow-up run is not deduplicated by \
                         an Idempotency-Key; send it without the header; nothing was queued"
                    ),
                )),
            };
        }
        let QueuedFollowUp { queued, mark } =
            graph.submit_follow_up(&access, &thread, input, strategy, webhook.as_deref())?;
        let mut view = RunView::queued(thread);
        if let FollowUpQueued::Behind { ahead } = queued {
            view.status = "behind".to_string();
            view.ahead = Some(ahead);
        }
        Ok((view, Some(mark)))
    })
    .await
}

/// Waits, for `wait: true`, until follow-up `view` (the queued run marked `mine`) queued behind
/// its thread's run is the thread's run or ran, or `deadline` passes: `None` then (the caller
/// waits for that run, told by its mark, as for a start's), or the 202 view to answer at once:
/// `behind_waiting` while the run before it is parked (for a person, its timer, or held for a
/// thread that waits), `behind` at the deadline.
pub(crate) async fn wait_for_turn(
    state: &Arc<ApiState>,
    mut view: RunView,
    mine: Option<&str>,
    deadline: Instant,
) -> Result<Option<RunView>, Problem> {
    let Some(mine) = mine.filter(|_| view.status == "behind") else { return Ok(None) };
    let mut pause = Duration::from_millis(5);
    loop {
        let (shared, id) = (Arc::clone(state), view.thread.clone());
        let (run, waiting) = blocking(move || {
            let waiting = shared.store.list_follow_ups(&id).map_err(Problem::store)?;
            Ok((queued_run(&shared, &id)?, waiting))
        })
        .await?;
        let Some(at) = waiting.iter().position(|r| is_follow_up(r, mine)) else { return Ok(None) };
        view.ahead = Some(at);
        if run.is_some_and(|r| r.wait != RunWait::Ready && r.control.is_none()) {
            view.status = "behind_waiting".to_string();
            view.detail = Some(
                "queued behind a run that waits for a person or its timer: this follow-up runs once that run \
                 ended; GET the thread to follow it"
                    .to_string(),
            );
            return Ok(Some(view));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Some(view));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// `Ok` when thread `thread` (if it exists) runs graph `graph`, as the store's description of
/// its graph names it: 422 otherwise (a follow-up runs the thread's own graph).
fn same_graph(state: &ApiState, graph: &dyn Hosted, thread: &str) -> Result<(), Problem> {
    let Some(record) = state.store.thread(thread)? else { return Ok(()) };
    if record.graph_fingerprint == graph.fingerprint() {
        return Ok(());
    }
    match Names::default().of(state.store.as_ref(), &record) {
        Some(name) if name == graph.name() => Ok(()),
        name => Err(Problem::unprocessable(format!(
            "thread `{thread}` runs graph `{}`, not `{}`: a follow-up run names its thread's graph; nothing was queued",
            name.as_deref().unwrap_or("(not described)"),
            graph.name()
        ))),
    }
}
