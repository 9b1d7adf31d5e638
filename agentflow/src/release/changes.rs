//! How a graph differs from the lock of its own version: every difference of nodes, routes,
//! tools (risk class, argument schema), state fields and the rest, one sentence each.

use serde_json::{Map, Value};

use super::json_diff::differences;

/// The node attributes in the order a message names them, each with how it is named.
const NODE_ATTRIBUTES: &[(&str, &str)] = &[("goto", "routes"), ("writes", "`writes`"), ("tools", "tools")];

/// How `current` (a lock built from the graph) differs from `locked` (the lock of the same
/// version), one sentence each; empty when they match. The fingerprint, which follows from the
/// rest, is named only when nothing else differs.
pub(super) fn changes(locked: &Value, current: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let top = [
        ("id", "the graph's id"),
        ("version", "the lock's version"),
        ("graph", "the graph's name"),
        ("start", "the start node"),
        ("max_steps", "the step bound"),
    ];
    for (key, what) in top {
        let (before, now) = (&locked[key], &current[key]);
        if before != now {
            out.push(format!("{what} changed from {} to {}", shown(before), shown(now)));
        }
    }
    nodes(&locked["nodes"], &current["nodes"], &mut out);
    tools(&locked["tools"], &current["tools"], &mut out);
    state(&locked["state"], &current["state"], &mut out);
    if out.is_empty() && locked["fingerprint"] != current["fingerprint"] {
        out.push(format!(
            "the fingerprint changed from {} to {} (the graph was built by another version of agentflow)",
            locked["fingerprint"], current["fingerprint"]
        ));
    }
    out
}

/// A value in a message: a string as itself in backticks, anything else as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => other.to_string(),
    }
}

/// A string as itself, anything else as JSON.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn object(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// The keys of `before`, then those only `after` has.
fn keys<'a>(before: &'a Map<String, Value>, after: &'a Map<String, Value>) -> Vec<&'a String> {
    before.keys().chain(after.keys().filter(|k| !before.contains_key(*k))).collect()
}

fn nodes(locked: &Value, current: &Value, out: &mut Vec<String>) {
    let (before, now) = (object(locked), object(current));
    for (name, was) in &before {
        match now.get(name) {
            None => out.push(format!("node `{name}` was removed")),
            Some(is) => node(name, was, is, out),
        }
    }
    for name in now.keys().filter(|n| !before.contains_key(*n)) {
        out.push(format!("node `{name}` was added"));
    }
}

/// A node's attributes: routes, `writes` and tools first, then the rest (`subgraphs`,
/// `interrupt`, `sleep`, `map`) in key order.
fn node(name: &str, was: &Value, is: &Value, out: &mut Vec<String>) {
    let (before, now) = (object(was), object(is));
    let mut attributes = keys(&before, &now);
    attributes.sort_by_key(|k| (NODE_ATTRIBUTES.iter().position(|(a, _)| a == k).unwrap_or(NODE_ATTRIBUTES.len()), *k));
    for key in attributes {
        let (b, n) = (before.get(key).unwrap_or(&Value::Null), now.get(key).unwrap_or(&Value::Null));
        if b == n {
            continue;
        }
        let what =
            NODE_ATTRIBUTES.iter().find(|(a, _)| a == key).map_or_else(|| format!("`{key}`"), |(_, w)| w.to_string());
        out.push(format!("{what} of `{name}` changed from {b} to {n}"));
    }
}

fn tools(locked: &Value, current: &Value, out: &mut Vec<String>) {
    let (before, now) = (object(locked), object(current));
    for (name, was) in &before {
        let Some(is) = now.get(name) else {
            out.push(format!("tool `{name}` was removed"));
            continue;
        };
        if was["risk"] != is["risk"] {
            out.push(format!(
                "the risk class of tool `{name}` changed from {} to {}: approvals pending in threads of this \
                 version were asked for the old class",
                plain(&was["risk"]),
                plain(&is["risk"])
            ));
        } else if was["approval"] != is["approval"] {
            out.push(format!("`approval` of tool `{name}` changed from {} to {}", was["approval"], is["approval"]));
        }
        if was["schema"] != is["schema"] {
            out.push(format!(
                "the argument schema of tool `{name}` changed ({})",
                differences(&was["schema"], &is["schema"])
            ));
        }
        let (b, n) = (object(was), object(is));
        for key in keys(&b, &n).into_iter().filter(|k| !["risk", "approval", "schema"].contains(&k.as_str())) {
            let (x, y) = (b.get(key).unwrap_or(&Value::Null), n.get(key).unwrap_or(&Value::Null));
            if x != y {
                out.push(format!("`{key}` of tool `{name}` changed from {x} to {y}"));
            }
        }
    }
    for name in now.keys().filter(|n| !before.contains_key(*n)) {
        out.push(format!("tool `{name}` was added"));
    }
}

fn state(locked: &Value, current: &Value, out: &mut Vec<String>) {
    if locked["name"] != current["name"] {
        out.push(format!("the state type changed from {} to {}", shown(&locked["name"]), shown(&current["name"])));
    }
    if locked["version"] != current["version"] {
        out.push(format!("the state's version changed from {} to {}", locked["version"], current["version"]));
    }
    let ty = plain(&current["name"]);
    let fields = |v: &Value| -> Vec<Value> { v["fields"].as_array().cloned().unwrap_or_default() };
    let (before, now) = (fields(locked), fields(current));
    let named = |list: &[Value], name: &Value| list.iter().find(|f| &f["name"] == name).cloned();
    for was in &before {
        let name = plain(&was["name"]);
        let Some(is) = named(&now, &was["name"]) else {
            out.push(format!("field `{name}` of `{ty}` was removed"));
            continue;
        };
        if was["type"] != is["type"] {
            out.push(format!(
                "field `{name}` of `{ty}` changed type from {} to {}",
                plain(&was["type"]),
                plain(&is["type"])
            ));
        }
        if was["reducer"] != is["reducer"] {
            out.push(format!(
                "the reducer of field `{name}` of `{ty}` changed from {} to {}",
                plain(&was["reducer"]),
                plain(&is["reducer"])
            ));
        }
        for mark in ["personal", "credential"] {
            let (b, n) = (was[mark].as_bool().unwrap_or(false), is[mark].as_bool().unwrap_or(false));
            if b != n {
                let now = if n { "is now" } else { "is no longer" };
                out.push(format!("field `{name}` of `{ty}` {now} marked {mark}"));
            }
        }
    }
    for is in now.iter().filter(|f| named(&before, &f["name"]).is_none()) {
        out.push(format!("field `{}` of `{ty}` was added", plain(&is["name"])));
    }
}

#[cfg(test)]
mod tests;
