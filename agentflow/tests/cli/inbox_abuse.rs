//! The inbox and the CLI under abuse: wrong tokens in a row, a foreign `Host`, one user's many
//! logins, a cookie from another port, an answer without the role, an edit the tool would
//! refuse, look-alike user names, stored text that would forge a row of the CLI's output.
//! The real binary in a subprocess, as in `serve.rs`; the store is read once it is stopped.

use crate::inbox_common;

use agentflow::Store;
use agentflow::approval::ApprovalStatus;
use agentflow_store::{StepCommit, ThreadRecord};
use inbox_common::http::*;
use inbox_common::*;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, HOST, RETRY_AFTER};
use serde_json::{Value, json};

#[tokio::test]
async fn wrong_tokens_in_a_row_are_answered_429_with_retry_after() {
    let dir = temp_dir("abuse-login");
    let store = filled_redb(&dir).await;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--login-attempts", "3"]);
    let base = &serve.base;
    let c = client();
    let form = c.get(format!("{base}/login")).send().await.unwrap();
    let login_cookie = set_cookie(&form, "agentflow_login").expect("the login form's cookie");
    let csrf = csrf_in(&form.text().await.unwrap());
    let attempt = |token: &'static str| {
        c.post(format!("{base}/login")).header(COOKIE, &login_cookie).form(&[("token", token), ("csrf", &csrf)]).send()
    };
    for _ in 0..3 {
        assert_eq!(attempt("guess").await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    let r = attempt("guess").await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = r.headers().get(RETRY_AFTER).expect("Retry-After").to_str().unwrap().parse().unwrap();
    assert!((1..=6).contains(&wait), "Retry-After: {wait}");
    // Not even the right token is tried until then.
    assert_eq!(attempt("alice-token").await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn metrics_are_refused_to_a_request_naming_another_host() {
    let dir = temp_dir("abuse-host");
    let store = filled_redb(&dir).await;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--allow-host", "inbox.example.com"]);
    let port = serve.base.rsplit(':').next().unwrap().to_string();
    let metrics = |host: String| client().get(format!("{}/metrics", serve.base)).header(HOST, host).send();
    let r = metrics(format!("rebound.attacker.example:{port}")).await.unwrap();
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
    assert!(!r.text().await.unwrap().contains("agentflow_"), "nothing of the metrics is shown");
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "inbox.example.com".into()] {
        assert_eq!(metrics(host.clone()).await.unwrap().status(), StatusCode::OK, "{host}");
    }
}

#[tokio::test]
async fn a_login_past_the_cap_ends_the_users_oldest_session_and_cookies_are_named_for_the_port() {
    let dir = temp_dir("abuse-sessions");
    let store = filled_redb(&dir).await;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--sessions-per-user", "2"]);
    let base = &serve.base;
    let first = login(base, "carol-token").await;
    let second = login(base, "carol-token").await;
    let alice = login(base, "alice-token").await;
    let third = login(base, "carol-token").await;
    let (status, to) = get(base, Some(&first), "/").await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/login"), "the oldest session was ended");
    for (who, user) in [("second", &second), ("third", &third), ("alice", &alice)] {
        assert_eq!(get(base, Some(user), "/").await.0, StatusCode::OK, "{who}");
    }
    // The session cookie carries the port in its name: a browser sends a host's cookies to
    // all its ports, and another port's inbox neither reads nor overwrites this one.
    let port = base.rsplit(':').next().unwrap();
    assert!(third.cookie.starts_with(&format!("agentflow_session_{port}=")), "{}", third.cookie);
    let id = third.cookie.split_once('=').unwrap().1;
    let unnamed = User { cookie: format!("agentflow_session={id}"), csrf: third.csrf.clone() };
    assert_eq!(get(base, Some(&unnamed), "/").await.0, StatusCode::SEE_OTHER, "another name is another cookie");
}

#[tokio::test]
async fn answering_a_question_needs_the_answer_role_when_one_is_set() {
    let dir = temp_dir("abuse-answer-role");
    let store = filled_redb(&dir).await;
    add_question(open_redb(&store)).await;
    let seq = with_redb(&store, |s| s.latest_checkpoint("t-question").unwrap().unwrap().seq).to_string();
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &["--answer-role", "refunds"]);
    let base = &serve.base;
    let bob = login(base, "bob-token").await;
    let (_, inbox) = get(base, Some(&bob), "/").await;
    let question = form_question(&inbox);
    let form = [("checkpoint", seq.as_str()), ("question", question.as_str()), ("value", "\"ship it\"")];
    let (status, page) = post(base, Some(&bob), "/threads/t-question/answer", &form).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("needs the role `refunds`"), "{page}");
    let carol = login(base, "carol-token").await;
    let (status, to) = post(base, Some(&carol), "/threads/t-question/answer", &form).await;
    assert_eq!((status, to.as_str()), (StatusCode::SEE_OTHER, "/"));
    // Carol's answer is the one recorded; Bob's left nothing.
    serve.stop();
    let audit = with_redb(&store, |s| s.list_audit("t-question").unwrap());
    let answers: Vec<(&str, &str)> =
        audit.iter().filter(|e| e.kind.contains("answer")).map(|e| (e.kind.as_str(), e.actor.as_str())).collect();
    assert_eq!(answers, [("interrupt.answered", "carol")], "{audit:?}");
}

#[tokio::test]
async fn an_edit_with_a_field_the_tool_does_not_have_is_refused_and_the_approval_stays_pending() {
    let dir = temp_dir("abuse-edit");
    let store = filled_redb(&dir).await;
    let id = with_redb(&store, |s| s.list_approvals("t-paused").unwrap()[0].id.clone());
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let base = &serve.base;
    let alice = login(base, "alice-token").await;
    let edit = format!("/approvals/{id}/edit");
    let sent = r#"{"order_id": "A-1", "amount": 25, "to_account": "attacker"}"#;
    let (status, page) = post(base, Some(&alice), &edit, &[("args", sent)]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{page}");
    assert!(page.contains("to_account"), "the page names the field: {page}");
    serve.stop();
    let a = with_redb(&store, |s| s.list_approvals("t-paused").unwrap().remove(0));
    assert_eq!(a.status, ApprovalStatus::Pending, "not spent: {a:?}");
    assert_eq!(a.decided_by, None);
    assert_eq!(serde_json::from_str::<Value>(&a.args).unwrap(), json!({ "order_id": "A-1", "amount": 40 }));
}

#[test]
fn look_alike_user_names_are_refused_and_count_as_one_person_for_the_two_person_rule() {
    let dir = temp_dir("abuse-names");
    let store = runtime().block_on(filled_redb(&dir));
    // Cyrillic а, Greek ο, fullwidth letters, a zero-width joiner inside the name.
    for (i, alike) in
        ["\u{430}lice", "\u{3b1}lice", "\u{ff41}\u{ff4c}\u{ff49}\u{ff43}\u{ff45}", "al\u{200d}ice"].iter().enumerate()
    {
        let users = dir.join(format!("alike-{i}.json"));
        let file = json!({ "users": [
            { "name": "alice", "token": "one", "roles": [] },
            { "name": alike, "token": "two", "roles": [] },
        ]});
        std::fs::write(&users, file.to_string()).unwrap();
        // Refused at once; a server that accepted the file keeps running, and fails the test.
        let out = start_refused(store.to_str().unwrap(), &users, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{alike:?}: {err}");
        assert!(err.contains("not confusable"), "{err}");
    }
    // One person cannot give both sign-offs under two spellings of one name.
    let id = with_redb(&store, |s| s.list_approvals("t-paused").unwrap()[0].id.clone());
    let approve = |name: &str| {
        cli(store.to_str().unwrap(), &["approve", &id, "--as", name, "--role", "irreversible", "--two-person"])
    };
    let out = approve("alice");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = approve("\u{430}lice");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the look-alike's sign-off counted: {err}");
    assert!(err.contains("needs a second approver"), "{err}");
    let a = with_redb(&store, |s| s.list_approvals("t-paused").unwrap().remove(0));
    assert!(a.status.is_waiting(), "{a:?}");
}

#[test]
fn thread_ids_with_newlines_tabs_and_format_characters_print_escaped_on_one_line() {
    let dir = temp_dir("abuse-escape");
    let store = dir.join("runs.redb");
    let id = "t\nforged  row\t\u{202E}cba\u{2066}x\u{2069}\u{200B}";
    {
        let s = agentflow::RedbStore::open(&store).unwrap();
        s.commit_step(StepCommit::new(ThreadRecord::new(id, "own\ner", "fp", 1, 1))).unwrap();
    }
    let path = store.to_str().unwrap();
    let shown = r"t\nforged  row\t\u202ecba\u2066x\u2069\u200b";
    let out = cli(path, &["threads"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.lines().count(), 2, "a header and one row: {text}");
    assert!(text.lines().nth(1).unwrap().starts_with(shown), "{text}");
    let out = cli(path, &["show", id]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("thread:")).unwrap_or_else(|| panic!("{text}"));
    assert_eq!(line, format!("thread:    {shown}"));
    for c in ['\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}', '\t'] {
        assert!(!text.contains(c), "{c:?} printed raw: {text:?}");
    }
    // JSON output escapes them too, and reads back as the id.
    let out = cli(path, &["threads", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('\u{202E}') && !text.contains('\u{200B}'), "{text:?}");
    let listed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(listed[0]["id"], id);
}
