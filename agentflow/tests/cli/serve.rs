//! `agentflow serve`, the approval inbox, over HTTP: the real binary in a subprocess, on a
//! store this test fills (a refund of 40 waiting for approval, requested by `agent`), and
//! requests made with reqwest (cookies handled by hand, redirects not followed). Here: logging
//! in and out, refused and forged requests, the pages and their errors, markup in stored
//! text, `/live` and the metrics; deciding approvals is in `serve_decisions.rs`, answering
//! interrupts in `serve_interrupts.rs`.
//!
//! Each refusal is checked twice: the answer (status and message) and the record in the store,
//! read back with the library once the server is stopped (it may hold the redb file while it
//! runs), still pending with its arguments.

use crate::inbox_common;

use std::sync::Arc;

use agentflow::Store;
use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use agentflow_store::PostgresStore;
use inbox_common::http::*;
use inbox_common::*;
use redb::ReadableTable;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::{Value, json};

#[path = "../../../tests/support/pg.rs"]
mod pg;

/// Every `Set-Cookie` of a response, whole.
fn cookies_set(r: &reqwest::Response) -> Vec<String> {
    r.headers().get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
}

/// What `/live` answers `user`.
async fn live(base: &str, user: &User) -> Value {
    let (status, body) = get(base, Some(user), "/live").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test]
async fn secure_cookies_mark_every_cookie_the_server_sets_secure() {
    let dir = temp_dir("serve-secure");
    let store = filled_redb(&dir).await;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--secure-cookies"]);
    let c = client();
    let form = c.get(format!("{}/login", serve.base)).send().await.unwrap();
    let mut set = cookies_set(&form);
    let login_cookie = set_cookie(&form, "agentflow_login").expect("the login form sets its CSRF cookie");
    let page = form.text().await.unwrap();
    let r = c
        .post(format!("{}/login", serve.base))
        .header(COOKIE, &login_cookie)
        .form(&[("token", "alice-token"), ("csrf", &csrf_in(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let session = set_cookie(&r, "agentflow_session").expect("a session cookie");
    set.extend(cookies_set(&r));
    let csrf = csrf_in(
        &c.get(format!("{}/", serve.base)).header(COOKIE, &session).send().await.unwrap().text().await.unwrap(),
    );
    let out = c
        .post(format!("{}/logout", serve.base))
        .header(COOKIE, &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    set.extend(cookies_set(&out));
    // The login form's cookie, the session, the login cookie's removal and the session's.
    assert_eq!(set.len(), 4, "{set:?}");
    for cookie in &set {
        let attrs: Vec<&str> = cookie.split(';').map(str::trim).collect();
        for wanted in ["Secure", "HttpOnly", "SameSite=Strict"] {
            assert!(attrs.contains(&wanted), "`{cookie}` lacks {wanted}");
        }
    }
}

#[tokio::test]
async fn anonymous_and_forged_requests_are_refused_and_change_nothing() {
    let (store, serve, approval) = setup("forged").await;
    let base = serve.base.as_str();
    let approve = format!("/approvals/{}/approve", approval.id);

    // Pages without a session redirect to the login form; a decision is refused outright.
    assert_eq!(get(base, None, "/").await, (StatusCode::SEE_OTHER, "/login".to_string()));
    assert_eq!(get(base, None, "/threads/t-paused").await.0, StatusCode::SEE_OTHER);
    let (status, page) = post(base, None, &approve, &[("csrf", "x")]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{page}");
    assert!(page.contains("Decisions need a logged-in user"), "{page}");
    let (status, body) = get(base, None, "/live").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");

    // A wrong token does not log in.
    let c = client();
    let form = c.get(format!("{base}/login")).send().await.unwrap();
    let login_cookie = set_cookie(&form, "agentflow_login").unwrap();
    let csrf = csrf_in(&form.text().await.unwrap());
    let r = c
        .post(format!("{base}/login"))
        .header(COOKIE, &login_cookie)
        .form(&[("token", "guess"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&r, "agentflow_session").is_none());
    // A login form posted without its CSRF cookie is refused even with a good token.
    let r = c.post(format!("{base}/login")).form(&[("token", "alice-token"), ("csrf", &csrf)]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // Logged in, but without the CSRF token, with a wrong one, or from another site.
    let alice = login(base, "alice-token").await;
    let no_token = client().post(format!("{base}{approve}")).header(COOKIE, &alice.cookie).form(&[("conditions", "")]);
    let r = no_token.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("CSRF token is missing or wrong"));
    let (status, page) = post(base, Some(&alice), &approve, &[("csrf", "0000")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    let r = client()
        .post(format!("{base}{approve}"))
        .header(COOKIE, &alice.cookie)
        .header("Origin", "http://evil.example")
        .form(&[("csrf", alice.csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Another user's CSRF token does not fit this session.
    let bob = login(base, "bob-token").await;
    let (status, _) = post(base, Some(&alice), &approve, &[("csrf", &bob.csrf)]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Logging out is a POST like the others: a wrong token ends nothing.
    let (status, _) = post(base, Some(&alice), "/logout", &[("csrf", "0000")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(get(base, Some(&alice), "/threads").await.0, StatusCode::OK);
    // After logout the session is gone.
    let (status, to) = post(base, Some(&alice), "/logout", &[]).await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/login"));
    let (status, _) = post(base, Some(&alice), &approve, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // None of the refused requests changed the record (a decision cannot be undone).
    serve.stop();
    assert_untouched(&store);
}

#[tokio::test]
async fn pages_show_threads_their_timeline_a_checkpoint_and_errors_as_pages() {
    let (store, serve, _) = setup("pages").await;
    let base = serve.base.as_str();
    let alice = login(base, "alice-token").await;

    let (status, list) = get(base, Some(&alice), "/threads").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains("t-paused") && list.contains("t-done") && list.contains("interrupted"), "{list}");
    let (status, page) = get(base, Some(&alice), "/threads/t-paused").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"timeline\""), "{page}");
    assert!(page.contains("/threads/t-paused/at/0"), "{page}");
    // The graph with the node the thread waits at highlighted.
    assert!(page.contains("class=\"current\" data-node=\"pay\""), "{page}");
    assert!(page.contains("style pay fill:#ffd84d"), "{page}");
    let (status, page) = get(base, Some(&alice), "/threads/t-done/at/1").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("checked order A-2"), "{page}");

    for (path, status, needle) in [
        ("/threads/nope", StatusCode::NOT_FOUND, "no thread `nope` in the store"),
        ("/threads/t-done/at/99", StatusCode::NOT_FOUND, "has no checkpoint 99"),
        ("/threads/t-done/at/x", StatusCode::BAD_REQUEST, "A checkpoint is a number"),
        ("/no/such/page", StatusCode::NOT_FOUND, "There is no page at this address"),
    ] {
        let (got, page) = get(base, Some(&alice), path).await;
        assert_eq!(got, status, "{path}: {page}");
        assert!(page.contains(needle), "{path}: {page}");
    }
    let (status, page) = get(base, Some(&alice), "/stuck").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("None."), "nothing is stuck after a moment with the default thresholds: {page}");

    // A redb file is open in one process at a time: while another process holds it, the server
    // does not start on it (exit 3) and says so; once it is free, the server starts again.
    let stopped = serve.stop();
    let held = open_redb(&store);
    let out = stopped.start_refused();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("another process"), "{err}");
    drop(held);
    let serve = stopped.start();
    let alice = login(&serve.base, "alice-token").await;
    assert_eq!(get(&serve.base, Some(&alice), "/threads").await.0, StatusCode::OK);
}

#[tokio::test]
async fn metrics_serve_the_stuck_gauge_by_kind() {
    let dir = temp_dir("metrics");
    let store = filled_redb(&dir).await;
    // Everything waiting on a person counts as stuck at once.
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--stuck-waiting", "0s"]);
    let (status, text) = get(&serve.base, None, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains("# TYPE agentflow_stuck_threads gauge"), "{text}");
    assert!(text.contains("agentflow_stuck_threads{kind=\"waiting_on_human\"} 1"), "{text}");
    assert!(text.contains("agentflow_stuck_threads{kind=\"lease_expired\"} 0"), "{text}");
    assert!(text.contains("agentflow_stuck_threads{kind=\"timer_overdue\"} 0"), "{text}");
    // The inbox lists it as the `stuck` command does.
    let alice = login(&serve.base, "alice-token").await;
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert!(inbox.contains("id=\"stuck\"") && inbox.contains("waiting_on_human"), "{inbox}");
}

#[tokio::test]
async fn live_reports_a_decision_made_by_the_cli_in_another_process() {
    let (store, serve, approval) = setup("live").await;
    let base = serve.base.as_str();
    let id = approval.id;
    let alice = login(base, "alice-token").await;
    let (status, before) = get(base, Some(&alice), "/live").await;
    assert_eq!(status, StatusCode::OK, "{before}");
    let before: Value = serde_json::from_str(&before).unwrap();
    assert_eq!(before["approvals"], 1);
    // Nothing changed: the same version.
    let (_, again) = get(base, Some(&alice), "/live").await;
    assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), before);

    // `agentflow approve` decides while the server holds the file, through its socket: the OS
    // user running the tests is `carol` in the users file.
    let out = cli(store.to_str().unwrap(), &["approve", &id, "--as", "carol", "--role", "irreversible"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, after) = get(base, Some(&alice), "/live").await;
    let after: Value = serde_json::from_str(&after).unwrap();
    assert_eq!(after["approvals"], 0);
    assert_ne!(after["version"], before["version"]);
}

/// A thread whose resume failed on an answer of the wrong shape still waits in its interrupt,
/// and the inbox lists it: `/live` counts it too, and an answer recorded for it from the CLI
/// changes the version, so an open inbox page reloads. (`/live` looked at `interrupted` threads
/// only: the page went on offering the question as unanswered.) The version is a hash of what
/// waits in the store, the same from every server on it: `answer` runs on the file itself, with
/// the server stopped, and the version is compared with the one of the server started after.
#[tokio::test]
async fn live_follows_a_thread_waiting_again_after_an_answer_of_the_wrong_shape() {
    let dir = temp_dir("live-failed");
    let store = filled_redb(&dir).await;
    add_question(open_redb(&store)).await;
    {
        let app = questions::graph().app().store(open_redb(&store));
        let run = app.runner(&()).thread("t-question").resume_with(42).await.unwrap();
        assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    }
    // `agentflow stuck` counts it as waiting on a person.
    let stuck = cli(store.to_str().unwrap(), &["stuck", "--waiting", "0s", "--json"]);
    assert_eq!(stuck.status.code(), Some(0), "{}", String::from_utf8_lossy(&stuck.stderr));
    let stuck: Value = serde_json::from_slice(&stuck.stdout).unwrap();
    let waiting = stuck.as_array().unwrap().iter().find(|s| s["thread"] == "t-question").expect("listed as stuck");
    assert_eq!(waiting["reason"], "waiting_on_human", "{waiting}");
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (_, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert!(inbox.contains("1 interrupt"), "the inbox lists it: {inbox}");
    let before = live(&serve.base, &alice).await;
    // `t-paused`, interrupted for its approval, and `t-question`, waiting again.
    assert_eq!(before["interrupts"], 2, "{before}");
    // Another server on the unchanged store: the same version.
    let serve = serve.stop().start();
    let alice = login(&serve.base, "alice-token").await;
    assert_eq!(live(&serve.base, &alice).await, before);
    let stopped = serve.stop();
    let out = cli(store.to_str().unwrap(), &["answer", "t-question", "--value", "\"ship\"", "--as", "ops"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let serve = stopped.start();
    let alice = login(&serve.base, "alice-token").await;
    let after = live(&serve.base, &alice).await;
    assert_ne!(after["version"], before["version"]);
}

#[tokio::test]
async fn live_reports_a_cli_decision_on_postgresql() {
    let Some(url) = pg::pg_url() else { return };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("inbox_live_{}_{nanos}", std::process::id());
    let store: Arc<dyn Store> = Arc::new(PostgresStore::builder().schema(schema.clone()).open(&url).expect("postgres"));
    fill(Arc::clone(&store)).await;
    let dir = temp_dir("live-pg");
    let serve = Serve::start(&url, &users_file(&dir), &["--schema", &schema]);
    {
        let alice = login(&serve.base, "alice-token").await;
        let (_, before) = get(&serve.base, Some(&alice), "/live").await;
        let before: Value = serde_json::from_str(&before).unwrap();
        assert_eq!(before["approvals"], 1);
        let id = store.list_approvals("t-paused").unwrap()[0].id.clone();
        let out = cli(&url, &["--schema", &schema, "approve", &id, "--as", "carol", "--role", "irreversible"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let (_, after) = get(&serve.base, Some(&alice), "/live").await;
        let after: Value = serde_json::from_str(&after).unwrap();
        assert_eq!(after["approvals"], 0);
        assert_ne!(after["version"], before["version"]);
    }
}

#[tokio::test]
async fn serve_refuses_a_non_loopback_address_and_a_bad_users_file() {
    let dir = temp_dir("bind");
    let store = filled_redb(&dir).await;
    let users = users_file(&dir);
    let out = cli(store.to_str().unwrap(), &["serve", "--bind", "0.0.0.0:0", "--users", users.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"users": [{"name": "x", "roles": []}]}"#).unwrap();
    let out = cli(store.to_str().unwrap(), &["serve", "--bind", "127.0.0.1:0", "--users", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs exactly one of `token` or `token_sha256`"));
}

/// The gauge follows what waits without a request reading the store: `t-paused` counts as
/// stuck once it has waited five seconds on a person, and only the periodic refresh (scraping
/// `/metrics` reads nothing) can move the gauge from 0 to 1 then.
#[tokio::test]
async fn the_stuck_gauge_is_refreshed_periodically() {
    let dir = temp_dir("refresh");
    // Taken before: the thread waits since a moment after this.
    let filled = std::time::Instant::now();
    let store = filled_redb(&dir).await;
    // Waiting on a person counts as stuck after 5 s; the gauge is refreshed every 200 ms.
    let serve =
        Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--stuck-waiting", "5s", "--stuck-every", "200ms"]);
    let waiting = "agentflow_stuck_threads{kind=\"waiting_on_human\"}";
    let (_, first) = get(&serve.base, None, "/metrics").await;
    assert!(filled.elapsed() < std::time::Duration::from_secs(5), "the server took 5 s to start and answer");
    assert!(first.contains(&format!("{waiting} 0")), "nothing has waited 5 s yet: {first}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, text) = get(&serve.base, None, "/metrics").await;
        if text.contains(&format!("{waiting} 1")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the gauge was not refreshed: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(filled.elapsed() >= std::time::Duration::from_secs(5), "counted before it waited 5 s");
}

#[tokio::test]
async fn hostile_thread_ids_payloads_and_answers_are_escaped_on_every_page() {
    // Markup in a thread id (with a slash, `..`, `?` and `#`), in what the interrupt asks and
    // in the answer: every page shows it as text, and links reach the thread.
    const ID: &str = "q\"'><script>alert(1)</script>/../x?y#z";
    const ASKS: &str = "</script><script>alert(2)</script><!--";
    const ANSWER: &str = "\"</script><script>alert(3)</script>\"";
    let dir = temp_dir("hostile");
    let store = filled_redb(&dir).await;
    {
        let run = questions::graph()
            .app()
            .store(open_redb(&store))
            .runner(&())
            .thread(ID)
            .run(Question { text: ASKS.into(), answer: None })
            .await
            .expect("interrupted run");
        assert!(matches!(run.outcome, agentflow::Outcome::Interrupted { .. }), "{:?}", run.outcome);
    }
    let a = the_approval(&store);
    let seq = with_redb(&store, |s| s.latest_checkpoint(ID).unwrap().unwrap().seq).to_string();
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let tid = segment(ID);
    let no_markup = |page: &str, body: &str| {
        assert!(!body.contains("<script>alert"), "{page} lets markup through: {body}");
        assert!(!body.contains("\"'><"), "{page} lets an attribute be closed: {body}");
    };

    let (status, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert_eq!(status, StatusCode::OK);
    no_markup("the inbox", &inbox);
    // The page's only script is the live poll.
    assert_eq!(inbox.matches("<script>").count(), 1, "{inbox}");
    assert!(inbox.contains(&format!("action=\"/threads/{tid}/answer\"")), "{inbox}");
    assert!(inbox.contains("&lt;/script&gt;&lt;script&gt;alert(2)"), "{inbox}");

    for page in ["/threads".to_string(), format!("/threads/{tid}"), format!("/threads/{tid}/at/0"), "/audit".into()] {
        let (status, body) = get(&serve.base, Some(&alice), &page).await;
        assert_eq!(status, StatusCode::OK, "{page}: {body}");
        no_markup(&page, &body);
    }
    let (_, threads) = get(&serve.base, Some(&alice), "/threads").await;
    assert!(threads.contains(&format!("href=\"/threads/{tid}\"")), "{threads}");

    // A flash for an approval id that is markup names no approval and shows nothing.
    let (status, body) = get(&serve.base, Some(&alice), "/?decided=%22%3E%3Cscript%3Ealert(4)%3C%2Fscript%3E").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("alert(4)"), "{body}");

    // A decision route asked with GET changes nothing (the record is read at the end).
    let (status, _) = get(&serve.base, Some(&alice), &format!("/approvals/{}/approve", a.id)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    // The answer, through the encoded path, is recorded for this thread and shown as text;
    // the answer leads back to the inbox, nowhere else.
    let path = format!("/threads/{tid}/answer");
    let (status, to) = post(
        &serve.base,
        Some(&alice),
        &path,
        &[("checkpoint", &seq), ("question", &form_question(&inbox)), ("value", ANSWER)],
    )
    .await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/"));
    for page in ["/".to_string(), format!("/threads/{tid}"), "/audit".into()] {
        let (_, body) = get(&serve.base, Some(&alice), &page).await;
        no_markup(&page, &body);
    }
    serve.stop();
    let recorded = with_redb(&store, |s| {
        s.list_audit(ID).unwrap().into_iter().filter(|e| e.kind == "interrupt.answered").collect::<Vec<_>>()
    });
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].detail["value"], json!("</script><script>alert(3)</script>"));
    assert_untouched(&store);
}

/// A login lasts `--session-ttl` (12 h unless said otherwise): once it is over, the pages send
/// the user to the login form and a decision is refused, the approval untouched.
#[tokio::test]
async fn a_session_ends_when_its_time_is_up() {
    let dir = temp_dir("session-ttl");
    let store = filled_redb(&dir).await;
    let approve = format!("/approvals/{}/approve", the_approval(&store).id);
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--session-ttl", "2s"]);
    let base = serve.base.as_str();
    let alice = login(base, "alice-token").await;
    assert_eq!(get(base, Some(&alice), "/").await.0, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert_eq!(get(base, Some(&alice), "/").await, (StatusCode::SEE_OTHER, "/login".to_string()));
    let (status, page) = post(base, Some(&alice), &approve, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{page}");
    // Logging in again starts a new session.
    let alice = login(base, "alice-token").await;
    assert_eq!(get(base, Some(&alice), "/").await.0, StatusCode::OK);
    serve.stop();
    assert_untouched(&store);
}

#[tokio::test]
async fn a_planted_session_id_is_never_adopted_and_an_oversized_form_changes_nothing() {
    let (store, serve, a) = setup("fixation").await;
    let base = &serve.base;
    // Someone plants a session id of their choosing in the browser before its user logs in.
    let planted = format!("{}={}", cookie_name(base, "agentflow_session"), "ab".repeat(32));
    let c = client();
    let form = c.get(format!("{base}/login")).header(COOKIE, &planted).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK, "a planted id is no session");
    let login_cookie = set_cookie(&form, "agentflow_login").expect("the login form's CSRF cookie");
    let csrf = csrf_in(&form.text().await.unwrap());
    let r = c
        .post(format!("{base}/login"))
        .header(COOKIE, format!("{planted}; {login_cookie}"))
        .form(&[("token", "alice-token"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let session = set_cookie(&r, "agentflow_session").expect("a new session cookie");
    assert_ne!(session, planted, "the login starts a session of its own");
    // The planted id gives no access after the login either.
    let (status, to) = get(base, Some(&User { cookie: planted.clone(), csrf: String::new() }), "/").await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/login"));

    // A form far larger than any decision is refused before it is read; nothing changes.
    let alice = login(base, "alice-token").await;
    let huge = "x".repeat(3 * 1024 * 1024);
    let (status, _) = post(base, Some(&alice), &format!("/approvals/{}/reject", a.id), &[("reason", &huge)]).await;
    assert!(status.is_client_error(), "{status}");
    serve.stop();
    assert_untouched(&store);
}

/// Threads whose records cannot be read (here one's state snapshots, another's pending writes
/// overwritten) do not take the inbox down: an approval is shown with a warning in place of the
/// state, and can still be decided; a paused thread is listed as unreadable.
#[tokio::test]
async fn a_thread_that_cannot_be_read_leaves_the_rest_of_the_inbox_usable() {
    let dir = temp_dir("unreadable");
    let store = filled_redb(&dir).await;
    add_question(open_redb(&store)).await;
    with_write(&store, |txn| {
        {
            let numbers = txn.open_table(agentflow_store::tables::THREAD_NUMBERS).unwrap();
            let number = numbers.get("t-paused").unwrap().expect("`t-paused` has checkpoints, so a number").value();
            drop(numbers);
            let mut snapshots = txn.open_table(agentflow_store::tables::SNAPSHOTS).unwrap();
            let keys: Vec<u64> = snapshots
                .range((number, 0)..=(number, u64::MAX))
                .unwrap()
                .map(|entry| entry.unwrap().0.value().1)
                .collect();
            assert!(!keys.is_empty());
            for seq in keys {
                snapshots.insert((number, seq), b"{not json".as_slice()).unwrap();
            }
        }
        // And what the paused `t-question` waits for: its pending writes' bytes.
        damage_pending_writes(txn, "t-question");
    });
    let id = the_approval(&store).id;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (status, inbox) = get(&serve.base, Some(&alice), "/").await;
    assert_eq!(status, StatusCode::OK, "{inbox}");
    assert!(inbox.contains("the state cannot be shown"), "{inbox}");
    let stuck = &inbox[inbox.find("id=\"stuck\"").expect("a stuck section")..];
    assert!(stuck.contains("t-question") && stuck.contains("unreadable"), "{stuck}");
    let (status, page) = get(&serve.base, Some(&alice), "/stuck").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (status, to) = post(&serve.base, Some(&alice), &format!("/approvals/{id}/approve"), &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{to}");
    let (status, page) = get(&serve.base, Some(&alice), "/threads/t-paused").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    serve.stop();
    assert_eq!(the_approval(&store).status, ApprovalStatus::Approved);
}

/// An address holding a NUL byte names nothing (no id holds one; PostgreSQL cannot even be
/// asked for one): 404, before any store read, on PostgreSQL as on redb.
#[tokio::test]
async fn an_address_with_a_nul_byte_is_not_found_on_postgresql() {
    let Some(url) = pg::pg_url() else { return };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("inbox_nul_{}_{nanos}", std::process::id());
    let store: Arc<dyn Store> = Arc::new(PostgresStore::builder().schema(schema.clone()).open(&url).expect("postgres"));
    fill(Arc::clone(&store)).await;
    let dir = temp_dir("nul-address");
    let serve = Serve::start(&url, &users_file(&dir), &["--schema", &schema]);
    let alice = login(&serve.base, "alice-token").await;
    for page in ["/threads/a%00b", "/threads/t-paused%00/at/0", "/?decided=a%00b"] {
        let (status, body) = get(&serve.base, Some(&alice), page).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{page}: {body}");
    }
    let (status, _) = post(&serve.base, Some(&alice), "/approvals/a%00b/approve", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(store.list_approvals("t-paused").unwrap()[0].status, ApprovalStatus::Pending);
}
