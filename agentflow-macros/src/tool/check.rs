//! Rules over one `#[tool]`.

use super::ir::{RISKS, ToolIr};
use crate::diag::{Diagnostics, Kind, list, unknown};
use crate::keywords::tool::COMPENSABLE;

const EXPECTED: &str = "expected `async fn name(args: Args) -> Result<T, ToolError>` \
                        (or `(args: Args, cx: &ToolCx)`, `(args: Args, cx: &ToolCx<Deps>)`, `(args: Args, deps: &Deps)`), where `Args: Deserialize + JsonSchema` and `T: Serialize`";

pub fn check_all(ir: &ToolIr, diags: &mut Diagnostics) {
    check_risk(ir, diags);
    check_compensate(ir, diags);
    check_description(ir, diags);
    check_signature(ir, diags);
}

// The gateway's policy keys on the risk class, so every tool must state it.
// `#[tool]` alone, or `#[tool(risk = dangerous)]`.
fn check_risk(ir: &ToolIr, diags: &mut Diagnostics) {
    match &ir.risk {
        None if !ir.args_parsed => {}
        None => diags.push(
            Kind::Syntax,
            ir.name_loc,
            format!("tool `{}` must declare its risk: `#[tool(risk = read)]`; one of {}", ir.name, list(RISKS)),
        ),
        Some((risk, loc)) if !RISKS.contains(&risk.as_str()) => {
            diags.push(Kind::Syntax, *loc, unknown("risk", risk, RISKS, &format!("one of {}", list(RISKS))));
        }
        Some(_) => {}
    }
}

// Only a call that changed something that can be undone names the tool
// that undoes it: a read changed nothing, an irreversible call cannot be undone.
fn check_compensate(ir: &ToolIr, diags: &mut Diagnostics) {
    let (Some((comp, loc)), Some((risk, _))) = (&ir.compensate, &ir.risk) else { return };
    if !RISKS.contains(&risk.as_str()) || COMPENSABLE.contains(&risk.as_str()) {
        return;
    }
    let why = if risk == "read" { "a read changes nothing to undo" } else { "its calls cannot be undone" };
    diags.push(
        Kind::Syntax,
        *loc,
        format!(
            "tool `{}` is `{risk}`, so it cannot name a compensation (`compensate = {comp}`): {why}; \
             only `reversible` and `external` tools can; remove `compensate`",
            ir.name
        ),
    );
}

// The doc comment is what the model reads to decide when to call the tool.
fn check_description(ir: &ToolIr, diags: &mut Diagnostics) {
    if ir.description.trim().is_empty() {
        diags.push(
            Kind::Syntax,
            ir.name_loc,
            format!(
                "tool `{}` needs a doc comment: it is the description the model reads (`/// Adds two numbers.`)",
                ir.name
            ),
        );
    }
}

fn check_signature(ir: &ToolIr, diags: &mut Diagnostics) {
    let n = &ir.name;
    if !ir.is_async {
        diags.push(Kind::Signature, ir.sig_loc, format!("tool `{n}` must be an `async fn`; {EXPECTED}"));
    }
    if ir.params == 0 || ir.params > 2 || !ir.args_by_value {
        diags.push(
            Kind::Signature,
            ir.sig_loc,
            format!("tool `{n}` takes its arguments as one typed struct; {EXPECTED}"),
        );
    }
    if !ir.has_return {
        diags.push(Kind::Signature, ir.sig_loc, format!("tool `{n}` must return `Result<T, ToolError>`; {EXPECTED}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::Loc;

    fn tool() -> ToolIr {
        ToolIr {
            name: "add".into(),
            name_loc: Loc::DUMMY,
            risk: Some(("read".into(), Loc::DUMMY)),
            idempotent: false,
            compensate: None,
            args_parsed: true,
            description: "Adds.".into(),
            is_async: true,
            params: 1,
            args_by_value: true,
            has_return: true,
            sig_loc: Loc::DUMMY,
        }
    }

    fn messages(ir: &ToolIr) -> Vec<String> {
        let mut d = Diagnostics::default();
        check_all(ir, &mut d);
        d.into_vec().into_iter().map(|d| d.message).collect()
    }

    #[test]
    fn a_valid_tool_passes() {
        assert!(messages(&tool()).is_empty());
    }

    #[test]
    fn risk_is_required_and_checked() {
        let mut t = tool();
        t.risk = None;
        assert!(messages(&t)[0].starts_with("tool `add` must declare its risk"));
        // An attribute that did not parse is reported by the parser alone.
        t.args_parsed = false;
        assert!(messages(&t).is_empty());
        t.args_parsed = true;
        t.risk = Some(("irreversable".into(), Loc::DUMMY));
        assert!(messages(&t)[0].contains("did you mean `irreversible`?"), "{:?}", messages(&t));
    }

    #[test]
    fn only_reversible_and_external_tools_name_a_compensation() {
        for (risk, ok) in [("read", false), ("reversible", true), ("external", true), ("irreversible", false)] {
            let mut t = tool();
            t.risk = Some((risk.into(), Loc::DUMMY));
            t.compensate = Some(("undo".into(), Loc::DUMMY));
            let m = messages(&t);
            assert_eq!(m.is_empty(), ok, "{risk}: {m:?}");
            if !ok {
                assert!(m[0].contains(&format!("is `{risk}`, so it cannot name a compensation")), "{m:?}");
            }
        }
        // An unknown risk is reported once, as such.
        let mut t = tool();
        t.risk = Some(("irreversable".into(), Loc::DUMMY));
        t.compensate = Some(("undo".into(), Loc::DUMMY));
        assert_eq!(messages(&t).len(), 1);
    }

    #[test]
    fn description_and_signature_are_checked_together() {
        let mut t = tool();
        t.description = String::new();
        t.is_async = false;
        t.params = 3;
        let m = messages(&t);
        assert_eq!(m.len(), 3, "{m:?}");
    }
}
