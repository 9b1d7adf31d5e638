//! Routes: what each URL reads or decides, who may ask, and the status of each answer.
//!
//! | method and path | login | what |
//! | --- | --- | --- |
//! | `GET /login`, `POST /login` | no | the login form; a token starts a session |
//! | `POST /logout` | yes + CSRF | ends the session |
//! | `GET /` | yes | the inbox (`?decided=ID` adds what became of that approval) |
//! | `GET /threads`, `/threads/{id}`, `/threads/{id}/at/{seq}` | yes | threads, one thread, its state at a checkpoint |
//! | `GET /audit`, `GET /stuck` | yes | the audit log, the stuck threads |
//! | `GET /live` | yes | the live fingerprint (JSON) |
//! | `POST /approvals/{id}/approve`, `/edit`, `/reject` | yes + CSRF | a decision, in the user's name |
//! | `POST /threads/{id}/answer` | yes + CSRF | an answer to the thread's question |
//! | `POST /threads/{id}/resume`, `/cancel`, `/pause`, `/fork` | yes + CSRF | a run control (the run queue), a fork at a checkpoint |
//! | `GET /metrics` | no | Prometheus text (counts only; nothing from the threads' states) |
//!
//! Every route is checked for the logged-in user (name, roles and tenants from the users file)
//! by the inbox's access policy: listings (inbox, threads, stuck, live) need `list` and show only
//! the threads of the user's tenants; a thread page needs `read_state`, a checkpoint page and
//! the audit log `read_history`; decisions `decide`, answers `answer`, the controls `resume`,
//! `cancel`, `pause`, `fork`. A refused operation answers 403 with the reason; a thread of
//! another tenant answers 404, exactly as a missing one. Starting threads, updating a state
//! and compacting are not offered here (the CLI does them).
//!
//! A page asked for without a session redirects to `/login`; a POST without one is refused
//! with 401, with a wrong or missing CSRF token (or a cross-site `Origin`) with 403. Errors
//! are pages with the status and a message saying what to do.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use agentflow_store::{ApprovalRecord, ApprovalStatus, Store, ThreadRecord, ThreadStatus};
use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use super::checks;
use super::live;
use super::pages::{self, ApprovalView, Context, InterruptView, Question};
use super::respond::{FormData, checked, error_page, failure, html, redirect};
use super::state::Shared;
use super::timeline;
use super::{acts, controls};
use crate::access::{Access, Operation, Tenants};
use crate::approval::{AnswerError, ApprovalDesk, RoleAuthorizer};
use crate::core::clock::now_ms;
use crate::interrupt::PendingKind;
use crate::server::auth::{self, Login, cross_site, random_token};
use crate::server::inspect::InspectError;
use crate::server::inspect::description::{Names, description};
use crate::server::inspect::fold;
use crate::server::inspect::personal;
use crate::server::inspect::sign_offs::sign_offs;
use crate::server::inspect::stuck::{self, Stuck};
use crate::server::inspect::waits::waits;

/// The server's routes.
pub(super) fn router(server: Shared) -> Router {
    Router::new()
        .route("/", get(inbox))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/threads", get(threads))
        .route("/threads/{id}", get(thread))
        .route("/threads/{id}/at/{seq}", get(checkpoint))
        .route("/audit", get(audit))
        .route("/stuck", get(stuck))
        .route("/live", get(live_json))
        .route("/metrics", get(metrics))
        .route("/approvals/{id}/{action}", post(acts::decide))
        .route("/threads/{id}/answer", post(acts::answer))
        .route("/threads/{id}/{action}", post(controls::act))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(no_nul_in_address))
        .with_state(server)
}

/// An address whose path or query holds a NUL byte (`%00`) names nothing: no id, checkpoint or
/// action holds one (PostgreSQL cannot even be asked for one). Answered 404 before any handler
/// reads the store, instead of a store failure.
async fn no_nul_in_address(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let uri = req.uri();
    let holds_nul = |part: &str| part.to_ascii_lowercase().contains("%00");
    if holds_nul(uri.path()) || uri.query().is_some_and(holds_nul) {
        return error_page(StatusCode::NOT_FOUND, "Not found", "There is no page at this address.", None);
    }
    next.run(req).await
}

async fn not_found(State(server): State<Shared>, headers: HeaderMap) -> Response {
    let s = server.auth.session(&headers);
    error_page(StatusCode::NOT_FOUND, "Not found", "There is no page at this address.", s.as_ref())
}

// ---- login ----

async fn login_form(State(server): State<Shared>, headers: HeaderMap) -> Response {
    if server.auth.session(&headers).is_some() {
        return redirect("/");
    }
    let csrf = match random_token() {
        Ok(t) => t,
        Err(e) => return failure(no_random(e), None),
    };
    let mut r = html(StatusCode::OK, pages::login(&csrf, None));
    set_cookie(&mut r, &format!("{}={csrf}; {}; Path=/login", server.auth.login_cookie(), server.cookie_attrs));
    r
}

/// Random bytes the operating system did not give, as the failure of the request.
fn no_random(e: std::io::Error) -> InspectError {
    InspectError::store(format!("cannot read random bytes for a session: {e}"))
}

fn set_cookie(r: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// `POST /login`. Failed logins are limited per client address, as the server that serves
/// the inbox reports it ([`ConnectInfo`]); a router served without one counts every client's
/// failures together.
async fn login(
    State(server): State<Shared>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    form: FormData,
) -> Response {
    let Ok(Form(form)) = form else {
        return error_page(StatusCode::BAD_REQUEST, "Bad request", "The login form was not sent as a form.", None);
    };
    let expected = auth::cookie(&headers, server.auth.login_cookie()).unwrap_or_default();
    let sent = form.get("csrf").map(String::as_str).unwrap_or("");
    if expected.is_empty() || cross_site(&headers) || !crate::server::users::same(sent, &expected) {
        return error_page(
            StatusCode::FORBIDDEN,
            "Request refused",
            "The login form's CSRF token is missing or wrong. Open /login again and log in from there.",
            None,
        );
    }
    let from = peer.map_or_else(|| "unknown".to_string(), |Extension(ConnectInfo(peer))| peer.ip().to_string());
    match server.auth.login(form.get("token").map(String::as_str).unwrap_or(""), &from) {
        Ok(Login::Started(id)) => {
            let mut r = redirect("/");
            set_cookie(&mut r, &format!("{}={id}; {}; Path=/", server.auth.session_cookie(), server.cookie_attrs));
            set_cookie(
                &mut r,
                &format!("{}=; {}; Path=/login; Max-Age=0", server.auth.login_cookie(), server.cookie_attrs),
            );
            r
        }
        Ok(Login::TooMany(wait)) => {
            let mut r = html(
                StatusCode::TOO_MANY_REQUESTS,
                pages::login(&expected, Some(&format!("Too many wrong tokens from your address. {wait}."))),
            );
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait.retry_after_secs()));
            r
        }
        Ok(Login::UnknownToken) => html(
            StatusCode::UNAUTHORIZED,
            pages::login(&expected, Some("Unknown token. Check the token you were given.")),
        ),
        Err(e) => failure(no_random(e), None),
    }
}

async fn logout(State(server): State<Shared>, headers: HeaderMap, form: FormData) -> Response {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    if let Err(refused) = checked(&server, &headers, &form) {
        return *refused;
    }
    server.auth.logout(&headers);
    let mut r = redirect("/login");
    set_cookie(&mut r, &format!("{}=; {}; Path=/; Max-Age=0", server.auth.session_cookie(), server.cookie_attrs));
    r
}

// ---- reading ----

/// The thread's context at its latest checkpoint. What cannot be read or computed (a damaged
/// record) is a warning in place of the state: the approval it frames can still be decided.
/// Personal fields are masked for a user who may not see them (see [`personal::show`]).
fn context(store: &dyn Store, access: &Access, t: &ThreadRecord) -> Result<Context, InspectError> {
    let description = match description(store, t) {
        Ok(description) => description,
        Err(e) => {
            return Ok(Context { warnings: vec![format!("the thread cannot be shown: {e}")], ..Context::default() });
        }
    };
    let latest = match store.latest_checkpoint(&t.id) {
        Ok(latest) => latest,
        Err(e) => {
            let warnings = vec![format!("the thread cannot be shown: {e}")];
            return Ok(Context { warnings, description, ..Context::default() });
        }
    };
    let Some(cp) = latest else {
        return Ok(Context { description, ..Context::default() });
    };
    let fields = fold::fields(description.as_ref());
    let folded = match fold::state_at(store, &t.id, cp.seq, fields.as_ref()) {
        Ok(folded) => folded,
        Err(e) => {
            return Ok(Context {
                seq: Some(cp.seq),
                state: Value::Null,
                warnings: vec![format!("the state cannot be shown: {e}")],
                description,
                next: vec![],
            });
        }
    };
    let mut state = folded.state;
    personal::show(store, access, "inbox", &t.id, description.as_ref(), &mut [&mut state])?;
    Ok(Context {
        seq: Some(cp.seq),
        state,
        warnings: folded.warnings,
        description,
        next: if t.status.is_finished() { vec![] } else { cp.cursor.clone() },
    })
}

struct InboxData {
    approvals: Vec<ApprovalView>,
    interrupts: Vec<InterruptView>,
    stuck: Vec<Stuck>,
    version: String,
    decided: Option<ApprovalRecord>,
    /// What the decided approval's sign-offs so far approved, while it waits for more.
    decided_sign_offs: String,
}

fn inbox_data(
    shared: &Arc<dyn Store>,
    access: &Access,
    stuck: (u64, u64),
    decided: Option<String>,
) -> Result<InboxData, InspectError> {
    let store = shared.as_ref();
    let desk = ApprovalDesk::for_store(Arc::clone(shared), RoleAuthorizer::new());
    let mut threads: BTreeMap<String, Context> = BTreeMap::new();
    let mut approvals = Vec::new();
    for record in store.scan_pending_approvals().map_err(InspectError::store)?.items {
        if !threads.contains_key(&record.thread) {
            // A thread record that cannot be read leaves its approval decidable, with a warning,
            // when every tenant may see it; under tenants, whose it is cannot be told: not listed.
            let c = match store.thread(&record.thread) {
                // Only the approvals of threads of the user's tenants are listed.
                Ok(Some(t)) if access.sees(&t) => context(store, access, &t)?,
                Ok(_) => continue,
                Err(_) if access.actor().tenants != Tenants::All => continue,
                Err(e) => Context { warnings: vec![format!("the thread cannot be shown: {e}")], ..Context::default() },
            };
            threads.insert(record.thread.clone(), c);
        }
        let c = &threads[&record.thread];
        let tool = c
            .description
            .as_ref()
            .and_then(|d| d["tools"].as_array())
            .and_then(|tools| tools.iter().find(|t| t["name"] == record.tool.as_str()).cloned());
        let context = Context {
            seq: c.seq,
            state: c.state.clone(),
            warnings: c.warnings.clone(),
            description: c.description.clone(),
            next: c.next.clone(),
        };
        approvals.push(ApprovalView { record, context, tool });
    }
    approvals.sort_by(|a, b| (a.record.created_at, &a.record.id).cmp(&(b.record.created_at, &b.record.id)));
    let mut interrupts = Vec::new();
    // A thread that cannot be read is listed as such; the rest of the inbox still shows.
    let mut unreadable = Vec::new();
    for t in store.scan_threads().map_err(InspectError::store)?.items {
        // A thread whose resume failed with a spent answer still waits in its interrupt.
        if !matches!(t.status, ThreadStatus::Interrupted | ThreadStatus::Failed) || !access.sees(&t) {
            continue;
        }
        match interrupt_view(store, &desk, &t) {
            Ok(Some(view)) => interrupts.push(view),
            Ok(None) => {}
            Err(e) => unreadable.push(Stuck {
                thread: t.id.clone(),
                reason: "unreadable",
                since: t.updated_at,
                detail: e.to_string(),
            }),
        }
    }
    let mut stuck = stuck::find(shared, stuck.0, stuck.1, now_ms())?;
    stuck.retain(|s| checks::sees_id(store, access, &s.thread));
    stuck.extend(unreadable);
    let version = live::snapshot(shared, access)?["version"].as_str().unwrap_or_default().to_string();
    let decided = match decided {
        Some(id) => {
            store.approval(&id).map_err(InspectError::store)?.filter(|a| checks::sees_id(store, access, &a.thread))
        }
        None => None,
    };
    let decided_sign_offs = match &decided {
        Some(a) if a.status.is_waiting() => sign_offs(store, a),
        _ => String::new(),
    };
    Ok(InboxData { approvals, interrupts, stuck, version, decided, decided_sign_offs })
}

/// The inbox's entry for a paused thread `t`: what it asks and whether it was answered; `None`
/// when it asks nothing the inbox answers (a subgraph run listed as its parent, a breakpoint of a
/// failed thread).
fn interrupt_view(
    store: &dyn Store,
    desk: &ApprovalDesk,
    t: &ThreadRecord,
) -> Result<Option<InterruptView>, InspectError> {
    // A subgraph run whose question its parent waits on is listed, and answered, as the
    // parent's; one whose parent moved on (a fork) waits for no one: no run would read its
    // answer.
    if desk.parent_waiting_on(&t.id).map_err(InspectError::store)?.is_some()
        || desk.parent_moved_on(&t.id).map_err(InspectError::store)?.is_some()
    {
        return Ok(None);
    }
    let (seq, waits) = waits(store, &t.id)?;
    let checkpoint = seq.unwrap_or_default();
    // Each question's answer, read as the library's resume reads it (a spent answer does not
    // count): a step that asks several takes one answer per question.
    let answers = match desk.waiting_questions(&t.id) {
        Ok((_, asks)) => asks,
        Err(AnswerError::NotWaiting { .. }) => Vec::new(),
        Err(e) => return Err(InspectError::store(e)),
    };
    let mut questions = Vec::new();
    for p in waits {
        let breakpoint = matches!(p.kind, PendingKind::Before | PendingKind::After);
        if p.kind == PendingKind::Interrupt || (breakpoint && t.status == ThreadStatus::Interrupted) {
            let kind = serde_json::to_value(p.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| format!("{:?}", p.kind));
            let id = p.question_id();
            // What an answer answers: the question `answer_question` checks.
            let (id, answered) = match answers.iter().find(|(asked, _)| asked.question_id() == id) {
                Some((_, answer)) => (Some(id), answer.as_ref().map(|a| (a.by.clone(), a.at))),
                None => (None, None),
            };
            questions.push(Question { node: p.node, instance: p.instance, kind, payload: p.payload, id, answered });
        }
    }
    Ok((!questions.is_empty()).then(|| InterruptView { thread: t.clone(), questions, checkpoint }))
}

async fn inbox(State(server): State<Shared>, headers: HeaderMap, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some(s) = server.auth.session(&headers) else { return redirect("/login") };
    let access = checks::access(&server, &s);
    if let Err(e) = access.allow(Operation::List, None) {
        return checks::refused(&e, &s);
    }
    let limits = server.stuck;
    let decided = q.get("decided").cloned();
    match server.with(move |store| inbox_data(store, &access, limits, decided)).await {
        Ok(d) => {
            let flash = d.decided.as_ref().map(|a| {
                let mut text = format!(
                    "Approval {} ({}) is {}{}.",
                    a.id,
                    a.tool,
                    a.status.as_str(),
                    a.decided_by.as_ref().map(|u| format!(" by {u}")).unwrap_or_default()
                );
                if a.status == ApprovalStatus::Approved {
                    text.push_str(&format!(" It will run with {} when thread {} is resumed.", a.args, a.thread));
                } else if a.status.is_waiting() {
                    text.push_str(&format!(
                        " Your sign-off is recorded (sign-offs so far: {}); another approver must approve the same \
                         arguments with the same conditions.",
                        d.decided_sign_offs
                    ));
                }
                text
            });
            html(StatusCode::OK, pages::inbox(&s, &d.approvals, &d.interrupts, &d.stuck, &d.version, flash.as_deref()))
        }
        Err(e) => failure(e, Some(&s)),
    }
}

async fn threads(State(server): State<Shared>, headers: HeaderMap) -> Response {
    let Some(s) = server.auth.session(&headers) else { return redirect("/login") };
    let access = checks::access(&server, &s);
    if let Err(e) = access.allow(Operation::List, None) {
        return checks::refused(&e, &s);
    }
    let result = server
        .with(move |store| {
            let mut names = Names::default();
            let mut list: Vec<(ThreadRecord, Option<String>)> = store
                .scan_threads()
                .map_err(InspectError::store)?
                .items
                .into_iter()
                .filter(|t| access.sees(t))
                .map(|t| {
                    let n = names.of(store.as_ref(), &t);
                    (t, n)
                })
                .collect();
            list.sort_by_key(|t| std::cmp::Reverse(t.0.updated_at));
            Ok(list)
        })
        .await;
    match result {
        Ok(list) => html(StatusCode::OK, pages::threads(&s, &list)),
        Err(e) => failure(e, Some(&s)),
    }
}

async fn thread(State(server): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let Some(s) = server.auth.session(&headers) else { return redirect("/login") };
    let access = checks::access(&server, &s);
    let result = server
        .with(move |store| {
            let store = store.as_ref();
            let t = match checks::thread(store, &access, Operation::ReadState, &id)? {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            let c = context(store, &access, &t)?;
            let approvals = store.list_approvals(&id).map_err(InspectError::store)?;
            let audit = store.scan_audit(&id).map_err(InspectError::store)?.items;
            let steps = timeline::steps(store, &id, &approvals, &audit)?;
            let waiting = timeline::now(store, &t);
            Ok(Ok((t, c, steps, waiting, approvals, audit)))
        })
        .await;
    match result {
        Ok(Ok((t, c, steps, waiting, approvals, audit))) => {
            html(StatusCode::OK, pages::thread(&s, &t, &c, &steps, &waiting, &approvals, &audit))
        }
        Ok(Err(e)) => checks::refused(&e, &s),
        Err(e) => failure(e, Some(&s)),
    }
}

async fn checkpoint(
    State(server): State<Shared>,
    headers: HeaderMap,
    Path((id, seq)): Path<(String, String)>,
) -> Response {
    let Some(s) = server.auth.session(&headers) else { return redirect("/login") };
    let Ok(seq) = seq.parse::<u64>() else {
        return error_page(StatusCode::BAD_REQUEST, "Bad request", "A checkpoint is a number.", Some(&s));
    };
    let thread = id.clone();
    let access = checks::access(&server, &s);
    let result = server
        .with(move |store| {
            let store = store.as_ref();
            let t = match checks::thread(store, &access, Operation::ReadHistory, &thread)? {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            let description = description(store, &t)?;
            let fields = fold::fields(description.as_ref());
            let mut folded = fold::state_at(store, &thread, seq, fields.as_ref())?;
            let states = &mut [&mut folded.state];
            personal::show(store, &access, "inbox", &thread, description.as_ref(), states)?;
            let approvals = store.list_approvals(&thread).map_err(InspectError::store)?;
            let audit = store.scan_audit(&thread).map_err(InspectError::store)?.items;
            let step = timeline::steps(store, &thread, &approvals, &audit)?.into_iter().find(|st| st.seq == seq);
            Ok(Ok((folded, step)))
        })
        .await;
    match result {
        Ok(Ok((folded, step))) => {
            html(StatusCode::OK, pages::checkpoint(&s, &id, seq, &folded.state, &folded.warnings, step.as_ref()))
        }
        Ok(Err(e)) => checks::refused(&e, &s),
        Err(e) => failure(e, Some(&s)),
    }
}

async fn audit(State(server): State<Shared>, headers: HeaderMap) -> Response {
    let Some(s) = server.auth.session(&headers) else { return redirect("/login") };
    // The audit log of every thread the user sees: a read of their histories.
    let access = checks::access(&server, &s);
    if let Err(e) = access.allow(Operation::ReadHistory, None) {
        return checks::refused(&e, &s);
    }
    let result = server
        .with(move |store| {
            let mut entries = Vec::new();
            for t in store.scan_threads().map_err(InspectError::store)?.items.into_iter().filter(|t| access.sees(t)) {
                entries.extend(store.scan_audit(&t.id).map_err(InspectError::store)?.items);
            }
            entries.sort_by(|a, b| (b.at, &b.thread, b.seq).cmp(&(a.at, &a.thread, a.seq)));
            entries.truncate(1000);
            Ok(entries)
        })
        .await;
    match result {
        Ok(entries) => html(StatusCode::OK, pages::audit(&s, &entries)),
        Err(e) => failure(e, Some(&s)),
    }
}

async fn stuck(State(server): State<Shared>, headers: HeaderMap) -> Response {
    let Some(s) = server.auth.session(&headers) else { return redirect("/login") };
    let access = checks::access(&server, &s);
    if let Err(e) = access.allow(Operation::List, None) {
        return checks::refused(&e, &s);
    }
    let (waiting, overdue) = server.stuck;
    let found = server.with(move |store| {
        let mut found = stuck::find(store, waiting, overdue, now_ms())?;
        found.retain(|st| checks::sees_id(store.as_ref(), &access, &st.thread));
        Ok(found)
    });
    match found.await {
        Ok(found) => html(StatusCode::OK, pages::stuck(&s, &found, waiting, overdue)),
        Err(e) => failure(e, Some(&s)),
    }
}

async fn live_json(State(server): State<Shared>, headers: HeaderMap) -> Response {
    let json = |status: StatusCode, v: Value| {
        let mut r = (status, v.to_string()).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    };
    let Some(s) = server.auth.session(&headers) else {
        return json(StatusCode::UNAUTHORIZED, serde_json::json!({ "error": "log in first" }));
    };
    let access = checks::access(&server, &s);
    if let Err(e) = access.allow(Operation::List, None) {
        return json(StatusCode::FORBIDDEN, serde_json::json!({ "error": e.to_string() }));
    }
    match server.with(move |store| live::snapshot(store, &access)).await {
        Ok(v) => json(StatusCode::OK, v),
        Err(e) => json(StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({ "error": e.to_string() })),
    }
}

async fn metrics(State(server): State<Shared>) -> Response {
    let mut r = (StatusCode::OK, server.metrics.render()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    r
}
