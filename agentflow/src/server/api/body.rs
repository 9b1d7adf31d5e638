//! Request bodies as JSON, refused as the API refuses everything (`{"error": ...}`): a body that
//! is not JSON answers 400, one whose values do not fit 422, one over the body limit 413.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use super::problem::Problem;

/// A JSON request body of type `T`.
#[derive(Debug)]
pub(crate) struct Body<T>(pub(crate) T);

/// A JSON request body of type `T`, or `T::default()` for an empty body.
#[derive(Debug)]
pub(crate) struct MaybeBody<T>(pub(crate) T);

/// The bytes of the request's body, or the refusal of a body too large.
async fn bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Problem> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "the request body is larger than the server takes (2 MiB); send less",
            )
        } else {
            Problem::bad_request(format!("the request body cannot be read: {rejection}"))
        }
    })
}

/// `bytes` read as a `T`.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        Category::Data => Problem::unprocessable(format!(
            "the request body does not fit: {e}; the OpenAPI document at /openapi.json describes it"
        )),
        _ => Problem::bad_request(format!("the request body is not JSON: {e}")),
    })
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = bytes(req, state).await?;
        if bytes.is_empty() {
            return Err(Problem::bad_request(
                "the request needs a JSON body; the OpenAPI document at /openapi.json describes it",
            ));
        }
        parse(&bytes).map(Body)
    }
}

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for MaybeBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(MaybeBody(T::default()));
        }
        parse(&bytes).map(MaybeBody)
    }
}
