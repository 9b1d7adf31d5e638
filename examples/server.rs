//! Two graphs served over HTTP: refunds that wait for a person's approval, and a digest written
//! step by step whose events a client follows as they are committed. The approval inbox, the
//! JSON API and its OpenAPI document, and the threads' event streams, in one process that runs
//! the graphs' threads.
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
//! A second graph, `digest`, writes a short digest of a topic in several steps, as an agent
//! would: it calls the tool `outline` (no approval needed) and keeps the call and its result in
//! its conversation, then writes one section per step, each a message of its own, waiting
//! `pause_ms` before each (a stand-in for the model's call: no model is involved here either).
//! Its run is slow enough to watch: follow a thread's events as they are committed with
//!
//! ```text
//! curl -s -H 'Authorization: Bearer agent-demo-token' -H 'content-type: application/json' \
//!   -d '{"graph": "digest", "thread": "digest-1", "input": {"topic": "tides", "sections": 5, "pause_ms": 500}}' \
//!   http://127.0.0.1:8700/api/threads
//! curl -N -H 'Authorization: Bearer bob-demo-token' http://127.0.0.1:8700/api/threads/digest-1/stream
//! ```
//!
//! (the stream stays open for the thread's next runs: Ctrl-C ends it).
//!
//! Options: `--db PATH` (default `server.redb`) or `--store postgres://...` (in `--schema NAME`,
//! default `agentflow`; any number of servers may share it); `--users FILE`
//! (default `server-users.json` beside the store file; written with demo tokens when missing,
//! readable by this OS account only);
//! `--bind ADDR` (default `127.0.0.1:8700`); `--workers N` (default 8): how many runs of each
//! graph this server runs at once; `0` runs none: the server answers the API and serves streams
//! while other servers sharing its PostgreSQL store run the threads. The first line printed is
//! `agentflow server: http://ADDR/ ...`. Ctrl-C stops it: running steps finish first.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agentflow::access::RoleAccess;
use agentflow::approval::RoleAuthorizer;
use agentflow::message::{Message, ToolCall};
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

/// The longest digest the example writes, in sections.
pub const MAX_SECTIONS: u32 = 50;
/// The longest pause before a section, in milliseconds.
pub const MAX_PAUSE_MS: u64 = 10_000;

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutlineArgs {
    /// What the digest is about.
    topic: String,
    /// How many sections it has.
    sections: u32,
}

/// Plans a digest: the titles of its sections (here: the topic, numbered).
#[tool(risk = read)]
async fn outline(args: OutlineArgs) -> Result<Value, ToolError> {
    let titles: Vec<String> = (1..=args.sections).map(|n| format!("{} ({n})", args.topic)).collect();
    Ok(json!({ "titles": titles }))
}

/// A digest of a topic, written one section per step. Fields left out of a new thread's input
/// take the defaults: 3 sections, 200 ms before each.
#[derive(Debug, Clone, Serialize, Deserialize, State)]
#[serde(default)]
pub struct Digest {
    pub topic: String,
    /// How many sections to write (at most [`MAX_SECTIONS`]).
    pub sections: u32,
    /// How long each section takes, in milliseconds (at most [`MAX_PAUSE_MS`]).
    pub pause_ms: u64,
    /// The conversation: the `outline` call and its result, then one message per section.
    #[reduce(messages)]
    pub messages: Vec<Message>,
    /// How many sections are written.
    pub written: u32,
}

impl Default for Digest {
    fn default() -> Self {
        Digest { topic: String::new(), sections: 3, pause_ms: 200, messages: Vec::new(), written: 0 }
    }
}

#[graph(state = Digest, start = plan, max_steps = 64)]
pub mod digest {
    use super::*;

    #[node(goto = [write], tools = [outline])]
    async fn plan(s: &Digest, cx: &Ctx<()>) -> Result<Step<Digest>, NodeError> {
        let sections = s.sections.clamp(1, MAX_SECTIONS);
        let call = ToolCall::new("outline-1", "outline", json!({ "topic": s.topic, "sections": sections }));
        let obs = cx.run_tool(outline, OutlineArgs { topic: s.topic.clone(), sections }).await?;
        let result = obs.body.get("result").cloned().unwrap_or(obs.body);
        let asked = Message::ai_with_tool_calls("", vec![call]);
        let answered = Message::tool("outline-1", result.to_string());
        Ok(goto!(write, Digest::update().sections(sections).messages(vec![asked, answered])))
    }

    #[node(goto = [write, END])]
    async fn write(s: &Digest) -> Step<Digest> {
        tokio::time::sleep(Duration::from_millis(s.pause_ms.min(MAX_PAUSE_MS))).await;
        let n = s.written + 1;
        let text = format!("Section {n} of {}: what is known about {}.", s.sections, s.topic);
        let update = Digest::update().written(n).messages(vec![Message::ai(text)]);
        if n >= s.sections { goto!(END, update) } else { goto!(write, update) }
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
    workers: usize,
}

fn options(args: Vec<String>) -> Result<Options, String> {
    let usage =
        "usage: server [--db PATH | --store postgres://... [--schema NAME]] [--users FILE] [--bind ADDR] [--workers N]";
    let mut o = Options {
        db: "server.redb".into(),
        url: None,
        schema: None,
        users: None,
        bind: SocketAddr::from(([127, 0, 0, 1], 8700)),
        workers: agentflow::server::DEFAULT_CONCURRENCY,
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
            "--workers" => {
                let text = value()?;
                o.workers = text
                    .parse()
                    .map_err(|_| format!("--workers `{text}` is not a number of runs (0: run none, only serve)"))?;
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
    let running = Server::new()
        .users_file(&users)?
        .access(RoleAccess::from_json(POLICY)?)
        .authorizer(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver"))
        .concurrency(o.workers)
        .app(refunds::graph().app().store(Arc::clone(&store)), ())
        .app(digest::graph().app().store(Arc::clone(&store)), ())
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
