//! What the server tests share: the graphs a server hosts (a refund that waits for a person, a
//! step that asks two questions, a run held at a gate until the test opens it), the users and
//! the access policy, a server on a redb file served on a free port, and a plain HTTP client
//! that sends a bearer token or the inbox's session cookie.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentflow::access::{Operation, RoleAccess};
use agentflow::approval::RoleAuthorizer;
use agentflow::persist::AuditEntry;
use agentflow::prelude::*;
use agentflow::server::{Server, ServerError};
use agentflow::{CancellationToken, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support::questions::{Ran, two_questions};
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    /// Whole currency units.
    pub amount: u32,
}

/// Refunds (here: echoes the amount). Irreversible: every call waits for a person.
#[tool(risk = irreversible)]
async fn refund(args: RefundArgs) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount }))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(default)]
pub struct Claim {
    pub amount: u32,
    pub outcome: Option<Value>,
}

#[graph(state = Claim, start = pay)]
pub mod refunds {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Claim, cx: &Ctx<()>) -> Result<Step<Claim>, NodeError> {
        let obs = cx.run_tool(refund, RefundArgs { amount: s.amount }).await?;
        Ok(goto!(END, Claim::update().outcome(Some(obs.body))))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(default)]
pub struct Gate {
    pub passed: bool,
}

#[graph(state = Gate, deps = Semaphore, start = hold)]
pub mod gated {
    use super::*;

    /// Runs until the test adds a permit to the deps' semaphore.
    #[node(goto = [END])]
    async fn hold(_s: &Gate, cx: &Ctx<Semaphore>) -> Result<Step<Gate>, NodeError> {
        if let Ok(permit) = cx.deps().acquire().await {
            permit.forget();
        }
        Ok(goto!(END, Gate::update().passed(true)))
    }
}

/// The operations of the API, each given the role named like it (`start`, `decide`, ...).
pub const OPERATIONS: [Operation; 10] = [
    Operation::List,
    Operation::ReadState,
    Operation::ReadHistory,
    Operation::Start,
    Operation::Resume,
    Operation::Answer,
    Operation::Decide,
    Operation::Cancel,
    Operation::Pause,
    Operation::SeePersonalData,
];

/// Each operation allowed to the role named like it.
pub fn policy() -> RoleAccess {
    OPERATIONS.into_iter().fold(RoleAccess::new(), |p, op| p.allow(op, op.as_str()))
}

/// Every role of [`policy`], and `refunds`, which the authorizer asks of who decides a refund.
pub fn all_roles() -> Vec<String> {
    OPERATIONS.iter().map(|op| op.as_str().to_string()).chain(["refunds".to_string()]).collect()
}

/// A user of the users file: `name`, token `NAME-token`, `roles`, `tenants` (none: every one).
pub fn user(name: &str, roles: &[String], tenants: Option<&[&str]>) -> Value {
    let mut u = json!({ "name": name, "token": format!("{name}-token"), "roles": roles });
    if let Some(tenants) = tenants {
        u["tenants"] = json!(tenants);
    }
    u
}

/// A server on a redb file, serving on a free port until [`Served::stop`].
pub struct Served {
    pub client: Client,
    pub store: Arc<dyn Store>,
    /// The gated graph's semaphore: a permit lets one held run go on.
    pub gate: Arc<Semaphore>,
    pub dir: PathBuf,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

/// Starts a server hosting `refunds`, `two_questions` and `gated` for `users`, under
/// [`policy`]; `refunds` are decided by the `refunds` role.
pub async fn serve(users: &[Value]) -> Served {
    serve_with(users, |server, _| server).await
}

/// [`serve`], with what `more` adds to the server (more graphs on the store, other limits).
pub async fn serve_with(users: &[Value], more: impl FnOnce(Server, &Arc<dyn Store>) -> Server) -> Served {
    serve_wrapped(users, |store| store, more).await
}

/// [`serve_with`] on the store `wrap` makes of the redb file's (a store with hooks).
pub async fn serve_wrapped(
    users: &[Value],
    wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    more: impl FnOnce(Server, &Arc<dyn Store>) -> Server,
) -> Served {
    let dir = temp_dir("server-api");
    let store: Arc<dyn Store> = wrap(Arc::new(open_redb(dir.join("runs.redb")).expect("the store file")));
    let users_file = dir.join("users.json");
    std::fs::write(&users_file, json!({ "users": users }).to_string()).unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let running = Server::new()
        .users_file(&users_file)
        .expect("the users file")
        .access(policy())
        .authorizer(RoleAuthorizer::new().role_for(Risk::Irreversible, "refunds"))
        .app(refunds::graph().app().store(Arc::clone(&store)), ())
        .app(two_questions::graph().app().store(Arc::clone(&store)), Ran::default())
        .app(gated::graph().app().store(Arc::clone(&store)), Arc::clone(&gate));
    let running = more(running, &store).listen("127.0.0.1:0".parse().unwrap()).await.expect("the server starts");
    let base = format!("http://{}", running.local_addr().expect("bound"));
    let stop = CancellationToken::new();
    let task = tokio::spawn(running.serve(stop.clone().cancelled_owned()));
    Served { client: Client::new(base), store, gate, dir, stop, task }
}

impl Served {
    /// Stops the server and waits until it stopped.
    pub async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("the server task").expect("the server stopped cleanly");
        std::fs::remove_dir_all(&self.dir).ok();
    }

    /// Thread `thread`'s audit entries of `kind`.
    pub fn audit(&self, thread: &str, kind: &str) -> Vec<AuditEntry> {
        self.store.list_audit(thread).unwrap().into_iter().filter(|e| e.kind == kind).collect()
    }

    /// Polls thread `thread` (as `who`) until its status is `status`; its view then.
    pub async fn until_status(&self, who: &Who<'_>, thread: &str, status: &str) -> Value {
        self.until(who, thread, |t| t["status"] == status).await
    }

    /// Polls thread `thread` (as `who`) until its status is `status` and its run left the
    /// queue (the worker settled it).
    pub async fn until_settled(&self, who: &Who<'_>, thread: &str, status: &str) -> Value {
        self.until(who, thread, |t| t["status"] == status && t["run"].is_null()).await
    }

    async fn until(&self, who: &Who<'_>, thread: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let reply = self.client.get(&format!("/api/threads/{thread}"), who).await;
            if done(&reply.json) {
                return reply.json;
            }
            assert!(tokio::time::Instant::now() < deadline, "thread {thread} never came to it: {}", reply.json);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Who a request is from.
pub enum Who<'a> {
    /// No credentials.
    Nobody,
    /// `Authorization: Bearer TOKEN`.
    Token(&'a str),
    /// The inbox's session cookie (`name=value`), and the CSRF token sent in `x-csrf-token`.
    Session { cookie: &'a str, csrf: Option<&'a str> },
}

/// An answer: its status and its body (JSON, or the text as a JSON string).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub json: Value,
    pub text: String,
    pub cookies: Vec<String>,
    pub headers: reqwest::header::HeaderMap,
}

/// A plain HTTP client of one server.
pub struct Client {
    base: String,
    http: reqwest::Client,
}

impl Client {
    fn new(base: String) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        Client { base, http }
    }

    /// The server's address, `http://HOST:PORT`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `method path` from `who`, with `body` as JSON and an `Origin` header if given.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        who: &Who<'_>,
        body: Option<&Value>,
        origin: Option<&str>,
    ) -> Reply {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        request = match who {
            Who::Nobody => request,
            Who::Token(token) => request.header("authorization", format!("Bearer {token}")),
            Who::Session { cookie, csrf } => {
                let request = request.header("cookie", *cookie);
                match csrf {
                    Some(csrf) => request.header("x-csrf-token", *csrf),
                    None => request,
                }
            }
        };
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        reply(request.send().await.expect("the server answers")).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str, who: &Who<'_>) -> Reply {
        self.send(reqwest::Method::GET, path, who, None, None).await
    }

    /// `POST path` with `body`.
    pub async fn post(&self, path: &str, who: &Who<'_>, body: Option<Value>) -> Reply {
        self.send(reqwest::Method::POST, path, who, body.as_ref(), None).await
    }

    /// `POST path` with `body` and `headers`.
    pub async fn post_with(&self, path: &str, who: &Who<'_>, body: &Value, headers: &[(&str, &str)]) -> Reply {
        let mut request = self.http.post(format!("{}{path}", self.base)).header("content-type", "application/json");
        if let Who::Token(token) = who {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        reply(request.body(body.to_string()).send().await.expect("the server answers")).await
    }

    /// `GET path` from `who` with `headers`, its answer left to read as it comes (a stream).
    pub async fn open(&self, path: &str, who: &Who<'_>, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.http.get(format!("{}{path}", self.base));
        request = match who {
            Who::Nobody => request,
            Who::Token(token) => request.header("authorization", format!("Bearer {token}")),
            Who::Session { cookie, .. } => request.header("cookie", *cookie),
        };
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the server answers")
    }

    /// Posts the inbox's login form with `token` as a browser does: its answer.
    pub async fn try_login(&self, token: &str) -> Reply {
        let form = self.http.get(format!("{}/login", self.base)).send().await.unwrap();
        let form = reply(form).await;
        let login_cookie = form.cookies.first().expect("the login form's cookie").clone();
        let csrf = csrf_of(&form.text);
        let posted = self
            .http
            .post(format!("{}/login", self.base))
            .header("cookie", login_cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}&token={token}"))
            .send()
            .await
            .unwrap();
        reply(posted).await
    }

    /// Logs in to the inbox with `token` as a browser does: the session cookie (`name=value`)
    /// and the session's CSRF token, read from a page's form.
    pub async fn login(&self, token: &str) -> (String, String) {
        let posted = self.try_login(token).await;
        assert_eq!(posted.status, 303, "logged in: {}", posted.text);
        let session =
            posted.cookies.iter().find(|c| c.starts_with("agentflow_session_")).expect("the session cookie").clone();
        let page = self.http.get(format!("{}/", self.base)).header("cookie", &session).send().await.unwrap();
        let page = reply(page).await;
        assert_eq!(page.status, 200, "the inbox with the session: {}", page.text);
        (session, csrf_of(&page.text))
    }
}

/// The `name=value` part of each `Set-Cookie`, and the body.
async fn reply(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let cookies = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
        .collect();
    let text = response.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
    Reply { status, json, text, cookies, headers }
}

/// The CSRF token of a page's first form.
fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap().to_string()
}
