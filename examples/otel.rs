//! A refund agent traced with OpenTelemetry: one trace per thread, across the pause for a
//! person's approval and the process that resumes it, in the GenAI semantic conventions.
//!
//! ```text
//! docker run --rm -p 16686:16686 -p 4318:4318 jaegertracing/jaeger:latest   # UI on :16686
//! export OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318
//! cargo run --example otel -- start --store refunds.redb --thread refund-1
//! cargo run --example otel -- approve --store refunds.redb --thread refund-1
//! ```
//!
//! `start` runs the agent until its refund waits for an approval, prints the approval and
//! exits; `approve` (another process, minutes or days later) approves it as a person, resumes
//! the thread to its end and exits. Both export their spans over OTLP/HTTP to the endpoint;
//! the backend shows one trace for `refund-1`: a short `create_thread` root, and under it one
//! `invoke_agent refunds` per process with its steps, nodes, the `chat` model calls, the
//! `execute_tool process_refund` call, the approval's wait and decision. Without arguments it
//! does both in this process, on a temporary store file. The account lookup in `plan` times
//! out once and is retried, so the trace also shows a retried node.
//!
//! Message contents and tool arguments go on the spans only when
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; even then the customer's name (a
//! `#[state(pii)]` field) is masked and credentials are redacted. `--customer`, `--message` and
//! `--instructions` change what the model is given; the refund tool reads the payment
//! provider's key from `PAYMENTS_API_KEY` when it is set (it only reports the key's mode).
//!
//! The model is `ScriptedModel`, a deterministic test double that reads the conversation and
//! follows a fixed plan; it is not a language model.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::{Message, Role, ToolCall};
use agentflow::model::{ChatModel, ChatReply, ChatRequest, ModelError, ScriptedModel, Usage, estimate_tokens};
use agentflow::otel::Otel;
use agentflow::prelude::*;
use agentflow::secret::{EnvSecrets, Secret, Secrets};
use agentflow::tool::RiskPolicy;
use agentflow::{PendingKind, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- the agent

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    /// The order to refund, e.g. `ORD-1001`.
    order_id: String,
    /// Whole currency units.
    amount: u32,
}

/// The variable the payment provider's key is read from.
pub const PAYMENTS_KEY: &str = "PAYMENTS_API_KEY";

/// Refunds `amount` on an order through the payment provider. Irreversible: under
/// `RiskPolicy::default()` a person approves each call first.
#[tool(risk = irreversible)]
async fn process_refund(args: RefundArgs, cx: &ToolCx<RefundDeps>) -> Result<Value, ToolError> {
    // A real client would put the key in its request's header; it is never returned or logged.
    // Live keys start with `sk_live_`; any other key is a test key.
    let key =
        Secret::<String>::reference(&format!("env:{PAYMENTS_KEY}")).map_err(|e| ToolError::Fatal(e.to_string()))?;
    let mode = match key.resolve(&cx.deps().secrets).await {
        Ok(key) if key.expose().starts_with("sk_live_") => "live",
        Ok(_) => "test",
        Err(_) => "sandbox",
    };
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id, "provider_mode": mode }))
}

/// A customer's refund request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct RefundCase {
    /// Who asks: personal data (masked on spans, in the inbox, for readers without the right).
    #[state(pii)]
    pub customer: String,
    /// What the customer wrote.
    pub message: String,
    /// The refund the model asked for.
    #[serde(default)]
    pub call: Option<ToolCall>,
    /// What the refund tool answered.
    #[serde(default)]
    pub result: Option<Value>,
    /// The answer to the customer.
    #[serde(default)]
    pub answer: Option<String>,
}

/// The agent's deps: the model, the secrets its tool may read, its instructions.
pub struct RefundDeps {
    pub model: Arc<dyn ChatModel>,
    pub secrets: Secrets,
    pub instructions: String,
}

#[graph(state = RefundCase, deps = RefundDeps, start = plan)]
pub mod refunds {
    use super::*;

    /// Finds the customer's account, then the model reads the request and asks for a refund.
    /// A transient failure (the account lookup timing out) is retried.
    #[node(goto = [refund], tools = [process_refund], retry(attempts = 3, base = 10ms))]
    async fn plan(s: &RefundCase, cx: &Ctx<RefundDeps>) -> Result<Step<RefundCase>, NodeError> {
        look_up_account(&s.customer, cx.attempt())?;
        let request = ChatRequest::new(opening(s, cx.deps())).with_tools(cx.tool_specs());
        let reply = cx.chat(&*cx.deps().model, &request).await?;
        let call =
            reply.tool_calls.into_iter().next().ok_or_else(|| NodeError::fatal("the model asked for no refund"))?;
        Ok(goto!(refund, RefundCase::update().call(Some(call))))
    }

    /// Runs the model's refund call: it waits for a person's approval, then runs once.
    #[node(goto = [reply], tools = [process_refund])]
    async fn refund(s: &RefundCase, cx: &Ctx<RefundDeps>) -> Result<Step<RefundCase>, NodeError> {
        let call = s.call.as_ref().ok_or_else(|| NodeError::fatal("no refund was asked for"))?;
        let seen = cx.call_tool(call).await?;
        Ok(goto!(reply, RefundCase::update().result(Some(seen.body))))
    }

    /// The model tells the customer what was done.
    #[node(goto = [END])]
    async fn reply(s: &RefundCase, cx: &Ctx<RefundDeps>) -> Result<Step<RefundCase>, NodeError> {
        let (Some(call), Some(result)) = (&s.call, &s.result) else {
            return Err(NodeError::fatal("nothing to report"));
        };
        let mut conversation = opening(s, cx.deps());
        conversation.push(Message::ai_with_tool_calls("", vec![call.clone()]));
        conversation.push(Message::tool(call.id.clone(), result.to_string()));
        let reply = cx.chat(&*cx.deps().model, &ChatRequest::new(conversation)).await?;
        Ok(goto!(END, RefundCase::update().answer(Some(reply.text))))
    }
}

/// A stand-in for the customer database. It times out on the first attempt, so that the trace
/// shows a retry: the `node plan` span has `agentflow.attempt = 2`. Like many real errors, its
/// message quotes the customer, and error messages are never put on spans.
fn look_up_account(customer: &str, attempt: u32) -> Result<(), NodeError> {
    match attempt {
        1 => Err(NodeError::transient(format!("the account lookup for {customer} timed out"))),
        _ => Ok(()),
    }
}

/// The instructions and the customer's message.
fn opening(s: &RefundCase, deps: &RefundDeps) -> Vec<Message> {
    vec![Message::system(deps.instructions.clone()), Message::human(s.message.clone())]
}

// ---------------------------------------------------------------- the scripted model

/// What the test double answers, read off the conversation: ask for the refund the message
/// names (`order=.. amount=..`); once the refund answered, tell the customer (by the name the
/// message gives after `this is`).
fn respond(req: &ChatRequest) -> Result<ChatReply, ModelError> {
    let asked = req.messages.iter().find(|m| m.role == Role::Human).map_or("", |m| m.content.as_str());
    let word = |prefix: &str| {
        asked
            .split_whitespace()
            .find_map(|w| w.strip_prefix(prefix))
            .map(|w| w.trim_end_matches(['.', ',']).to_string())
    };
    let (order, amount) = (word("order=").unwrap_or_default(), word("amount=").and_then(|a| a.parse::<u32>().ok()));
    let reply = match req.messages.last().filter(|m| m.role == Role::Tool) {
        None => ChatReply {
            tool_calls: vec![ToolCall::new(
                "call_refund_1",
                "process_refund",
                json!({ "order_id": order, "amount": amount.unwrap_or(0) }),
            )],
            ..ChatReply::default()
        },
        Some(result) => {
            let name = asked.split("this is ").nth(1).and_then(|rest| rest.split(['.', ',']).next()).unwrap_or("there");
            let body: Value = serde_json::from_str(&result.content).unwrap_or(Value::Null);
            ChatReply::text(match body["result"]["refunded"].as_u64() {
                Some(refunded) => format!("Dear {name}, {refunded} EUR on {order} are on their way back to you."),
                None => format!("Dear {name}, I could not refund {order}: {}.", body["detail"]),
            })
        }
    };
    let prompt: String = req.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n");
    let said =
        reply.text.len() as u64 + reply.tool_calls.iter().map(|c| c.arguments.to_string().len() as u64).sum::<u64>();
    let usage = Some(Usage::new(estimate_tokens(&prompt), said.div_ceil(4).max(1)));
    Ok(ChatReply { usage, ..reply })
}

// ---------------------------------------------------------------- running it

/// The requester every thread is started by (it may not approve its own refund).
pub const OWNER: &str = "agent:refund-bot";
/// Holders of this role decide irreversible calls.
pub const APPROVER_ROLE: &str = "refund-approver";

/// What a run is started with, from the command line or the defaults.
#[derive(Debug, Clone)]
pub struct Options {
    pub store: std::path::PathBuf,
    pub thread: String,
    pub customer: String,
    pub message: String,
    pub instructions: String,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            store: std::env::temp_dir().join(format!("agentflow-otel-{}.redb", std::process::id())),
            thread: "refund-1".into(),
            customer: "Ada Lovelace".into(),
            message: "Hello, this is Ada Lovelace. Please refund order=ORD-1001 amount=120, it arrived broken.".into(),
            instructions: "You are a refund agent. Refund what the customer asks for with process_refund.".into(),
        };
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("`{flag}` needs a value"))?;
            match flag.as_str() {
                "--store" => o.store = value.into(),
                "--thread" => o.thread = value,
                "--customer" => o.customer = value,
                "--message" => o.message = value,
                "--instructions" => o.instructions = value,
                other => return Err(format!("unknown option `{other}`")),
            }
        }
        Ok(o)
    }
}

/// The agent on `store`, under `RiskPolicy::default()` (`process_refund` waits for approval).
pub fn agent(store: Arc<dyn Store>) -> App<RefundCase, RefundDeps> {
    refunds::graph().app().store(store).policy(RiskPolicy::default())
}

/// The deps: the scripted model, the provider's key from the environment, the instructions.
pub fn deps(instructions: &str) -> RefundDeps {
    RefundDeps {
        model: Arc::new(ScriptedModel::new().respond_with(respond)),
        secrets: Secrets::new().with(EnvSecrets::only([PAYMENTS_KEY])),
        instructions: instructions.to_string(),
    }
}

/// Runs the thread until its refund waits for an approval; the approval's id.
pub async fn start(app: &App<RefundCase, RefundDeps>, o: &Options) -> Result<String, Box<dyn std::error::Error>> {
    let case = RefundCase { customer: o.customer.clone(), message: o.message.clone(), ..RefundCase::default() };
    let deps = deps(&o.instructions);
    let run = app.runner(&deps).thread(&o.thread).owner(OWNER).run(case).await?;
    println!("run `{}`: {}", o.thread, run.outcome);
    let Outcome::Interrupted { pending, .. } = &run.outcome else {
        return Err(format!("expected a pause for approval, got {}", run.outcome).into());
    };
    let p = pending.iter().find(|p| p.kind == PendingKind::Approval).ok_or("no approval is pending")?;
    let id = p.payload["approval"].as_str().ok_or("the pause names no approval")?.to_string();
    println!("waiting for approval {id}: {} {}", p.payload["tool"].as_str().unwrap_or("?"), p.payload["args"]);
    Ok(id)
}

/// Approves the thread's pending refund as `alice` and resumes the thread to its end.
pub async fn approve(app: &App<RefundCase, RefundDeps>, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, APPROVER_ROLE))?;
    let pending = desk.for_thread(&o.thread)?.into_iter().find(|r| r.status == ApprovalStatus::Pending);
    let id = pending.ok_or_else(|| format!("thread `{}` has no pending approval", o.thread))?.id;
    let decided = desk.approve(&id, &Approver::new("alice", [APPROVER_ROLE]))?;
    println!("alice approves {id}: {}", decided.status);
    let deps = deps(&o.instructions);
    let run = app.runner(&deps).thread(&o.thread).resume().await?;
    println!("resume `{}`: {}", o.thread, run.outcome);
    println!("answer: {}", run.state.answer.as_deref().unwrap_or("(none)"));
    Ok(())
}

/// The trace the thread's spans belong to, as the store keeps it (W3C `traceparent`).
fn print_trace(store: &dyn Store, thread: &str) {
    match store.thread(thread).ok().flatten().and_then(|t| t.trace) {
        Some(trace) => println!("trace of `{thread}`: {trace}"),
        None => println!("trace of `{thread}`: none stored (no OpenTelemetry layer was installed)"),
    }
}

async fn run(mode: &str, o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&o.store)?);
    let app = agent(Arc::clone(&store));
    match mode {
        "start" => {
            start(&app, o).await?;
        }
        "approve" => approve(&app, o).await?,
        _ => {
            start(&app, o).await?;
            approve(&app, o).await?;
        }
    }
    print_trace(&*store, &o.thread);
    Ok(())
}

fn main() -> ExitCode {
    run_with_args(std::env::args().skip(1).collect())
}

/// The example's `main` with these command-line arguments.
pub fn run_with_args(args: Vec<String>) -> ExitCode {
    let mut args = args.into_iter().peekable();
    let mode = match args.peek().map(String::as_str) {
        Some("start" | "approve") => args.next().unwrap_or_default(),
        _ => "both".to_string(),
    };
    let o = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "otel: {e}\nusage: otel [start|approve] [--store PATH] [--thread ID] [--customer NAME] [--message TEXT] [--instructions TEXT]"
            );
            return ExitCode::FAILURE;
        }
    };
    println!("otel: a refund agent traced with OpenTelemetry ({mode})");
    println!("  model: {} (a deterministic test double, not an LLM)", agentflow::model::SCRIPTED_MODEL_NAME);
    println!("  store: {}", o.store.display());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    // The exporter reads the standard `OTEL_*` variables; without an endpoint it sends to
    // http://localhost:4318, and spans it cannot deliver are dropped. It is built inside the
    // runtime, which the gRPC transport (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`) runs on.
    let installed = {
        let _inside = rt.enter();
        Otel::from_env().service_name("refund-agent").init()
    };
    let guard = match installed {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("otel: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(run(&mode, &o));
    // Sends what is still queued before the process exits (the runtime still running).
    if let Err(e) = guard.shutdown() {
        eprintln!("otel: the spans were not all exported: {e}");
    }
    drop(rt);
    if mode == "both" {
        let _ = std::fs::remove_file(&o.store);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("otel: {e}");
            ExitCode::FAILURE
        }
    }
}
