// A tool that also takes `&ToolCx` (its call id, idempotency key and node).
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    receipt: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Label {
    /// The label to put on the ticket.
    label: String,
}

/// Puts a label on the ticket; labels can be removed again.
#[tool(risk = reversible)]
async fn set_label(args: Label, cx: &ToolCx) -> Result<String, ToolError> {
    Ok(format!("{} set by {} in call {}", args.label, cx.node(), cx.call_id()))
}

#[graph(state = Ticket, start = triage)]
mod triage {
    use super::*;

    #[node(goto = [END], tools = [set_label])]
    async fn triage(_s: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
        let obs = cx.run_tool(set_label, Label { label: "billing".into() }).await?;
        let receipt = obs.result().and_then(|v| v.as_str()).map(str::to_string);
        Ok(goto!(END, Ticket::update().receipt(receipt)))
    }
}

fn main() {
    use agentflow::tool::{Risk, Tool};
    assert_eq!(set_label.risk(), Risk::Reversible);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(triage::graph().run(Ticket::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.receipt.as_deref(), Some("billing set by triage in call triage-set_label-1"));
}
