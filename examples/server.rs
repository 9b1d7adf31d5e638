//! A refund graph served over HTTP: the approval inbox, the JSON API and its OpenAPI document, in
//! one process that runs the graph's threads.
//!
//! ```text
//! cargo run --example server                       # ./server.redb, ./server-users.json, http://127.0.0.1:8700/
//! cargo run --example server -- --bind 127.0.0.1:0 # a free port
//! cargo run --example server -- --store postgres://localhost/agentflow [--schema NAME]
//! ```
//!
//! Then, while it runs (the tokens are the demo users file's):
//!
//! ```text
//! curl -s -H 'Authorization: Bearer agent-demo-token' -H 'content-type: application/json' \
//!   -d '{"graph": "refunds", "input": {"order": "ORD-1001", "amount": 299}, "wait": true}' \
//!   http://127.0.0.1:8700/api/threads              # waits for a person: an approval
//! curl -s -H 'Authorization: Bearer alice-demo-token' http://127.0.0.1:8700/api/approvals
//! curl -s -X POST -H 'Authorization: Bearer alice-demo-token' \
//!   http://127.0.0.1:8700/api/threads/THREAD/approvals/APPROVAL/approve
//! agentflow pending --store server.redb            # the CLI reaches the server through its socket
//! ```
//!
//! or open http://127.0.0.1:8700/ and log in with `alice-demo-token` to decide in the inbox.
//!
//! The graph checks an order, then calls `refund` (risk `irreversible`, so every call waits for a
//! person). Every run goes through the store's run queue and the server's worker: a run started
//! over HTTP parks when it reaches the approval, and goes on by itself once `alice` (role
//! `approver`) approves, edits or rejects it. `agent` (role `agent`) starts and resumes refunds,
//! `bob` (role `viewer`) only reads. No model is involved.
//!
//! Options: `--db PATH` (default `server.redb`) or `--store postgres://...` (in `--schema NAME`,
//! default `agentflow`; any number of servers may share it); `--users FILE`
//! (default `server-users.json` beside the store file; written with demo tokens when missing,
//! readable by this OS account only);
//! `--bind ADDR` (default `127.0.0.1:8700`). The first line printed is
//! `agentflow server: http://ADDR/ ...`. Ctrl-C stops it: running steps finish first.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agentflow::access::RoleAccess;
use agentflow::approval::RoleAuthorizer;
use agentflow::prelude::*;
use agentflow::server::Server;
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

/// A refund claim. Fields left out of a new thread's input start empty.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(default)]
pub struct Claim {
    pub order: String,
    pub amount: u32,
    #[reduce(append)]
    pub notes: Vec<String>,
    pub outcome: Option<Value>,
}

#[graph(state = Claim, start = check)]
pub mod refunds {
    use super::*;

    #[node(goto = [pay])]
    async fn check(s: &Claim) -> Step<Claim> {
        goto!(pay, Claim::update().notes(vec![format!("order {} paid {}, delivered", s.order, s.amount)]))
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Claim, cx: &Ctx<()>) -> Result<Step<Claim>, NodeError> {
        let obs = cx.run_tool(refund, RefundArgs { order_id: s.order.clone(), amount: s.amount }).await?;
        // The tool's result when it ran; what came back instead otherwise (a rejection's reason).
        let outcome = obs.body.get("result").cloned().unwrap_or(obs.body);
        Ok(goto!(END, Claim::update().notes(vec!["refund call returned".into()]).outcome(Some(outcome))))
    }
}

/// Who may do what, as an operator keeps it in a file: operation -> roles.
pub const POLICY: &str = r#"{
    "list": ["agent", "approver", "viewer"],
    "read_state": ["agent", "approver", "viewer"],
    "read_history": ["agent", "approver", "viewer"],
    "start": ["agent"],
    "resume": ["agent", "approver"],
    "answer": ["approver"],
    "decide": ["approver"],
    "cancel": ["agent", "approver"],
    "pause": ["agent", "approver"]
}"#;

/// The demo users: tokens in clear, for a trial (use `"token_sha256"` for real users).
const USERS: &str = r#"{ "users": [
  { "name": "alice", "token": "alice-demo-token", "roles": ["approver"] },
  { "name": "agent", "token": "agent-demo-token", "roles": ["agent"] },
  { "name": "bob", "token": "bob-demo-token", "roles": ["viewer"] }
] }
"#;

/// Writes a new file readable and writable by this OS account only (mode 0600): the users file
/// holds tokens.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(text.as_bytes())
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    rt.block_on(run_with_args(std::env::args().skip(1).collect()))
}

/// The example's `main` with these command-line arguments.
pub async fn run_with_args(args: Vec<String>) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command line.
struct Options {
    db: String,
    url: Option<String>,
    schema: Option<String>,
    users: Option<PathBuf>,
    bind: SocketAddr,
}

fn options(args: Vec<String>) -> Result<Options, String> {
    let usage = "usage: server [--db PATH | --store postgres://... [--schema NAME]] [--users FILE] [--bind ADDR]";
    let mut o = Options {
        db: "server.redb".into(),
        url: None,
        schema: None,
        users: None,
        bind: SocketAddr::from(([127, 0, 0, 1], 8700)),
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value; {usage}"));
        match a.as_str() {
            "--db" => o.db = value()?,
            "--store" => o.url = Some(value()?),
            "--schema" => o.schema = Some(value()?),
            "--users" => o.users = Some(PathBuf::from(value()?)),
            "--bind" => {
                let text = value()?;
                o.bind = text
                    .parse()
                    .map_err(|_| format!("--bind `{text}` is not an address and port, like 127.0.0.1:8700"))?;
            }
            other => return Err(format!("unknown argument `{other}`; {usage}")),
        }
    }
    Ok(o)
}

async fn run(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let o = options(args)?;
    let store: Arc<dyn Store> = match &o.url {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let mut builder = agentflow_store::PostgresStore::builder();
            if let Some(schema) = &o.schema {
                builder = builder.schema(schema.clone());
            }
            Arc::new(builder.open(url)?)
        }
        Some(other) => {
            return Err(format!("--store `{other}` is not a postgres:// URL; give a redb file with --db").into());
        }
        // Opened once, held for the server's lifetime.
        None => Arc::new(RedbStore::open(&o.db)?),
    };
    let users = o.users.unwrap_or_else(|| match &o.url {
        Some(_) => PathBuf::from("server-users.json"),
        None => Path::new(&o.db).with_file_name("server-users.json"),
    });
    let wrote = !users.exists();
    if wrote {
        write_private(&users, USERS).map_err(|e| format!("cannot write {}: {e}", users.display()))?;
    }
    let app = refunds::graph().app().store(Arc::clone(&store));
    let running = Server::new()
        .users_file(&users)?
        .access(RoleAccess::from_json(POLICY)?)
        .authorizer(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver"))
        .app(app, ())
        .listen(o.bind)
        .await?;
    let at = running.local_addr().ok_or("the server has no address")?;
    println!(
        "agentflow server: http://{at}/ (the inbox; the API at /api, its OpenAPI document at /openapi.json; Ctrl-C stops it)"
    );
    if wrote {
        println!("wrote {} (demo tokens in clear; use \"token_sha256\" for real users)", users.display());
    }
    println!(
        "log in to the inbox with alice-demo-token (she decides refunds); programs send `Authorization: Bearer TOKEN`"
    );
    println!(
        "start a refund: curl -H 'Authorization: Bearer agent-demo-token' -H 'content-type: application/json' \
         -d '{{\"graph\": \"refunds\", \"input\": {{\"order\": \"ORD-1001\", \"amount\": 299}}}}' http://{at}/api/threads"
    );
    if let Some(socket) = running.socket() {
        println!("the agentflow tool reaches this server through {}", socket.display());
    }
    running
        .serve(async {
            // Ctrl-C (SIGINT): stop accepting, let running steps finish, release the store.
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    println!("agentflow server: stopped");
    Ok(())
}
