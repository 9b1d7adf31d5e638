//! Drift: the reference server's live tools against an edited copy of the committed snapshot.
//! A changed property type, a changed description and a tool the server no longer offers are
//! each refused, naming the tool and the JSON pointer of the change.

use agentflow::mcp::{McpClient, McpError};
use serde_json::{Value, json};

use crate::support::mcp::{everything_snapshot, everything_stdio};

/// The committed snapshot, edited by `edit`.
fn edited(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut snapshot: Value = serde_json::from_slice(&everything_snapshot()).expect("the snapshot is JSON");
    edit(&mut snapshot);
    serde_json::to_vec_pretty(&snapshot).expect("encode")
}

fn tool<'a>(snapshot: &'a mut Value, name: &str) -> &'a mut Value {
    snapshot["tools"].as_array_mut().unwrap().iter_mut().find(|t| t["name"] == name).expect("a tool of the snapshot")
}

/// Connects with `snapshot` and returns the refusal's text.
async fn refusal(snapshot: &[u8]) -> Option<(String, Vec<agentflow::mcp::Drift>)> {
    let transport = everything_stdio()?;
    match McpClient::connect("everything", snapshot, transport).await {
        Err(McpError::Drift { server, drift }) => {
            assert_eq!(server, "everything");
            let text = McpError::Drift { server, drift: drift.clone() }.to_string();
            Some((text, drift))
        }
        other => panic!("expected drift, got {other:?}"),
    }
}

#[tokio::test]
async fn a_changed_property_type_is_refused_naming_the_tool_and_pointer() {
    let snapshot = edited(|s| tool(s, "get-sum")["inputSchema"]["properties"]["a"]["type"] = json!("string"));
    let Some((text, drift)) = refusal(&snapshot).await else { return };
    assert_eq!(drift.len(), 1, "{text}");
    assert!(text.contains(r#"get-sum: /inputSchema/properties/a/type: "string" -> "number""#), "{text}");
    assert!(text.contains("agentflow mcp snapshot"), "says what to do: {text}");
}

#[tokio::test]
async fn a_vanished_tool_and_a_changed_description_are_refused_each_named() {
    let snapshot = edited(|s| {
        let mut fake = tool(s, "echo").clone();
        fake["name"] = json!("fake-tool");
        s["tools"].as_array_mut().unwrap().push(fake);
        tool(s, "echo")["description"] = json!("Echoes back the input, louder");
    });
    let Some((text, drift)) = refusal(&snapshot).await else { return };
    assert_eq!(drift.len(), 2, "{text}");
    assert!(text.contains("fake-tool: no longer offered by the server"), "{text}");
    assert!(
        text.contains(r#"echo: /description: "Echoes back the input, louder" -> "Echoes back the input string""#),
        "{text}"
    );
}

#[tokio::test]
async fn a_changed_title_or_annotation_is_not_drift() {
    let snapshot = edited(|s| {
        tool(s, "get-sum")["title"] = json!("Adder");
        tool(s, "get-sum")["annotations"] = json!({"readOnlyHint": false});
    });
    let Some(transport) = everything_stdio() else { return };
    let client =
        McpClient::connect("everything", &snapshot, transport).await.expect("title and hints are not compared");
    client.close().await;
}

#[tokio::test]
async fn a_reordered_required_list_is_not_drift_but_a_dropped_entry_is() {
    let Some(transport) = everything_stdio() else { return };
    let reordered = edited(|s| {
        let required = tool(s, "get-sum")["inputSchema"]["required"].as_array_mut().expect("get-sum requires a and b");
        assert_eq!(required.len(), 2, "{required:?}");
        required.reverse();
    });
    let client = McpClient::connect("everything", &reordered, transport.clone()).await.expect("a reorder is no drift");
    client.close().await;

    let dropped = edited(|s| {
        let required = tool(s, "get-sum")["inputSchema"]["required"].as_array_mut().expect("required");
        required.pop();
    });
    match McpClient::connect("everything", &dropped, transport).await {
        Err(McpError::Drift { .. }) => {}
        other => panic!("a required entry added by the server is drift, got {other:?}"),
    }
}
