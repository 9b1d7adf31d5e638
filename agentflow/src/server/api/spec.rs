//! The API's OpenAPI 3.1 document, made from the route table ([`TABLE`]): a path per route, each
//! operation with its id, summary, parameters, request body, answers and error answers; the
//! bodies' JSON schemas (from their types) under `components/schemas`; the two ways to log in,
//! a bearer token and the inbox's session cookie, under `components/securitySchemes`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::bodies::ErrorBody;
use super::table::{Place, Route, TABLE, example, parameters};
use crate::server::auth::SESSION_COOKIE;

/// What each error status means, for every route that may answer it.
fn error_description(status: u16) -> &'static str {
    match status {
        400 => "The request is malformed (its body is not JSON, a parameter is not valid).",
        401 => "Who calls is not known: send `Authorization: Bearer TOKEN`, or the inbox's session cookie.",
        403 => "The caller may not do this (the access policy, the authorizer, or a missing CSRF token says why).",
        404 => {
            "No such thread, approval or graph, or one of a tenant the caller does not act for (or an \
                address holding a NUL byte, which names nothing)."
        }
        409 => "The thread or approval is not in a state that allows this now (the message says what to do).",
        405 => "This address does not take this method.",
        413 => "The request body is too large.",
        422 => "The body's values are refused (the message says which).",
        429 => {
            "Too many wrong tokens from the client's address (at the API and the inbox's login together): the \
                token was not checked; wait for the `Retry-After` header's seconds. On the stream route also \
                `too_many_streams`: the caller holds as many streams open as one user may."
        }
        500 => "The server failed (`internal`); try again, and check the server's log if it persists.",
        503 => "The store failed; try again.",
        _ => "An error.",
    }
}

/// The error statuses `route` may answer: those of its table entry; 400 for an address whose
/// parameters are not UTF-8 text, on a route with parameters; 401 and 429 (too many wrong
/// tokens) on a route that wants a caller; 404 (an address holding a NUL byte), 405 (another
/// method) and 500 on every route.
pub(crate) fn errors(route: &Route) -> BTreeSet<u16> {
    let mut errors: BTreeSet<u16> = route.errors.iter().copied().collect();
    if !parameters(route.path).is_empty() {
        errors.insert(400);
    }
    if route.operation.is_some() {
        errors.extend([401, 429]);
    }
    errors.extend([404, 405, 500]);
    errors
}

/// The OpenAPI operation of `route`, its schemas added to `generator`.
fn operation(route: &Route, generator: &mut schemars::SchemaGenerator, error: &Value) -> Value {
    let mut op = Map::new();
    op.insert("operationId".into(), json!(route.id));
    op.insert("summary".into(), json!(route.summary));
    let mut description = route.description.to_string();
    if let Some(operation) = route.operation {
        description.push_str(&format!(" Access policy operation: `{operation}`."));
        // The operation checked, for programs (what `RoleAccess` files name).
        op.insert("x-agentflow-operation".into(), json!(operation.as_str()));
    }
    op.insert("description".into(), json!(description));
    op.insert(
        "tags".into(),
        json!([if route.path.starts_with("/api/graphs") || route.operation.is_none() {
            "graphs"
        } else if route.path.contains("/approvals") {
            "approvals"
        } else {
            "threads"
        }]),
    );
    let mut params: Vec<Value> = parameters(route.path)
        .into_iter()
        .map(|name| {
            json!({
                "name": name,
                "in": "path",
                "required": true,
                "schema": { "type": "string" },
                "example": example(name),
            })
        })
        .collect();
    params.extend(route.params.iter().map(|p| {
        json!({
            "name": p.name,
            "in": match p.place { Place::Header => "header", Place::Query => "query" },
            "required": false,
            "description": p.description,
            "schema": { "type": p.kind },
        })
    }));
    if !params.is_empty() {
        op.insert("parameters".into(), Value::Array(params));
    }
    if let Some(request) = route.request {
        op.insert(
            "requestBody".into(),
            json!({
                "required": request.required,
                "content": { "application/json": { "schema": (request.body)(generator).to_value() } },
            }),
        );
    }
    let mut responses = Map::new();
    for reply in route.replies {
        responses.insert(
            reply.status.to_string(),
            json!({
                "description": reply.description,
                "content": { reply.media.as_str(): { "schema": (reply.body)(generator).to_value() } },
            }),
        );
    }
    for status in &errors(route) {
        responses.insert(
            status.to_string(),
            json!({
                "description": error_description(*status),
                "content": { "application/json": { "schema": error } },
            }),
        );
    }
    op.insert("responses".into(), Value::Object(responses));
    if route.operation.is_none() {
        op.insert("security".into(), json!([]));
    }
    Value::Object(op)
}

/// Builds the document.
fn build() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let error = generator.subschema_for::<ErrorBody>().to_value();
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for route in TABLE {
        if !paths.contains_key(route.path) {
            order.push(route.path);
        }
        let op = operation(route, &mut generator, &error);
        paths.entry(route.path).or_default().insert(route.verb.as_str().to_lowercase(), op);
    }
    let mut ordered = Map::new();
    for path in order {
        if let Some(ops) = paths.remove(path) {
            ordered.insert(path.to_string(), Value::Object(ops));
        }
    }
    let schemas = generator.take_definitions(true);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agentflow server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The graphs an agentflow server hosts: start and resume threads (runs go through the \
                run queue, run by the server's workers), read their state and history, decide approvals, \
                answer questions, cancel and pause runs. Every route but this document needs a caller: a \
                bearer token of the server's users file, or the inbox's session cookie with its CSRF token in \
                `x-csrf-token` on every POST. Wrong bearer tokens are limited per client address, together with \
                the inbox's failed logins: past the limit, 429 with `Retry-After`, the token not checked. Errors \
                are `{\"error\": {\"code\", \"message\"}}`.",
        },
        "servers": [{ "url": "/" }],
        "security": [{ "bearer": [] }, { "session": [] }],
        "tags": [
            { "name": "graphs", "description": "The hosted graphs and this document." },
            { "name": "threads", "description": "Threads, their runs, state and history." },
            { "name": "approvals", "description": "Approvals and questions waiting for a person." },
        ],
        "paths": ordered,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token of the server's users file (`token`, or the one whose SHA-256 is `token_sha256`).",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": format!("{SESSION_COOKIE}_PORT"),
                    "description": "The inbox's session cookie (named for the server's port, as \
                        `agentflow_session_8700`), set by logging in at /login; every POST with it also sends \
                        the session's CSRF token in the `x-csrf-token` header.",
                },
            },
        },
    })
}

/// The API's OpenAPI 3.1 document (the same for every server: it describes the routes, not the
/// hosted graphs, which `GET /api/graphs` lists).
pub fn spec() -> Value {
    document().clone()
}

/// [`spec`], made once.
pub(crate) fn document() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(build)
}
