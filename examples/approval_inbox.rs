//! A refund waiting for a person, to decide in the approval inbox (`agentflow serve`).
//!
//! ```text
//! cargo run --example approval_inbox                     # ./inbox.redb: a refund waits; ./inbox-users.json
//! agentflow serve --store inbox.redb --users inbox-users.json    # http://127.0.0.1:8700/, log in as alice
//! cargo run --example approval_inbox -- --resume refund-1        # the refund runs with what was decided
//! ```
//!
//! `agentflow serve` holds the store file while it runs, so stop it (Ctrl-C) before `--resume`:
//! a redb file is open in one process at a time. `cargo run --example server` hosts a graph like
//! this one next to the inbox, in one process, and the refund goes on as soon as it is approved.
//!
//! The graph checks an order, then calls `refund` (risk `irreversible`, so the default
//! policy asks a person first) and stops: the thread waits in the store with an approval
//! record, and this process exits. In the inbox, `alice` (role `irreversible`) approves,
//! edits the amount or rejects; `bob` (no role) is refused; `agent`, who requested the
//! call, may not approve it. `--resume` then runs the thread on: the refund gets the
//! approved (or edited) arguments, or the rejection reason comes back as the observation.
//! No model is involved. `--db PATH` picks another store file.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    /// The order to refund.
    order_id: String,
    /// Whole currency units.
    amount: u32,
}

/// Refunds an order through the payment provider (here: echoes what it was given).
#[tool(risk = irreversible)]
async fn refund(args: RefundArgs) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Claim {
    order: String,
    amount: u32,
    #[reduce(append)]
    notes: Vec<String>,
    outcome: Option<Value>,
}

#[graph(state = Claim, start = check)]
pub mod refunds {
    use super::*;

    #[node(goto = [pay])]
    async fn check(s: &Claim) -> Step<Claim> {
        goto!(pay, Claim::update().notes(vec![format!("order {} paid 299, delivered 12 days ago", s.order)]))
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Claim, cx: &Ctx<()>) -> Result<Step<Claim>, NodeError> {
        let obs = cx.run_tool(refund, RefundArgs { order_id: s.order.clone(), amount: s.amount }).await?;
        Ok(goto!(END, Claim::update().notes(vec!["refund call returned".into()]).outcome(Some(obs.body))))
    }
}

/// The claim of the store's `n`th refund thread.
pub fn claim(n: usize) -> Claim {
    Claim { order: format!("ORD-{}", 1000 + n), amount: 299, ..Claim::default() }
}

const USERS: &str = r#"{ "users": [
  { "name": "alice", "token": "alice-demo-token", "roles": ["irreversible"] },
  { "name": "bob", "token": "bob-demo-token", "roles": [] },
  { "name": "agent", "token": "agent-demo-token", "roles": ["irreversible"] }
] }
"#;

async fn run(args: &[String]) -> Result<(), String> {
    let mut db = "inbox.redb".to_string();
    let mut resume: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--db" => db = it.next().ok_or("--db needs a path")?.clone(),
            "--resume" => resume = Some(it.next().ok_or("--resume needs a thread id")?.clone()),
            other => {
                return Err(format!("unknown argument `{other}`; usage: approval_inbox [--db PATH] [--resume THREAD]"));
            }
        }
    }
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&db).map_err(|e| {
        format!(
            "cannot open `{db}`: {e} (stop `agentflow serve` while this runs? it holds the file only during a request)"
        )
    })?);
    let app = refunds::graph().app().store(Arc::clone(&store));
    if let Some(thread) = resume {
        let run = app.runner(&()).thread(&thread).resume().await.map_err(|e| e.to_string())?;
        println!("thread {thread}: {}", said(&run.outcome));
        match &run.state.outcome {
            Some(body) => println!("the refund tool returned: {body}"),
            None => println!("the refund did not run yet (is the approval still pending?)"),
        }
        return Ok(());
    }
    let n = store.list_threads().map_err(|e| e.to_string())?.len() + 1;
    let thread = format!("refund-{n}");
    let run = app.runner(&()).thread(&thread).owner("agent").run(claim(n)).await.map_err(|e| e.to_string())?;
    println!("thread {thread}: {}", said(&run.outcome));
    let users = std::path::Path::new(&db).with_file_name("inbox-users.json");
    if !users.exists() {
        std::fs::write(&users, USERS).map_err(|e| format!("cannot write {}: {e}", users.display()))?;
        println!("wrote {} (demo tokens in clear; use \"token_sha256\" for real users)", users.display());
    }
    println!("\nDecide it in the browser:");
    println!("  agentflow serve --store {db} --users {}", users.display());
    println!("  open http://127.0.0.1:8700/ and log in with alice-demo-token");
    println!("Then run it on:\n  cargo run --example approval_inbox -- --db {db} --resume {thread}");
    Ok(())
}

/// An outcome for people.
fn said(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Completed => "completed".to_string(),
        Outcome::Interrupted { pending, .. } => {
            let what: Vec<String> = pending
                .iter()
                .map(|p| {
                    format!(
                        "{} at `{}`: {}",
                        serde_json::to_string(&p.kind).unwrap_or_default(),
                        p.node,
                        p.payload["args"]
                    )
                })
                .collect();
            format!("waits for a person ({})", what.join("; "))
        }
        other => format!("{other:?}"),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("approval_inbox: {e}");
            ExitCode::FAILURE
        }
    }
}
