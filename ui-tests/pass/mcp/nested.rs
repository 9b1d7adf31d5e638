// An MCP tool whose arguments nest: an object, an array of objects, optional fields and
// an object that refuses unknown fields, built as typed structs and listed in a node; `validate`
// refuses unknown fields at every level and checks the whole schema (`enum`, `maximum`, ..).
use agentflow::prelude::*;
use agentflow::tool::{Risk, Tool};
use serde::{Deserialize, Serialize};
use serde_json::json;

agentflow::mcp_tools! {
    /// A ticket system.
    pub mod tickets from "tickets.json" {
        create_ticket: external idempotent,
        get_ticket: read,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Desk {
    opened: Option<String>,
}

fn args() -> tickets::CreateTicketArgs {
    tickets::CreateTicketArgs {
        title: "Printer on fire".into(),
        priority: Some(1),
        reporter: tickets::CreateTicketArgsReporter { name: "Ada".into(), email_address: None },
        lines: vec![tickets::CreateTicketArgsLinesItem { sku: "PRN-1".into(), qty: 2 }],
        labels: Some(vec!["hardware".into()]),
        r#type: Some("bug".into()),
        extra: None,
    }
}

#[graph(state = Desk, start = open)]
mod desk {
    use super::*;

    #[node(goto = [END], tools = [tickets::create_ticket, tickets::get_ticket])]
    async fn open(_s: &Desk, cx: &Ctx<()>) -> Result<Step<Desk>, NodeError> {
        let obs = cx.run_tool(tickets::create_ticket, args()).await?;
        let _ = cx.run_tool(tickets::get_ticket, tickets::GetTicketArgs { ticket_id: 7 }).await?;
        Ok(goto!(END, Desk::update().opened(obs.result().map(|v| v.to_string()))))
    }
}

fn main() {
    let _ = desk::graph();
    let t = tickets::create_ticket;
    assert_eq!(t.name(), "create-ticket");
    assert_eq!(t.description(), "Opens a ticket.");
    assert_eq!((t.risk(), t.idempotent()), (Risk::External, true));
    assert_eq!(tickets::get_ticket.name(), "getTicket");
    assert_eq!(tickets::SERVER, "tickets");
    assert_eq!(tickets::TOOLS.len(), 2);
    assert!(tickets::SNAPSHOT.starts_with(b"{"));
    // The model is shown the snapshot's schema, without `$schema`.
    let schema = t.parameters();
    assert_eq!(schema["properties"]["reporter"]["required"], json!(["name"]));
    assert!(schema.get("$schema").is_none());

    // The structs serialise under the server's names, leaving out what is `None`.
    let value = serde_json::to_value(args()).unwrap();
    assert_eq!(
        value,
        json!({
            "title": "Printer on fire",
            "priority": 1,
            "reporter": { "name": "Ada" },
            "lines": [{ "sku": "PRN-1", "qty": 2 }],
            "labels": ["hardware"],
            "type": "bug"
        })
    );
    assert_eq!(serde_json::from_value::<tickets::CreateTicketArgs>(value.clone()).unwrap(), args());
    assert_eq!(t.validate(&value), Ok(()));
    // An unknown field is refused at every level: where the schema says
    // `additionalProperties: false` (the reporter) ...
    let mut unknown = value.clone();
    unknown["reporter"]["phone"] = json!("555");
    let e = t.validate(&unknown).unwrap_err();
    assert!(e.0.contains("`/reporter`") && e.0.contains("`additionalProperties`") && e.0.contains("phone"), "{e}");
    // ... and where it says nothing (an item of `lines`): the declared properties are what the
    // program was typed against.
    let mut unknown = value.clone();
    unknown["lines"][0]["admin"] = json!(true);
    let e = t.validate(&unknown).unwrap_err();
    assert!(e.0.contains("unknown field `admin`"), "{e}");
    // A free-form object (`extra`, no properties) stays free-form.
    let mut free = value.clone();
    free["extra"] = json!({ "anything": [1, 2] });
    assert_eq!(t.validate(&free), Ok(()));
    // The whole schema is checked: `enum` ...
    let mut outside = value.clone();
    outside["type"] = json!("DROP TABLE");
    let e = t.validate(&outside).unwrap_err();
    assert!(e.0.contains("`/type`") && e.0.contains("`enum`"), "{e}");
    // ... `maximum` and `minimum` ...
    let mut high = value.clone();
    high["priority"] = json!(999);
    let e = t.validate(&high).unwrap_err();
    assert!(e.0.contains("`/priority`") && e.0.contains("`maximum`"), "{e}");
    high["priority"] = json!(0);
    assert!(t.validate(&high).unwrap_err().0.contains("`minimum`"));
    // ... and an integral float counts as an integer, as JSON Schema has it.
    let mut float = value.clone();
    float["lines"][0]["qty"] = json!(2.0);
    float["priority"] = json!(4.0);
    assert_eq!(t.validate(&float), Ok(()));
    float["lines"][0]["qty"] = json!(2.5);
    let e = t.validate(&float).unwrap_err();
    assert!(e.0.contains("`/lines/0/qty`") && e.0.contains("`type`"), "{e}");
    // A wrong type and a missing field are refused before anything is sent.
    let mut wrong = value.clone();
    wrong["lines"][0]["qty"] = json!("two");
    let e = t.validate(&wrong).unwrap_err();
    assert!(e.0.contains("`/lines/0/qty`") && e.0.contains("`type`"), "{e}");
    let e = t.validate(&json!({ "title": "x" })).unwrap_err();
    assert!(e.0.contains("`required`") && e.0.contains("reporter"), "{e}");
    let e = t.validate(&json!({ "title": "x", "reporter": { "name": "A" }, "lines": [], "color": "red" })).unwrap_err();
    assert!(e.0.contains("unknown field(s) color"), "{e}");
}
