//! The served tool's calls, results and schemas as JSON, checked without a server.

use serde_json::json;

use super::*;
use crate::core::state::ReducerKind;

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("the tests give objects"),
    }
}

fn question(node: &str, asks: Value) -> Pending {
    Pending { node: node.into(), instance: None, kind: PendingKind::Interrupt, payload: asks }
}

fn approval(node: &str, id: &str) -> Pending {
    Pending {
        node: node.into(),
        instance: None,
        kind: PendingKind::Approval,
        payload: json!({"approval": id, "tool": "refund", "args": {"amount": 90}, "risk": "irreversible",
                        "reason": "needs approval", "expires_at": 5}),
    }
}

#[test]
fn a_call_starts_or_resumes_a_named_thread() {
    let start = parse_call(Some(&args(json!({"thread": "t-1", "input": {"amount": 3}})))).unwrap();
    assert_eq!(start, Call::Start { thread: "t-1".into(), input: json!({"amount": 3}) });
    let resume = parse_call(Some(&args(json!({"thread": "t-1", "resume": {}})))).unwrap();
    assert_eq!(resume, Call::Resume { thread: "t-1".into(), resume: json!({}) });
    assert_eq!(resume.thread(), "t-1");
}

#[test]
fn a_call_that_is_unclear_is_refused_saying_what_to_give() {
    let refused = |v: Value| parse_call(Some(&args(v))).unwrap_err().0;
    assert!(parse_call(None).unwrap_err().0.contains("`thread` is required"));
    assert!(refused(json!({"thread": " ", "input": {}})).contains("`thread` is required"));
    assert!(refused(json!({"thread": 7, "input": {}})).contains("must be a string, not a number"));
    assert!(refused(json!({"thread": "t", "input": {}, "resume": {}})).contains("not both"));
    assert!(refused(json!({"thread": "t"})).contains("give `input` to start thread `t`"));
    assert!(refused(json!({"thread": "t", "inputs": {}})).contains("unknown argument `inputs`"));
}

#[test]
fn a_bare_answer_goes_to_the_only_question() {
    let q = question("ask", json!("which?"));
    let plan = plan_resume("t", &[q.clone(), approval("pay", "apr-1")], json!(true)).unwrap();
    assert_eq!(plan, Plan::Answer(vec![(q.question_id(), json!(true))]));
}

#[test]
fn a_bare_answer_is_refused_when_several_questions_wait_and_lists_them() {
    let (a, b) = (question("left", json!("a?")), question("right", json!("b?")));
    let why = plan_resume("t", &[a.clone(), b.clone()], json!(true)).unwrap_err().0;
    assert!(why.contains("waits on 2 questions"), "{why}");
    assert!(why.contains(&a.question_id()) && why.contains(&b.question_id()), "{why}");
    assert!(why.contains("node `left`") && why.contains("node `right`"), "{why}");
    // Naming each question answers each, in the order given.
    let named = json!({ a.question_id(): 1, b.question_id(): 2 });
    let Plan::Answer(answers) = plan_resume("t", &[a.clone(), b.clone()], named).unwrap() else {
        panic!("named answers are answers")
    };
    assert_eq!(answers.len(), 2);
    assert!(answers.contains(&(a.question_id(), json!(1))) && answers.contains(&(b.question_id(), json!(2))));
    // An empty resume while questions wait answers nothing: refused, listing them.
    let why = plan_resume("t", &[a.clone(), b], json!({})).unwrap_err().0;
    assert!(why.contains("waits for answers to") && why.contains(&a.question_id()), "{why}");
}

#[test]
fn an_object_is_never_taken_for_a_bare_answer() {
    let q = question("ask", json!("address?"));
    // An object answer to the only question must be named: a key that is no question is refused.
    let why = plan_resume("t", std::slice::from_ref(&q), json!({"street": "Main"})).unwrap_err().0;
    assert!(why.contains("does not wait on a question `street`"), "{why}");
    assert!(why.contains(&q.question_id()), "{why}");
    let plan = plan_resume("t", std::slice::from_ref(&q), json!({ q.question_id(): {"street": "Main"} })).unwrap();
    assert_eq!(plan, Plan::Answer(vec![(q.question_id(), json!({"street": "Main"}))]));
}

#[test]
fn approvals_are_not_decided_through_the_tool() {
    let why = plan_resume("t", &[approval("pay", "apr-1")], json!({"apr-1": "approve"})).unwrap_err().0;
    assert!(why.contains("`apr-1` is an approval") && why.contains("approval desk"), "{why}");
    // Once decided, `{}` (or null) continues; a bare value has nothing to answer.
    assert_eq!(plan_resume("t", &[approval("pay", "apr-1")], json!({})).unwrap(), Plan::Continue);
    assert_eq!(plan_resume("t", &[], Value::Null).unwrap(), Plan::Continue);
    let why = plan_resume("t", &[approval("pay", "apr-1")], json!("yes")).unwrap_err().0;
    assert!(why.contains("waits for no answer"), "{why}");
}

#[test]
fn results_are_done_waiting_or_failed() {
    let done = shape("t", &Outcome::Completed, json!({"amount": 3}), false);
    assert_eq!(done.value, json!({"status": "done", "thread": "t", "state": {"amount": 3}}));
    assert!(!done.is_error);

    let pending = vec![approval("pay", "apr-1"), question("ask", json!({"q": "why?"}))];
    let outcome = Outcome::Interrupted { thread: Some("t".into()), pending: pending.clone() };
    let waiting = shape("t", &outcome, json!({}), false);
    assert!(!waiting.is_error);
    assert_eq!(waiting.value["status"], "waiting");
    assert_eq!(waiting.value["thread"], "t");
    let items = waiting.value["waiting_for"].as_array().unwrap();
    assert_eq!(
        items[0],
        json!({"kind": "approval", "node": "pay", "id": "apr-1", "tool": "refund", "risk": "irreversible",
               "reason": "needs approval", "expires_at": 5, "args": {"amount": 90}})
    );
    assert_eq!(
        items[1],
        json!({"kind": "interrupt", "node": "ask", "id": pending[1].question_id(), "asks": {"q": "why?"}})
    );
    assert!(waiting.text.contains("approval `apr-1` of tool `refund`"), "{}", waiting.text);
    // No state in a waiting result.
    assert!(waiting.value.get("state").is_none());

    // What a question asks and an approval's arguments are hidden from who may not see them.
    let hidden = shape("t", &outcome, json!({}), true);
    let items = hidden.value["waiting_for"].as_array().unwrap();
    assert_eq!((&items[0]["args"], &items[1]["asks"]), (&json!(MASK), &json!(MASK)));
    assert_eq!(items[0]["id"], "apr-1");

    let cancelled = shape("t", &Outcome::Cancelled, json!({"amount": 3}), false);
    assert!(cancelled.is_error);
    assert_eq!(cancelled.value, json!({"status": "failed", "thread": "t", "error": "the run was cancelled"}));
}

#[test]
fn the_input_schema_follows_the_state_fields() {
    let fields = [
        Field::new("customer", ReducerKind::Overwrite, "String"),
        Field::new("amount", ReducerKind::Overwrite, "u32"),
        Field::new("note", ReducerKind::Overwrite, "Option<String>"),
        Field::new("tags", ReducerKind::Overwrite, "Vec<String>"),
        Field::new("outcome", ReducerKind::Overwrite, "Option<Value>"),
    ];
    let schema = state_schema(&fields);
    assert_eq!(
        schema,
        json!({"type": "object", "properties": {
            "customer": {"type": "string"},
            "amount": {"type": "integer", "minimum": 0},
            "note": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "outcome": {}
        }})
    );
    let tool = input_schema(schema.clone());
    assert_eq!(tool["required"], json!(["thread"]));
    assert_eq!(tool["properties"]["input"], schema);
    assert_eq!(tool["properties"]["thread"]["type"], "string");
    assert!(tool["properties"].get("resume").is_some());
    assert_eq!(output_schema()["required"], json!(["status", "thread"]));
}

#[test]
fn an_answer_of_the_wrong_shape_leaves_the_thread_waiting_and_says_why() {
    let reason = "the resume value for node `ask` does not have the shape it expects (a string where a boolean \
                  is expected); resume again with a value of the right shape";
    let outcome = Outcome::Failed { node: "ask".into(), error: crate::NodeError::needs_input(reason) };
    assert_eq!(refused_answer(&outcome), Some(reason));
    let q = question("ask", json!({"q": "refund?"}));
    let shaped = still_waiting("t", reason, std::slice::from_ref(&q), false);
    assert!(shaped.is_error);
    assert_eq!(
        shaped.value,
        json!({"status": "waiting", "thread": "t", "error": reason,
               "waiting_for": [{"kind": "interrupt", "node": "ask", "id": q.question_id(), "asks": {"q": "refund?"}}]})
    );
    assert!(shaped.text.contains(reason) && shaped.text.contains("still waiting for an answer to question"));
    // No Rust type in the words.
    assert!(!shaped.text.contains("Failed {") && !shaped.text.contains("NodeError"), "{}", shaped.text);

    // A node that failed for good is no refused answer, and reads in words too.
    let fatal = Outcome::Failed { node: "pay".into(), error: crate::NodeError::fatal("card declined") };
    assert_eq!(refused_answer(&fatal), None);
    let failed = shape("t", &fatal, json!({}), false);
    assert_eq!(failed.value["error"], "node `pay` failed (fatal error): card declined");
    assert!(failed.is_error);
}

#[test]
fn run_errors_are_told_in_the_tools_terms_not_the_rust_apis() {
    let exists = RunError::ThreadExists { thread: "t1".into() };
    assert!(exists.to_string().contains(".resume()"), "the Rust text this rewords: {exists}");
    let own = thread_exists("t1", true);
    assert!(own.contains("exists already") && own.contains("call again with `resume`"), "{own}");
    let foreign = thread_exists("t1", false);
    assert_eq!(foreign, "the thread id `t1` is taken; start the thread under another id");
    for text in [&own, &foreign] {
        assert!(!text.contains(".resume") && !text.contains("tenant"), "{text}");
    }
    let unknown = RunError::Resume(ResumeError::UnknownThread { thread: "t1".into() });
    assert_eq!(run_error("t1", &unknown), unknown_thread("t1"));
    assert_eq!(unknown_thread("t1"), "no thread `t1`; start it with `input`");
    let errors = [
        RunError::NotWaiting { thread: "t1".into(), status: "completed".into() },
        RunError::ValueRequired { thread: "t1".into(), node: "ask".into() },
        RunError::SeveralQuestions { thread: "t1".into(), questions: vec!["a".into(), "b".into()] },
    ];
    for e in &errors {
        let text = run_error("t1", e);
        assert!(text.contains("`resume`") || text.contains("\"resume\""), "{text}");
        assert!(!text.contains(".resume"), "{text}");
    }
    // The others keep their own words.
    let busy = RunError::ThreadBusy { thread: "t1".into(), holder: "w".into(), expires_at: 9 };
    assert_eq!(run_error("t1", &busy), busy.to_string());
}
