//! `agentflow answer` on a step that asks two questions at once: each is answered on its own
//! with `--question ID`, an answer naming none is refused, and the thread goes on once each has
//! its answer.

use super::*;

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Support {
    refunded: Option<bool>,
    deleted: Option<bool>,
}

#[graph(state = Support, start = split)]
mod two_questions {
    use super::*;

    #[node(goto = [refund, delete])]
    async fn split(_s: &Support) -> Step<Support> {
        goto!([refund, delete], Support::update())
    }

    #[node(goto = [END], interrupt, writes = [refunded])]
    async fn refund(_s: &Support, cx: &Ctx<()>) -> Result<Step<Support>, NodeError> {
        let yes: bool = cx.interrupt(json!({ "question": "refund 40 EUR to order A-1?" }))?;
        Ok(goto!(END, Support::update().refunded(Some(yes))))
    }

    #[node(goto = [END], interrupt, writes = [deleted])]
    async fn delete(_s: &Support, cx: &Ctx<()>) -> Result<Step<Support>, NodeError> {
        let yes: bool = cx.interrupt(json!({ "question": "delete the customer's account?" }))?;
        Ok(goto!(END, Support::update().deleted(Some(yes))))
    }
}

#[test]
fn answer_takes_one_question_at_a_time_when_a_step_asks_two() {
    let dir = temp_dir("answer-two");
    let path = dir.join("two.redb");
    let app =
        |path: &Path| two_questions::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    runtime().block_on(async {
        let run = app(&path).runner(&()).thread("c").run(Support::default()).await.unwrap();
        assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    });
    let listed = af_json(&path, &["pending"])["interrupts"].clone();
    let id = |node: &str| {
        let item = listed.as_array().unwrap().iter().find(|p| p["node"] == node).unwrap_or_else(|| panic!("{listed}"));
        item["question"].as_str().unwrap().to_string()
    };
    let (refund_q, delete_q) = (id("refund"), id("delete"));

    // An answer naming no question is refused, naming both and how to answer; nothing recorded.
    let bare = af(&path, &["answer", "c", "--value", "true", "--as", "ops"]);
    expect_refusal(&bare, 1, "--question");
    for q in [&refund_q, &delete_q] {
        assert!(stderr(&bare).contains(q.as_str()), "{}", stderr(&bare));
    }
    // One value for both alike is refused too: they ask different things.
    expect_refusal(&af(&path, &["answer", "c", "--value", "true", "--as", "ops", "--all-alike"]), 1, "different");
    assert!(!af_json(&path, &["audit", "c"]).to_string().contains("interrupt.answered"));

    let answered = af_json(&path, &["answer", "c", "--value", "true", "--as", "ops", "--question", &refund_q]);
    assert_eq!((answered["node"].as_str(), &answered["value"]), (Some("refund"), &json!(true)));
    assert_eq!(answered["unanswered"], json!([delete_q]));
    let listed = af_json(&path, &["pending"])["interrupts"].clone();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["node"], "delete");
    runtime().block_on(async {
        let early = app(&path).runner(&()).thread("c").resume().await;
        assert!(matches!(early, Err(agentflow::RunError::ValueRequired { .. })), "{:?}", early.map(|r| r.outcome));
    });

    let text = stdout(&af(&path, &["answer", "c", "--value", "false", "--as", "ops", "--question", &delete_q]));
    assert!(text.contains("continues with the answers"), "{text}");
    runtime().block_on(async {
        let done = app(&path).runner(&()).thread("c").resume().await.unwrap();
        assert_eq!(done.outcome, Outcome::Completed);
        assert_eq!((done.state.refunded, done.state.deleted), (Some(true), Some(false)));
    });
}
