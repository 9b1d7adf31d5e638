//! Messages whose ids repeat (ids are derived from content): a client gets each message once,
//! and a message replaced under its id as a snapshot of the messages.

use serde_json::{Value, json};

use super::{cx, entry, event, mapper, no_store, types};

fn sure() -> Value {
    json!({ "id": "ai-sure", "role": "ai", "content": "Sure." })
}

fn step(seq: u64, checkpoint: u64, updates: Value) -> agentflow_store::StoredEvent {
    entry(seq, 0, "step", json!({ "run": "r-1", "step": seq, "checkpoint": checkpoint, "updates": updates }))
}

#[test]
fn a_message_two_nodes_append_in_one_step_is_sent_once() {
    let store = no_store();
    let mut m = mapper(false, |_| None);
    let both = json!([
        { "node": "a", "update": { "messages": [sure()] } },
        { "node": "b", "update": { "messages": [sure()] } },
    ]);
    let mapped = m.entry(cx(&store, None), &step(2, 2, both));
    assert_eq!(
        types(&mapped),
        [
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "STEP_STARTED",
            "-",
            "-",
            "-",
            "STEP_FINISHED",
        ],
        "the second is the same message: its places are kept, nothing is sent"
    );
}

#[test]
fn the_same_reply_in_a_later_run_is_not_sent_again() {
    let store = no_store();
    // The state the second run starts from holds the first run's reply.
    let mut m = mapper(false, |_| Some(json!({ "messages": [sure()] })));
    m.entry(cx(&store, None), &step(2, 2, json!([{ "node": "a", "update": { "messages": [sure()] } }])));
    m.entry(
        cx(&store, None),
        &entry(2, 1, "run.finished", json!({ "run": "r-1", "status": "completed", "checkpoint": 2 })),
    );
    let started = m.entry(cx(&store, None), &entry(3, 0, "run.started", json!({ "run": "r-2", "checkpoint": 2 })));
    assert_eq!(event(&started, 3)["messages"], json!([{ "id": "ai-sure", "role": "assistant", "content": "Sure." }]));
    let again = m.entry(cx(&store, None), &step(4, 3, json!([{ "node": "a", "update": { "messages": [sure()] } }])));
    assert_eq!(types(&again), ["STEP_STARTED", "-", "-", "-", "STEP_FINISHED"]);
    // A reader that starts at the second run (its client holds nothing): the snapshot tells the
    // client of the reply, so it is not sent again either.
    let mut late = mapper(false, |_| Some(json!({ "messages": [sure()] })));
    late.entry(cx(&store, None), &entry(3, 0, "run.started", json!({ "run": "r-2", "checkpoint": 2 })));
    let late_step =
        late.entry(cx(&store, None), &step(4, 3, json!([{ "node": "a", "update": { "messages": [sure()] } }])));
    assert_eq!(types(&late_step), types(&again));
}

#[test]
fn a_message_replaced_under_its_id_is_sent_as_the_messages_at_the_step() {
    let store = no_store();
    let replaced = json!({ "id": "ai-sure", "role": "ai", "content": "Sure, done." });
    let after = json!({ "id": "ai-next", "role": "ai", "content": "Anything else?" });
    let at_step = json!({ "messages": [replaced.clone(), after.clone()], "email": "ada@example.com" });
    let mut m = mapper(false, move |seq| (seq == 3).then(|| at_step.clone()));
    m.entry(cx(&store, None), &step(2, 2, json!([{ "node": "a", "update": { "messages": [sure()] } }])));
    let update = json!([{ "node": "a", "update": { "messages": [replaced, after] } }]);
    let mapped = m.entry(cx(&store, None), &step(3, 3, update));
    assert_eq!(types(&mapped), ["STEP_STARTED", "MESSAGES_SNAPSHOT", "-", "-", "-", "-", "-", "STEP_FINISHED"]);
    assert_eq!(
        event(&mapped, 1)["messages"],
        json!([
            { "id": "ai-sure", "role": "assistant", "content": "Sure, done." },
            { "id": "ai-next", "role": "assistant", "content": "Anything else?" },
        ]),
        "the messages at the step's checkpoint; the ones after it in the step are in it"
    );
    assert!(mapped.snapshots);
}

#[test]
fn a_tool_call_made_again_under_another_message_is_sent_as_a_snapshot() {
    let store = no_store();
    let call =
        |id: &str| json!({ "id": id, "role": "ai", "tool_calls": [{ "id": "call-1", "name": "f", "arguments": {} }] });
    let snapshot = json!({ "messages": [call("ai-1"), call("ai-2")] });
    let mut m = mapper(false, move |_| Some(snapshot.clone()));
    let first =
        m.entry(cx(&store, None), &step(2, 2, json!([{ "node": "a", "update": { "messages": [call("ai-1")] } }])));
    assert_eq!(types(&first), ["STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "STEP_FINISHED"]);
    let again =
        m.entry(cx(&store, None), &step(3, 3, json!([{ "node": "a", "update": { "messages": [call("ai-2")] } }])));
    assert_eq!(types(&again), ["STEP_STARTED", "MESSAGES_SNAPSHOT", "-", "-", "STEP_FINISHED"]);
}

#[test]
fn a_replacement_without_a_state_to_show_is_not_sent_twice_over() {
    let store = no_store();
    let mut m = mapper(false, |_| None);
    m.entry(cx(&store, None), &step(2, 2, json!([{ "node": "a", "update": { "messages": [sure()] } }])));
    let replaced = json!({ "id": "ai-sure", "role": "ai", "content": "Sure, done." });
    let mapped = m.entry(cx(&store, None), &step(3, 3, json!([{ "node": "a", "update": { "messages": [replaced] } }])));
    assert_eq!(types(&mapped), ["STEP_STARTED", "-", "-", "-", "STEP_FINISHED"], "no text added to the held one");
}
