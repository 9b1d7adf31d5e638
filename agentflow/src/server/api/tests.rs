//! The router and the OpenAPI document come from one table: the registered routes are the
//! document's paths, every other address answers 404 and another method 405 (JSON errors), every
//! route but the document wants a caller, and the document holds what clients need.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use agentflow_store::{RedbStore, Store};
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;

use super::caller::CSRF_HEADER;
use super::router::registered;
use super::spec::spec;
use super::state::ApiState;
use super::table::{ROUTES, TABLE, Verb, example, parameters};
use crate::access::AllowAll;
use crate::approval::RoleAuthorizer;
use crate::serve_limits::{AttemptLimiter, ServeLimits};
use crate::server::auth::{Auth, Login};
use crate::server::users::Users;

fn users() -> Arc<Users> {
    let path = std::env::temp_dir().join(format!(
        "agentflow-api-users-{}-{}.json",
        std::process::id(),
        crate::server::test_file_number()
    ));
    std::fs::write(&path, r#"{"users": [{"name": "alice", "token": "alice-token", "roles": ["ops"]}]}"#).unwrap();
    Arc::new(Users::load(&path).unwrap())
}

fn state(auth: Option<Arc<Auth>>) -> Arc<ApiState> {
    let attempts =
        auth.as_ref().map_or_else(|| Arc::new(ServeLimits::default().attempt_limiter()), |a| Arc::clone(a.attempts()));
    state_with(auth, attempts)
}

fn state_with(auth: Option<Arc<Auth>>, attempts: Arc<AttemptLimiter>) -> Arc<ApiState> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    Arc::new(ApiState {
        store,
        graphs: BTreeMap::new(),
        users: users(),
        auth,
        attempts,
        access: Arc::new(AllowAll),
        authorizer: RoleAuthorizer::new(),
        answer_role: None,
        streams: Arc::new(crate::server::stream::Streams::new(16)),
        webhooks: None,
    })
}

/// `path` with each parameter filled in.
fn concrete(path: &str) -> String {
    parameters(path)
        .into_iter()
        .fold(path.to_string(), |p, name| p.replace(&format!("{{{name}}}"), example(name).as_str().unwrap()))
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let (status, _, body) = send_with_headers(router, request).await;
    (status, body)
}

/// [`send`], with the answer's headers.
async fn send_with_headers(router: &Router, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
    let response = tower_service::Service::call(&mut router.clone(), request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let json =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22).await.unwrap();
    assert!(json, "{status}: not JSON: {}", String::from_utf8_lossy(&bytes));
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

fn request(method: Method, path: &str) -> Request<Body> {
    Request::builder().method(method).uri(path).body(Body::empty()).unwrap()
}

#[test]
fn the_router_registers_the_routes_the_document_describes() {
    let (_, registered) = registered(state(None));
    let registered: BTreeSet<(String, String)> =
        registered.iter().map(|(verb, path)| (verb.as_str().to_lowercase(), path.to_string())).collect();
    let document = spec();
    let described: BTreeSet<(String, String)> = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| ops.as_object().unwrap().keys().map(move |m| (m.clone(), path.clone())))
        .collect();
    assert_eq!(registered, described);
    let listed: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_lowercase(), p.to_string())).collect();
    assert_eq!(listed, described);
    assert_eq!(ROUTES.len(), TABLE.len(), "no route is registered twice");
}

#[tokio::test]
async fn every_route_is_routed_and_every_one_but_the_document_wants_a_caller() {
    let (router, _) = registered(state(None));
    for route in TABLE {
        let method = Method::from_bytes(route.verb.as_str().as_bytes()).unwrap();
        let (status, body) = send(&router, request(method, &concrete(route.path))).await;
        if route.operation.is_some() {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{} {}: {body}", route.verb.as_str(), route.path);
            assert_eq!(body["error"]["code"], "unauthorized");
        } else {
            assert_eq!(status, StatusCode::OK, "{}", route.path);
            assert_eq!(body["openapi"], "3.1.0");
        }
    }
}

#[tokio::test]
async fn an_address_of_no_route_answers_404_and_another_method_405_as_json() {
    let (router, _) = registered(state(None));
    for path in ["/api/nothing", "/api/threads/t-1/nothing", "/nothing", "/api/threads/t%00/state"] {
        let (status, body) = send(&router, request(Method::GET, path)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    let paths: BTreeSet<&str> = TABLE.iter().map(|r| r.path).collect();
    for path in paths {
        let taken: BTreeSet<Verb> = TABLE.iter().filter(|r| r.path == path).map(|r| r.verb).collect();
        for method in [Method::PUT, Method::DELETE, Method::PATCH, Method::GET, Method::POST] {
            let verb = match method {
                Method::GET => Some(Verb::Get),
                Method::POST => Some(Verb::Post),
                Method::DELETE => Some(Verb::Delete),
                _ => None,
            };
            if verb.is_some_and(|v| taken.contains(&v)) {
                continue;
            }
            let (status, body) = send(&router, request(method.clone(), &concrete(path))).await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {body}");
            assert_eq!(body["error"]["code"], "method_not_allowed");
        }
    }
}

#[test]
fn every_operation_has_an_id_a_summary_its_answers_and_its_errors() {
    let document = spec();
    let mut ids = BTreeSet::new();
    for (path, ops) in document["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_string()), "operationId {id} twice");
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{id}: no summary");
            let responses = op["responses"].as_object().unwrap();
            assert!(responses.keys().any(|s| s.starts_with('2')), "{id}: no success answer");
            for name in parameters(path) {
                assert!(
                    op["parameters"].as_array().unwrap().iter().any(|p| p["name"] == name && p["in"] == "path"),
                    "{id}: parameter {name} not declared"
                );
            }
            if op.get("x-agentflow-operation").is_some() {
                for status in ["401", "403"] {
                    let schema = &responses[status]["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/ErrorBody", "{id}: {status}");
                }
            } else {
                assert_eq!(op["security"], serde_json::json!([]), "{id} needs no login");
            }
        }
    }
    let schemes = &document["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["session"]["in"], "cookie");
    // Every reference resolves to a schema of the document.
    let schemas = document["components"]["schemas"].as_object().unwrap();
    for name in ["StartRun", "ResumeRun", "RunView", "ThreadView", "StateView", "ApprovalView", "ErrorBody"] {
        assert!(schemas.contains_key(name), "no schema {name}");
    }
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"").skip(1) {
        let target = reference.split('"').next().unwrap();
        let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("a $ref to {target}"));
        assert!(schemas.contains_key(name), "the $ref {target} names no schema");
    }
}

#[tokio::test]
async fn a_session_cookie_acts_only_with_its_csrf_token_and_an_unknown_token_is_refused() {
    let auth = Arc::new(Auth::new(users(), Duration::from_secs(60), &ServeLimits::default()));
    let Login::Started(id) = auth.login("alice-token", "127.0.0.1").unwrap() else { panic!("alice logs in") };
    let cookie = format!("{}={id}", auth.session_cookie());
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(header::COOKIE, cookie.parse().unwrap());
    let csrf = auth.session(&headers).unwrap().csrf;
    let (router, _) = registered(state(Some(Arc::clone(&auth))));
    let with_cookie = |method: Method, path: &str, csrf: Option<&str>| {
        let mut r = Request::builder().method(method).uri(path).header(header::COOKIE, &cookie);
        if let Some(token) = csrf {
            r = r.header(CSRF_HEADER, token);
        }
        r.body(Body::empty()).unwrap()
    };
    // A read needs no CSRF token.
    let (status, body) = send(&router, with_cookie(Method::GET, "/api/threads", None)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // An action without it, or with another, is refused before anything is looked at.
    for sent in [None, Some("wrong")] {
        let (status, body) = send(&router, with_cookie(Method::POST, "/api/threads/t-1/cancel", sent)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["error"]["code"], "csrf");
    }
    // With it, the action is the user's: there is no thread `t-1`.
    let (status, body) = send(&router, with_cookie(Method::POST, "/api/threads/t-1/cancel", Some(&csrf))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // A bearer token of no user is refused, not passed over for the cookie.
    let request = Request::builder()
        .uri("/api/threads")
        .header(header::COOKIE, &cookie)
        .header(header::AUTHORIZATION, "Bearer not-a-token")
        .body(Body::empty())
        .unwrap();
    let (status, body) = send(&router, request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

/// A request from `token` (as `Authorization: Bearer TOKEN`) with `body`.
fn with_token(method: Method, path: &str, token: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test]
async fn every_status_a_probe_sees_is_one_the_document_gives_its_route() {
    let document = spec();
    let mut seen_everywhere = BTreeSet::new();
    for route in TABLE {
        let method = Method::from_bytes(route.verb.as_str().as_bytes()).unwrap();
        let path = concrete(route.path);
        // One wrong token is allowed per address here, so the probes end with a refusal.
        let (router, _) = registered(state_with(None, Arc::new(AttemptLimiter::new(1, Duration::from_secs(60)))));
        let mut probes = vec![
            request(method.clone(), &path),
            request(if route.verb == Verb::Get { Method::DELETE } else { Method::PUT }, &path),
            // A NUL byte in the query names nothing.
            with_token(method.clone(), &format!("{path}?x=%00"), "alice-token", ""),
            with_token(method.clone(), &path, "alice-token", ""),
        ];
        if route.verb == Verb::Post {
            probes.push(with_token(method.clone(), &path, "alice-token", "{not json"));
            probes.push(with_token(method.clone(), &path, "alice-token", r#"{"no_such_field": 1}"#));
            probes.push(with_token(method.clone(), &path, "alice-token", &"x".repeat(3 << 20)));
        }
        if !parameters(route.path).is_empty() {
            // Not UTF-8 once percent-decoded.
            let bad = parameters(route.path)
                .iter()
                .fold(route.path.to_string(), |p, n| p.replace(&format!("{{{n}}}"), "%FF"));
            probes.push(with_token(method.clone(), &bad, "alice-token", ""));
        }
        probes.push(with_token(method.clone(), &path, "wrong-token", ""));
        probes.push(with_token(method.clone(), &path, "wrong-token", ""));
        let documented = &document["paths"][route.path][route.verb.as_str().to_lowercase()]["responses"];
        let mut seen = BTreeSet::new();
        for probe in probes {
            let described = format!("{} {}", probe.method(), probe.uri());
            let (status, body) = send(&router, probe).await;
            let listed = documented.get(status.as_str()).is_some();
            assert!(
                listed,
                "{} {}: {described} answered {status}, which the document does not give: {body}",
                route.verb.as_str(),
                route.path
            );
            if !status.is_success() {
                let code =
                    body["error"]["code"].as_str().unwrap_or_else(|| panic!("{described}: no error code: {body}"));
                assert!(documented_codes().contains(code), "{described}: code {code} is not in ErrorDetail's list");
            }
            seen.insert(status.as_u16());
        }
        if route.operation.is_some() {
            assert!(
                seen.contains(&429),
                "{} {}: the probes reach the attempt limit: {seen:?}",
                route.verb.as_str(),
                route.path
            );
        }
        seen_everywhere.extend(seen);
    }
    for status in [400, 401, 404, 405, 413, 422, 429] {
        assert!(seen_everywhere.contains(&status), "the probes saw {status}: {seen_everywhere:?}");
    }
}

/// The codes `ErrorDetail.code`'s schema lists (its description, in backticks).
fn documented_codes() -> BTreeSet<String> {
    let document = spec();
    let description = document["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["description"]
        .as_str()
        .expect("ErrorDetail.code is described")
        .to_string();
    description.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn every_error_code_the_api_sends_is_in_the_documented_list() {
    let codes = documented_codes();
    let sources = [
        include_str!("problem.rs"),
        include_str!("caller.rs"),
        include_str!("router.rs"),
        include_str!("runs.rs"),
        include_str!("body.rs"),
        include_str!("path.rs"),
        include_str!("stream.rs"),
        include_str!("idempotency.rs"),
        include_str!("follow_ups.rs"),
    ];
    let mut sent = BTreeSet::new();
    for source in sources {
        // `Problem::new(STATUS, "code", ..)`: the code is the first string after the status.
        for call in source.split("Problem::new(").skip(1) {
            if let Some(code) = call.split('"').nth(1) {
                sent.insert(code.to_string());
            }
        }
    }
    for code in ["bad_request", "not_found", "conflict", "unprocessable", "store_unavailable", "unauthorized"] {
        sent.insert(code.to_string());
    }
    for code in &sent {
        assert!(codes.contains(code), "the API sends `{code}`, which ErrorDetail.code does not list: {codes:?}");
    }
    for code in
        ["csrf", "too_many_attempts", "thread_id_not_allowed", "question_required", "graph_not_hosted", "internal"]
            .into_iter()
            .chain(["too_many_streams", "idempotency_key_reused"])
            .chain(["follow_up_refused", "webhook_not_allowed", "idempotency_key_not_supported"])
    {
        assert!(sent.contains(code) && codes.contains(code), "{code}");
    }
    let status = &spec()["components"]["schemas"]["RunView"]["properties"]["status"]["description"];
    assert!(status.as_str().is_some_and(|d| d.contains("`not_started`")), "{status}");
}

#[tokio::test]
async fn an_address_not_utf8_is_a_json_400() {
    let (router, _) = registered(state(None));
    for path in
        ["/api/threads/%FF", "/api/threads/%C3/state", "/api/graphs/%FF", "/api/threads/t/approvals/%FF/approve"]
    {
        let method = if path.ends_with("approve") { Method::POST } else { Method::GET };
        let (status, body) = send(&router, with_token(method, path, "alice-token", "")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{path}");
        assert!(body["error"]["message"].as_str().unwrap().contains("UTF-8"), "{body}");
    }
}

#[tokio::test]
async fn wrong_bearer_tokens_count_with_failed_logins_per_address_and_past_the_limit_no_token_is_checked() {
    let limits = ServeLimits::default().login_attempts(3, Duration::from_secs(60));
    let auth = Arc::new(Auth::new(users(), Duration::from_secs(60), &limits));
    let (router, _) = registered(state(Some(Arc::clone(&auth))));
    let from = |address: &str, token: &str| {
        let mut r = with_token(Method::GET, "/api/threads", token, "");
        let peer: std::net::SocketAddr = format!("{address}:40000").parse().unwrap();
        r.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        r
    };
    // One wrong login and one wrong token from 10.0.0.1: a right token still passes.
    assert!(matches!(auth.login("guess-1", "10.0.0.1"), Ok(Login::UnknownToken)));
    let (status, body) = send(&router, from("10.0.0.1", "guess-2")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    assert_eq!(send(&router, from("10.0.0.1", "alice-token")).await.0, StatusCode::OK, "successes cost nothing");
    // The third wrong attempt uses the last one: from then on no token is checked.
    assert_eq!(send(&router, from("10.0.0.1", "guess-3")).await.0, StatusCode::UNAUTHORIZED);
    for token in ["guess-4", "alice-token"] {
        let (status, headers, body) = send_with_headers(&router, from("10.0.0.1", token)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{token}: {body}");
        assert_eq!(body["error"]["code"], "too_many_attempts");
        let wait: u64 = headers[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "{wait}");
    }
    assert!(matches!(auth.login("alice-token", "10.0.0.1"), Ok(Login::TooMany(_))), "the login counts them too");
    // Another address is not held back; without an address every client shares one key.
    assert_eq!(send(&router, from("10.0.0.2", "alice-token")).await.0, StatusCode::OK);
    for _ in 0..3 {
        assert_eq!(
            send(&router, with_token(Method::GET, "/api/threads", "guess", "")).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert!(matches!(auth.login("alice-token", "unknown"), Ok(Login::TooMany(_))));
}

#[tokio::test]
async fn an_authorization_header_of_another_scheme_leaves_the_session_cookie_to_say_who_calls() {
    let auth = Arc::new(Auth::new(users(), Duration::from_secs(60), &ServeLimits::default()));
    let Login::Started(id) = auth.login("alice-token", "127.0.0.1").unwrap() else { panic!("alice logs in") };
    let cookie = format!("{}={id}", auth.session_cookie());
    let (router, _) = registered(state(Some(Arc::clone(&auth))));
    let basic = |cookie: Option<&str>| {
        let mut r = Request::builder().uri("/api/threads").header(header::AUTHORIZATION, "Basic YWxpY2U6c2VjcmV0");
        if let Some(cookie) = cookie {
            r = r.header(header::COOKIE, cookie);
        }
        r.body(Body::empty()).unwrap()
    };
    let (status, body) = send(&router, basic(Some(&cookie))).await;
    assert_eq!(status, StatusCode::OK, "a proxy's Basic header is passed over: {body}");
    let (status, body) = send(&router, basic(None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    // The scheme is matched in any case.
    let (status, _) = send(&router, with_token(Method::GET, "/api/threads", "alice-token", "")).await;
    assert_eq!(status, StatusCode::OK);
    let lower = Request::builder()
        .uri("/api/threads")
        .header(header::AUTHORIZATION, "bearer alice-token")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, lower).await.0, StatusCode::OK);
}
