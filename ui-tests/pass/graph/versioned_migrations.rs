// Version 2 of a released graph: `review` became `human_review`, the tool `send_email` became
// `send_message` (its pending approvals have their arguments rewritten), and `wire` is gone
// (its pending approvals are cancelled). The migration covers every node and every tool held
// for approval in the committed lock of version 1, `graphs/tickets/v1.lock` beside this file.
use agentflow::__private::{ArgsMigration, ToolMigration};
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Doc {
    text: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct Message {
    to: String,
    body: String,
}

/// Sends a message.
#[tool(risk = external)]
async fn send_message(args: Message) -> Result<(), ToolError> {
    let _ = (args.to, args.body);
    Ok(())
}

/// `send_email {to, text}` -> `send_message {to, body}`.
fn email_to_message(mut args: serde_json::Value) -> Result<serde_json::Value, String> {
    let text = args.get_mut("text").map(serde_json::Value::take).ok_or("no `text`")?;
    args["body"] = text;
    args.as_object_mut().ok_or("not an object")?.remove("text");
    Ok(args)
}

#[graph(state = Doc, start = triage, max_steps = 10, id = "tickets", version = 2,
        migrate(from = 1, nodes(review -> human_review, legacy -> END),
                          tools(send_email -> send_message, wire -> cancel),
                          args(send_message = email_to_message)))]
mod support {
    use super::*;

    #[node(goto = [human_review, END])]
    async fn triage(_d: &Doc) -> Step<Doc> {
        goto!(human_review)
    }

    #[node(goto = [END], tools = [send_message], interrupt)]
    async fn human_review(_d: &Doc) -> Step<Doc> {
        goto!(END)
    }
}

fn main() {
    let graph = support::graph();
    let release = graph.release();
    assert_eq!((release.id, release.version), ("tickets", 2));
    let [m] = release.migrations else { panic!("one migration: {:?}", release.migrations) };
    assert_eq!(m.from, 1);
    assert_eq!(m.nodes, &[("review", "human_review"), ("legacy", "END")]);
    assert_eq!(m.tools, &[("send_email", ToolMigration::Rename("send_message")), ("wire", ToolMigration::Cancel)]);
    let [("send_message", ArgsMigration::Map(map))] = m.args else { panic!("{:?}", m.args) };
    let moved = map(serde_json::json!({ "to": "ann", "text": "hi" })).unwrap();
    assert_eq!(moved, serde_json::json!({ "to": "ann", "body": "hi" }));
    assert_eq!(
        release.nodes,
        r#"{"human_review":{"goto":["END"],"interrupt":true,"map":false,"sleep":false,"subgraphs":[],"tools":["send_message"],"writes":null},"triage":{"goto":["END","human_review"],"interrupt":false,"map":false,"sleep":false,"subgraphs":[],"tools":[],"writes":null}}"#
    );
}
