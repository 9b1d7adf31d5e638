//! Deploying a new version of a graph while threads wait: version 1 parks them, version 2
//! completes them through the migrations it declares.
//!
//! `cargo run --example upgrade` (both halves, on a fresh `upgrade.redb`), or one half per
//! process: `cargo run --example upgrade -- park --store F` with version 1, then
//! `cargo run --example upgrade -- finish --store F` with version 2.
//!
//! Version 1 of the `tickets` graph (`#[graph(id = "tickets", version = 1)]`) asks a person in
//! `review` and sends replies with `send_email` (risk `irreversible`: it waits for an approval).
//! Version 2 renames `review` to `human_review`, replaces `send_email` by `send_message`, whose
//! arguments are named differently, and adds a state field. It declares
//! `migrate(from = 1, nodes(review -> human_review), tools(send_email -> send_message),
//! args(send_message = ..))`; the compiler checked that declaration against the committed locks
//! `examples/graphs/tickets/v1.lock` and `v2.lock`. A thread parked by version 1 moves in one
//! commit on its first resume, audited as `graph.migrated`.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const USAGE: &str = "usage: upgrade [park|finish] [--store FILE]   (no command: both, on a fresh file)";
const OWNER: &str = "agent:tickets";

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Email {
    to: String,
    body: String,
}

/// Sends an email (version 1's tool).
#[tool(risk = irreversible)]
pub async fn send_email(args: Email) -> Result<Value, ToolError> {
    println!("    sent an email to {}: {}", args.to, args.body);
    Ok(json!({ "sent": true }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Message {
    recipient: String,
    text: String,
}

/// Sends a message (version 2's tool).
#[tool(risk = irreversible)]
pub async fn send_message(args: Message) -> Result<Value, ToolError> {
    println!("    sent a message to {}: {}", args.recipient, args.text);
    Ok(json!({ "sent": true }))
}

/// Rewrites the arguments of an approval of `send_email` pending when version 2 is deployed.
fn email_to_message(mut args: Value) -> Result<Value, String> {
    let to = args["to"].take();
    let body = args["body"].take();
    if to.is_null() || body.is_null() {
        return Err(format!("not the arguments of send_email: {args}"));
    }
    Ok(json!({ "recipient": to, "text": body }))
}

pub mod v1 {
    use super::*;

    #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    pub struct Ticket {
        pub customer: String,
        pub question: String,
        #[reduce(append)]
        pub log: Vec<String>,
    }

    #[graph(state = Ticket, start = triage, id = "tickets", version = 1)]
    pub mod tickets {
        use super::*;

        #[node(goto = [review, reply])]
        async fn triage(t: &Ticket) -> Step<Ticket> {
            if t.question.contains("refund") { goto!(review) } else { goto!(reply) }
        }

        #[node(goto = [reply], interrupt)]
        async fn review(t: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
            let verdict: String = cx.interrupt(json!({ "refund for": t.customer }))?;
            Ok(goto!(reply, Ticket::update().log(vec![format!("reviewed: {verdict}")])))
        }

        #[node(goto = [END], tools = [send_email])]
        async fn reply(t: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
            cx.run_tool(send_email, json!({ "to": t.customer, "body": "we are on it" })).await?;
            Ok(goto!(END, Ticket::update().log(vec!["replied".into()])))
        }
    }
}

pub mod v2 {
    use super::*;

    #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    pub struct Ticket {
        pub customer: String,
        pub question: String,
        #[reduce(append)]
        pub log: Vec<String>,
        /// New in version 2; threads of version 1 read its default.
        #[serde(default)]
        pub channel: String,
    }

    #[graph(state = Ticket, start = triage, id = "tickets", version = 2,
            migrate(from = 1, nodes(review -> human_review), tools(send_email -> send_message),
                              args(send_message = super::email_to_message)))]
    pub mod tickets {
        use super::*;

        #[node(goto = [human_review, reply])]
        async fn triage(t: &Ticket) -> Step<Ticket> {
            if t.question.contains("refund") { goto!(human_review) } else { goto!(reply) }
        }

        #[node(goto = [reply], interrupt)]
        async fn human_review(t: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
            let verdict: String = cx.interrupt(json!({ "refund for": t.customer }))?;
            Ok(goto!(reply, Ticket::update().log(vec![format!("reviewed: {verdict}")])))
        }

        #[node(goto = [END], tools = [send_message])]
        async fn reply(t: &Ticket, cx: &Ctx<()>) -> Result<Step<Ticket>, NodeError> {
            cx.run_tool(send_message, json!({ "recipient": t.customer, "text": "we are on it" })).await?;
            Ok(goto!(END, Ticket::update().log(vec!["replied".into()]).channel("message".into())))
        }
    }
}

/// Version 1: one ticket waits for a person's review, one for the approval of its email.
async fn park(store: Arc<dyn Store>) -> Result<(), Box<dyn std::error::Error>> {
    let app = v1::tickets::graph().app().store(store);
    println!("version {} parks two tickets:", app.graph().version());
    for (thread, question) in [("ticket-1", "a refund, please"), ("ticket-2", "where is my parcel?")] {
        let input = v1::Ticket { customer: format!("{thread}@example.com"), question: question.into(), log: vec![] };
        let run = app.runner(&()).thread(thread).owner(OWNER).run(input).await?;
        let Outcome::Interrupted { pending, .. } = &run.outcome else {
            return Err(format!("{thread}: {:?}", run.outcome).into());
        };
        let waits = if pending[0].kind == PendingKind::Approval { "an approval" } else { "a review" };
        println!("  {thread} waits for {waits} in `{}`", pending[0].node);
    }
    Ok(())
}

/// Version 2: both tickets resume where they wait, moved by the declared migrations.
async fn finish(store: Arc<dyn Store>) -> Result<(), Box<dyn std::error::Error>> {
    let app = v2::tickets::graph().app().store(Arc::clone(&store));
    println!("version {} completes them:", app.graph().version());
    // ticket-1 gets its review in `human_review`; ticket-2's approval of `send_email` is asked
    // again for `send_message`, its arguments mapped. Both then wait for that approval.
    let reviewed = app.runner(&()).thread("ticket-1").resume_with("approved").await?;
    let asked_again = app.runner(&()).thread("ticket-2").resume().await?;
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "support"))?;
    for (thread, run) in [("ticket-1", reviewed), ("ticket-2", asked_again)] {
        let Outcome::Interrupted { pending, .. } = &run.outcome else {
            return Err(format!("{thread}: {:?}", run.outcome).into());
        };
        let id = pending[0].payload["approval"].as_str().ok_or("no approval id")?;
        println!("  {thread} asks to run {} {}: approved", pending[0].payload["tool"], pending[0].payload["args"]);
        desk.approve(id, &Approver::new("alice", ["support"]))?;
    }
    for thread in ["ticket-1", "ticket-2"] {
        let run = app.runner(&()).thread(thread).resume().await?;
        let migrated: Vec<Value> =
            app.audit_log(thread)?.into_iter().filter(|e| e.kind == "graph.migrated").map(|e| e.detail).collect();
        println!("  {thread}: {:?}, log {:?}, channel {:?}", run.outcome, run.state.log, run.state.channel);
        println!("    graph.migrated: {}", migrated.first().map(Value::to_string).unwrap_or_default());
        if run.outcome != Outcome::Completed || migrated.len() != 1 {
            return Err(format!("{thread} did not complete on version 2 with one migration").into());
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    run_with_args(std::env::args().skip(1).collect()).await
}

/// The example's `main` with its command-line arguments (without the program's name).
pub(crate) async fn run_with_args(args: Vec<String>) -> ExitCode {
    let (mut command, mut file) = (None, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "park" | "finish" if command.is_none() => command = Some(arg),
            "--store" => file = args.next(),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let both = command.is_none();
    let file = file.unwrap_or_else(|| "upgrade.redb".into());
    if both {
        let _ = std::fs::remove_file(&file);
    }
    let result = async {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&file)?);
        if both || command.as_deref() == Some("park") {
            park(Arc::clone(&store)).await?;
        }
        if both || command.as_deref() == Some("finish") {
            finish(store).await?;
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
