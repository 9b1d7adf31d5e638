//! The API's router, registered from the route table: each route's handler on its method and
//! path; any other path under `/api/` answers 404, another method on a route's path 405, both as
//! JSON errors; an address holding a NUL byte names nothing (404).

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, any, on};

use super::problem::Problem;
use super::state::ApiState;
use super::table::{Endpoint, Route, TABLE, Verb};
use super::{controls, decisions, graphs, runs, schedules, stream, threads, waiting};

/// The handler of `route`, on its method.
fn method_router(route: &Route) -> MethodRouter<Arc<ApiState>> {
    let filter = match route.verb {
        Verb::Get => MethodFilter::GET,
        Verb::Post => MethodFilter::POST,
        Verb::Delete => MethodFilter::DELETE,
    };
    match route.endpoint {
        Endpoint::OpenApi => on(filter, graphs::openapi),
        Endpoint::ListGraphs => on(filter, graphs::list),
        Endpoint::GetGraph => on(filter, graphs::get),
        Endpoint::ListThreads => on(filter, threads::list),
        Endpoint::StartRun => on(filter, runs::start),
        Endpoint::GetThread => on(filter, threads::get),
        Endpoint::GetState => on(filter, threads::state),
        Endpoint::GetHistory => on(filter, threads::history),
        Endpoint::GetPending => on(filter, threads::pending),
        Endpoint::ListApprovals => on(filter, waiting::list),
        Endpoint::Resume => on(filter, runs::resume),
        Endpoint::Approve => on(filter, decisions::approve),
        Endpoint::Reject => on(filter, decisions::reject),
        Endpoint::Edit => on(filter, decisions::edit),
        Endpoint::Cancel => on(filter, controls::cancel),
        Endpoint::Pause => on(filter, controls::pause),
        Endpoint::Stream => on(filter, stream::stream),
        Endpoint::ListSchedules => on(filter, schedules::list),
        Endpoint::CreateSchedule => on(filter, schedules::create),
        Endpoint::DeleteSchedule => on(filter, schedules::delete),
    }
}

/// 404 for a path no route has.
async fn not_found() -> Problem {
    Problem::not_found("there is no API route at this address; /openapi.json lists them")
}

/// 405 for a method a route's path does not take.
async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this address does not take this method; /openapi.json lists each route's method",
    )
}

/// An address whose path or query holds a NUL byte (`%00`) names nothing: no thread or approval
/// id holds one. Answered 404 before any handler reads the store.
async fn no_nul_in_address(req: Request, next: Next) -> Response {
    let uri = req.uri();
    let holds_nul = |part: &str| part.to_ascii_lowercase().contains("%00");
    if holds_nul(uri.path()) || uri.query().is_some_and(holds_nul) {
        return not_found().await.into_response();
    }
    next.run(req).await
}

/// The API's routes on `state`, and the (method, path) of each route as it was registered.
/// Requests to no route answer 404 JSON.
pub(crate) fn registered(state: Arc<ApiState>) -> (Router, Vec<(Verb, &'static str)>) {
    let mut router: Router<Arc<ApiState>> = Router::new();
    let mut registered = Vec::with_capacity(TABLE.len());
    for route in TABLE {
        router = router.route(route.path, method_router(route));
        registered.push((route.verb, route.path));
    }
    let router = router
        .method_not_allowed_fallback(method_not_allowed)
        // Under `/api/`, an address no route has is the API's 404, also where the API is served
        // next to the inbox's pages (whose own fallback answers every other address).
        .route("/api", any(not_found))
        .route("/api/", any(not_found))
        .route("/api/{*rest}", any(not_found))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(no_nul_in_address))
        .with_state(state);
    (router, registered)
}

/// The API's router: the routes of [`ROUTES`](super::ROUTES) on `state` (made by
/// [`Server::start`](crate::server::Server::start)), every other address 404, another method on
/// a route's path 405, as JSON errors.
pub(crate) fn api_router(state: Arc<ApiState>) -> Router {
    registered(state).0
}
