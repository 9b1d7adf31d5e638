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
//! The server may hold the redb file while it runs: the test reads the store and resumes the
//! threads with the server stopped, and starts it again after (on another port, where the
//! people log in again).
//!
//! Screenshots of the schema error and the answer form (`inbox_browser_layout.rs` takes the
//! inbox and a thread's page) are written under cargo's target dir (`inbox-screenshots/`), or to
//! the directory `AGENTFLOW_SCREENSHOTS` names: `AGENTFLOW_SCREENSHOTS=$PWD/docs/screenshots`
//! refreshes the README's pictures. Without chromedriver the test is skipped with one line,
//! unless `CI=true`: then it fails.

use crate::inbox_common;

use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use fantoccini::Locator;
use inbox_common::browser::*;
use inbox_common::*;
use serde_json::{Value, json};

/// The window the browsers open with.
const WINDOW: (u32, u32) = (1280, 1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_edits_and_approves_in_the_browser_and_the_run_uses_the_edited_arguments() {
    let Some(driver_path) = chromedriver() else { return };
    let dir = temp_dir("browser");
    let store = filled_redb(&dir).await;
    let id = with_redb(&store, |s| s.list_approvals("t-paused").unwrap()[0].id.clone());
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let driver = start_driver(&driver_path);

    // Bob has no role for irreversible calls: his approval is refused, visibly.
    let bob = browser(&driver, &dir.join("profile-bob"), WINDOW).await;
    log_in(&bob, &serve.base, "bob-token").await;
    bob.wait().at_most(PAGE).for_element(Locator::Id(&format!("approve-{id}"))).await.unwrap().click().await.unwrap();
    let refusal = text_of(&bob, "error").await;
    assert!(refusal.contains("needs the `irreversible` role"), "{refusal}");
    assert!(refusal.contains("Nothing was changed"), "{refusal}");
    let stopped = serve.stop();
    let record = with_redb(&store, |s| s.approval(&id).unwrap().unwrap());
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert_eq!(record.decided_by, None);
    let serve = stopped.start();
    let base = serve.base.clone();
    // He leaves the inbox open.
    log_in(&bob, &base, "bob-token").await;
    bob.goto(&format!("{base}/")).await.unwrap();
    bob.wait().at_most(PAGE).for_element(Locator::Id(&format!("approval-{id}"))).await.unwrap();

    // Alice sees the call and its arguments.
    let alice = browser(&driver, &dir.join("profile-alice"), WINDOW).await;
    log_in(&alice, &base, "alice-token").await;
    let args: Value = serde_json::from_str(&text_of(&alice, &format!("args-{id}")).await).expect("arguments as JSON");
    assert_eq!(args, json!({ "order_id": "A-1", "amount": 40 }));

    // An edit that breaks the tool's schema is refused on the page.
    let field = alice.find(Locator::Id(&format!("edit-args-{id}"))).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(r#"{"order_id": "A-1", "amount": "twenty-five"}"#).await.unwrap();
    alice.find(Locator::Id(&format!("edit-{id}"))).await.unwrap().click().await.unwrap();
    let error = text_of(&alice, "error").await;
    assert!(error.contains("`args.amount` must be integer"), "{error}");
    screenshot(&alice, "edit-refused.png").await;
    // (It changed nothing: the edit she makes next is the first decision, see the audit log below.)

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

    // Her edit is the one decision recorded: neither Bob's refused approval nor her refused
    // edit left anything.
    let stopped = serve.stop();
    let record = with_redb(&store, |s| s.approval(&id).unwrap().unwrap());
    assert_eq!((record.status, record.decided_by.as_deref()), (ApprovalStatus::Approved, Some("alice")));
    let audit = with_redb(&store, |s| s.list_audit("t-paused").unwrap());
    let decisions: Vec<(&str, &str)> = audit
        .iter()
        .filter(|e| e.kind.starts_with("approval.") && e.kind != "approval.requested")
        .map(|e| (e.kind.as_str(), e.actor.as_str()))
        .collect();
    assert_eq!(decisions, [("approval.approved", "alice")], "{audit:?}");

    // The thread completes with the edited arguments: the tool echoes what it received.
    let done = resume(&store).await;
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.clone().unwrap()["result"], json!({ "refunded": 25, "order_id": "A-1" }));
    assert_eq!(done.state.log, vec!["checked order A-1".to_string(), "paid".to_string()]);
    // And a second thread waits in `cx.interrupt`.
    add_question(open_redb(&store)).await;

    let serve = stopped.start();
    let base = serve.base.clone();
    log_in(&alice, &base, "alice-token").await;
    alice.goto(&format!("{base}/threads/t-paused")).await.unwrap();
    assert_eq!(text_of(&alice, "status").await, "completed");
    let approvals = text_of(&alice, "approvals").await;
    assert!(approvals.contains("alice") && approvals.contains(r#""amount":25"#), "{approvals}");

    // The thread waiting in `cx.interrupt`: Alice answers it on the page, and the app's plain
    // resume continues with her answer.
    alice.goto(&format!("{base}/")).await.unwrap();
    let asks = text_of(&alice, "interrupt-t-question").await;
    assert!(asks.contains("ship it?"), "{asks}");
    let field = alice.find(Locator::Id("answer-value-t-question")).await.unwrap();
    field.send_keys(r#""yes, ship it""#).await.unwrap();
    screenshot(&alice, "interrupt.png").await;
    alice.find(Locator::Id("answer-t-question")).await.unwrap().click().await.unwrap();
    let answered = text_when(&alice, "interrupt-t-question", |t| t.contains("Answered by")).await;
    assert!(answered.contains("Answered by alice"), "{answered}");
    serve.stop();
    let done = questions::graph().app().store(open_redb(&store)).runner(&()).thread("t-question").resume().await;
    let done = done.expect("resume with the answer given in the browser");
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.answer.as_deref(), Some("yes, ship it"));

    alice.close().await.unwrap();
    bob.close().await.unwrap();
}
