//! The comparison of a graph with the lock of its own version, on hand-built locks.

use serde_json::{Value, json};

use super::changes;

/// A lock of `support` version 2: `triage` routes to `review` or ends, `review` calls `refund`.
fn lock() -> Value {
    json!({
        "format": 1, "id": "support", "version": 2, "graph": "support", "fingerprint": "00aa",
        "start": "triage", "max_steps": 10,
        "nodes": {
            "triage": { "goto": ["END", "review"], "writes": ["amount"], "tools": [], "subgraphs": [],
                        "interrupt": false, "sleep": false, "map": false },
            "review": { "goto": ["END"], "writes": null, "tools": ["refund"], "subgraphs": [],
                        "interrupt": true, "sleep": false, "map": false },
        },
        "tools": {
            "refund": { "risk": "irreversible", "approval": true,
                        "schema": { "type": "object", "properties": { "amount": { "type": "integer" } } } },
        },
        "state": { "name": "Doc", "version": 1, "fields": [
            { "name": "amount", "type": "u32", "reducer": "overwrite", "personal": false, "credential": false },
            { "name": "email", "type": "String", "reducer": "overwrite", "personal": false, "credential": false },
        ] },
    })
}

#[test]
fn a_graph_equal_to_its_lock_has_no_changes() {
    assert!(changes(&lock(), &lock()).is_empty());
}

#[test]
fn node_changes_are_named_like_the_compilers() {
    let mut now = lock();
    now["nodes"]["triage"]["goto"] = json!(["END"]);
    now["nodes"]["triage"]["writes"] = json!(["amount", "email"]);
    now["nodes"]["review"]["tools"] = json!([]);
    now["nodes"]["review"]["interrupt"] = json!(false);
    now["nodes"]["escalate"] = now["nodes"]["review"].clone();
    now["fingerprint"] = json!("00bb");
    let found = changes(&lock(), &now);
    assert_eq!(
        found,
        vec![
            "tools of `review` changed from [\"refund\"] to []",
            "`interrupt` of `review` changed from true to false",
            "routes of `triage` changed from [\"END\",\"review\"] to [\"END\"]",
            "`writes` of `triage` changed from [\"amount\"] to [\"amount\",\"email\"]",
            "node `escalate` was added",
        ],
        "the fingerprint follows from the rest and is not named"
    );
    let mut gone = lock();
    gone["nodes"].as_object_mut().unwrap().remove("review");
    assert_eq!(changes(&lock(), &gone), vec!["node `review` was removed"]);
}

#[test]
fn a_tools_risk_class_and_argument_schema_are_compared() {
    let mut now = lock();
    now["tools"]["refund"]["risk"] = json!("external");
    now["tools"]["refund"]["schema"]["properties"]["amount"]["type"] = json!("number");
    now["tools"]["lookup"] = json!({ "risk": "read", "approval": false, "schema": {} });
    let found = changes(&lock(), &now);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].starts_with("the risk class of tool `refund` changed from irreversible to external"), "{found:?}");
    assert_eq!(
        found[1],
        "the argument schema of tool `refund` changed (at /properties/amount/type: \"integer\" -> \"number\")"
    );
    assert_eq!(found[2], "tool `lookup` was added");
}

#[test]
fn state_fields_their_types_reducers_and_marks_are_compared() {
    let mut now = lock();
    now["state"]["fields"] = json!([
        { "name": "amount", "type": "f64", "reducer": "add", "personal": false, "credential": false },
        { "name": "email", "type": "String", "reducer": "overwrite", "personal": true, "credential": false },
        { "name": "note", "type": "String", "reducer": "overwrite", "personal": false, "credential": false },
    ]);
    now["state"]["version"] = json!(2);
    assert_eq!(
        changes(&lock(), &now),
        vec![
            "the state's version changed from 1 to 2",
            "field `amount` of `Doc` changed type from u32 to f64",
            "the reducer of field `amount` of `Doc` changed from overwrite to add",
            "field `email` of `Doc` is now marked personal",
            "field `note` of `Doc` was added",
        ]
    );
    let mut fewer = lock();
    fewer["state"]["fields"].as_array_mut().unwrap().pop();
    fewer["state"]["name"] = json!("Ticket");
    assert_eq!(
        changes(&lock(), &fewer),
        vec!["the state type changed from `Doc` to `Ticket`", "field `email` of `Ticket` was removed"]
    );
}

#[test]
fn the_start_the_step_bound_and_a_lone_fingerprint_change_are_named() {
    let mut now = lock();
    now["start"] = json!("review");
    now["max_steps"] = json!(12);
    assert_eq!(
        changes(&lock(), &now),
        vec!["the start node changed from `triage` to `review`", "the step bound changed from 10 to 12"]
    );
    let mut rehashed = lock();
    rehashed["fingerprint"] = json!("00cc");
    let found = changes(&lock(), &rehashed);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("the fingerprint changed from \"00aa\" to \"00cc\""), "{found:?}");
}
