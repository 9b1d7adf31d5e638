//! A thread's event stream read by a browser's own `EventSource`: headless Chromium driven
//! through chromedriver (WebDriver), logged in to `examples/server.rs`'s inbox, runs a script in
//! the inbox's page that opens `new EventSource('/api/threads/T/stream')` (the session cookie is
//! its credential: an EventSource sends no other header) while a `digest` runs, and collects the
//! events until `RUN_FINISHED`. Without chromedriver the test is skipped with one line, unless
//! `CI=true`: then it fails (`.ci/chromium.sh` installs Debian's chromium and chromium-driver).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::server::{Served, api};
use crate::sse_reader::SseReader;
use crate::stream::wait_for_thread;
use crate::stream_ag_ui::digest_event_types;
use crate::support::temp::temp_dir;

#[path = "../../agentflow/tests/cli/inbox_common/browser.rs"]
#[allow(dead_code, reason = "the inbox browser tests' driver and session helpers; this test uses a part")]
mod browser;

/// Run in the page: opens an EventSource on the URL given and answers the events it got, each
/// `{id, data}`, once one is `RUN_FINISHED` or `RUN_ERROR` (or an error and those it got).
const COLLECT: &str = r#"
const [url, done] = arguments;
const events = [];
const source = new EventSource(url);
const timer = setTimeout(() => {
  source.close();
  done({ error: "no RUN_FINISHED within 25 s", events });
}, 25000);
source.onmessage = (message) => {
  const data = JSON.parse(message.data);
  events.push({ id: message.lastEventId, data });
  if (data.type === "RUN_FINISHED" || data.type === "RUN_ERROR") {
    clearTimeout(timer);
    source.close();
    done({ events });
  }
};
source.onerror = () => {
  if (source.readyState === EventSource.CLOSED) {
    clearTimeout(timer);
    done({ error: "the browser closed the stream", events });
  }
};
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_the_inbox_follows_a_running_thread_with_the_browsers_event_source() {
    let Some(driver_path) = browser::chromedriver() else { return };
    let dir = temp_dir("stream-browser");
    let served = Served::start(&["--db", dir.join("server.redb").to_str().unwrap()]);
    let base = served.base.clone();
    let driver = browser::start_driver(&driver_path);
    let page = browser::browser(&driver, &dir.join("profile"), (1024, 768)).await;
    browser::log_in(&page, &base, "bob-demo-token").await;

    // A digest whose sections take a moment each: the page follows it while it runs.
    let sections = 3;
    let (status, queued) = api(
        &base,
        "agent-demo-token",
        "POST",
        "/api/threads",
        Some(json!({ "graph": "digest", "thread": "digest-browser", "input": { "topic": "tides", "sections": sections, "pause_ms": 300 } })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    wait_for_thread(&base, "digest-browser").await;
    let got = page
        .execute_async(COLLECT, vec![json!("/api/threads/digest-browser/stream")])
        .await
        .expect("the page's script answered");
    if got.get("error").is_some() {
        // An EventSource tells a page nothing of a refusal: ask the route with fetch.
        let why = page
            .execute_async(
                "const [url, done] = arguments; fetch(url, { signal: AbortSignal.timeout(3000) }).then(async r => done(r.status + ' ' + (await r.text()))).catch(e => done(String(e)));",
                vec![json!("/api/threads/digest-browser/stream?follow=false")],
            )
            .await;
        panic!("{got}: {why:?}");
    }
    let events = got["events"].as_array().cloned().unwrap_or_default();
    let types: Vec<&str> = events.iter().map(|e| e["data"]["type"].as_str().unwrap_or_default()).collect();
    assert_eq!(types, digest_event_types(sections), "{got}");
    assert_eq!(events.last().unwrap()["data"]["result"]["status"], "completed", "{got}");

    // The browser got every event with its id, as a program reading the same stream does.
    let mut reader =
        SseReader::open(&format!("{base}/api/threads/digest-browser/stream"), "bob-demo-token", None).await;
    for (n, seen) in events.iter().enumerate() {
        let read = reader.next_within(Duration::from_secs(20)).await;
        assert_eq!(seen["id"].as_str(), read.id.as_deref(), "event {n}'s id");
        assert_eq!(seen["data"], read.json(), "event {n}");
    }
    let ids: Vec<(u64, u32, u32)> = events
        .iter()
        .map(|e| {
            let id = e["id"].as_str().unwrap_or_default();
            let parts: Vec<u32> = id.split('-').map(|p| p.parse().unwrap()).collect();
            (u64::from(parts[0]), parts[1], parts[2])
        })
        .collect();
    assert!(ids.windows(2).all(|p| p[0] < p[1]), "ids not strictly increasing: {ids:?}");
    page.close().await.unwrap();
}
