//! What threads of an older locked version would meet on the current graph that the compiler
//! cannot see: a state field whose type changed under the same state version, and a pending
//! approval whose tool's argument schema changed with no `args(..)` migration for it.

use serde_json::Value;

use super::json_diff::differences;
use super::migration::{GraphMigration, ToolMigration};

/// The problems threads stored at `older`'s version would meet on `current` (a lock built from
/// the graph), given the graph's declared migrations; each sentence names the field or tool and
/// what to declare. Empty when there are none.
///
/// `later` is the next locked version between the two, if any: a problem it shares (the same
/// field type, the same tool arguments at its version) is left to its own check, whose remedy
/// covers threads of `older`'s version too, so the remedy is declared once.
pub(super) fn problems(
    older: &Value,
    later: Option<&Value>,
    current: &Value,
    migrations: &[GraphMigration],
) -> Vec<String> {
    let mut out = Vec::new();
    let from = older["version"].as_u64().unwrap_or(1);
    let to = current["version"].as_u64().unwrap_or(1);
    field_types(older, later, current, from, to, &mut out);
    let mut chain: Vec<&GraphMigration> =
        migrations.iter().filter(|m| u64::from(m.from) >= from && u64::from(m.from) < to).collect();
    chain.sort_by_key(|m| m.from);
    argument_schemas(older, later, current, from, &chain, &mut out);
    out
}

/// The state's field `name` in a lock: its entry, and the state's version.
fn field<'a>(lock: &'a Value, name: &str) -> Option<(&'a Value, &'a Value)> {
    let fields = lock["state"]["fields"].as_array()?;
    let field = fields.iter().find(|f| f["name"].as_str() == Some(name))?;
    Some((field, &lock["state"]["version"]))
}

/// A field whose type changed while the state's version stayed: a stored state of the old
/// type would not read back, and no state migration would run.
fn field_types(older: &Value, later: Option<&Value>, current: &Value, from: u64, to: u64, out: &mut Vec<String>) {
    let (was, is) = (&older["state"], &current["state"]);
    if was["version"] != is["version"] {
        return;
    }
    let version = is["version"].as_u64().unwrap_or(1);
    let ty = is["name"].as_str().unwrap_or("the state");
    for field_was in was["fields"].as_array().into_iter().flatten() {
        let Some(name) = field_was["name"].as_str() else { continue };
        let Some((now, _)) = field(current, name) else { continue };
        if field_was["type"] == now["type"] {
            continue;
        }
        // The later lock has the same field, type and state version: its check says it.
        if later
            .and_then(|l| field(l, name))
            .is_some_and(|(f, v)| f["type"] == field_was["type"] && v == &was["version"])
        {
            continue;
        }
        out.push(format!(
            "field `{name}` of `{ty}` changed type from {} to {} between version {from} and {to}, and the \
             state's version stayed {version}: raise `#[state(version = {})]` and register \
             `App::migration({version}, ..)` to convert the stored states",
            text(&field_was["type"]),
            text(&now["type"]),
            version.saturating_add(1),
        ));
    }
}

/// Where a tool named `tool` at the start of `chain` is named once the migrations before
/// version `at` ran: `None` when one cancels its approvals or maps its arguments (`args(..)`),
/// as that covers the approvals pending for it.
fn carried<'a>(tool: &'a str, chain: &[&GraphMigration], at: u64) -> Option<&'a str> {
    let mut name = tool;
    for migration in chain.iter().filter(|m| u64::from(m.from) < at) {
        match migration.tools.iter().find(|(old, _)| last(old) == name).map(|(_, to)| to) {
            Some(ToolMigration::Rename(new)) => name = last(new),
            Some(ToolMigration::Cancel) => return None,
            None => {}
        }
        if migration.args.iter().any(|(t, _)| last(t) == name) {
            return None;
        }
    }
    Some(name)
}

/// A tool that needs approval at the older version, whose argument schema differs now and which
/// no `tools(.. -> cancel)` nor `args(..)` of the chain covers: an approval pending with the old
/// arguments would run them against the new schema.
fn argument_schemas(
    older: &Value,
    later: Option<&Value>,
    current: &Value,
    from: u64,
    chain: &[&GraphMigration],
    out: &mut Vec<String>,
) {
    let Some(tools) = older["tools"].as_object() else { return };
    for (tool, was) in tools {
        if was["approval"].as_bool() != Some(true) {
            continue;
        }
        let Some(name) = carried(tool, chain, u64::MAX) else { continue };
        // A tool the graph no longer lists is `#[graph]`'s to report.
        let Some(is) = current["tools"].get(name) else { continue };
        if was["schema"] == is["schema"] {
            continue;
        }
        // The later lock has the tool with the same arguments, needing approval: its check
        // says it, with a remedy that covers this version's threads too.
        if let Some(later) = later {
            let at = later["version"].as_u64().unwrap_or(u64::MAX);
            let there = carried(tool, chain, at).and_then(|n| later["tools"].get(n));
            if there.is_some_and(|t| t["approval"].as_bool() == Some(true) && t["schema"] == was["schema"]) {
                continue;
            }
        }
        // Its name where `migrate(from = <older version>, args(..))` names it.
        let at = carried(tool, chain, from.saturating_add(1)).unwrap_or(name);
        out.push(format!(
            "an approval of `{tool}` may be pending in threads of version {from}, and the argument schema of \
             `{name}` changed since ({}): add `migrate(from = {from}, args({at} = path::to::fn))` to rewrite the \
             pending arguments, or `args({at} = cancel)` to cancel those approvals",
            differences(&was["schema"], &is["schema"]),
        ));
    }
}

/// A tool as `migrate(..)` names it (an identifier, or a path such as `mcp::get_sum`),
/// compared with [`Tool::name`](crate::tool::Tool::name): its last segment.
fn last(written: &str) -> &str {
    written.rsplit("::").next().unwrap_or(written)
}

/// A string as itself, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
