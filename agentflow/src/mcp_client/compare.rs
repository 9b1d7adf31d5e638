//! The live tool list against the snapshot: for every tool of the snapshot, the live tool of
//! the same name compared on `description`, `inputSchema` and `outputSchema`, down to the
//! leaves ([`Drift`], [`Change`]). `required`, `enum` and an array `type` are sets: a reorder is
//! no change, an element added or removed is one change at the array.

use serde_json::Value;

use super::drift::{Change, Drift, escape};
use super::{McpError, Snapshot, SnapshotTool};

/// How deep the walk goes; below this a changed subtree is one change.
const MAX_WALK_DEPTH: usize = 128;

/// The snapshot's tools the live list changed or dropped (in the snapshot's order), and the
/// live tools the snapshot does not have, by name (ignored: no program was typed against them).
pub fn compare(snapshot: &Snapshot, live: &[SnapshotTool]) -> (Vec<Drift>, Vec<String>) {
    let mut drift = Vec::new();
    for tool in &snapshot.tools {
        let Some(now) = live.iter().find(|t| t.name == tool.name) else {
            drift.push(Drift { tool: tool.name.clone(), changes: Vec::new(), vanished: true });
            continue;
        };
        let mut changes = Vec::new();
        let (before, after) = (Value::String(tool.description.clone()), Value::String(now.description.clone()));
        walk("/description".to_string(), Some(&before), Some(&after), 0, &mut changes);
        walk("/inputSchema".to_string(), Some(&tool.input_schema), Some(&now.input_schema), 0, &mut changes);
        walk("/outputSchema".to_string(), tool.output_schema.as_ref(), now.output_schema.as_ref(), 0, &mut changes);
        if !changes.is_empty() {
            drift.push(Drift { tool: tool.name.clone(), changes, vanished: false });
        }
    }
    let mut new_tools: Vec<String> =
        live.iter().filter(|t| snapshot.tool(&t.name).is_none()).map(|t| t.name.clone()).collect();
    new_tools.sort();
    new_tools.dedup();
    (drift, new_tools)
}

/// The first tool name the live list gives twice.
pub(crate) fn duplicate(live: &[SnapshotTool]) -> Option<&str> {
    let mut names: Vec<&str> = live.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    names.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// `live` checked against `snapshot` for the server named `server`: the live tools the
/// snapshot does not have, or [`McpError::Protocol`] for a tool listed twice, or
/// [`McpError::Drift`].
pub(crate) fn check(server: &str, snapshot: &Snapshot, live: &[SnapshotTool]) -> Result<Vec<String>, McpError> {
    if let Some(name) = duplicate(live) {
        return Err(McpError::Protocol {
            server: server.to_string(),
            why: format!(
                "its tool list names the tool `{name}` more than once, so which definition holds is unknown; fix the \
                 server"
            ),
        });
    }
    let (drift, new_tools) = compare(snapshot, live);
    if drift.is_empty() { Ok(new_tools) } else { Err(McpError::Drift { server: server.to_string(), drift }) }
}

/// Whether the array at `pointer` is a set in JSON Schema (`required`, `enum`, `type`).
fn is_set(pointer: &str) -> bool {
    pointer.ends_with("/required") || pointer.ends_with("/enum") || pointer.ends_with("/type")
}

/// Whether two arrays hold the same elements, in any order.
fn same_set(a: &[Value], b: &[Value]) -> bool {
    let sorted = |v: &[Value]| {
        let mut keys: Vec<String> = v.iter().map(Value::to_string).collect();
        keys.sort_unstable();
        keys
    };
    a.len() == b.len() && sorted(a) == sorted(b)
}

fn walk(pointer: String, before: Option<&Value>, after: Option<&Value>, depth: usize, out: &mut Vec<Change>) {
    match (before, after) {
        (Some(a), Some(b)) if a == b => {}
        (None, None) => {}
        (Some(Value::Object(a)), Some(Value::Object(b))) if depth < MAX_WALK_DEPTH => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                walk(format!("{pointer}/{}", escape(key)), a.get(key), b.get(key), depth + 1, out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if is_set(&pointer) => {
            if !same_set(a, b) {
                out.push(Change { pointer, before: before.cloned(), after: after.cloned() });
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() && depth < MAX_WALK_DEPTH => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(format!("{pointer}/{i}"), Some(x), Some(y), depth + 1, out);
            }
        }
        (a, b) => out.push(Change { pointer, before: a.cloned(), after: b.cloned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp_client::drift::describe;
    use serde_json::json;

    fn tool(name: &str, description: &str, input: Value) -> SnapshotTool {
        SnapshotTool {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema: input,
            output_schema: None,
            annotations: None,
        }
    }

    fn snapshot(tools: Vec<SnapshotTool>) -> Snapshot {
        Snapshot { format: super::super::SNAPSHOT_FORMAT, server: Value::Null, tools }
    }

    fn sum() -> SnapshotTool {
        tool(
            "get-sum",
            "Adds two numbers",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        )
    }

    #[test]
    fn equal_lists_have_no_drift_and_new_tools_are_reported_not_refused() {
        let snap = snapshot(vec![sum()]);
        let (drift, new_tools) = compare(&snap, &[tool("zeta", "", json!({})), sum(), tool("alpha", "", json!({}))]);
        assert!(drift.is_empty(), "{drift:?}");
        assert_eq!(new_tools, ["alpha", "zeta"]);
    }

    #[test]
    fn a_changed_property_type_is_one_change_at_its_pointer() {
        let snap = snapshot(vec![sum()]);
        let mut live = sum();
        live.input_schema["properties"]["a"]["type"] = json!("string");
        let (drift, _) = compare(&snap, &[live]);
        assert_eq!(
            drift,
            [Drift {
                tool: "get-sum".into(),
                vanished: false,
                changes: vec![Change {
                    pointer: "/inputSchema/properties/a/type".into(),
                    before: Some(json!("number")),
                    after: Some(json!("string")),
                }],
            }]
        );
        let text = describe("everything", &drift);
        assert!(text.contains(r#"get-sum: /inputSchema/properties/a/type: "number" -> "string""#), "{text}");
        assert!(text.starts_with("MCP server `everything`"), "{text}");
        assert!(text.contains("agentflow mcp snapshot"), "{text}");
    }

    #[test]
    fn vanished_added_and_removed_keys_escaped_keys_and_descriptions() {
        let mut old = sum();
        old.input_schema["properties"]["x/y~z"] = json!({"type": "string"});
        let snap = snapshot(vec![old, tool("gone", "", json!({}))]);
        let mut live = sum();
        live.description = "Adds two numbers, fast".into();
        live.input_schema["properties"]["c"] = json!({"type": "number"});
        live.output_schema = Some(json!({"type": "object"}));
        let (drift, new_tools) = compare(&snap, &[live]);
        assert!(new_tools.is_empty());
        assert_eq!(drift.len(), 2);
        let pointers: Vec<(&str, Option<&Value>, Option<&Value>)> =
            drift[0].changes.iter().map(|c| (c.pointer.as_str(), c.before.as_ref(), c.after.as_ref())).collect();
        assert_eq!(
            pointers,
            [
                ("/description", Some(&json!("Adds two numbers")), Some(&json!("Adds two numbers, fast"))),
                ("/inputSchema/properties/c", None, Some(&json!({"type": "number"}))),
                ("/inputSchema/properties/x~1y~0z", Some(&json!({"type": "string"})), None),
                ("/outputSchema", None, Some(&json!({"type": "object"}))),
            ]
        );
        assert!(drift[1].vanished && drift[1].tool == "gone" && drift[1].changes.is_empty());
        let text = describe("s", &drift);
        assert!(text.contains("get-sum: /inputSchema/properties/c: (absent) -> {\"type\":\"number\"}"), "{text}");
        assert!(text.contains("gone: no longer offered by the server"), "{text}");
    }

    #[test]
    fn arrays_compare_by_index_and_a_length_change_is_reported_at_the_array() {
        let snap = snapshot(vec![sum()]);
        let mut reordered = sum();
        reordered.input_schema["required"] = json!(["b", "a"]);
        reordered.input_schema["properties"]["a"]["type"] = json!(["null", "number"]);
        let mut snap_set = snapshot(vec![sum()]);
        snap_set.tools[0].input_schema["properties"]["a"]["type"] = json!(["number", "null"]);
        snap_set.tools[0].input_schema["properties"]["b"]["enum"] = json!([1, 2, 3]);
        reordered.input_schema["properties"]["b"]["enum"] = json!([3, 1, 2]);
        assert!(compare(&snap_set, &[reordered.clone()]).0.is_empty(), "a set reordered is no drift");

        reordered.input_schema["properties"]["b"]["enum"] = json!([3, 1, 4]);
        let (drift, _) = compare(&snap_set, &[reordered]);
        assert_eq!(
            drift[0].changes,
            [Change {
                pointer: "/inputSchema/properties/b/enum".into(),
                before: Some(json!([1, 2, 3])),
                after: Some(json!([3, 1, 4])),
            }],
            "an element swapped is one change at the set"
        );

        let mut examples = sum();
        examples.input_schema["examples"] = json!([1, 2]);
        let mut swapped = sum();
        swapped.input_schema["examples"] = json!([2, 1]);
        let (drift, _) = compare(&snapshot(vec![examples]), &[swapped]);
        let pointers: Vec<&str> = drift[0].changes.iter().map(|c| c.pointer.as_str()).collect();
        assert_eq!(pointers, ["/inputSchema/examples/0", "/inputSchema/examples/1"], "other arrays keep their order");

        let mut longer = sum();
        longer.input_schema["required"] = json!(["a", "b", "c"]);
        let (drift, _) = compare(&snap, &[longer]);
        assert_eq!(
            drift[0].changes,
            [Change {
                pointer: "/inputSchema/required".into(),
                before: Some(json!(["a", "b"])),
                after: Some(json!(["a", "b", "c"])),
            }]
        );
    }

    #[test]
    fn a_tool_listed_twice_is_a_protocol_error_naming_it() {
        let snap = snapshot(vec![sum()]);
        let mut changed = sum();
        changed.description = "other".into();
        let err = check("s", &snap, &[sum(), tool("x", "", json!({})), changed]).expect_err("refused");
        match err {
            McpError::Protocol { why, .. } => assert!(why.contains("`get-sum` more than once"), "{why}"),
            other => panic!("a tool listed twice is a protocol error, got {other:?}"),
        }
        assert_eq!(check("s", &snap, &[sum(), tool("x", "", json!({}))]).expect("no drift"), ["x"]);
    }

    #[test]
    fn title_and_annotations_are_not_drift() {
        let snap = snapshot(vec![sum()]);
        let mut live = sum();
        live.title = Some("Sum".into());
        live.annotations = Some(json!({"readOnlyHint": false}));
        assert!(compare(&snap, &[live]).0.is_empty());
    }
}
