//! What the API answers when it refuses or fails: a status and the JSON body
//! `{"error": {"code": "<snake_case>", "message": "what to do"}}`, and how each library error
//! becomes one.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::bodies::{ErrorBody, ErrorDetail};
use crate::access::AccessError;
use crate::app::WorkerError;
use crate::approval::{AnswerError, DecisionError};
use crate::durable::{HistoryError, PersistError};
use crate::serve_limits::TooManyAttempts;
use crate::server::hosted::SubmitError;
use crate::server::inspect::InspectError;
use agentflow_store::{LeaseError, QueueError};

/// A refusal or failure of the API: its status, a stable snake_case code and a message that
/// says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The error's code (`not_found`, `forbidden`, ..).
    pub(crate) code: &'static str,
    /// What went wrong and what to do.
    pub(crate) message: String,
    /// For a 429: how many seconds to wait, sent as `Retry-After`.
    pub(crate) retry_after: Option<u64>,
}

impl Problem {
    /// A problem of `status` with `code` and `message`.
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Problem { status, code, message: message.into(), retry_after: None }
    }

    /// 400: the request is malformed.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404: no such thing (or not there for the caller: the two are not told apart).
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 404 for a thread that is missing or of a tenant the caller does not act for.
    pub(crate) fn no_thread(thread: &str) -> Self {
        Problem::not_found(format!("no thread `{thread}`; list the threads you may see with GET /api/threads"))
    }

    /// 409: the thread or approval is not in a state that allows it.
    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        Problem::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 422: the body is well-formed but its values are refused.
    pub(crate) fn unprocessable(message: impl Into<String>) -> Self {
        Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", message)
    }

    /// 429: the client address made too many failed attempts (wrong tokens, at the API and at
    /// the inbox's login together); the token was not checked.
    pub(crate) fn too_many(wait: TooManyAttempts) -> Self {
        let secs = wait.retry_after_secs();
        Problem {
            retry_after: Some(secs),
            ..Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_attempts",
                format!(
                    "too many wrong tokens from your address; the token was not checked: try again in {secs} s \
                     (the `Retry-After` header), with a token of the server's users file"
                ),
            )
        }
    }

    /// 503: the store failed; the request may be tried again.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", message)
    }

    /// A store failure of any error type.
    pub(crate) fn store(e: impl std::fmt::Display) -> Self {
        Problem::unavailable(format!("the store failed: {e}; try again, and check the server's log if it persists"))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ErrorBody { error: ErrorDetail { code: self.code.to_string(), message: self.message } };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

impl From<AccessError> for Problem {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::NotVisible { thread, .. } => Problem::no_thread(&thread),
            other => Problem::new(StatusCode::FORBIDDEN, "forbidden", other.to_string()),
        }
    }
}

impl From<InspectError> for Problem {
    fn from(e: InspectError) -> Self {
        match e {
            InspectError::NotFound(message) => Problem::not_found(message),
            other => Problem::store(other),
        }
    }
}

impl From<HistoryError> for Problem {
    fn from(e: HistoryError) -> Self {
        match e {
            HistoryError::UnknownThread { thread } => Problem::no_thread(&thread),
            HistoryError::UnknownCheckpoint { .. } => Problem::not_found(e.to_string()),
            HistoryError::Access(e) => e.into(),
            HistoryError::Persist(PersistError::Lease(LeaseError::ThreadBusy { .. })) => {
                Problem::conflict(format!("{e}; a run holds the thread: wait for it to stop, then try again"))
            }
            other => Problem::store(other),
        }
    }
}

impl From<WorkerError> for Problem {
    fn from(e: WorkerError) -> Self {
        match e {
            WorkerError::UnknownThread { thread } => Problem::no_thread(&thread),
            WorkerError::ThreadExists { thread } => Problem::conflict(format!(
                "thread `{thread}` exists already; continue it with POST /api/threads/{thread}/resume, or start \
                 another with a new id"
            )),
            WorkerError::Access(e) => e.into(),
            WorkerError::Queue(QueueError::AlreadyQueued { thread }) => Problem::conflict(format!(
                "thread `{thread}` has a queued run already (running, or waiting for a person or its timer); wait \
                 for it, decide what it waits for, or cancel it first"
            )),
            WorkerError::ValueRequired { thread, node } => Problem::conflict(format!(
                "thread `{thread}` waits at node `{node}` for a value: resume it with one (POST \
                 /api/threads/{thread}/resume with {{\"value\": ..., \"question\": ...}}, the question's id as GET \
                 /api/threads/{thread}/pending lists it), or cancel it"
            )),
            // Sent again with the same request, a start is answered as the first (see `runs`).
            WorkerError::KeyUsed { same_request: false, .. } => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                format!("{e}; nothing was started"),
            ),
            WorkerError::KeyUsed { .. } => Problem::conflict(e.to_string()),
            WorkerError::FollowUpRefused { .. } | WorkerError::FollowUpOtherGraph { .. } => {
                Problem::new(StatusCode::CONFLICT, "follow_up_refused", e.to_string())
            }
            WorkerError::FollowUpPurged { .. } => Problem::new(StatusCode::CONFLICT, "thread_purged", e.to_string()),
            WorkerError::NotRunning { .. } | WorkerError::GraphUnknown { .. } => Problem::conflict(e.to_string()),
            WorkerError::Queue(QueueError::Unsupported { .. }) => Problem::conflict(e.to_string()),
            WorkerError::NulByte { .. } | WorkerError::OwnerRequired(_) | WorkerError::ReservedThreadId { .. } => {
                Problem::unprocessable(e.to_string())
            }
            WorkerError::Persist(PersistError::Value { .. } | PersistError::Encode { .. }) => {
                Problem::unprocessable(e.to_string())
            }
            other => Problem::store(other),
        }
    }
}

impl From<SubmitError> for Problem {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Input { .. } | SubmitError::Update { .. } => Problem::unprocessable(e.to_string()),
            SubmitError::Worker(e) => e.into(),
            SubmitError::Schedule(e) => e.into(),
        }
    }
}

impl From<DecisionError> for Problem {
    fn from(e: DecisionError) -> Self {
        match e {
            DecisionError::NotFound { id } => {
                Problem::not_found(format!("no approval `{id}`; list what waits with GET /api/approvals"))
            }
            DecisionError::NotAuthorized { .. } => Problem::new(StatusCode::FORBIDDEN, "forbidden", e.to_string()),
            DecisionError::AlreadyDecided { .. }
            | DecisionError::Expired { .. }
            | DecisionError::SameApprover { .. } => Problem::conflict(e.to_string()),
            DecisionError::InvalidEdit { .. } | DecisionError::InvalidResult { .. } => {
                Problem::unprocessable(format!("{e}; nothing was changed"))
            }
            DecisionError::Access(e) => e.into(),
            other => Problem::store(other),
        }
    }
}

impl From<AnswerError> for Problem {
    fn from(e: AnswerError) -> Self {
        match e {
            AnswerError::NotFound { thread } => Problem::no_thread(&thread),
            AnswerError::NotWaiting { .. }
            | AnswerError::Stale { .. }
            | AnswerError::QuestionChanged { .. }
            | AnswerError::AlreadyAnswered { .. }
            | AnswerError::AnswerTheParent { .. }
            | AnswerError::ParentMovedOn { .. }
            | AnswerError::SeveralQuestions { .. }
            | AnswerError::QuestionsDiffer { .. }
            | AnswerError::Busy { .. } => Problem::conflict(format!("{e}; nothing was recorded")),
            AnswerError::Value(_) | AnswerError::Credential { .. } | AnswerError::Anonymous => {
                Problem::unprocessable(format!("{e}; nothing was recorded"))
            }
            AnswerError::Access(e) => e.into(),
            other => Problem::store(other),
        }
    }
}

impl From<agentflow_store::ReadError> for Problem {
    fn from(e: agentflow_store::ReadError) -> Self {
        Problem::store(e)
    }
}

impl From<tokio::task::JoinError> for Problem {
    fn from(e: tokio::task::JoinError) -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the request's store task failed ({e}); try again, and check the server's log if it persists"),
        )
    }
}

/// Runs the blocking store work `f` on a blocking thread.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(f).await?
}
