//! `agentflow answer` on questions (asked by the thread itself or inside its subgraph), and
//! states the binary folds without the graph's Rust types: renamed fields, `None` left out of
//! the stored form, and a custom reducer it cannot run.

use crate::cli_common::*;

use std::path::Path;
use std::sync::Arc;

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[test]
fn answer_records_the_value_the_apps_next_resume_continues_with() {
    let dir = temp_dir("answer");
    let path = dir.join("ask.redb");
    let ask = |path: &Path| asking::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    runtime().block_on(async {
        let run = ask(&path).runner(&()).thread("q").run(Ask { question: "how many?".into(), answer: None }).await;
        assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    });
    expect_refusal(&af(&path, &["answer", "q", "--value", "three", "--as", "ops"]), 2, "--value");
    expect_refusal(&af(&path, &["answer", "nope", "--value", "3", "--as", "ops"]), 1, "no thread `nope`");
    expect_refusal(
        &af(&path, &["answer", "q", "--value", "3", "--as", "ops", "--checkpoint", "42"]),
        1,
        "no longer waits at checkpoint 42",
    );
    // The question's id, as `show` and `pending` give it: an answer naming another question is
    // refused and records nothing.
    let question = af_json(&path, &["show", "q"])["pending"][0]["question"].as_str().unwrap().to_string();
    assert_eq!(af_json(&path, &["pending"])["interrupts"][0]["question"], json!(question));
    assert!(stdout(&af(&path, &["show", "q"])).contains(&format!("question:  {question}")));
    let other = "0".repeat(64);
    expect_refusal(
        &af(&path, &["answer", "q", "--value", "3", "--as", "ops", "--question", &other]),
        1,
        "asks another question at checkpoint",
    );
    assert!(!af_json(&path, &["audit", "q"]).to_string().contains("interrupt.answered"));
    let answered = af_json(&path, &["answer", "q", "--value", "3", "--as", "ops", "--question", &question]);
    assert_eq!(
        (answered["by"].as_str(), answered["node"].as_str(), &answered["value"]),
        (Some("ops"), Some("ask"), &json!(3))
    );
    expect_refusal(&af(&path, &["answer", "q", "--value", "4", "--as", "dev"]), 1, "already answered");
    let audit = af_json(&path, &["audit", "q"]);
    assert!(audit.to_string().contains("interrupt.answered"), "{audit}");
    runtime().block_on(async {
        let done = ask(&path).runner(&()).thread("q").resume().await.unwrap();
        assert_eq!(done.outcome, Outcome::Completed);
        assert_eq!(done.state.answer, Some(3));
    });
    expect_refusal(&af(&path, &["answer", "q", "--value", "5", "--as", "ops"]), 1, "not waiting in `interrupt`");
}

/// A thread that an answer of the wrong shape failed still waits where it asked: `pending` and
/// `show` list its question, and a right answer continues it.
#[test]
fn a_question_a_wrong_answer_failed_is_still_listed_and_can_be_answered_anew() {
    let dir = temp_dir("answer-wrong");
    let path = dir.join("ask.redb");
    let ask = |path: &Path| asking::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    runtime().block_on(async {
        let run = ask(&path).runner(&()).thread("q").run(Ask { question: "how many?".into(), answer: None }).await;
        assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    });
    af_json(&path, &["answer", "q", "--value", "\"three\"", "--as", "ops"]);
    runtime().block_on(async {
        let run = ask(&path).runner(&()).thread("q").resume().await.unwrap();
        assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    });
    let listed = af_json(&path, &["pending"])["interrupts"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(
        (&listed[0]["thread"], &listed[0]["node"], &listed[0]["kind"]),
        (&json!("q"), &json!("ask"), &json!("interrupt"))
    );
    assert_eq!(listed[0]["payload"], json!({ "question": "how many?" }));
    let shown = af_json(&path, &["show", "q"]);
    assert_eq!(shown["thread"]["status"], "failed");
    assert_eq!(shown["pending"][0]["payload"], json!({ "question": "how many?" }));
    af_json(&path, &["answer", "q", "--value", "3", "--as", "ops"]);
    runtime().block_on(async {
        let done = ask(&path).runner(&()).thread("q").resume().await.unwrap();
        assert_eq!((done.outcome, done.state.answer), (Outcome::Completed, Some(3)));
    });
    assert_eq!(af_json(&path, &["pending"])["interrupts"], json!([]));
}

/// A state whose stored names are not its Rust field names (`#[serde(rename_all)]`): its
/// updates name `log_lines`, its snapshots `logLines`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
#[serde(rename_all = "camelCase")]
struct Notes {
    title: String,
    #[reduce(append)]
    log_lines: Vec<String>,
}

#[graph(state = Notes, start = first)]
mod noting {
    use super::*;

    #[node(goto = [second])]
    async fn first(_s: &Notes) -> Step<Notes> {
        goto!(second, Notes::update().log_lines(vec!["one".into()]))
    }

    #[node(goto = [END])]
    async fn second(_s: &Notes) -> Step<Notes> {
        goto!(END, Notes::update().log_lines(vec!["two".into()]))
    }
}

/// A state that leaves `None` out of its stored form: `verdict` is absent from the snapshot
/// until a node sets it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
struct Review {
    title: String,
    #[reduce(append)]
    notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    verdict: Option<String>,
}

#[graph(state = Review, start = read)]
mod reviewing {
    use super::*;

    #[node(goto = [decide])]
    async fn read(_s: &Review) -> Step<Review> {
        goto!(decide, Review::update().notes(vec!["read".into()]))
    }

    #[node(goto = [END])]
    async fn decide(_s: &Review) -> Step<Review> {
        goto!(END, Review::update().notes(vec!["decided".into()]).verdict(Some("ship".into())))
    }
}

fn keep_longest(old: &mut String, new: String) {
    if new.len() > old.len() {
        *old = new;
    }
}

/// A state with a field folded by the user's own function, which the binary cannot run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
struct Draft {
    title: String,
    #[reduce(custom = keep_longest)]
    best: String,
}

#[graph(state = Draft, start = short)]
mod drafting {
    use super::*;

    #[node(goto = [long])]
    async fn short(_s: &Draft) -> Step<Draft> {
        goto!(long, Draft::update().best("brief".to_string()))
    }

    #[node(goto = [END])]
    async fn long(_s: &Draft) -> Step<Draft> {
        goto!(END, Draft::update().best("a longer draft".to_string()))
    }
}

/// A field with a custom reducer cannot be folded without the graph's Rust types: `show`
/// leaves it out with a warning (the rest of the state shown), and `compact` refuses with
/// exit code 5, changing nothing.
#[test]
fn a_custom_reducer_is_left_out_by_show_and_refused_by_compact_with_exit_code_5() {
    let dir = temp_dir("compact-custom");
    let path = dir.join("drafts.redb");
    let open = |path: &Path| drafting::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    // A long title keeps the small updates stored as deltas of the first snapshot.
    let input = Draft { title: "a title long enough to outweigh the updates ".repeat(8), best: String::new() };
    let expected = Draft { best: "a longer draft".into(), ..input.clone() };
    runtime().block_on(async {
        let run = open(&path).runner(&()).thread("d-1").run(input.clone()).await.expect("completed run");
        assert_eq!((&run.outcome, &run.state), (&Outcome::Completed, &expected));
    });
    let history = af_json(&path, &["history", "d-1"]);
    let shown = af_json(&path, &["show", "d-1"]);
    assert_eq!(shown["state"]["title"], input.title.as_str(), "{shown}");
    assert!(shown["state"].get("best").is_none(), "a custom-reduced field was shown: {shown}");
    let warnings = shown["warnings"].to_string();
    assert!(warnings.contains("`best` has a custom reducer"), "{shown}");
    let out = af(&path, &["compact", "d-1", "--keep", "1"]);
    expect_refusal(&out, 5, "`best` has a custom reducer");
    assert_eq!(af_json(&path, &["history", "d-1"]), history);
    assert_eq!(open(&path).state("d-1").unwrap().expect("a checkpoint").state, expected);
}

/// An update naming a key the stored state does not hold (here a field the state stores under
/// another name) cannot be folded without the state's types: `compact` refuses with exit code
/// 5 and changes nothing, so the app still reads every appended line.
#[test]
fn compact_refuses_updates_whose_keys_the_stored_state_does_not_hold() {
    let dir = temp_dir("compact-renamed");
    let path = dir.join("notes.redb");
    let open = |path: &Path| noting::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    // A long title keeps the small updates stored as deltas of the first snapshot.
    let input = Notes { title: "a title long enough to outweigh the updates ".repeat(8), log_lines: vec![] };
    let expected = Notes { log_lines: vec!["one".into(), "two".into()], ..input.clone() };
    runtime().block_on(async {
        let run = open(&path).runner(&()).thread("n-1").run(input.clone()).await.expect("completed run");
        assert_eq!((&run.outcome, &run.state), (&Outcome::Completed, &expected));
    });
    let history = af_json(&path, &["history", "n-1"]);
    let out = af(&path, &["compact", "n-1", "--keep", "1"]);
    expect_refusal(&out, 5, "`log_lines`");
    assert!(stderr(&out).contains("App::compact"), "{}", stderr(&out));
    assert_eq!(af_json(&path, &["history", "n-1"]), history);
    assert_eq!(open(&path).state("n-1").unwrap().expect("a checkpoint").state, expected);

    // A `None` left out of the snapshot is no such key: the compaction folds it.
    let path = dir.join("review.redb");
    let open = |path: &Path| reviewing::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    let input = Review { title: "a title long enough to outweigh the updates ".repeat(8), ..Review::default() };
    let expected =
        Review { notes: vec!["read".into(), "decided".into()], verdict: Some("ship".into()), ..input.clone() };
    runtime().block_on(async {
        let run = open(&path).runner(&()).thread("r-1").run(input).await.expect("completed run");
        assert_eq!((&run.outcome, &run.state), (&Outcome::Completed, &expected));
    });
    let report = af_json(&path, &["compact", "r-1", "--keep", "1"]);
    assert_eq!((report["dropped"].as_u64(), report["folded"].as_u64()), (Some(2), Some(1)), "{report}");
    assert_eq!(open(&path).state("r-1").unwrap().expect("a checkpoint").state, expected);
}

/// `asking` as the subgraph of a parent: the question is asked inside the child.
#[graph(state = Ask, start = delegate)]
mod delegating {
    use super::*;

    #[node(goto = [END], subgraphs = [asking])]
    async fn delegate(s: &Ask, cx: &Ctx<()>) -> Result<Step<Ask>, NodeError> {
        let answered = cx.subgraph(asking::graph(), s.clone()).await?;
        Ok(goto!(END, Ask::update().answer(answered.answer)))
    }
}

/// A question asked inside a subgraph is listed once, as the parent thread's (the one to
/// answer: its resume hands the answer down), by `pending` and by `stuck`.
#[test]
fn a_question_asked_inside_a_subgraph_is_listed_once_as_the_parents() {
    let dir = temp_dir("pending-child");
    let path = dir.join("ask.redb");
    runtime().block_on(async {
        let app = delegating::graph().app().store(Arc::new(RedbStore::open(&path).unwrap()) as Arc<dyn Store>);
        let run = app.runner(&()).thread("p").run(Ask { question: "how many?".into(), answer: None }).await;
        assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    });
    let threads = af_json(&path, &["threads"]);
    assert_eq!(threads.as_array().map(Vec::len), Some(2), "the parent and its child: {threads}");
    let listed = af_json(&path, &["pending"])["interrupts"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["thread"], "p", "{listed}");
    let stuck = af_json(&path, &["stuck", "--waiting", "0s"]);
    let stuck: Vec<&str> = stuck.as_array().unwrap().iter().map(|s| s["thread"].as_str().unwrap()).collect();
    assert_eq!(stuck, vec!["p"]);
}
