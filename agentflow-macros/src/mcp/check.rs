//! Rules over one `mod .. from ".." { .. }` of `mcp_tools!` and its snapshot's tools.

use super::ir::{ModuleIr, SnapTool};
use crate::diag::{Diagnostics, Kind, did_you_mean, list, unknown};
use crate::keywords::mcp::RISKS;

pub fn check_all(module: &ModuleIr, tools: &[SnapTool], diags: &mut Diagnostics) {
    check_entries(module, tools, diags);
    check_missing(module, tools, diags);
    check_rust_names(module, tools, diags);
}

// Every name in the risk map is a tool of the snapshot, given one known risk, once.
// `eho: read`, `echo: safe`, `echo: read, echo: read`.
fn check_entries(module: &ModuleIr, tools: &[SnapTool], diags: &mut Diagnostics) {
    let names: Vec<&str> = tools.iter().map(|t| t.rust.as_str()).collect();
    for (i, e) in module.entries.iter().enumerate() {
        if !names.contains(&e.name.as_str()) {
            let hint = match did_you_mean(&e.name, names.iter().copied()) {
                Some(close) => format!("did you mean `{close}`?"),
                None if names.is_empty() => "it has no tools".to_string(),
                None => format!("its tools are {}", list(&names)),
            };
            diags.push(
                Kind::UnknownTool,
                e.loc,
                format!("no tool `{}` in the snapshot `{}`; {hint}", e.name, module.path),
            );
        }
        if !RISKS.contains(&e.risk.as_str()) {
            diags.push(Kind::Syntax, e.risk_loc, unknown("risk", &e.risk, RISKS, &format!("one of {}", list(RISKS))));
        }
        if module.entries[..i].iter().any(|before| before.name == e.name) {
            diags.push(Kind::Syntax, e.loc, format!("`{}` is given a risk twice; keep one", e.name));
        }
    }
}

// The gateway's policy keys on the risk class, and the server's annotations are hints from
// outside the program: every tool of the snapshot needs a class from the program.
fn check_missing(module: &ModuleIr, tools: &[SnapTool], diags: &mut Diagnostics) {
    for t in tools {
        if module.entries.iter().any(|e| e.name == t.rust) {
            continue;
        }
        let hints = if t.annotations.is_empty() {
            "the server gives no hints".to_string()
        } else {
            let said: Vec<String> = t.annotations.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("the server's annotations say {} (shown, not trusted)", said.join(", "))
        };
        diags.push(
            Kind::MissingRisk,
            module.name_loc,
            format!(
                "MCP tool `{}` (`{}`) has no risk class: add `{}: <risk>` to `mod {}`, the risk one of {}; {hints}",
                t.name,
                t.rust,
                t.rust,
                module.name,
                RISKS.join(", "),
            ),
        );
    }
}

// Two MCP names that map to one Rust name (`get-sum` and `get_sum`) cannot both be items.
fn check_rust_names(module: &ModuleIr, tools: &[SnapTool], diags: &mut Diagnostics) {
    for (i, t) in tools.iter().enumerate() {
        if let Some(first) = tools[..i].iter().find(|before| before.rust == t.rust) {
            diags.push(
                Kind::NameClash,
                module.path_loc,
                format!(
                    "MCP tools `{}` and `{}` both become `{}` in Rust; take the snapshot without one of them \
                     (`agentflow mcp snapshot .. --exclude {}`)",
                    first.name, t.name, t.rust, t.name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Loc;
    use crate::mcp::ir::Entry;
    use crate::mcp::schema::read_snapshot;

    fn tools() -> Vec<SnapTool> {
        let bytes = serde_json::json!({ "format": 1, "tools": [
            { "name": "echo", "inputSchema": { "type": "object" },
              "annotations": { "readOnlyHint": true, "idempotentHint": true } },
            { "name": "get-sum", "inputSchema": { "type": "object" } },
        ]});
        read_snapshot(bytes.to_string().as_bytes()).unwrap()
    }

    fn entry(name: &str, risk: &str) -> Entry {
        Entry { name: name.into(), loc: Loc::DUMMY, risk: risk.into(), risk_loc: Loc::DUMMY, idempotent: false }
    }

    fn module(entries: Vec<Entry>) -> ModuleIr {
        ModuleIr {
            name: "everything".into(),
            name_loc: Loc::DUMMY,
            path: "../mcp/everything.json".into(),
            path_loc: Loc::DUMMY,
            entries,
        }
    }

    fn messages(m: &ModuleIr, tools: &[SnapTool]) -> Vec<String> {
        let mut d = Diagnostics::default();
        check_all(m, tools, &mut d);
        d.into_vec().into_iter().map(|d| d.message).collect()
    }

    #[test]
    fn a_complete_risk_map_passes() {
        assert!(messages(&module(vec![entry("echo", "read"), entry("get_sum", "external")]), &tools()).is_empty());
    }

    #[test]
    fn a_tool_without_risk_is_named_with_its_annotations() {
        let m = messages(&module(vec![entry("get_sum", "read")]), &tools());
        assert_eq!(
            m,
            ["MCP tool `echo` (`echo`) has no risk class: add `echo: <risk>` to `mod everything`, the risk one of \
              read, reversible, external, irreversible; the server's annotations say idempotentHint: true, \
              readOnlyHint: true (shown, not trusted)"]
        );
        let m = messages(&module(vec![entry("echo", "read")]), &tools());
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with("MCP tool `get-sum` (`get_sum`) has no risk class"), "{m:?}");
        assert!(m[0].ends_with("the server gives no hints"), "{m:?}");
    }

    #[test]
    fn a_misspelt_tool_gets_a_did_you_mean_from_the_snapshot() {
        let m = messages(&module(vec![entry("eho", "read"), entry("get_sum", "read")]), &tools());
        assert!(
            m.contains(&"no tool `eho` in the snapshot `../mcp/everything.json`; did you mean `echo`?".to_string()),
            "{m:?}"
        );
        // And `echo` itself is then missing its risk: both are reported together.
        assert_eq!(m.len(), 2, "{m:?}");
        let m =
            messages(&module(vec![entry("echo", "read"), entry("get_sum", "read"), entry("zzz", "read")]), &tools());
        assert_eq!(m, ["no tool `zzz` in the snapshot `../mcp/everything.json`; its tools are `echo`, `get_sum`"]);
    }

    #[test]
    fn unknown_and_repeated_risks() {
        let m =
            messages(&module(vec![entry("echo", "reed"), entry("get_sum", "read"), entry("echo", "read")]), &tools());
        assert_eq!(
            m,
            [
                "unknown risk `reed`; did you mean `read`? expected one of `read`, `reversible`, `external`, `irreversible`",
                "`echo` is given a risk twice; keep one",
            ]
        );
    }

    #[test]
    fn two_tools_with_one_rust_name_are_refused() {
        let bytes = serde_json::json!({ "format": 1, "tools": [
            { "name": "get-sum", "inputSchema": { "type": "object" } },
            { "name": "get_sum", "inputSchema": { "type": "object" } },
        ]});
        let tools = read_snapshot(bytes.to_string().as_bytes()).unwrap();
        let m = messages(&module(vec![entry("get_sum", "read")]), &tools);
        assert_eq!(
            m,
            ["MCP tools `get-sum` and `get_sum` both become `get_sum` in Rust; take the snapshot without one of them \
              (`agentflow mcp snapshot .. --exclude get_sum`)"]
        );
    }
}
