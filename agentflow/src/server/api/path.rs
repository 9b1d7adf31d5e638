//! Path parameters (`{thread}`, `{approval}`, `{graph}`), refused as the API refuses everything:
//! an address whose parameter is not UTF-8 text once percent-decoded (`/api/threads/%FF`)
//! answers 400 `bad_request` as JSON, not axum's plain-text rejection.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::problem::Problem;

/// The path parameters of a route, as `T` (a `String`, or a tuple of them in the path's order).
#[derive(Debug)]
pub(crate) struct Path<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            // A route registered without the parameters its handler reads: the server's fault.
            Err(rejection) if rejection.status().is_server_error() => Err(Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!(
                    "the route cannot read its address ({}); report it with the server's log",
                    rejection.body_text()
                ),
            )),
            Err(rejection) => Err(Problem::bad_request(format!(
                "the address is not valid ({}): ids are UTF-8 text, percent-encoded in the path",
                rejection.body_text()
            ))),
        }
    }
}
