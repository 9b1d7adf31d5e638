//! A thread's page over HTTP (`agentflow serve` as a subprocess, as in `serve.rs`): its
//! timeline says how long each step took and which durable timer a step slept on, and a last
//! row says what a paused thread waits for now (a timer, an approval; a note, when that record
//! cannot be read, in place of an error page).

use crate::inbox_common;

use std::time::Duration;

use agentflow::prelude::*;
use inbox_common::http::{get, login};
use inbox_common::*;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Nap {
    /// How long `nap` sleeps, in millis.
    pub ms: u64,
    pub woke: bool,
}

#[graph(state = Nap, start = nap)]
pub mod napping {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn nap(s: &Nap, cx: &Ctx<()>) -> Result<Step<Nap>, NodeError> {
        cx.sleep(Duration::from_millis(s.ms)).await?;
        Ok(goto!(END, Nap::update().woke(true)))
    }
}

/// The row of checkpoint `seq` in a page's timeline.
fn row<'a>(page: &'a str, thread: &str, seq: u64) -> &'a str {
    let link = format!("<td><a href=\"/threads/{thread}/at/{seq}\">");
    let at = page.find(&link).unwrap_or_else(|| panic!("no row for checkpoint {seq}: {page}"));
    let end = page[at..].find("</tr>").map_or(page.len(), |e| at + e);
    &page[at..end]
}

#[tokio::test]
async fn the_timeline_shows_how_long_each_step_took_and_the_timers_a_thread_slept_on() {
    let dir = temp_dir("timeline");
    let store = dir.join("runs.redb");
    fill(open_redb(&store)).await;
    {
        let app = napping::graph().app().store(open_redb(&store));
        for (thread, ms) in [("t-napped", 1_000), ("t-napping", 3_600_000)] {
            let run = app.runner(&()).thread(thread).run(Nap { ms, woke: false }).await.expect("a run");
            assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{thread}: {:?}", run.outcome);
        }
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let woke = app.runner(&()).thread("t-napped").resume().await.expect("resume when due");
        assert_eq!(woke.outcome, Outcome::Completed);
        assert!(woke.state.woke);
    }
    let approval = with_redb(&store, |s| s.list_approvals("t-paused").unwrap()[0].id.clone());
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let base = serve.base.as_str();
    let alice = login(base, "alice-token").await;

    // It slept a second on its timer, then finished: the step says so, with the wake time.
    let (status, page) = get(base, Some(&alice), "/threads/t-napped").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("<th>Took</th><th>Waited</th>"), "{page}");
    let input = row(&page, "t-napped", 0);
    assert!(input.contains("<td class=\"took\">-</td><td class=\"waits\"></td>"), "{input}");
    let slept = row(&page, "t-napped", 1);
    assert!(slept.contains("<td>nap</td>"), "{slept}");
    assert!(slept.contains("<td class=\"took\">1."), "the step took the second it slept, and a little more: {slept}");
    assert!(slept.contains("<td class=\"waits\">slept 1."), "{slept}");
    assert!(slept.contains(" UTC (<code>nap</code>)</td>"), "{slept}");
    assert!(!page.contains("id=\"waiting\""), "a finished thread waits for nothing: {page}");
    // Its checkpoint's page says it too.
    let (status, page) = get(base, Some(&alice), "/threads/t-napped/at/1").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("The step took 1.") && page.contains("it waited: slept 1."), "{page}");

    // Asleep for an hour: the page says until when, and that it is not yet due.
    let (_, page) = get(base, Some(&alice), "/threads/t-napping").await;
    let input = row(&page, "t-napping", 0);
    assert!(input.contains("<td class=\"took\">-</td>"), "{input}");
    let waiting = &page[page.find("id=\"waiting\"").unwrap_or_else(|| panic!("{page}"))..];
    assert!(
        waiting.contains("Sleeping until 20") && waiting.contains(" UTC (in 59m) in node <code>nap</code>"),
        "{waiting}"
    );

    // Paused for an approval: the page names it; the steps before took a moment each.
    let (_, page) = get(base, Some(&alice), "/threads/t-paused").await;
    let waiting = &page[page.find("id=\"waiting\"").unwrap_or_else(|| panic!("{page}"))..];
    assert!(waiting.contains(&format!("Waiting for a decision on approval <code>{approval}</code>")), "{waiting}");
    let checked = row(&page, "t-paused", 1);
    assert!(checked.contains(" ms</td>"), "{checked}");
}

#[tokio::test]
async fn a_thread_whose_wait_cannot_be_read_still_shows_its_page_and_says_so() {
    let dir = temp_dir("timeline-unreadable");
    let store = dir.join("runs.redb");
    add_question(open_redb(&store)).await;
    // What the paused `t-question` waits for: its pending writes' bytes, damaged.
    with_write(&store, |txn| damage_pending_writes(txn, "t-question"));
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    let alice = login(&serve.base, "alice-token").await;
    let (status, page) = get(&serve.base, Some(&alice), "/threads/t-question").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("<td id=\"status\">interrupted</td>"), "{page}");
    let waiting = &page[page.find("id=\"waiting\"").unwrap_or_else(|| panic!("{page}"))..];
    assert!(waiting.contains("What it waits for cannot be shown"), "{waiting}");
    assert!(row(&page, "t-question", 0).contains("<td class=\"took\">-</td>"), "{page}");
}
