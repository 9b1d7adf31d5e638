//! What every page and action answers with: the HTML headers every page carries, error pages,
//! redirects, store failures as pages, and the session check of a state-changing request.

use std::collections::HashMap;

use axum::extract::Form;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::pages;
use super::state::Inbox;
use crate::server::auth::{Session, cross_site};
use crate::server::inspect::InspectError;

pub(super) type FormData = Result<Form<HashMap<String, String>>, FormRejection>;

/// An HTML answer with the headers every page carries.
pub(super) fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; \
             img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

pub(super) fn error_page(status: StatusCode, title: &str, message: &str, session: Option<&Session>) -> Response {
    html(status, pages::error(title, message, session))
}

pub(super) fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(to).unwrap_or(HeaderValue::from_static("/")));
    r
}

/// A read that failed as a page: not found 404, a store failure 500.
pub(super) fn failure(e: InspectError, session: Option<&Session>) -> Response {
    match e {
        InspectError::NotFound(message) => error_page(StatusCode::NOT_FOUND, "Not found", &message, session),
        other => error_page(StatusCode::INTERNAL_SERVER_ERROR, "The store failed", &other.to_string(), session),
    }
}

/// The fields of a POSTed form and its session, CSRF-checked (see [`checked`]); the error page
/// to answer otherwise. `what` names what the form sends ("A decision").
pub(super) fn posted(
    server: &Inbox,
    headers: &HeaderMap,
    form: FormData,
    what: &str,
) -> Result<(HashMap<String, String>, Session), Box<Response>> {
    let Ok(Form(form)) = form else {
        let message = format!("{what} is sent as a form.");
        return Err(Box::new(error_page(StatusCode::BAD_REQUEST, "Bad request", &message, None)));
    };
    let session = checked(server, headers, &form)?;
    Ok((form, session))
}

/// The session of a state-changing request with a valid CSRF token, or the refusal.
pub(super) fn checked(
    server: &Inbox,
    headers: &HeaderMap,
    form: &HashMap<String, String>,
) -> Result<Session, Box<Response>> {
    let Some(session) = server.auth.session(headers) else {
        return Err(Box::new(error_page(
            StatusCode::UNAUTHORIZED,
            "Log in first",
            "Decisions need a logged-in user: log in at /login with your token, then try again.",
            None,
        )));
    };
    let sent = form.get("csrf").map(String::as_str).unwrap_or("");
    if cross_site(headers) || !session.csrf_matches(sent) {
        return Err(Box::new(error_page(
            StatusCode::FORBIDDEN,
            "Request refused",
            "The form's CSRF token is missing or wrong (or the request came from another site). Nothing was \
             changed. Reload the page and submit the form again.",
            Some(&session),
        )));
    }
    Ok(session)
}
