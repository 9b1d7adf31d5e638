//! The thread page's controls: `POST /threads/{id}/resume`, `/cancel`, `/pause` (the run
//! queue, through the library's `RunControls`) and `/fork` (a `seq` field: branch the thread
//! at that checkpoint). Each is CSRF-checked and checked for the logged-in user: a refusal
//! answers 403 with the reason, a thread of another tenant 404 as a missing one.
//!
//! Starting a thread, updating its state and compacting it are not offered by the inbox: an
//! unknown action answers 404.

use std::sync::Arc;

use agentflow_store::{LeaseError, QueueError};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::checks;
use super::pages;
use super::respond::{FormData, error_page, failure, posted, redirect};
use super::state::Shared;
use crate::access::Operation;
use crate::persist::{HistoryError, PersistError, fork_thread};
use crate::server::inspect::InspectError;
use crate::{RunControls, WorkerError};

/// A control the thread page offers.
#[derive(Clone, Copy)]
enum Control {
    Resume,
    Cancel,
    Pause,
    Fork(u64),
}

/// What became of a control that the access checks let through.
enum Done {
    /// Asked (or forked at the new head).
    Yes,
    /// Refused: the status and the message.
    No(StatusCode, String),
}

/// `POST /threads/{id}/{action}`.
pub(super) async fn act(
    State(server): State<Shared>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: FormData,
) -> Response {
    let (form, s) = match posted(&server, &headers, form, "A control") {
        Ok(posted) => posted,
        Err(r) => return *r,
    };
    let control = match action.as_str() {
        "resume" => Control::Resume,
        "cancel" => Control::Cancel,
        "pause" => Control::Pause,
        "fork" => match form.get("seq").map(|v| v.trim().parse::<u64>()) {
            Some(Ok(seq)) => Control::Fork(seq),
            _ => {
                return error_page(
                    StatusCode::BAD_REQUEST,
                    "Bad request",
                    "A fork names the checkpoint to branch from (a number).",
                    Some(&s),
                );
            }
        },
        _ => return error_page(StatusCode::NOT_FOUND, "Not found", "There is no page at this address.", Some(&s)),
    };
    let operation = match control {
        Control::Resume => Operation::Resume,
        Control::Cancel => Operation::Cancel,
        Control::Pause => Operation::Pause,
        Control::Fork(_) => Operation::Fork,
    };
    let access = checks::access(&server, &s);
    let thread = id.clone();
    let result = server
        .with(move |store| {
            if let Err(e) = checks::thread(store.as_ref(), &access, operation, &thread)? {
                return Ok(Err(e));
            }
            let controls = RunControls::new(Arc::clone(store), access.clone());
            let done = match control {
                Control::Resume => controls.submit_resume(&thread, None).map(|()| true),
                Control::Cancel => controls.cancel_run(&thread),
                Control::Pause => controls.pause_run(&thread),
                Control::Fork(seq) => {
                    return Ok(Ok(match fork_thread(store, &thread, seq, &access.actor().id) {
                        Ok(_) => Done::Yes,
                        Err(e) => fork_refused(e)?,
                    }));
                }
            };
            Ok(Ok(match done {
                Ok(true) => Done::Yes,
                Ok(false) => Done::No(
                    StatusCode::CONFLICT,
                    format!("thread `{thread}` has no queued or running run to {action}; nothing was asked"),
                ),
                Err(e) => control_refused(e)?,
            }))
        })
        .await;
    match result {
        Ok(Ok(Done::Yes)) => redirect(&format!("/threads/{}", pages::url(&id))),
        Ok(Ok(Done::No(status, message))) => {
            error_page(status, "The request was refused", &format!("{message}."), Some(&s))
        }
        Ok(Err(e)) => checks::refused(&e, &s),
        Err(f) => failure(f, Some(&s)),
    }
}

/// A refused run control as a page's status and message; a store that failed is a failure.
fn control_refused(e: WorkerError) -> Result<Done, InspectError> {
    Ok(match e {
        WorkerError::UnknownThread { thread } => {
            Done::No(StatusCode::NOT_FOUND, InspectError::missing_thread(&thread).to_string())
        }
        WorkerError::Access(e) => Done::No(StatusCode::FORBIDDEN, e.to_string()),
        WorkerError::Queue(QueueError::AlreadyQueued { .. } | QueueError::Unsupported { .. })
        | WorkerError::GraphUnknown { .. }
        | WorkerError::NotRunning { .. }
        | WorkerError::ValueRequired { .. } => Done::No(StatusCode::CONFLICT, e.to_string()),
        other => return Err(InspectError::store(other)),
    })
}

/// A refused fork as a page's status and message; a store that failed is a failure.
fn fork_refused(e: HistoryError) -> Result<Done, InspectError> {
    Ok(match e {
        HistoryError::UnknownThread { .. } | HistoryError::UnknownCheckpoint { .. } => {
            Done::No(StatusCode::NOT_FOUND, e.to_string())
        }
        HistoryError::Persist(PersistError::Lease(LeaseError::ThreadBusy { .. })) => Done::No(
            StatusCode::CONFLICT,
            format!("{e}; a run holds the thread: wait for it to pause or finish, then try again"),
        ),
        other => return Err(InspectError::store(other)),
    })
}
