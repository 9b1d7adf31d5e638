//! Each kind of entry as AG-UI events, and what the mapping keeps from one entry to the next:
//! runs that never finished, the questions a run parked on, where a reader starts.

use serde_json::{Value, json};

use super::{cx, entry, event, mapper, no_store, types};
use crate::access::personal::MASK;
use crate::server::stream::ag_ui::{ABANDONED, INTERRUPT, LOST};

/// A step in which an AI asks for a tool, the tool answers, the AI replies, and fields change.
pub(super) fn chat_step() -> Value {
    json!({ "run": "r-1", "step": 1, "checkpoint": 2, "nodes": ["agent", "tools"], "updates": [
        { "node": "agent", "instance": null, "update": {
            "messages": [
                { "id": "human-1", "role": "human", "content": "refund order 7" },
                { "id": "ai-1", "role": "ai", "content": "", "tool_calls": [
                    { "id": "call-1", "name": "refund", "arguments": { "order": 7 } },
                    { "id": "call-2", "name": "lookup", "arguments": "{not json" },
                ] },
            ],
            "email": "ada@example.com",
            "api_key": "sk-secret",
            "count": 1,
        } },
        { "node": "tools", "instance": 0, "update": {
            "messages": [
                { "id": "tool-1", "role": "tool", "content": "refunded", "tool_call_id": "call-1" },
                { "id": "ai-2", "role": "ai", "content": "Done: order 7 is refunded." },
            ],
            "log": ["refund 7", "lookup"],
            "a/b~c": 3,
        } },
    ] })
}

#[test]
fn a_step_maps_to_each_nodes_step_its_messages_and_a_state_delta() {
    let store = no_store();
    let mut m = mapper(false, |_| panic!("a step of new messages reads no state"));
    let mapped = m.entry(cx(&store, None), &entry(4, 1, "step", chat_step()));
    assert!(!mapped.shows_personal);
    assert_eq!(
        types(&mapped),
        [
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "STATE_DELTA",
            "STEP_FINISHED",
            "STEP_STARTED",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_DELTA",
            "STEP_FINISHED",
        ]
    );
    assert_eq!(event(&mapped, 0)["stepName"], "agent");
    assert_eq!(*event(&mapped, 1), json!({ "type": "TEXT_MESSAGE_START", "messageId": "human-1", "role": "user" }));
    assert_eq!(event(&mapped, 2)["delta"], "refund order 7");
    // The AI message without text gives no text events, only its calls, parented to it.
    assert_eq!(event(&mapped, 4)["toolCallId"], "call-1");
    assert_eq!(event(&mapped, 4)["toolCallName"], "refund");
    assert_eq!(event(&mapped, 4)["parentMessageId"], "ai-1");
    assert_eq!(event(&mapped, 5)["delta"], r#"{"order":7}"#);
    assert_eq!(event(&mapped, 8)["delta"], "{not json", "arguments kept as text are sent as they are");
    // Overwritten fields replace, personal ones masked, credential ones always; added ones wait
    // for a snapshot.
    assert_eq!(
        event(&mapped, 10)["delta"],
        json!([
            { "op": "add", "path": "/api_key", "value": MASK },
            { "op": "add", "path": "/email", "value": MASK },
        ])
    );
    assert_eq!(
        *event(&mapped, 13),
        json!({ "type": "TOOL_CALL_RESULT", "messageId": "tool-1", "toolCallId": "call-1", "content": "refunded", "role": "tool" })
    );
    assert_eq!(event(&mapped, 14)["role"], "assistant");
    assert_eq!(event(&mapped, 15)["delta"], "Done: order 7 is refunded.");
    // Appended items each at the end; a field name is escaped in its pointer.
    assert_eq!(
        event(&mapped, 17)["delta"],
        json!([
            { "op": "add", "path": "/a~1b~0c", "value": 3 },
            { "op": "add", "path": "/log/-", "value": "refund 7" },
            { "op": "add", "path": "/log/-", "value": "lookup" },
        ])
    );
}

#[test]
fn a_reader_who_may_see_personal_data_sees_it_and_the_mapping_says_so() {
    let store = no_store();
    let mut m = mapper(true, |_| None);
    let mapped = m.entry(cx(&store, None), &entry(4, 1, "step", chat_step()));
    assert!(mapped.shows_personal);
    let delta = &event(&mapped, 10)["delta"];
    assert_eq!(delta[1], json!({ "op": "add", "path": "/email", "value": "ada@example.com" }));
    assert_eq!(delta[0]["value"], MASK, "a credential is masked for everyone");
}

#[test]
fn masking_keeps_each_events_place() {
    // A masked personal list reads as one masked value, and its empty update as none: the
    // places are the stored update's, whoever reads.
    let personal = json!({ "name": "g", "state": { "fields": [
        { "name": "log", "reducer": "append", "type": "Vec<String>", "personal": true },
        { "name": "messages", "reducer": "messages", "type": "Vec<Message>", "personal": true },
    ] } });
    let step = json!({ "run": "r", "updates": [{ "node": "n", "update": {
        "log": ["x"], "messages": [{ "id": "m", "role": "ai", "content": "hi" }],
    } }] });
    let store = no_store();
    let vocabulary = |sees| crate::server::stream::ag_ui::Vocabulary::new("t", Some(&personal), sees);
    let read = || {
        crate::server::stream::snapshot::Snapshots::new(Box::new(|_: &dyn agentflow_store::Store, _: &str, _: u64| {
            None
        }))
    };
    let mut hidden = crate::server::stream::mapper::Mapper::new(vocabulary(false), read());
    let mut shown = crate::server::stream::mapper::Mapper::new(vocabulary(true), read());
    let masked = hidden.entry(cx(&store, None), &entry(1, 0, "step", step.clone()));
    let clear = shown.entry(cx(&store, None), &entry(1, 0, "step", step));
    assert_eq!(types(&masked), ["STEP_STARTED", "-", "-", "-", "STATE_DELTA", "STEP_FINISHED"]);
    assert_eq!(
        types(&clear),
        [
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_DELTA",
            "STEP_FINISHED"
        ]
    );
    assert_eq!(event(&masked, 4)["delta"], json!([{ "op": "add", "path": "/log", "value": MASK }]));
    let empty = json!({ "run": "r", "updates": [{ "node": "n", "update": { "log": [] } }] });
    assert_eq!(types(&hidden.entry(cx(&store, None), &entry(2, 0, "step", empty))), ["STEP_STARTED", "STEP_FINISHED"]);
}

/// The states of a thread whose input asked `hi`, at each checkpoint: personal and credential
/// fields, and the checkpoint's number as `count`.
fn states(seq: u64) -> Option<Value> {
    Some(json!({
        "messages": [{ "id": "human-1", "role": "human", "content": "hi" }],
        "email": "ada@example.com", "api_key": "sk", "count": seq,
    }))
}

#[test]
fn a_run_starts_with_the_state_and_messages_it_starts_from() {
    let store = no_store();
    let mut m = mapper(false, states);
    let started = m.entry(
        cx(&store, None),
        &entry(1, 0, "run.started", json!({ "run": "r-1", "graph": "chat", "resumed": false, "checkpoint": 0 })),
    );
    assert_eq!(types(&started), ["-", "RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]);
    assert_eq!(*event(&started, 1), json!({ "type": "RUN_STARTED", "threadId": "t-1", "runId": "r-1" }));
    assert_eq!(
        event(&started, 2)["snapshot"],
        json!({ "messages": [{ "id": "human-1", "role": "human", "content": "hi" }], "email": MASK, "api_key": MASK, "count": 0 })
    );
    assert_eq!(event(&started, 3)["messages"], json!([{ "id": "human-1", "role": "user", "content": "hi" }]));
    assert!(started.snapshots);
    // A start written before starts named their checkpoint, or a reader shown no states: the
    // places stay, the snapshots are not sent.
    let old = mapper(false, states).entry(cx(&store, None), &entry(2, 0, "run.started", json!({ "run": "r-2" })));
    assert_eq!(types(&old), ["-", "RUN_STARTED", "-", "-"]);
    let mut blind = mapper(false, |_| None);
    let unread = blind.entry(cx(&store, None), &entry(1, 0, "run.started", json!({ "run": "r-1", "checkpoint": 0 })));
    assert_eq!(types(&unread), ["-", "RUN_STARTED", "-", "-"]);
}

#[test]
fn a_run_that_never_finished_is_closed_before_the_run_that_goes_on_after_it() {
    let store = no_store();
    let mut m = mapper(false, |_| None);
    let start = |run: &str| json!({ "run": run, "graph": "chat", "resumed": true, "checkpoint": 1 });
    m.entry(cx(&store, None), &entry(1, 0, "run.started", start("r-1")));
    m.entry(cx(&store, None), &entry(2, 0, "step", json!({ "run": "r-1", "checkpoint": 1, "updates": [] })));
    // Its process died: the next run starts without a `run.finished` before it.
    let resumed = m.entry(cx(&store, None), &entry(3, 0, "run.started", start("r-2")));
    assert_eq!(types(&resumed), ["RUN_ERROR", "RUN_STARTED", "-", "-"]);
    assert_eq!(
        *event(&resumed, 0),
        json!({
            "type": "RUN_ERROR",
            "message": "run r-1 stopped without finishing (its process stopped or lost the thread); run r-2 goes on from its last commit",
            "code": ABANDONED,
        })
    );
    m.entry(cx(&store, None), &entry(3, 1, "run.finished", json!({ "run": "r-2", "status": "completed" })));
    let next = m.entry(cx(&store, None), &entry(4, 0, "run.started", start("r-3")));
    assert_eq!(types(&next), ["-", "RUN_STARTED", "-", "-"], "the run before ended");
    // A reader that starts at the run's start looks at the entry before it: the same events.
    let mut fresh = mapper(false, |_| None);
    fresh.look_back(Some(&entry(2, 0, "step", json!({ "run": "r-1", "updates": [] }))));
    assert_eq!(fresh.entry(cx(&store, None), &entry(3, 0, "run.started", start("r-2"))), resumed);
    let mut after_end = mapper(false, |_| None);
    after_end.look_back(Some(&entry(3, 1, "run.finished", json!({ "run": "r-2", "status": "completed" }))));
    assert_eq!(types(&after_end.entry(cx(&store, None), &entry(4, 0, "run.started", start("r-3")))), types(&next));
    // A client that holds a run open whose end the log lost (a gap): closed first, without an id.
    let mut behind = mapper(false, |_| None);
    behind.entry(cx(&store, None), &entry(1, 0, "run.started", start("r-1")));
    behind.forget_previous();
    let lost = behind.entry(cx(&store, None), &entry(9, 0, "run.started", start("r-9")));
    assert_eq!(types(&lost), ["-", "RUN_STARTED", "-", "-"]);
    assert_eq!(
        (lost.before.len(), lost.before[0]["type"].as_str(), lost.before[0]["code"].as_str()),
        (1, Some("RUN_ERROR"), Some(LOST))
    );
}

/// An `interrupt` entry: a question holding personal data, and an approval.
fn waits() -> Value {
    json!({ "run": "r-1",
        "questions": [{ "id": "q-1", "node": "review", "instance": null, "kind": "interrupt", "question": { "draft": "to ada@example.com" } }],
        "approvals": [{ "id": "apr-1", "tool": "refund", "node": "agent", "instance": null, "kind": "approval" }],
    })
}

#[test]
fn a_run_parked_for_people_ends_with_its_interrupts_their_questions_masked() {
    let store = no_store();
    let mut m = mapper(false, states);
    let parked = m.entry(cx(&store, None), &entry(2, 0, "interrupt", waits()));
    assert_eq!(types(&parked), ["CUSTOM"]);
    assert_eq!(event(&parked, 0)["name"], INTERRUPT);
    let mut masked = waits();
    masked["questions"][0]["question"] = json!(MASK);
    assert_eq!(event(&parked, 0)["value"], masked, "a question's value is masked as an answer is");
    let ended =
        json!({ "run": "r-1", "status": "interrupted", "checkpoint": 3, "detail": "waiting for approval apr-1" });
    let finished = m.entry(cx(&store, Some((2, 1))), &entry(2, 1, "run.finished", ended.clone()));
    assert_eq!(types(&finished), ["STATE_SNAPSHOT", "RUN_FINISHED"]);
    assert_eq!(event(&finished, 0)["snapshot"]["count"], 3, "the state at the checkpoint the entry names");
    let end = event(&finished, 1);
    assert_eq!(end["result"], json!({ "status": "interrupted", "detail": "waiting for approval apr-1" }));
    assert_eq!(
        end["outcome"],
        json!({ "type": "interrupt", "interrupts": [
            { "id": "q-1", "reason": "interrupt", "message": MASK,
              "metadata": { "node": "review", "instance": null, "question": MASK } },
            { "id": "apr-1", "reason": "approval", "message": "the call of `refund` waits for a decision",
              "metadata": { "tool": "refund", "node": "agent", "instance": null } },
        ] })
    );
    // A reader who may see personal data sees the question; one that starts at the run's end
    // looks back at the entry before it.
    let mut seeing = mapper(true, states);
    seeing.look_back(Some(&entry(2, 0, "interrupt", waits())));
    let shown = seeing.entry(cx(&store, None), &entry(2, 1, "run.finished", ended));
    assert_eq!(types(&shown), ["-", "RUN_FINISHED"], "not the log's newest entry: no snapshot");
    let interrupts = &event(&shown, 1)["outcome"]["interrupts"];
    assert_eq!(interrupts[0]["metadata"]["question"], json!({ "draft": "to ada@example.com" }));
    assert!(interrupts[0].get("message").is_none(), "a question that is no text has no message");
    // Without an `interrupt` entry of the run before it: no interrupt outcome.
    let mut bare = mapper(false, |_| None);
    let plain =
        bare.entry(cx(&store, None), &entry(5, 0, "run.finished", json!({ "run": "r-5", "status": "interrupted" })));
    assert!(event(&plain, 1).get("outcome").is_none());
}

#[test]
fn a_run_ends_finished_failed_or_cancelled() {
    let store = no_store();
    let mut m = mapper(false, states);
    let failed = json!({ "run": "r-2", "status": "failed", "checkpoint": 4, "detail": "node `agent` failed: boom" });
    let mapped = m.entry(cx(&store, Some((3, 0))), &entry(3, 0, "run.finished", failed));
    assert_eq!(types(&mapped), ["STATE_SNAPSHOT", "RUN_ERROR"]);
    assert_eq!(
        *event(&mapped, 1),
        json!({ "type": "RUN_ERROR", "message": "node `agent` failed: boom", "code": "failed" })
    );
    let cancelled = json!({ "run": "r-3", "status": "cancelled", "detail": "" });
    let mapped = m.entry(cx(&store, Some((9, 0))), &entry(4, 0, "run.finished", cancelled));
    assert_eq!(types(&mapped), ["-", "RUN_FINISHED"]);
    assert_eq!(event(&mapped, 1)["outcome"], json!({ "type": "cancelled" }));
    let completed = json!({ "run": "r-4", "status": "completed", "checkpoint": 5, "detail": "" });
    let mapped = m.entry(cx(&store, None), &entry(5, 0, "run.finished", completed));
    assert!(event(&mapped, 1).get("outcome").is_none(), "a success is the default outcome");
}

#[test]
fn a_reader_that_starts_in_the_middle_of_a_run_is_brought_in_step() {
    let store = no_store();
    // A step first: the run it is of, and the state before it.
    let mut m = mapper(false, states);
    let step = entry(6, 0, "step", json!({ "run": "r-1", "checkpoint": 5, "updates": [] }));
    let synced = m.sync(cx(&store, None), &step, None);
    let kinds: Vec<&str> = synced.before.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]);
    assert_eq!(synced.before[0]["runId"], "r-1");
    assert_eq!(synced.before[1]["snapshot"]["count"], 4, "the state before the step");
    assert!(synced.slots.is_empty() && synced.snapshots);
    assert!(m.holds_run());
    // A run's end: the state it names.
    let mut m = mapper(false, states);
    let end = entry(7, 1, "run.finished", json!({ "run": "r-1", "status": "completed", "checkpoint": 6 }));
    assert_eq!(m.sync(cx(&store, None), &end, None).before[1]["snapshot"]["count"], 6);
    // An `interrupt` entry: the checkpoint its commit's end names.
    let mut m = mapper(false, states);
    let parked = m.sync(cx(&store, None), &entry(7, 0, "interrupt", waits()), Some(6));
    assert_eq!(parked.before[1]["snapshot"]["count"], 6);
    // A run's start needs nothing: its own events start the run.
    let mut m = mapper(false, states);
    let start = entry(8, 0, "run.started", json!({ "run": "r-2", "checkpoint": 6 }));
    assert_eq!(m.sync(cx(&store, None), &start, None), Default::default());
    // A client that holds another run open (the log lost its end): closed, the entry's run
    // started.
    m.entry(cx(&store, None), &start);
    let other = entry(20, 0, "step", json!({ "run": "r-5", "checkpoint": 30, "updates": [] }));
    let kinds: Vec<String> =
        m.sync(cx(&store, None), &other, None).before.iter().map(|e| format!("{} {}", e["type"], e["code"])).collect();
    assert_eq!(kinds[..2], [format!("\"RUN_ERROR\" \"{LOST}\""), "\"RUN_STARTED\" null".to_string()]);
    // One of the run the client holds: no new start, the state again.
    let same = entry(21, 0, "step", json!({ "run": "r-5", "checkpoint": 31, "updates": [] }));
    let again = m.sync(cx(&store, None), &same, None);
    assert_eq!(again.before[0]["type"], "STATE_SNAPSHOT");
}

#[test]
fn an_unknown_kind_or_unreadable_data_is_a_custom_event_not_a_failure() {
    let store = no_store();
    let mut m = mapper(true, |_| None);
    let other = m.entry(cx(&store, None), &entry(1, 0, "budget.spent", json!({ "run": "r", "tokens": 12 })));
    assert_eq!(event(&other, 0)["name"], "agentflow.budget.spent");
    assert_eq!(event(&other, 0)["value"], json!({ "run": "r", "tokens": 12 }));
    // For a reader who may not see personal data, everything but the run is masked.
    let mut masked = mapper(false, |_| None);
    let hidden = masked.entry(cx(&store, None), &entry(1, 0, "budget.spent", json!({ "run": "r", "tokens": 12 })));
    assert_eq!(event(&hidden, 0)["value"], json!({ "run": "r", "tokens": MASK }));
    let unreadable =
        agentflow_store::StoredEvent::new(agentflow_store::EventId::new(2, 0), "step", b"{not json".to_vec(), 5);
    let mapped = m.entry(cx(&store, None), &unreadable);
    assert_eq!(types(&mapped), ["CUSTOM"]);
    assert_eq!(event(&mapped, 0)["name"], "agentflow.step");
    assert!(event(&mapped, 0)["value"]["unreadable"].as_str().unwrap().contains("not JSON"));
    // Without a description every field is overwritten, none masked.
    let mut plain = crate::server::stream::mapper::Mapper::new(
        crate::server::stream::ag_ui::Vocabulary::new("t-1", None, false),
        crate::server::stream::snapshot::Snapshots::new(crate::server::stream::snapshot::none()),
    );
    let step = json!({ "run": "r", "updates": [{ "node": "n", "update": { "email": "x", "list": [1] } }] });
    let mapped = plain.entry(cx(&store, None), &entry(3, 0, "step", step));
    assert_eq!(
        event(&mapped, 1)["delta"],
        json!([{ "op": "add", "path": "/email", "value": "x" }, { "op": "add", "path": "/list", "value": [1] }])
    );
    // A run without an id is named by its entry.
    let started = plain.entry(cx(&store, None), &entry(4, 2, "run.started", json!({})));
    assert_eq!(event(&started, 1)["runId"], "4-2");
}

#[test]
fn an_entrys_places_are_known_before_it_is_mapped() {
    let store = no_store();
    let entries = [
        entry(1, 0, "run.started", json!({ "run": "r-1", "checkpoint": 0 })),
        entry(2, 0, "step", chat_step()),
        entry(2, 1, "step", json!({ "run": "r-1", "updates": [{ "node": "n", "update": { "log": [] } }] })),
        entry(3, 0, "interrupt", waits()),
        entry(3, 1, "run.finished", json!({ "run": "r-1", "status": "interrupted", "checkpoint": 3 })),
        entry(4, 0, "budget.spent", json!({ "run": "r-1" })),
        agentflow_store::StoredEvent::new(agentflow_store::EventId::new(5, 0), "step", b"{".to_vec(), 0),
    ];
    for sees in [false, true] {
        let mut m = mapper(sees, states);
        for e in &entries {
            let places = m.places(e);
            assert_eq!(places, m.entry(cx(&store, Some((3, 1))), e).slots.len(), "{}", e.id);
        }
    }
}
