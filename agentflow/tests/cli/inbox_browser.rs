//! The approval inbox in a real browser: headless Chromium driven through chromedriver
//! (WebDriver), against `agentflow serve` run as a subprocess on a redb store.
//!
//! A run pauses before a refund of 40 on order A-1 (irreversible, requested by `agent`).
//! - Bob (no role) logs in, opens the inbox, clicks Approve: the page says he lacks the role,
//!   and the record is still pending. He goes back to the inbox and leaves it open.
//! - Alice (role `irreversible`) logs in, sees the arguments, submits an edit that breaks the
//!   tool's schema (the page shows the schema error and the form again), fixes the amount to 25
//!   there and approves. Bob's open inbox reloads by itself (the live poll) and shows nothing waiting.
//! - The test resumes the thread: the tool receives amount 25 and the thread completes.
//! - A second thread waits in `cx.interrupt`: Alice types an answer on the inbox and presses
//!   Answer; the app's plain `resume()` continues the thread with it.
//!
//! Screenshots of the inbox, the schema error, the finished thread's page and the answer form
//! are written under cargo's target dir (`inbox-screenshots/`), or to the directory
//! `AGENTFLOW_SCREENSHOTS` names: `AGENTFLOW_SCREENSHOTS=$PWD/docs/screenshots` refreshes the
//! README's pictures. Without chromedriver the test is skipped with one line, unless
//! `CI=true`: then it fails.

use crate::inbox_common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use fantoccini::{Client, ClientBuilder, Locator};
use inbox_common::*;
use serde_json::{Value, json};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a page may take to show what the test waits for.
const PAGE: Duration = Duration::from_secs(20);

/// chromedriver on a free loopback port; killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_driver(path: &str) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    // Ready when it accepts connections.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "chromedriver did not listen on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver { child, url: format!("http://127.0.0.1:{port}") }
}

/// A browser session with its own profile (so its own cookies).
async fn browser(driver: &Driver, profile: &Path) -> Client {
    let args = json!([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1500",
        format!("--user-data-dir={}", profile.display()),
    ]);
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert("goog:chromeOptions".into(), json!({ "binary": CHROMIUM, "args": args }));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a chromedriver session")
}

async fn log_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/login")).await.unwrap();
    c.wait().at_most(PAGE).for_element(Locator::Id("token")).await.unwrap().send_keys(token).await.unwrap();
    c.find(Locator::Id("login")).await.unwrap().click().await.unwrap();
    // The inbox, with the logout button of a session.
    if let Err(e) = c.wait().at_most(PAGE).for_element(Locator::Id("logout")).await {
        panic!("{token} did not get logged in ({e}): {}", c.source().await.unwrap_or_default());
    }
}

async fn text_of(c: &Client, id: &str) -> String {
    text_when(c, id, |_| true).await
}

/// The text of `#{id}` once `ready` accepts it (the page may still be the one before a click,
/// or be replaced while it is read: an open inbox reloads itself); the last text seen after
/// [`PAGE`] otherwise.
async fn text_when(c: &Client, id: &str, ready: impl Fn(&str) -> bool) -> String {
    let began = std::time::Instant::now();
    loop {
        let found = c.wait().at_most(PAGE).for_element(Locator::Id(id)).await;
        let element = found.unwrap_or_else(|e| panic!("no #{id}: {e}"));
        match element.text().await {
            Ok(text) if ready(&text) || began.elapsed() >= PAGE => return text,
            Ok(_) => {}
            // Replaced between the find and the read: find it again on the new page.
            Err(_) if began.elapsed() < PAGE => {}
            Err(e) => panic!("#{id} could not be read: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the screenshots go: `AGENTFLOW_SCREENSHOTS`, or a directory under cargo's target dir,
/// so a test run leaves the committed pictures alone.
fn screenshots() -> PathBuf {
    let dir = match std::env::var_os("AGENTFLOW_SCREENSHOTS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_TARGET_TMPDIR")).join("inbox-screenshots"),
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "chromedriver returned no PNG for {name}");
    std::fs::write(screenshots().join(name), png).expect("write the screenshot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_edits_and_approves_in_the_browser_and_the_run_uses_the_edited_arguments() {
    let driver_path = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| CHROMEDRIVER.to_string());
    if !Path::new(&driver_path).exists() || !Path::new(CHROMIUM).exists() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "chromedriver ({driver_path}) or chromium ({CHROMIUM}) is missing under CI: .ci/chromium.sh installs them"
        );
        eprintln!(
            "SKIPPED the browser test: {driver_path} or {CHROMIUM} is missing (apt-get install chromium chromium-driver)"
        );
        return;
    }
    let dir = temp_dir("browser");
    let store = filled_redb(&dir).await;
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let base = serve.base.clone();
    let id = with_redb(&store, |s| s.list_approvals("t-paused").unwrap()[0].id.clone());
    let driver = start_driver(&driver_path);

    // Bob has no role for irreversible calls: his approval is refused, visibly.
    let bob = browser(&driver, &dir.join("profile-bob")).await;
    log_in(&bob, &base, "bob-token").await;
    bob.wait().at_most(PAGE).for_element(Locator::Id(&format!("approve-{id}"))).await.unwrap().click().await.unwrap();
    let refusal = text_of(&bob, "error").await;
    assert!(refusal.contains("needs the `irreversible` role"), "{refusal}");
    assert!(refusal.contains("Nothing was changed"), "{refusal}");
    let record = with_redb(&store, |s| s.approval(&id).unwrap().unwrap());
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert_eq!(record.decided_by, None);
    // He leaves the inbox open.
    bob.goto(&format!("{base}/")).await.unwrap();
    bob.wait().at_most(PAGE).for_element(Locator::Id(&format!("approval-{id}"))).await.unwrap();

    // Alice sees the call and its arguments.
    let alice = browser(&driver, &dir.join("profile-alice")).await;
    log_in(&alice, &base, "alice-token").await;
    let args: Value = serde_json::from_str(&text_of(&alice, &format!("args-{id}")).await).expect("arguments as JSON");
    assert_eq!(args, json!({ "order_id": "A-1", "amount": 40 }));
    screenshot(&alice, "inbox.png").await;

    // An edit that breaks the tool's schema is refused on the page.
    let field = alice.find(Locator::Id(&format!("edit-args-{id}"))).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(r#"{"order_id": "A-1", "amount": "twenty-five"}"#).await.unwrap();
    alice.find(Locator::Id(&format!("edit-{id}"))).await.unwrap().click().await.unwrap();
    let error = text_of(&alice, "error").await;
    assert!(error.contains("`args.amount` must be integer"), "{error}");
    screenshot(&alice, "edit-refused.png").await;
    assert_eq!(with_redb(&store, |s| s.approval(&id).unwrap().unwrap().status), ApprovalStatus::Pending);

    // The refusal page gives the form back with what she sent: she fixes the amount there.
    let field = alice.wait().at_most(PAGE).for_element(Locator::Id(&format!("edit-args-{id}"))).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(r#"{"order_id": "A-1", "amount": 25}"#).await.unwrap();
    alice.find(Locator::Id(&format!("edit-{id}"))).await.unwrap().click().await.unwrap();
    let flash = text_of(&alice, "flash").await;
    assert!(flash.contains("is APPROVED by alice"), "{flash}");
    assert!(flash.contains(r#"{"amount":25,"order_id":"A-1"}"#), "{flash}");

    // Bob's open inbox learns of the decision by itself and reloads.
    bob.wait().at_most(PAGE).for_element(Locator::Id("empty")).await.expect("Bob's inbox reloads after the decision");

    // The thread completes with the edited arguments: the tool echoes what it received.
    let done = resume(&store).await;
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.clone().unwrap()["result"], json!({ "refunded": 25, "order_id": "A-1" }));
    assert_eq!(done.state.log, vec!["checked order A-1".to_string(), "paid".to_string()]);

    alice.goto(&format!("{base}/threads/t-paused")).await.unwrap();
    assert_eq!(text_of(&alice, "status").await, "completed");
    let approvals = text_of(&alice, "approvals").await;
    assert!(approvals.contains("alice") && approvals.contains(r#""amount":25"#), "{approvals}");
    screenshot(&alice, "thread.png").await;

    // A thread waiting in `cx.interrupt`: Alice answers it on the page, and the app's plain
    // resume continues with her answer.
    add_question(open_redb(&store)).await;
    alice.goto(&format!("{base}/")).await.unwrap();
    let asks = text_of(&alice, "interrupt-t-question").await;
    assert!(asks.contains("ship it?"), "{asks}");
    let field = alice.find(Locator::Id("answer-value-t-question")).await.unwrap();
    field.send_keys(r#""yes, ship it""#).await.unwrap();
    screenshot(&alice, "interrupt.png").await;
    alice.find(Locator::Id("answer-t-question")).await.unwrap().click().await.unwrap();
    let answered = text_when(&alice, "interrupt-t-question", |t| t.contains("Answered by")).await;
    assert!(answered.contains("Answered by alice"), "{answered}");
    let done = questions::graph().app().store(open_redb(&store)).runner(&()).thread("t-question").resume().await;
    let done = done.expect("resume with the answer given in the browser");
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.answer.as_deref(), Some("yes, ship it"));

    alice.close().await.unwrap();
    bob.close().await.unwrap();
    drop(serve);
}
