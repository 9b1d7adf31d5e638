//! The graph a thread was stored with: its description, kept under the graph's fingerprint
//! and in the thread's first checkpoint, and what changed when a resume finds another
//! fingerprint.

use std::sync::Arc;

use agentflow_store::Store;
use serde_json::Value;

use super::graph_identity::GraphIdentity;
use super::io::blocking;

/// The stored description of a graph, to explain a fingerprint change.
/// Stores the graph's description under its fingerprint unless the store has
/// it already (see [`GraphIdentity::description`]). The description only
/// serves tools that read the store, so a failure is logged, not fatal.
/// One stored before the state's fields were marked as they are now is replaced.
pub(super) async fn keep_description(
    store: &Arc<dyn Store>,
    graph: &impl GraphIdentity,
    fields: &'static [crate::core::state::Field],
) {
    let fingerprint = graph.fingerprint().to_string();
    let fp = fingerprint.clone();
    match blocking(store, move |s| s.graph_description(&fp)).await {
        Ok(Ok(Some(text))) if marks_current(&text, fields) => return,
        Ok(Ok(Some(_))) => {}
        Ok(Ok(None)) => {}
        Ok(Err(e)) => return tracing::warn!(parent: None, fingerprint, error = %e, "reading the graph's description"),
        Err(e) => return tracing::warn!(parent: None, fingerprint, error = %e, "reading the graph's description"),
    }
    let text = graph.description();
    match blocking(store, move |s| s.put_graph_description(&fingerprint, &text)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(parent: None, error = %e, "storing the graph's description"),
        Err(e) => tracing::warn!(parent: None, error = %e, "storing the graph's description"),
    }
}

/// Whether a stored description marks the same fields personal and credential as `fields`
/// (the marks do not change the fingerprint). Reads the text only when either side has marks.
pub(super) fn marks_current(text: &str, fields: &[crate::core::state::Field]) -> bool {
    let marked = fields.iter().any(|f| f.personal || f.credential);
    if !marked && !text.contains("\"personal\":true") && !text.contains("\"credential\":true") {
        return true;
    }
    let Ok(stored) = serde_json::from_str::<Value>(text) else { return true };
    let Some(listed) = stored.pointer("/state/fields").and_then(Value::as_array) else { return !marked };
    let flag = |f: &Value, key: &str| f.get(key).and_then(Value::as_bool).unwrap_or(false);
    fields.iter().all(|field| {
        listed
            .iter()
            .find(|f| f.get("name").and_then(Value::as_str) == Some(field.name))
            .is_none_or(|f| flag(f, "personal") == field.personal && flag(f, "credential") == field.credential)
    }) && listed.iter().all(|f| {
        !(flag(f, "personal") || flag(f, "credential"))
            || fields.iter().any(|field| f.get("name").and_then(Value::as_str) == Some(field.name))
    })
}

pub(super) fn explain_change(stored: Option<&Value>, current: &Value) -> String {
    let (stored_all, current_all) = (stored.unwrap_or(&Value::Null), current);
    let Some(stored) = stored.and_then(|s| s.get("nodes")).and_then(Value::as_object) else {
        return "the stored thread carries no description of its graph".into();
    };
    let Some(current) = current.get("nodes").and_then(Value::as_object) else { return String::new() };
    let mut changes = Vec::new();
    for (name, routes) in stored {
        match current.get(name) {
            None => changes.push(format!("node `{name}` was removed")),
            Some(now) if now != routes => changes.push(format!("routes of `{name}` changed from {routes} to {now}")),
            Some(_) => {}
        }
    }
    for name in current.keys().filter(|n| !stored.contains_key(*n)) {
        changes.push(format!("node `{name}` was added"));
    }
    // Per node: its tools, and the fields it may write (threads stored before these were
    // described carry none, and are compared on what they carry).
    for (key, what) in [("tools", "tools"), ("writes", "`writes`")] {
        let of = |v: &Value| v.get(key).and_then(Value::as_object).cloned();
        if let (Some(before), Some(now)) = (of(stored_all), of(current_all)) {
            for name in before.keys().chain(now.keys().filter(|n| !before.contains_key(*n))) {
                let (b, n) = (before.get(name).unwrap_or(&Value::Null), now.get(name).unwrap_or(&Value::Null));
                if b != n {
                    changes.push(format!("{what} of `{name}` changed from {b} to {n}"));
                }
            }
        }
    }
    for (key, what) in [("state", "the state type"), ("start", "the start node"), ("max_steps", "the step bound")] {
        if let (Some(b), Some(n)) = (stored_all.get(key), current_all.get(key))
            && b != n
        {
            changes.push(format!("{what} changed from {b} to {n}"));
        }
    }

    if changes.is_empty() {
        "the state type, start node, `writes` lists, step bound or tools changed".into()
    } else {
        changes.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::explain_change;

    fn described(writes: serde_json::Value, max_steps: u32) -> serde_json::Value {
        json!({
            "name": "g",
            "nodes": { "a": ["b"], "b": ["END"] },
            "tools": {},
            "state": "Doc",
            "start": "a",
            "max_steps": max_steps,
            "writes": writes,
        })
    }

    #[test]
    fn a_changed_writes_list_or_step_bound_is_named() {
        let before = described(json!({ "a": ["x", "y"] }), 10);
        let after = described(json!({ "a": ["x"], "b": ["y"] }), 12);
        let changes = explain_change(Some(&before), &after);
        assert!(changes.contains("`writes` of `a` changed from [\"x\",\"y\"] to [\"x\"]"), "{changes}");
        assert!(changes.contains("`writes` of `b` changed from null to [\"y\"]"), "{changes}");
        assert!(changes.contains("the step bound changed from 10 to 12"), "{changes}");
    }

    #[test]
    fn a_description_stored_before_writes_were_described_is_compared_on_what_it_holds() {
        let old = json!({ "name": "g", "nodes": { "a": ["b"], "b": ["END"] }, "tools": {} });
        let now = described(json!({ "a": ["x"] }), 10);
        let changes = explain_change(Some(&old), &now);
        assert_eq!(changes, "the state type, start node, `writes` lists, step bound or tools changed");
    }

    #[test]
    fn a_description_without_the_current_marks_is_stale() {
        use super::marks_current;
        use crate::core::state::{Field, ReducerKind};
        let plain = [Field::new("email", ReducerKind::Overwrite, "String")];
        let marked = [Field::new("email", ReducerKind::Overwrite, "String").personal()];
        let old = r#"{"state":{"fields":[{"name":"email","reducer":"overwrite","type":"String"}]}}"#;
        let now = r#"{"state":{"fields":[{"name":"email","personal":true,"credential":false}]}}"#;
        assert!(marks_current(old, &plain));
        assert!(!marks_current(old, &marked));
        assert!(marks_current(now, &marked));
        assert!(!marks_current(now, &plain));
    }
}
