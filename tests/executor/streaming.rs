//! Streaming a run: `Runner::stream` and its modes.
//!
//! - `events` items are the events `on_event` receives for the same run, in
//!   the same order; `updates` items are the updates of `NodeFinished`.
//! - `values` gives one state per super-step, equal to the thread's history.
//! - `custom` items come from `cx.emit`, with the node, step and instance.
//! - `messages` items are the chunks of the model's replies (the
//!   `ScriptedModel` test double streams word by word); usage is counted as
//!   without a stream.
//! - A slow reader sees every item and the run never runs ahead of it by
//!   more than the buffer.
//! - The stream is `Send`: it runs in a spawned task.
//! - The result always ends the stream, errors included; `finish` returns it.
//! - Dropping the stream stops the run; the thread resumes from its last step.
//! - `Event`'s `Display` is one line.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::message::Message;
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel, Usage, estimate_tokens};
use agentflow::prelude::*;
use agentflow::{Event, RedbStore, Run, RunError, Store, StreamItem, StreamMode, StreamPart};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A bound on every test so a regression hangs no CI job.
const GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Board {
    tickers: Vec<String>,
    #[reduce(append)]
    notes: Vec<String>,
    summary: String,
}

/// The model (a scripted test double) and a check that fails once.
pub struct Desk {
    model: ScriptedModel,
    flaky: AtomicBool,
}

/// The test double answers `"<ticker> looks fine today"`, with a usage
/// estimated from the words, whatever order the instances ask in.
fn desk() -> Desk {
    let model = ScriptedModel::new().respond_with(|req: &ChatRequest| {
        let asked = req.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let text = format!("{asked} looks fine today");
        let usage = Usage::new(estimate_tokens(&asked), estimate_tokens(&text));
        Ok(ChatReply { usage: Some(usage), ..ChatReply::text(text) })
    });
    Desk { model, flaky: AtomicBool::new(true) }
}

#[graph(state = Board, deps = Desk, start = plan)]
mod board {
    use super::*;

    #[node(goto = [analyst, check])]
    async fn plan(s: &Board) -> Step<Board> {
        goto!([each(analyst, s.tickers.clone()), check])
    }

    #[node(goto = [summarize], parallel = 2)]
    async fn analyst(_s: &Board, #[payload] ticker: &str, cx: &Ctx<Desk>) -> Result<Step<Board>, NodeError> {
        cx.emit(json!({ "ticker": ticker, "stage": "asking" })).await?;
        let reply = cx.chat(&cx.deps().model, &ChatRequest::new(vec![Message::human(ticker)])).await?;
        cx.emit(json!({ "ticker": ticker, "stage": "done" })).await?;
        Ok(goto!(summarize, Board::update().notes(vec![reply.text])))
    }

    #[node(goto = [summarize], retry(attempts = 2, base = 1ms, jitter = false))]
    async fn check(_s: &Board, desk: &Desk) -> Result<Step<Board>, NodeError> {
        if desk.flaky.swap(false, Ordering::SeqCst) {
            return Err(NodeError::transient("the quote feed timed out"));
        }
        Ok(goto!(summarize, Board::update().notes(vec!["checked".into()])))
    }

    #[node(goto = [END])]
    async fn summarize(s: &Board) -> Step<Board> {
        goto!(END, Board::update().summary(format!("{} notes", s.notes.len())))
    }
}

fn input() -> Board {
    Board { tickers: vec!["ACME".into(), "GLOBEX".into(), "INITECH".into()], ..Board::default() }
}

/// Every item of `stream`, the last one (`Done`) included, read through the
/// `Stream` trait.
async fn collect<S: State>(stream: agentflow::RunStream<'_, S>) -> Vec<StreamItem<S>> {
    tokio::time::timeout(GUARD, futures_util::StreamExt::collect(stream)).await.expect("no hang")
}

/// The run's result, which must be the last item and only there.
fn done<S: State>(items: &mut Vec<StreamItem<S>>) -> Result<Run<S>, RunError> {
    let Some(StreamItem { part: StreamPart::Done(result), .. }) = items.pop() else {
        panic!("the last item is `Done`");
    };
    assert!(items.iter().all(|i| !matches!(i.part, StreamPart::Done(_))), "`Done` comes once, last");
    result
}

#[tokio::test]
async fn events_of_a_stream_are_the_events_of_on_event_in_the_same_order() {
    let app = board::graph().app();
    let (deps, seen) = (desk(), Arc::new(Mutex::new(Vec::new())));
    let sink = Arc::clone(&seen);
    let plain = app.runner(&deps).on_event(move |e: Event<Board>| sink.lock().unwrap().push(e)).run(input()).await;
    let plain = plain.expect("a valid run");
    assert_eq!(plain.outcome, Outcome::Completed);
    let expected: Vec<String> = seen.lock().unwrap().iter().map(|e| format!("{e:?}")).collect();
    assert!(expected.iter().any(|e| e.starts_with("NodeRetrying")), "the run has a retry: {expected:#?}");
    assert!(expected.iter().any(|e| e.starts_with("Activity(ModelCall")), "and model calls");

    let deps = desk();
    let mut items = collect(app.runner(&deps).stream_modes([StreamMode::Events]).stream(input())).await;
    let run = done(&mut items).expect("a valid run");
    let streamed: Vec<String> = items
        .iter()
        .map(|i| {
            assert!(i.namespace.is_empty(), "the root graph's items have an empty namespace");
            match &i.part {
                StreamPart::Event(e) => format!("{e:?}"),
                other => panic!("only events were asked for: {other:?}"),
            }
        })
        .collect();
    assert_eq!(streamed, expected);
    assert_eq!(run.state, plain.state);
    assert_eq!(run.usage, plain.usage, "the same calls and tokens are counted");
}

#[tokio::test]
async fn a_buffer_of_one_loses_no_event_of_concurrent_instances() {
    let app = board::graph().app();
    let (deps, seen) = (desk(), Arc::new(Mutex::new(Vec::new())));
    let sink = Arc::clone(&seen);
    let plain = app.runner(&deps).on_event(move |e: Event<Board>| sink.lock().unwrap().push(format!("{e:?}")));
    plain.run(input()).await.expect("a valid run");
    let mut expected = seen.lock().unwrap().clone();

    // Every item waits for the reader; the instances may interleave
    // differently, but every event is there, once.
    let deps = desk();
    let modes = StreamMode::ALL;
    let mut items = collect(app.runner(&deps).stream_modes(modes).stream_buffer(1).stream(input())).await;
    let run = done(&mut items).expect("a valid run");
    assert_eq!(run.outcome, Outcome::Completed);
    let mut streamed: Vec<String> = items
        .iter()
        .filter_map(|i| match &i.part {
            StreamPart::Event(e) => Some(format!("{e:?}")),
            _ => None,
        })
        .collect();
    expected.sort();
    streamed.sort();
    assert_eq!(streamed, expected);
}

#[tokio::test]
async fn updates_are_the_updates_of_the_finished_nodes_with_their_instance() {
    let app = board::graph().app();
    let deps = desk();
    let modes = [StreamMode::Updates, StreamMode::Events];
    let mut items = collect(app.runner(&deps).stream_modes(modes).stream(input())).await;
    done(&mut items).expect("a valid run");
    let mut finished = Vec::new();
    let mut updates = Vec::new();
    for item in &items {
        match &item.part {
            StreamPart::Event(Event::NodeFinished { step, node, instance, update, .. }) => {
                finished.push((*step, *node, *instance, format!("{update:?}")));
            }
            StreamPart::Update { step, node, instance, update } => {
                updates.push((*step, *node, *instance, format!("{update:?}")));
            }
            _ => {}
        }
    }
    assert_eq!(updates, finished);
    let analysts: Vec<Option<u32>> = updates.iter().filter(|u| u.1 == "analyst").map(|u| u.2).collect();
    assert_eq!(analysts, [Some(0), Some(1), Some(2)], "in payload order, each with its instance index");
    assert!(updates[1].3.contains("ACME looks fine today"), "{updates:?}");
}

#[tokio::test]
async fn values_give_one_state_per_super_step_equal_to_the_history() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = board::graph().app().store(store);
    let deps = desk();
    let stream = app.runner(&deps).thread("values").stream_modes([StreamMode::Values]).stream(input());
    let mut items = collect(stream).await;
    let run = done(&mut items).expect("a valid run");
    let values: Vec<(u64, Board)> = items
        .into_iter()
        .map(|i| match i.part {
            StreamPart::Values { step, state } => (u64::from(step), state),
            other => panic!("only values were asked for: {other:?}"),
        })
        .collect();
    let history: Vec<(u64, Board)> = app
        .history("values")
        .unwrap()
        .into_iter()
        .filter(|c| c.parent.is_some())
        .map(|c| (c.metadata.step, app.state_at("values", c.seq).unwrap().expect("stored").state))
        .collect();
    assert_eq!(values.len(), 3, "plan, [analyst x3, check], summarize");
    assert_eq!(values, history);
    assert_eq!(values.last().map(|v| &v.1), Some(&run.state));
}

#[tokio::test]
async fn custom_items_come_from_emit_with_their_node_and_instance() {
    let app = board::graph().app();
    let deps = desk();
    let mut items = collect(app.runner(&deps).stream_modes([StreamMode::Custom]).stream(input())).await;
    done(&mut items).expect("a valid run");
    let mut custom: Vec<(u32, &str, Option<u32>, serde_json::Value)> = items
        .into_iter()
        .map(|i| match i.part {
            StreamPart::Custom { step, node, instance, value } => (step, node, instance, value),
            other => panic!("only custom items were asked for: {other:?}"),
        })
        .collect();
    assert_eq!(custom.len(), 6, "two per analyst instance: {custom:?}");
    // Each instance's own items are in the order it emitted them.
    for (i, ticker) in ["ACME", "GLOBEX", "INITECH"].into_iter().enumerate() {
        let mine: Vec<_> = custom.iter().filter(|c| c.2 == Some(i as u32)).map(|c| c.3.clone()).collect();
        let want = [json!({"ticker": ticker, "stage": "asking"}), json!({"ticker": ticker, "stage": "done"})];
        assert_eq!(mine, want, "instance {i}");
    }
    custom.sort_by_key(|c| c.2);
    assert!(custom.iter().all(|c| c.0 == 1 && c.1 == "analyst"));
}

#[tokio::test]
async fn emit_without_a_custom_stream_does_nothing() {
    // Neither a plain run nor a stream of other modes sees the values.
    let app = board::graph().app();
    let deps = desk();
    assert_eq!(app.run(input(), &deps).await.unwrap().outcome, Outcome::Completed);
    let deps = desk();
    let mut items = collect(app.runner(&deps).stream_modes([StreamMode::Updates]).stream(input())).await;
    done(&mut items).expect("a valid run");
    assert!(items.iter().all(|i| matches!(i.part, StreamPart::Update { .. })));
}

#[tokio::test]
async fn messages_are_the_chunks_of_the_replies_and_usage_counts_as_without_a_stream() {
    let app = board::graph().app();
    let deps = desk();
    let plain = app.run(input(), &deps).await.unwrap();
    let deps = desk();
    let mut items = collect(app.runner(&deps).stream_modes([StreamMode::Messages]).stream(input())).await;
    let run = done(&mut items).expect("a valid run");
    assert_eq!(run.state, plain.state);
    assert_eq!(run.usage, plain.usage);
    assert_eq!(run.usage.model_calls, 3);
    for (i, ticker) in ["ACME", "GLOBEX", "INITECH"].into_iter().enumerate() {
        let chunks: Vec<_> = items
            .iter()
            .filter_map(|item| match &item.part {
                StreamPart::Message { node: "analyst", instance, chunk, .. } if *instance == Some(i as u32) => {
                    Some(chunk)
                }
                StreamPart::Message { .. } => None,
                other => panic!("only messages were asked for: {other:?}"),
            })
            .collect();
        let text: String = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(text, format!("{ticker} looks fine today"));
        assert!(chunks.len() >= 4, "streamed word by word: {chunks:?}");
        let usage: Vec<_> = chunks.iter().filter_map(|c| c.usage).collect();
        assert_eq!(usage, [Usage::new(1, 4)], "usage comes once, last");
    }
}

// ------------------------------------------------------------------ pacing

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Tally {
    #[reduce(add)]
    sent: u32,
}

/// How many values the node emitted so far.
#[derive(Default)]
pub struct Counter {
    emitted: AtomicUsize,
}

const CHATTY: usize = 200;

#[graph(state = Tally, deps = Counter, start = chatty)]
mod chatty {
    use super::*;

    #[node(goto = [END])]
    async fn chatty(_s: &Tally, cx: &Ctx<Counter>) -> Result<Step<Tally>, NodeError> {
        for i in 0..CHATTY {
            cx.emit(i).await?;
            cx.deps().emitted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(goto!(END, Tally::update().sent(CHATTY as u32)))
    }
}

#[tokio::test]
async fn a_slow_reader_sees_every_item_and_the_run_waits_for_it() {
    const BUFFER: usize = 4;
    let app = chatty::graph().app();
    let deps = Counter::default();
    let mut stream =
        app.runner(&deps).stream_modes([StreamMode::Custom]).stream_buffer(BUFFER).stream(Tally::default());
    let mut read = 0usize;
    let result = loop {
        let item = tokio::time::timeout(GUARD, stream.next()).await.expect("no hang").expect("ends with Done");
        match item.part {
            StreamPart::Custom { value, .. } => {
                assert_eq!(value, json!(read), "every item, in order");
                read += 1;
                // The node is never more than the buffer ahead of the reader.
                let emitted = deps.emitted.load(Ordering::SeqCst);
                assert!(emitted <= read + BUFFER, "emitted {emitted} with {read} read");
                // A slow reader: let everything else run before reading on.
                for _ in 0..5 {
                    tokio::task::yield_now().await;
                }
            }
            StreamPart::Done(result) => break result,
            other => panic!("only custom items were asked for: {other:?}"),
        }
    };
    assert_eq!(read, CHATTY);
    assert_eq!(result.expect("a valid run").state.sent, CHATTY as u32);
    assert!(stream.next().await.is_none(), "nothing after `Done`");
}

#[tokio::test]
async fn finish_runs_to_the_end_without_reading_and_returns_the_result() {
    let app = chatty::graph().app();
    let deps = Counter::default();
    let mut stream = app.runner(&deps).stream_modes([StreamMode::Custom]).stream_buffer(1).stream(Tally::default());
    let first = stream.next().await.expect("an item");
    assert!(matches!(first.part, StreamPart::Custom { .. }));
    let run = tokio::time::timeout(GUARD, stream.finish()).await.expect("no hang").expect("not read yet");
    assert_eq!(run.expect("a valid run").state.sent, CHATTY as u32);
    assert_eq!(deps.emitted.load(Ordering::SeqCst), CHATTY);
}

#[tokio::test]
async fn the_result_ends_the_stream_even_when_the_run_cannot_start_or_fails() {
    // A thread without a store: the run cannot start.
    let app = chatty::graph().app();
    let deps = Counter::default();
    let mut items = collect(app.runner(&deps).thread("t").stream_modes(StreamMode::ALL).stream(Tally::default())).await;
    assert!(matches!(done(&mut items), Err(RunError::NoStore)));
    assert!(items.is_empty());
    // A node that fails for good: the outcome says so.
    let deps = desk();
    let app = fails::graph().app();
    let mut items = collect(app.runner(&deps).stream_modes([StreamMode::Events]).stream(Board::default())).await;
    let run = done(&mut items).expect("a valid run");
    assert!(matches!(&run.outcome, Outcome::Failed { node, .. } if node == "check"), "{:?}", run.outcome);
    let last_event = items.last().map(|i| match &i.part {
        StreamPart::Event(e) => e.to_string(),
        other => format!("{other:?}"),
    });
    assert!(last_event.is_some_and(|e| e.starts_with("finished after 0 steps: Failed")));
}

/// `check` fails on its only attempt.
#[graph(state = Board, deps = Desk, start = check)]
mod fails {
    use super::*;

    #[node(goto = [END])]
    async fn check(_s: &Board, desk: &Desk) -> Result<Step<Board>, NodeError> {
        if desk.flaky.load(Ordering::SeqCst) {
            return Err(NodeError::transient("the quote feed timed out"));
        }
        Ok(goto!(END))
    }
}

// ------------------------------------------------------------------ Send, drop

fn assert_send<T: Send>(_: &T) {}

#[tokio::test]
async fn the_stream_is_send_and_is_read_in_a_spawned_task() {
    let app = Arc::new(board::graph().app());
    let deps = Arc::new(desk());
    let (a, d) = (Arc::clone(&app), Arc::clone(&deps));
    let task = tokio::spawn(async move {
        let stream = a.runner(&d).stream_modes(StreamMode::ALL).stream(input());
        assert_send(&stream);
        collect(stream).await
    });
    let mut items = tokio::time::timeout(GUARD, task).await.expect("no hang").expect("the task ran");
    let run = done(&mut items).expect("a valid run");
    assert_eq!(run.outcome, Outcome::Completed);
    let kinds = |f: fn(&StreamPart<Board>) -> bool| items.iter().filter(|i| f(&i.part)).count();
    assert_eq!(kinds(|p| matches!(p, StreamPart::Values { .. })), 3);
    assert_eq!(kinds(|p| matches!(p, StreamPart::Update { .. })), 6);
    assert_eq!(kinds(|p| matches!(p, StreamPart::Custom { .. })), 6);
    assert!(kinds(|p| matches!(p, StreamPart::Message { .. })) >= 12);
    assert!(kinds(|p| matches!(p, StreamPart::Event(_))) > 10);
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Line {
    #[reduce(append)]
    trail: Vec<String>,
}

/// How often each node ran.
#[derive(Default)]
pub struct Runs {
    a: AtomicUsize,
    b: AtomicUsize,
    c: AtomicUsize,
}

#[graph(state = Line, deps = Runs, start = a)]
mod line {
    use super::*;

    #[node(goto = [b])]
    async fn a(_s: &Line, runs: &Runs) -> Step<Line> {
        runs.a.fetch_add(1, Ordering::SeqCst);
        goto!(b, Line::update().trail(vec!["a".into()]))
    }

    #[node(goto = [c])]
    async fn b(_s: &Line, runs: &Runs) -> Step<Line> {
        runs.b.fetch_add(1, Ordering::SeqCst);
        goto!(c, Line::update().trail(vec!["b".into()]))
    }

    #[node(goto = [END])]
    async fn c(_s: &Line, runs: &Runs) -> Step<Line> {
        runs.c.fetch_add(1, Ordering::SeqCst);
        goto!(END, Line::update().trail(vec!["c".into()]))
    }
}

#[tokio::test]
async fn dropping_the_stream_stops_the_run_and_the_thread_resumes_from_its_last_step() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = line::graph().app().store(store);
    let runs = Runs::default();
    // A buffer of one: the run waits for the reader right after the first state.
    let mut stream =
        app.runner(&runs).thread("cut").stream_modes([StreamMode::Values]).stream_buffer(1).stream(Line::default());
    let first = tokio::time::timeout(GUARD, stream.next()).await.expect("no hang").expect("an item");
    let StreamPart::Values { step: 1, state } = first.part else { panic!("{:?}", first.part) };
    assert_eq!(state.trail, ["a"]);
    drop(stream);
    assert_eq!(runs.b.load(Ordering::SeqCst), 0, "the run stopped where its reader left it");
    assert_eq!(app.state("cut").unwrap().expect("stored").state.trail, ["a"]);

    // The thread is released at once and resumes, streamed too, from step 1.
    let mut items = collect(app.runner(&runs).thread("cut").stream_modes([StreamMode::Values]).stream_resume()).await;
    let run = done(&mut items).expect("a valid resume");
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.trail, ["a", "b", "c"]);
    let steps: Vec<u32> = items
        .iter()
        .map(|i| match &i.part {
            StreamPart::Values { step, .. } => *step,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(steps, [2, 3]);
    let counts = [&runs.a, &runs.b, &runs.c].map(|n| n.load(Ordering::SeqCst));
    assert_eq!(counts, [1, 1, 1], "each node ran once over both runs");
}

// ------------------------------------------------------------------ Display

#[test]
fn an_event_displays_on_one_line_with_long_updates_cut() {
    let long = "word ".repeat(500);
    let update = Board::update().notes(vec![long.clone(), "second\nline".into()]).summary(long);
    let event: Event<Board> =
        Event::NodeFinished { step: 3, node: "analyst", instance: Some(2), update, next: vec!["summarize"] };
    let line = event.to_string();
    assert!(line.starts_with("step 3: analyst[2] -> summarize with "), "{line}");
    assert!(!line.contains('\n'), "{line}");
    assert!(line.ends_with('…'), "the update is cut: {line}");
    assert!(line.chars().count() <= 240, "{} chars", line.chars().count());

    let error = NodeError::fatal(format!("upstream said:\n{}", "x".repeat(1000)));
    let event: Event<Board> = Event::NodeFailed { step: 0, node: "check", instance: None, error };
    let line = event.to_string();
    assert!(line.starts_with("step 0: check failed: fatal error: upstream said: x"), "{line}");
    assert!(!line.contains('\n') && line.chars().count() <= 240, "{line}");

    let short: Event<Board> = Event::StepStarted { step: 1, nodes: vec!["a", "b"] };
    assert_eq!(short.to_string(), "step 1: [a, b]");
}

// ------------------------------------------------------------------ resume_with

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Greeting {
    text: String,
}

#[graph(state = Greeting, start = ask)]
mod greet {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Greeting, cx: &Ctx<()>) -> Result<Step<Greeting>, NodeError> {
        let name: String = cx.interrupt("name?")?;
        cx.emit(format!("hello, {name}")).await?;
        Ok(goto!(END, Greeting::update().text(format!("Hello, {name}"))))
    }
}

#[tokio::test]
async fn a_paused_thread_resumes_with_a_value_as_a_stream() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = greet::graph().app().store(store);
    let modes = [StreamMode::Custom, StreamMode::Values];
    let mut items = collect(app.runner(&()).thread("g").stream_modes(modes).stream(Greeting::default())).await;
    let run = done(&mut items).expect("a valid run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    assert!(items.is_empty(), "no step completed, nothing emitted: {items:?}");

    let mut items = collect(app.runner(&()).thread("g").stream_modes(modes).stream_resume_with("Ada")).await;
    let run = done(&mut items).expect("a valid resume");
    assert_eq!(run.outcome, Outcome::Completed);
    let parts: Vec<String> = items
        .into_iter()
        .map(|i| match i.part {
            StreamPart::Custom { value, .. } => format!("custom {value}"),
            StreamPart::Values { step, state } => format!("values {step} {}", state.text),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(parts, ["custom \"hello, Ada\"", "values 1 Hello, Ada"]);
}
