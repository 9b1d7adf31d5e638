//! The inbox's first screen in a real browser (headless Chromium through chromedriver, as in
//! `inbox_browser.rs`): at 1300x1000, with the largest graph the examples draw, the decision is
//! in view without scrolling, and the thread's timeline says how long each step took and what it
//! waited for.
//!
//! A refund of 120 waits for its approval at the end of `escalation` (nine nodes, a branch, a
//! fan-out and a loop: as large as `examples/support_router.rs`, the examples' largest graph).
//! - Alice opens the inbox: the Approve and Reject buttons end above the window's bottom edge,
//!   with the graph drawn on the page. She approves.
//! - The test resumes the thread: the refund runs and `settle` sleeps on a durable timer; the
//!   thread's page says until when. Resumed once it is due, the thread completes, and the
//!   timeline shows each step's duration, the wait for the approval and the sleep.
//!
//! The inbox and the thread's page are saved as `inbox.png` and `thread.png` (see
//! `inbox_browser.rs` for where). The store is read and the thread resumed with the server
//! stopped (it may hold the redb file while it runs), started again after (Alice logs in anew).

use crate::inbox_common;

use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use fantoccini::{Client, Locator};
use inbox_common::browser::*;
use inbox_common::*;
use serde_json::{Value, json};

/// The window: a laptop's browser.
const WINDOW: (u32, u32) = (1300, 1000);

/// Where `#{id}` ends, measured without scrolling: its bounding box's bottom edge, the
/// window's inner height and the page's scroll offset.
async fn bottom_of(c: &Client, id: &str) -> (f64, f64, f64) {
    let script = "const e = document.getElementById(arguments[0]);\
                  return [e.getBoundingClientRect().bottom, window.innerHeight, window.scrollY];";
    let v = c.execute(script, vec![json!(id)]).await.expect("measure the element");
    let n = |i: usize| v[i].as_f64().unwrap_or_else(|| panic!("{v}"));
    (n(0), n(1), n(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decision_is_in_view_beside_a_large_graph_and_the_timeline_shows_the_waits() {
    let Some(driver_path) = chromedriver() else { return };
    let dir = temp_dir("layout");
    let store = dir.join("runs.redb");
    add_large(open_redb(&store)).await;
    let id = with_redb(&store, |s| s.list_approvals("t-large").unwrap()[0].id.clone());
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let base = serve.base.clone();
    let driver = start_driver(&driver_path);

    let alice = browser(&driver, &dir.join("profile-alice"), WINDOW).await;
    log_in(&alice, &base, "alice-token").await;
    alice.wait().at_most(PAGE).for_element(Locator::Id(&format!("approve-{id}"))).await.unwrap();
    // The page draws the whole graph: its nine nodes, START and END.
    let boxes = alice.execute("return document.querySelectorAll('svg.graph rect').length;", vec![]).await.unwrap();
    assert_eq!(boxes, json!(11), "the graph's boxes");
    let args: Value = serde_json::from_str(&text_of(&alice, &format!("args-{id}")).await).expect("arguments as JSON");
    assert_eq!(args, json!({ "order_id": "B-7", "amount": 120 }));

    // The decision is on the first screen, beside the arguments.
    for button in [format!("approve-{id}"), format!("reject-{id}")] {
        let (bottom, height, scrolled) = bottom_of(&alice, &button).await;
        eprintln!("#{button}: bottom edge {bottom}px, window {height}px high");
        assert_eq!(scrolled, 0.0, "the page was not scrolled");
        assert!(height <= f64::from(WINDOW.1), "the window is {height}px high");
        assert!(bottom <= height, "#{button} ends at {bottom}px, below the window's {height}px");
    }
    let (args_bottom, height, _) = bottom_of(&alice, &format!("args-{id}")).await;
    assert!(args_bottom <= height, "the arguments end at {args_bottom}px, below the window's {height}px");
    // The picture shows the whole card: the window grows to the page's height for it.
    let page = alice.execute("return document.documentElement.scrollHeight;", vec![]).await.unwrap();
    let chrome = WINDOW.1.saturating_sub(height as u32);
    let grown = u32::try_from(page.as_u64().unwrap_or_default()).unwrap_or(2000) + chrome;
    alice.set_window_size(WINDOW.0, grown).await.unwrap();
    screenshot(&alice, "inbox.png").await;
    alice.set_window_size(WINDOW.0, WINDOW.1).await.unwrap();

    alice.find(Locator::Id(&format!("approve-{id}"))).await.unwrap().click().await.unwrap();
    let flash = text_of(&alice, "flash").await;
    assert!(flash.contains("is APPROVED by alice"), "{flash}");
    let stopped = serve.stop();
    assert_eq!(with_redb(&store, |s| s.approval(&id).unwrap().unwrap().status), ApprovalStatus::Approved);

    // The refund runs; `settle` sleeps on its timer, and the thread's page says until when.
    let slept = resume_large(open_redb(&store)).await;
    assert!(matches!(slept.outcome, Outcome::Sleeping { .. }), "{:?}", slept.outcome);
    assert_eq!(slept.state.receipt.clone().unwrap()["result"], json!({ "refunded": 120, "order_id": "B-7" }));
    let serve = stopped.start();
    let base = serve.base.clone();
    log_in(&alice, &base, "alice-token").await;
    alice.goto(&format!("{base}/threads/t-large")).await.unwrap();
    let waiting = text_of(&alice, "waiting").await;
    assert!(waiting.contains("Sleeping until") && waiting.contains("settle"), "{waiting}");

    // Due: resumed, it completes.
    let stopped = serve.stop();
    tokio::time::sleep(SETTLE).await;
    let done = resume_large(open_redb(&store)).await;
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(done.state.settled);
    let serve = stopped.start();
    let base = serve.base.clone();
    log_in(&alice, &base, "alice-token").await;
    alice.goto(&format!("{base}/threads/t-large")).await.unwrap();
    assert_eq!(text_of(&alice, "status").await, "completed");
    let timeline = text_of(&alice, "timeline").await;
    // Each step but the input says how long it took; the step that ran `settle` slept on the
    // timer for 1.5 s, and the one that ran the refund waited for alice's approval.
    let rows: Vec<&str> = timeline.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(rows[0].contains("Took") && rows[0].contains("Waited"), "{timeline}");
    // The last step ran `settle` (the 1.5 s timer; measured from the step's start, so a little
    // more), the one before it the refund (which waited for alice).
    let settle = rows.last().copied().unwrap_or_default();
    assert!(settle.contains("loop settle") && settle.contains("slept 1."), "{timeline}");
    assert!(settle.contains(" UTC (settle)"), "{settle}");
    let refunded = rows.iter().find(|r| r.contains("loop refund_order")).unwrap_or_else(|| panic!("{timeline}"));
    assert!(refunded.contains("approval of refund: ") && refunded.contains("approved by alice"), "{refunded}");
    assert!(rows[1].starts_with("0 0 input") && rows[1].ends_with(" -"), "{timeline}");
    for row in &rows[2..] {
        assert!(row.contains(" ms") || row.contains(" s"), "every step but the input says how long it took: {row}");
    }
    assert!(alice.find(Locator::Id("waiting")).await.is_err(), "a finished thread waits for nothing");
    screenshot(&alice, "thread.png").await;

    alice.close().await.unwrap();
    drop(serve);
}
