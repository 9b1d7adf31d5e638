//! The routes that change something: deciding an approval and answering a question.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::pages;
use super::respond::{FormData, error_page, failure, html, posted, redirect};
use super::state::Shared;
use crate::access::AccessError;
use crate::approval::{AnswerError, ApprovalDesk, Approver, DecisionError, RoleAuthorizer};
use crate::server::inspect::edit_check::{check_edit, tool_schema};

/// A refused decision: its status and message.
fn refused(e: DecisionError) -> (StatusCode, String) {
    let status = match &e {
        DecisionError::NotFound { .. } => StatusCode::NOT_FOUND,
        DecisionError::NotAuthorized { .. } => StatusCode::FORBIDDEN,
        DecisionError::AlreadyDecided { .. } | DecisionError::Expired { .. } | DecisionError::SameApprover { .. } => {
            StatusCode::CONFLICT
        }
        DecisionError::InvalidEdit { .. } | DecisionError::InvalidResult { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        // The access policy refused (a thread of another tenant is not found, above).
        DecisionError::Access(AccessError::NotVisible { .. }) => StatusCode::NOT_FOUND,
        DecisionError::Access(_) => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, e.to_string())
}

enum Decision {
    Approve(Option<Value>),
    Edit(Value),
    Reject(String),
}

/// `POST /approvals/{id}/{action}`: approves, edits or rejects the approval in the logged-in
/// user's name.
pub(super) async fn decide(
    State(server): State<Shared>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: FormData,
) -> Response {
    let (form, s) = match posted(&server, &headers, form, "A decision") {
        Ok(posted) => posted,
        Err(r) => return *r,
    };
    let field = |name: &str| form.get(name).map(|v| v.trim().to_string()).unwrap_or_default();
    let decision = match action.as_str() {
        "approve" => {
            let text = field("conditions");
            Decision::Approve(if text.is_empty() {
                None
            } else {
                Some(serde_json::from_str(&text).unwrap_or(Value::String(text)))
            })
        }
        "edit" => match serde_json::from_str::<Value>(&field("args")) {
            Ok(v) => Decision::Edit(v),
            Err(e) => {
                return html(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    pages::error_with(
                        "The edit was refused",
                        &format!("The arguments are not valid JSON ({e}). Nothing was changed."),
                        Some(&s),
                        &pages::edit_again(&s, &id, &field("args")),
                    ),
                );
            }
        },
        "reject" => {
            let reason = field("reason");
            if reason.is_empty() {
                return error_page(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "The rejection was refused",
                    "A rejection needs a reason (it is handed to the model). Nothing was changed.",
                    Some(&s),
                );
            }
            Decision::Reject(reason)
        }
        _ => return error_page(StatusCode::NOT_FOUND, "Not found", "Unknown decision.", Some(&s)),
    };
    let sent_args = matches!(decision, Decision::Edit(_)).then(|| field("args"));
    let authorizer = server.authorizer.clone();
    let policy = Arc::clone(&server.access);
    let approver: Approver = s.actor();
    let target = id.clone();
    let result = server
        .with(move |store| {
            let desk = ApprovalDesk::for_store(Arc::clone(store), authorizer)
                .access_shared(policy)
                .reading_as(approver.clone());
            let id = target.as_str();
            let outcome = match decision {
                Decision::Approve(None) => desk.approve(id, &approver),
                Decision::Approve(Some(c)) => desk.approve_with_conditions(id, &approver, c),
                Decision::Edit(args) => {
                    let schema = tool_schema(store.as_ref(), id)?;
                    desk.edit_checked(id, &approver, args, |tool, value| check_edit(tool, schema.as_ref(), value))
                }
                Decision::Reject(reason) => desk.reject(id, &approver, &reason),
            };
            Ok(outcome.map_err(refused))
        })
        .await;
    match result {
        Ok(Ok(record)) => redirect(&format!("/?decided={}", pages::url(&record.id))),
        Ok(Err((status, message))) => {
            // A refused edit comes back with the arguments as sent, to fix and send again.
            let again = match &sent_args {
                Some(sent) if status == StatusCode::UNPROCESSABLE_ENTITY => pages::edit_again(&s, &id, sent),
                _ => String::new(),
            };
            html(
                status,
                pages::error_with(
                    "The decision was refused",
                    &format!("{message}. Nothing was changed."),
                    Some(&s),
                    &again,
                ),
            )
        }
        Err(f) => failure(f, Some(&s)),
    }
}

/// `POST /threads/{id}/answer`: records the answer to the thread's interrupt, bound to the
/// checkpoint the page showed.
pub(super) async fn answer(
    State(server): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: FormData,
) -> Response {
    let (form, s) = match posted(&server, &headers, form, "An answer") {
        Ok(posted) => posted,
        Err(r) => return *r,
    };
    if let Some(role) = &server.answer_role
        && !s.roles.iter().any(|r| r == role)
    {
        return error_page(
            StatusCode::FORBIDDEN,
            "The answer was refused",
            &format!(
                "Answering a question needs the role `{role}`, which `{}` does not have. Nothing was recorded; ask \
                 someone with that role to answer it.",
                s.user
            ),
            Some(&s),
        );
    }
    let field = |name: &str| form.get(name).map(|v| v.trim().to_string()).unwrap_or_default();
    let Ok(checkpoint) = field("checkpoint").parse::<u64>() else {
        return error_page(StatusCode::BAD_REQUEST, "Bad request", "The form names no checkpoint.", Some(&s));
    };
    let question = field("question");
    if question.is_empty() {
        return error_page(
            StatusCode::BAD_REQUEST,
            "Bad request",
            "The form names no question: reload the page (it may predate this version of the server) and answer again.",
            Some(&s),
        );
    }
    let value = match serde_json::from_str::<Value>(&field("value")) {
        Ok(v) => v,
        Err(e) => {
            return error_page(
                StatusCode::UNPROCESSABLE_ENTITY,
                "The answer was refused",
                &format!("The answer is not valid JSON ({e}). Nothing was recorded."),
                Some(&s),
            );
        }
    };
    let who: Approver = s.actor();
    let thread = id.clone();
    let policy = Arc::clone(&server.access);
    let result = server
        .with(move |store| {
            let desk = ApprovalDesk::for_store(Arc::clone(store), RoleAuthorizer::new())
                .access_shared(policy)
                .reading_as(who.clone());
            Ok(desk.answer_question(&thread, checkpoint, &question, value, &who))
        })
        .await;
    match result {
        Ok(Ok(_)) => redirect("/"),
        Ok(Err(e)) => {
            let status = match &e {
                AnswerError::NotFound { .. } => StatusCode::NOT_FOUND,
                AnswerError::NotWaiting { .. }
                | AnswerError::Stale { .. }
                | AnswerError::QuestionChanged { .. }
                | AnswerError::AlreadyAnswered { .. }
                | AnswerError::AnswerTheParent { .. }
                | AnswerError::ParentMovedOn { .. }
                | AnswerError::SeveralQuestions { .. }
                | AnswerError::QuestionsDiffer { .. }
                | AnswerError::Busy { .. } => StatusCode::CONFLICT,
                AnswerError::Anonymous => StatusCode::UNAUTHORIZED,
                AnswerError::Value(_) | AnswerError::Credential { .. } => StatusCode::UNPROCESSABLE_ENTITY,
                AnswerError::Access(AccessError::NotVisible { .. }) => StatusCode::NOT_FOUND,
                AnswerError::Access(_) => StatusCode::FORBIDDEN,
                // Recorded, but the run a worker parked for it was not woken.
                AnswerError::NotWoken { .. } => {
                    return error_page(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "The answer was recorded, but its run was not woken",
                        &format!("{e}."),
                        Some(&s),
                    );
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error_page(status, "The answer was refused", &format!("{e}. Nothing was recorded."), Some(&s))
        }
        Err(f) => failure(f, Some(&s)),
    }
}
