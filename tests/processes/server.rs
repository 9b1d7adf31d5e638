//! `examples/server.rs` as its own process, driven over HTTP as a front end and a person would:
//! a run started through the JSON API waits for an approval, is approved in the inbox's page,
//! and completes; on a redb file (the server holds it: a program that opens it is told which
//! server has it) and on PostgreSQL (two servers share the store). The served `/openapi.json`
//! passes the pinned OpenAPI validator (`npm ci --prefix web`). A server killed with SIGKILL
//! starts again on its file, and the run it left goes on.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, ExitCode, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::{Value, json};

use crate::support::openapi;
use crate::support::pg::{pg_url, unique_schema};
use crate::support::process::own_test;
use crate::support::temp::temp_dir;

#[path = "../../examples/server.rs"]
#[allow(dead_code, reason = "the test runs the example's `main` in a child process")]
pub(crate) mod server_example;

/// Set in a child process: the example's command-line arguments, as a JSON array of strings.
const CHILD_ARGS: &str = "AGENTFLOW_SERVER_EXAMPLE_ARGS";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "child process of the tests in this file: runs the `server` example's `main`"]
async fn server_example_child() {
    let Ok(args) = std::env::var(CHILD_ARGS) else { return };
    let args: Vec<String> = serde_json::from_str(&args).unwrap();
    // The harness printed `test server_example_child ... ` without a line break.
    println!();
    assert_eq!(server_example::run_with_args(args.clone()).await, ExitCode::SUCCESS, "the example failed: {args:?}");
}

/// The example serving in a child process; killed (SIGKILL) when dropped.
pub(crate) struct Served {
    child: Child,
    // Kept open: the server's stdout stays a pipe with a reader.
    _stdout: BufReader<ChildStdout>,
    /// `http://127.0.0.1:PORT`
    pub(crate) base: String,
}

impl Served {
    /// Starts the example with `args` on a free port and waits (at most 2 minutes) for the
    /// line naming its address.
    pub(crate) fn start(args: &[&str]) -> Served {
        let mut all: Vec<&str> = vec!["--bind", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut child = own_test(module_path!(), "server_example_child")
            .env(CHILD_ARGS, serde_json::to_string(&all).unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server example");
        let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    let _ = tx.send(None);
                    return reader;
                }
                if let Some(at) = line.find("agentflow server: http://") {
                    let url = line[at + "agentflow server: ".len()..].split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(Some(url.trim_end_matches('/').to_string()));
                    return reader;
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Some(base)) => Served { child, _stdout: handle.join().unwrap(), base },
            other => {
                let _ = child.kill();
                panic!("the server example did not start: {other:?}");
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and waits for the process to be gone.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that follows no redirect.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A JSON request to the API with a bearer token: its status and body.
pub(crate) async fn api(base: &str, token: &str, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let c = client();
    let url = format!("{base}{path}");
    let req = match method {
        "GET" => c.get(url),
        _ => c.post(url).header("content-type", "application/json").body(body.unwrap_or(json!({})).to_string()),
    };
    let r = req.header("authorization", format!("Bearer {token}")).send().await.expect("the request");
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Starts a refund over the API as `agent`, waiting until it parks: the thread's id.
async fn start_refund(base: &str, thread: &str, amount: u32) -> Value {
    let (status, run) = api(
        base,
        "agent-demo-token",
        "POST",
        "/api/threads",
        Some(json!({ "graph": "refunds", "thread": thread, "input": { "order": "ORD-7", "amount": amount }, "wait": true })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    run
}

/// The id of the approval `thread` waits on, as alice sees it.
async fn approval_of(base: &str, thread: &str) -> String {
    let (status, waiting) = api(base, "alice-demo-token", "GET", "/api/approvals", None).await;
    assert_eq!(status, StatusCode::OK, "{waiting}");
    let approvals = waiting["approvals"].as_array().cloned().unwrap_or_default();
    let found = approvals.iter().find(|a| a["thread"] == thread && a["waiting"] == true);
    found.unwrap_or_else(|| panic!("no approval waits for {thread}: {waiting}"))["id"].as_str().unwrap().to_string()
}

/// The `name=value` of a cookie a response sets whose name starts with `prefix`.
fn cookie(r: &reqwest::Response, prefix: &str) -> Option<String> {
    r.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(prefix))
        .map(|v| v.split(';').next().unwrap_or_default().to_string())
}

/// The value of the first `name="csrf" value="..."` in a page.
fn csrf_in(page: &str) -> String {
    let key = "name=\"csrf\" value=\"";
    let at = page.find(key).unwrap_or_else(|| panic!("no CSRF field in the page: {page}")) + key.len();
    page[at..].split('"').next().unwrap_or_default().to_string()
}

/// Logs in to the inbox with `token` through its form: the session cookie and the CSRF token
/// of the inbox's forms.
pub(crate) async fn login(base: &str, token: &str) -> (String, String) {
    let c = client();
    let form = c.get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let login_cookie = cookie(&form, "agentflow_login").expect("the login form sets its CSRF cookie");
    let page = form.text().await.unwrap();
    let r = c
        .post(format!("{base}/login"))
        .header(COOKIE, &login_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&csrf={}", csrf_in(&page)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "login with {token} failed");
    let session = cookie(&r, "agentflow_session").expect("a session cookie");
    let inbox = c.get(format!("{base}/")).header(COOKIE, &session).send().await.unwrap();
    assert_eq!(inbox.status(), StatusCode::OK);
    let csrf = csrf_in(&inbox.text().await.unwrap());
    (session, csrf)
}

/// Approves `approval` in the inbox's page as the logged-in user.
async fn approve_in_inbox(base: &str, session: &(String, String), approval: &str) {
    let r = client()
        .post(format!("{base}/approvals/{approval}/approve"))
        .header(COOKIE, &session.0)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}", session.1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "the inbox's approve: {}", r.text().await.unwrap_or_default());
}

/// Polls the thread (at most 60 s) until its status is `status`; its state then.
pub(crate) async fn wait_for_status(base: &str, thread: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, view) = api(base, "bob-demo-token", "GET", &format!("/api/threads/{thread}"), None).await;
        assert_eq!(code, StatusCode::OK, "{view}");
        if view["status"] == status {
            let (code, state) = api(base, "bob-demo-token", "GET", &format!("/api/threads/{thread}/state"), None).await;
            assert_eq!(code, StatusCode::OK, "{state}");
            return state;
        }
        assert!(Instant::now() < deadline, "{thread} did not reach `{status}`: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The refund ran once, with the amount asked for.
fn assert_refunded_once(state: &Value, amount: u32) {
    assert_eq!(state["state"]["outcome"]["refunded"], amount, "{state}");
    let notes = state["state"]["notes"].as_array().cloned().unwrap_or_default();
    let calls = notes.iter().filter(|n| n.as_str() == Some("refund call returned")).count();
    assert_eq!(calls, 1, "the refund step ran once: {state}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_over_http_is_approved_in_the_inbox_and_completes_on_a_redb_file() {
    let dir = temp_dir("server-redb");
    let db = dir.join("server.redb");
    let served = Served::start(&["--db", db.to_str().unwrap()]);
    let base = served.base.clone();

    let run = start_refund(&base, "refund-1", 40).await;
    assert_eq!(run["status"], "interrupted", "the run parks at the approval: {run}");
    let approval = approval_of(&base, "refund-1").await;
    // Bob may read but not decide; the refusal changes nothing.
    let (status, refused) =
        api(&base, "bob-demo-token", "POST", &format!("/api/threads/refund-1/approvals/{approval}/approve"), None)
            .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");

    let alice = login(&base, "alice-demo-token").await;
    approve_in_inbox(&base, &alice, &approval).await;
    let state = wait_for_status(&base, "refund-1", "completed").await;
    assert_refunded_once(&state, 40);

    // The demo users file it wrote holds tokens in clear: no other account may read it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("server-users.json")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the users file's mode: {mode:o}");
    }

    // The server holds the file: a program that opens it is told which process has it.
    match crate::support::stores::open_redb(&db) {
        Err(e @ agentflow_store::OpenError::AlreadyOpen { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&format!("pid {}", served.pid())), "the message names the server: {message}");
        }
        Err(other) => panic!("expected AlreadyOpen naming the server, got {other}"),
        Ok(_) => panic!("the server holds the file: opening it must fail"),
    }

    // The OpenAPI document the server serves passes the pinned validator.
    let doc = client().get(format!("{base}/openapi.json")).send().await.unwrap();
    assert_eq!(doc.status(), StatusCode::OK);
    let text = doc.text().await.unwrap();
    let file = dir.join("openapi.json");
    std::fs::write(&file, &text).unwrap();
    if let Some(result) = openapi::validate(&file) {
        let printed = result.unwrap_or_else(|errors| panic!("/openapi.json is not a valid OpenAPI document: {errors}"));
        assert!(printed.contains("valid: OpenAPI 3.1"), "{printed}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn inbox_tabs_polling_next_to_runs_started_over_http_never_find_the_file_held() {
    // Before the server owned the file, an app opening it next to five open inbox tabs failed
    // with `AlreadyOpen` 14-17% of the time. Now the app is in the server: nothing reopens it.
    let dir = temp_dir("server-tabs");
    let db = dir.join("server.redb");
    let served = Served::start(&["--db", db.to_str().unwrap()]);
    let base = served.base.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tabs = Vec::new();
    for _ in 0..5 {
        let session = login(&base, "bob-demo-token").await;
        let (base, stop) = (base.clone(), stop.clone());
        tabs.push(tokio::spawn(async move {
            let c = client();
            let mut polls = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for page in ["/live", "/"] {
                    let r = c.get(format!("{base}{page}")).header(COOKIE, &session.0).send().await.unwrap();
                    assert_eq!(r.status(), StatusCode::OK, "a tab's {page} failed");
                }
                polls += 1;
            }
            polls
        }));
    }
    let starts = (0..20).map(|i| {
        let base = base.clone();
        tokio::spawn(async move { start_refund(&base, &format!("tab-{i}"), 10 + i).await })
    });
    for run in futures_util::future::join_all(starts).await {
        let run = run.unwrap();
        assert_eq!(run["status"], "interrupted", "every run reaches its approval: {run}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for tab in tabs {
        assert!(tab.await.unwrap() > 0, "each tab polled while the runs went on");
    }
    let (_, waiting) = api(&base, "alice-demo-token", "GET", "/api/approvals", None).await;
    assert_eq!(waiting["approvals"].as_array().map_or(0, Vec::len), 20, "{waiting}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_while_a_run_waits_starts_again_on_its_file_and_the_run_goes_on_once() {
    let dir = temp_dir("server-kill");
    let db = dir.join("server.redb");
    let served = Served::start(&["--db", db.to_str().unwrap()]);
    start_refund(&served.base, "refund-k", 75).await;
    let approval = approval_of(&served.base, "refund-k").await;
    let (status, decided) = api(
        &served.base,
        "alice-demo-token",
        "POST",
        &format!("/api/threads/refund-k/approvals/{approval}/approve"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    // Killed right after the decision: the worker may be anywhere in the refund's step.
    served.kill();

    // The sidecar and socket of the killed server do not stop the next one.
    let again = Served::start(&["--db", db.to_str().unwrap()]);
    let state = wait_for_status(&again.base, "refund-k", "completed").await;
    assert_refunded_once(&state, 75);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgresql_two_servers_share_the_store_a_run_started_on_one_is_approved_in_the_others_inbox() {
    let Some(url) = pg_url() else { return };
    let schema = unique_schema("server", "two");
    let dir = temp_dir("server-pg");
    let users = dir.join("users.json");
    let args = ["--store", url.as_str(), "--schema", schema.as_str(), "--users", users.to_str().unwrap()];
    let one = Served::start(&args);
    let two = Served::start(&args);

    let run = start_refund(&one.base, "refund-pg", 55).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    let approval = approval_of(&two.base, "refund-pg").await;
    let alice = login(&two.base, "alice-demo-token").await;
    approve_in_inbox(&two.base, &alice, &approval).await;
    let state = wait_for_status(&one.base, "refund-pg", "completed").await;
    assert_refunded_once(&state, 55);
}
