//! A standing adversarial suite: a model-based property test of the tool
//! gateway. Random sequences of operations (model replies that swap the
//! tool under an approved call id, reuse or duplicate call ids, change the
//! arguments; human decisions; runs dropped at a random await; deadlines;
//! a lease taken over mid-run; `update_state`; `fork`) are driven against a
//! durable one-node agent that calls the model and the tools itself. After
//! every operation the outside world (a ledger the tool bodies append to)
//! is checked against the store's approval records and audit log:
//!
//! 1. every executed non-read call matches an approval that was APPROVED
//!    for that exact thread, node, tool and canonical arguments (or the
//!    policy's `Run` for its risk class);
//! 2. no approval is executed twice (idempotent re-runs excepted, each
//!    audited as `effect.rerun`);
//! 3. an uncertain outcome of a non-idempotent call is re-run only after a
//!    human's `RunAgain`, and an approved call cut off mid-way is never left
//!    `EXECUTING` once its thread completed (it is settled or listed for a
//!    human as an unknown outcome);
//! 4. a committed state reads back equal to what the run returned, floats
//!    bit for bit.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentflow::approval::{ApprovalDesk, ApprovalStatus, Approver, RoleAuthorizer, Settlement};
use agentflow::message::{Message, ToolCall};
use agentflow::model::{ChatModel, ChatReply, ChatRequest, ScriptedModel};
use agentflow::prelude::*;
use agentflow::tool::{Decision, Risk, RiskPolicy, canonical_json};
use agentflow::{RedbStore, Run, Store};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- the outside world

/// One call that reached a tool body.
#[derive(Debug, Clone)]
struct Executed {
    thread: String,
    node: String,
    tool: &'static str,
    /// The canonical JSON of the arguments the body received.
    args: String,
    key: String,
}

thread_local! {
    /// Every call that reached a tool body on this OS thread. Each case runs
    /// on a current-thread runtime of its own, so cases and tests in
    /// parallel never see each other's calls.
    static LEDGER: RefCell<Vec<Executed>> = const { RefCell::new(Vec::new()) };
}

fn ledger() -> Vec<Executed> {
    LEDGER.with(|l| l.borrow().clone())
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Order {
    order: String,
    amount: f64,
    /// How long the provider takes to answer.
    hold_ms: u64,
}

/// Records the call (the provider acted), then holds it for `hold_ms`.
async fn act(tool: &'static str, args: &Order, cx: &ToolCx<'_>) -> Result<Value, ToolError> {
    let key = cx.idempotency_key().to_string();
    // The key is `{thread}/{seq}/{node}/{effect key}`.
    let thread = key.split('/').next().unwrap_or_default().to_string();
    let canonical = canonical_json(&json!({ "order": args.order, "amount": args.amount, "hold_ms": args.hold_ms }));
    LEDGER.with(|l| {
        l.borrow_mut().push(Executed { thread, node: cx.node().to_string(), tool, args: canonical, key });
    });
    tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;
    Ok(json!({ tool: args.order, "amount": args.amount }))
}

/// Looks an order up. Read only.
#[tool(risk = read)]
async fn lookup(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("lookup", &args, cx).await
}

/// Tags an order; the tag can be removed. Reversible, run by policy.
#[tool(risk = reversible)]
async fn tag_order(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("tag_order", &args, cx).await
}

/// Opens a ticket; the tracker drops a second request with the same key.
#[tool(risk = external, idempotent)]
async fn open_ticket(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("open_ticket", &args, cx).await
}

/// Refunds an order. Irreversible: needs a human's approval.
#[tool(risk = irreversible)]
async fn refund_order(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("refund_order", &args, cx).await
}

/// Deletes an account. Irreversible: needs a human's approval.
#[tool(risk = irreversible)]
async fn delete_account(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("delete_account", &args, cx).await
}

const TOOLS: [&str; 5] = ["lookup", "tag_order", "open_ticket", "refund_order", "delete_account"];

fn needs_approval(tool: &str) -> bool {
    matches!(tool, "refund_order" | "delete_account")
}

fn idempotent(tool: &str) -> bool {
    tool == "open_ticket"
}

// ---------------------------------------------------------------- the agent

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Desk {
    #[reduce(append)]
    log: Vec<String>,
    /// Computed floats (`amount * 0.15`) of the calls that answered.
    #[reduce(append)]
    fees: Vec<f64>,
    total: f64,
}

pub struct Deps {
    model: Arc<dyn ChatModel>,
}

/// What one run of the agent node did; `stop`: the model said `stop`.
struct Turn {
    log: Vec<String>,
    fees: Vec<f64>,
    total: f64,
    stop: bool,
}

/// The body of both graphs' `agent` node: model turns and tool calls in one
/// node. After a pause the node starts over and asks the model again, which
/// may answer anything.
async fn agent_turn(s: &Desk, cx: &Ctx<'_, Deps>) -> Result<Turn, NodeError> {
    let mut messages = vec![Message::human("settle the customer's orders")];
    let (mut log, mut fees) = (Vec::new(), Vec::new());
    let mut total = s.total;
    for _ in 0..3 {
        let request = ChatRequest::new(messages.clone()).with_tools(cx.tool_specs());
        let reply = cx.chat(&*cx.deps().model, &request).await?;
        if reply.text == "stop" {
            return Ok(Turn { log, fees, total, stop: true });
        }
        if reply.tool_calls.is_empty() {
            break;
        }
        let calls = reply.tool_calls.clone();
        messages.push(reply.into_message("ai"));
        for observation in cx.call_tools(&calls).await? {
            if let Some(amount) = observation.body["result"]["amount"].as_f64() {
                fees.push(amount * 0.15);
                total += amount * 0.15;
            }
            log.push(observation.body.to_string());
            messages.push(observation.into_message());
        }
    }
    Ok(Turn { log, fees, total, stop: false })
}

/// The graph the property test drives.
#[graph(state = Desk, deps = Deps, start = agent, max_steps = 200)]
mod one_node {
    use super::*;

    /// It goes round until the model says `stop`. Its timeout falls while
    /// a slow tool holds its call (`hold_ms` 50), and it is retried. (Where
    /// the timeout falls only decides which sequences the suite explores:
    /// the invariants it checks hold at any timing.)
    #[node(
        goto = [agent, END],
        tools = [lookup, tag_order, open_ticket, refund_order, delete_account],
        timeout = 25ms,
        retry(attempts = 3, base = 1ms, jitter = false)
    )]
    async fn agent(s: &Desk, cx: &Ctx<Deps>) -> Result<Step<Desk>, NodeError> {
        let Turn { log, fees, total, stop } = agent_turn(s, cx).await?;
        let update = Desk::update().log(log).fees(fees).total(total);
        Ok(if stop { goto!(END, update) } else { goto!(agent, update) })
    }
}

/// The same agent with a timeout no stall reaches, for the regression tests
/// whose assertions need each run to get as far as its script says.
#[graph(state = Desk, deps = Deps, start = agent, max_steps = 200)]
mod patient_one_node {
    use super::*;

    #[node(
        goto = [agent, END],
        tools = [lookup, tag_order, open_ticket, refund_order, delete_account],
        timeout = 5s,
        retry(attempts = 3, base = 1ms, jitter = false)
    )]
    async fn agent(s: &Desk, cx: &Ctx<Deps>) -> Result<Step<Desk>, NodeError> {
        let Turn { log, fees, total, stop } = agent_turn(s, cx).await?;
        let update = Desk::update().log(log).fees(fees).total(total);
        Ok(if stop { goto!(END, update) } else { goto!(agent, update) })
    }
}

// ---------------------------------------------------------------- the scripted model

/// One tool call of a generated reply.
#[derive(Debug, Clone)]
struct GenCall {
    id: u8,
    tool: usize,
    order: u8,
    amount: f64,
    hold_ms: u64,
}

impl GenCall {
    fn call(&self) -> ToolCall {
        let args = json!({ "order": format!("o{}", self.order), "amount": self.amount, "hold_ms": self.hold_ms });
        ToolCall::new(format!("c{}", self.id), TOOLS[self.tool], args)
    }
}

/// What the model answers when next asked, resolved when it is asked.
#[derive(Debug, Clone)]
enum Reply {
    /// These calls (ids from a small pool, so they repeat across turns and
    /// within one reply).
    Calls(Vec<GenCall>),
    /// The last tool-call reply again, faithfully.
    Repeat,
    /// The last tool-call reply with each call's tool swapped for another
    /// (an approved `refund_order` becomes `delete_account`), same ids and
    /// arguments.
    Swap,
    /// The last tool-call reply with each amount changed (a computed float).
    Rescale(f64),
    /// No tool calls: the node's step ends (it runs again in the next).
    Done,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Reply>,
    last: Vec<ToolCall>,
}

fn serve(script: &Mutex<Script>) -> ChatReply {
    let mut script = script.lock().unwrap();
    let Some(next) = script.queue.pop_front() else {
        return ChatReply::text("stop");
    };
    let calls = match next {
        Reply::Done => return ChatReply::text("done"),
        Reply::Calls(calls) => calls.iter().map(GenCall::call).collect(),
        Reply::Repeat => script.last.clone(),
        Reply::Swap => script
            .last
            .iter()
            .map(|c| {
                let to = if c.name == "delete_account" { "refund_order" } else { "delete_account" };
                ToolCall::new(c.id.clone(), to, c.arguments.clone())
            })
            .collect(),
        Reply::Rescale(factor) => script
            .last
            .iter()
            .map(|c| {
                let mut args = c.arguments.clone();
                let amount = args["amount"].as_f64().unwrap_or(1.0) * factor;
                args["amount"] = json!(amount);
                ToolCall::new(c.id.clone(), c.name.clone(), args)
            })
            .collect(),
    };
    if calls.is_empty() {
        return ChatReply::text("done");
    }
    script.last.clone_from(&calls);
    ChatReply { tool_calls: calls, ..ChatReply::default() }
}

// ---------------------------------------------------------------- operations

#[derive(Debug, Clone, Copy)]
enum Human {
    Approve,
    /// Approve with other (valid) arguments: this amount.
    Edit(f64),
    Reject,
    Cancel,
    /// Decide nothing until the approval's time to live has passed.
    LetExpire,
    Succeeded,
    Failed,
    RunAgain,
}

#[derive(Debug, Clone)]
enum Op {
    /// Queue a model reply.
    Model(Reply),
    /// Queue these model replies, then run (or resume) the thread until it
    /// ends or pauses (the model says `stop` once its replies are used up).
    Drive(Vec<Reply>),
    /// Run (or resume) the thread, dropping the run future after `polls`
    /// polls or `ms` milliseconds: a crash at a random await (a tool may be
    /// holding its call).
    Crash { replies: Vec<Reply>, polls: u32, ms: Option<u64> },
    /// Resume with a run deadline this far away.
    Deadline { ms: u64 },
    /// Resume, and after `polls` polls let another executor take the
    /// thread's lease (its clock is past the lease's expiry), then give it
    /// back once the run ended.
    LeaseLoss { polls: u32 },
    /// Decide the `pick`-th record waiting for a human.
    Decide { pick: usize, how: Human },
    /// Decide every record waiting for a human the same way, queue the
    /// model's answer to the node asking again, and resume (`crash`: drop
    /// the resumed run after that many polls).
    Continue { how: Human, then: Reply, crash: Option<u32> },
    /// A human writes to the (perhaps paused) thread.
    UpdateState { amount: f64 },
    /// Fork the thread at the `pick`-th checkpoint.
    Fork { pick: usize },
}

fn amount() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(10.0),
        Just(0.1),
        // Computed floats, as a model or a node computes them.
        (1u32..2000).prop_map(|cents| f64::from(cents) / 100.0 * 0.15),
        (1u32..1000).prop_map(|total| f64::from(total) * 0.15),
    ]
}

fn gen_call() -> impl Strategy<Value = GenCall> {
    (0u8..3, 0usize..TOOLS.len(), 0u8..2, amount(), prop_oneof![2 => Just(0u64), 1 => Just(50u64)])
        .prop_map(|(id, tool, order, amount, hold_ms)| GenCall { id, tool, order, amount, hold_ms })
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        4 => prop::collection::vec(gen_call(), 1..4).prop_map(Reply::Calls),
        2 => Just(Reply::Repeat),
        2 => Just(Reply::Swap),
        1 => prop_oneof![Just(2.0), Just(0.15), Just(1.1)].prop_map(Reply::Rescale),
        1 => Just(Reply::Done),
    ]
}

/// What the model answers when the node asks again after a decision.
fn after_decision() -> impl Strategy<Value = Reply> {
    prop_oneof![
        4 => Just(Reply::Repeat),
        2 => Just(Reply::Swap),
        1 => prop_oneof![Just(2.0), Just(0.15)].prop_map(Reply::Rescale),
        1 => prop::collection::vec(gen_call(), 1..3).prop_map(Reply::Calls),
    ]
}

fn human() -> impl Strategy<Value = Human> {
    prop_oneof![
        4 => Just(Human::Approve),
        1 => amount().prop_map(Human::Edit),
        1 => Just(Human::Reject),
        1 => Just(Human::Cancel),
        1 => Just(Human::LetExpire),
        1 => Just(Human::Succeeded),
        1 => Just(Human::Failed),
        2 => Just(Human::RunAgain),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => reply().prop_map(Op::Model),
        4 => prop::collection::vec(reply(), 0..4).prop_map(Op::Drive),
        3 => (prop::collection::vec(reply(), 0..3), 1u32..60, prop::option::weighted(0.8, 1u64..60))
            .prop_map(|(replies, polls, ms)| Op::Crash { replies, polls, ms }),
        1 => prop_oneof![Just(1u64), Just(10), Just(25)].prop_map(|ms| Op::Deadline { ms }),
        1 => (1u32..30).prop_map(|polls| Op::LeaseLoss { polls }),
        3 => (0usize..3, human()).prop_map(|(pick, how)| Op::Decide { pick, how }),
        6 => (human(), after_decision(), prop::option::weighted(0.3, 1u32..40))
            .prop_map(|(how, then, crash)| Op::Continue { how, then, crash }),
        1 => amount().prop_map(|amount| Op::UpdateState { amount }),
        1 => (0usize..8).prop_map(|pick| Op::Fork { pick }),
    ]
}

// ---------------------------------------------------------------- driving

const ROLE: &str = "ops";
const OWNER: &str = "agent:support-bot";
const SHORT_TTL: Duration = Duration::from_millis(60);

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Polls a future at most `left` times, or until `cut` fires, then drops
/// it (`None`): a crash at whatever await it had reached.
struct PollLimit<F> {
    fut: Pin<Box<F>>,
    left: u32,
    cut: Option<Pin<Box<tokio::time::Sleep>>>,
}

fn limit<F: Future>(fut: F, polls: u32, cut_ms: Option<u64>) -> PollLimit<F> {
    let cut = cut_ms.map(|ms| Box::pin(tokio::time::sleep(Duration::from_millis(ms))));
    PollLimit { fut: Box::pin(fut), left: polls, cut }
}

impl<F: Future> Future for PollLimit<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let cut = self.cut.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
        if self.left == 0 || cut {
            return Poll::Ready(None);
        }
        self.left -= 1;
        self.fut.as_mut().poll(cx).map(Some)
    }
}

struct World {
    store: Arc<dyn Store>,
    graph: App<Desk, Deps>,
    desk: ApprovalDesk,
    deps: Deps,
    script: Arc<Mutex<Script>>,
    /// The threads of the case; the last is the one driven. A completed
    /// thread is followed by a new one.
    threads: Vec<String>,
    thread: String,
    /// `RunAgain` settlements per (thread, node, tool, canonical args).
    run_again: HashMap<(String, String, String, String), usize>,
}

impl World {
    fn new(thread: &str, short_ttl: bool) -> Self {
        Self::with_graph(one_node::graph(), thread, short_ttl)
    }

    fn with_graph(graph: CompiledGraph<Desk, Deps>, thread: &str, short_ttl: bool) -> Self {
        let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
        let policy = RiskPolicy::default()
            .risk(Risk::Reversible, Decision::Run)
            .risk(Risk::External, Decision::Run)
            .risk(Risk::Irreversible, Decision::NeedsApproval);
        let graph = graph.app().store(Arc::clone(&store)).policy(policy).approval_ttl(if short_ttl {
            SHORT_TTL
        } else {
            Duration::from_secs(3600)
        });
        let authorizer = RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE).role_for(Risk::Reversible, ROLE);
        let authorizer = authorizer.role_for(Risk::External, ROLE);
        let desk = graph.approvals(authorizer).unwrap();
        let script = Arc::new(Mutex::new(Script::default()));
        let model = {
            let script = Arc::clone(&script);
            ScriptedModel::new().respond_with(move |_req: &ChatRequest| Ok(serve(&script)))
        };
        let deps = Deps { model: Arc::new(model) };
        World {
            store,
            graph,
            desk,
            deps,
            script,
            threads: vec![thread.to_string()],
            thread: thread.to_string(),
            run_again: HashMap::new(),
        }
    }

    fn started(&self) -> bool {
        self.graph.state(&self.thread).ok().flatten().is_some()
    }

    /// Moves on to a new thread once the current one completed.
    fn next_thread(&mut self) {
        let completed = matches!(self.graph.state(&self.thread), Ok(Some(snapshot)) if snapshot.next.is_empty());
        if completed {
            self.thread = format!("{}.{}", self.threads[0], self.threads.len());
            self.threads.push(self.thread.clone());
        }
    }

    /// A run of the thread: a fresh run the first time, a resume after.
    async fn go(&self, deadline: Option<Duration>) -> Result<Run<Desk>, agentflow::RunError> {
        let mut runner = self.graph.runner(&self.deps).thread(self.thread.clone()).owner(OWNER);
        if let Some(limit) = deadline {
            runner = runner.timeout(limit);
        }
        if self.started() { runner.resume().await } else { runner.run(Desk::default()).await }
    }

    async fn apply(&mut self, op: &Op) {
        self.next_thread();
        match op {
            Op::Model(reply) => self.script.lock().unwrap().queue.push_back(reply.clone()),
            Op::Drive(replies) => {
                self.script.lock().unwrap().queue.extend(replies.iter().cloned());
                let run = self.go(None).await;
                self.check_read_back(run);
            }
            Op::Deadline { ms } => {
                let run = self.go(Some(Duration::from_millis(*ms))).await;
                self.check_read_back(run);
            }
            Op::Crash { replies, polls, ms } => {
                self.script.lock().unwrap().queue.extend(replies.iter().cloned());
                let run = limit(self.go(None), *polls, *ms).await;
                if let Some(run) = run {
                    self.check_read_back(run);
                }
            }
            Op::LeaseLoss { polls } => {
                let mut run = limit(self.go(None), *polls, None);
                let early = (&mut run).await;
                // Another executor whose clock is past the lease's expiry.
                let stolen = self.store.acquire_lease(&self.thread, "thief", 60_000, now_ms() + 120_000).is_ok();
                let result = match early {
                    Some(result) => Some(result),
                    None => {
                        run.left = u32::MAX;
                        run.await
                    }
                };
                if stolen {
                    self.store.release_lease(&self.thread, "thief").expect("the thief gives the thread back");
                }
                if let Some(Ok(run)) = result
                    && !stolen
                {
                    self.check_read_back(Ok(run));
                }
            }
            Op::Decide { pick, how } => self.decide(*pick, *how).await,
            Op::Continue { how, then, crash } => {
                let waiting = self.waiting().len();
                for pick in 0..waiting {
                    // Decided ones leave the list; the first waiting one is next.
                    let _ = pick;
                    self.decide(0, *how).await;
                    if matches!(how, Human::LetExpire) {
                        break;
                    }
                }
                self.script.lock().unwrap().queue.push_back(then.clone());
                let limit_polls = crash.unwrap_or(u32::MAX);
                let cut = crash.map(|polls| polls as u64);
                if let Some(run) = limit(self.go(None), limit_polls, cut).await {
                    self.check_read_back(run);
                }
            }
            Op::UpdateState { amount } => {
                let update = Desk::update().log(vec![format!("a human noted {amount}")]).fees(vec![amount * 0.15]);
                let _ = self.graph.update_state(&self.thread, update, "human:bob");
            }
            Op::Fork { pick } => {
                if let Ok(history) = self.graph.history(&self.thread)
                    && !history.is_empty()
                {
                    let seq = history[pick % history.len()].seq;
                    let _ = self.graph.fork(&self.thread, seq, "human:bob");
                }
            }
        }
    }

    /// The current thread's records waiting for a human.
    fn waiting(&self) -> Vec<agentflow::approval::ApprovalRecord> {
        self.desk
            .for_thread(&self.thread)
            .unwrap()
            .into_iter()
            .filter(|r| matches!(r.status, ApprovalStatus::Pending | ApprovalStatus::OutcomeUnknown))
            .collect()
    }

    async fn decide(&mut self, pick: usize, how: Human) {
        let waiting = self.waiting();
        if waiting.is_empty() {
            return;
        }
        let record = &waiting[pick % waiting.len()];
        let id = record.id.as_str();
        let unknown = record.status == ApprovalStatus::OutcomeUnknown;
        let _ = match how {
            Human::LetExpire => {
                tokio::time::sleep(SHORT_TTL + Duration::from_millis(10)).await;
                return;
            }
            Human::Approve if !unknown => self.desk.approve(id, &alice()),
            Human::Edit(amount) if !unknown => {
                let mut args: Value = serde_json::from_str(&record.args).unwrap();
                args["amount"] = json!(amount);
                self.desk.edit(id, &alice(), args)
            }
            Human::Reject if !unknown => self.desk.reject(id, &alice(), "not today"),
            Human::Cancel if !unknown => self.desk.cancel(id, &alice()),
            Human::Succeeded if unknown => self.desk.settle(id, &alice(), Settlement::Succeeded(json!({"by": "hand"}))),
            Human::Failed if unknown => self.desk.settle(id, &alice(), Settlement::Failed("it did not act".into())),
            Human::RunAgain if unknown => {
                let settled = self.desk.settle(id, &alice(), Settlement::RunAgain);
                if settled.is_ok() {
                    let binding =
                        (record.thread.clone(), record.node.clone(), record.tool.clone(), record.args.clone());
                    *self.run_again.entry(binding).or_default() += 1;
                }
                settled
            }
            _ => return,
        };
    }

    /// Invariant 4: what a completed or paused run returned is what reads back.
    fn check_read_back(&self, run: Result<Run<Desk>, agentflow::RunError>) {
        let Ok(run) = run else { return };
        if !matches!(run.outcome, Outcome::Completed | Outcome::Interrupted { .. }) {
            return;
        }
        let stored = self.graph.state(&self.thread).expect("the thread reads back").expect("a committed state").state;
        let bits =
            |d: &Desk| (d.log.clone(), d.fees.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), d.total.to_bits());
        assert_eq!(bits(&stored), bits(&run.state), "the committed state reads back as the run returned it");
        if run.outcome == Outcome::Completed {
            // 3. A call cut off mid-way is never left out of sight: once the
            // thread completed, no approval is still `EXECUTING`.
            let approvals = self.store.list_approvals(&self.thread).expect("the approvals read back");
            let executing: Vec<_> = approvals.iter().filter(|r| r.status == ApprovalStatus::Executing).collect();
            assert!(executing.is_empty(), "a completed thread left approvals executing: {executing:#?}");
        }
    }

    /// Invariants 1 to 3, against the ledger, the approval records and the
    /// audit log.
    fn check(&self) {
        for e in ledger() {
            assert!(self.threads.contains(&e.thread), "a call ran for an unknown thread: {e:?}");
        }
        for thread in &self.threads {
            self.check_thread(thread);
        }
    }

    fn check_thread(&self, thread: &str) {
        let ledger: Vec<Executed> = ledger().into_iter().filter(|e| e.thread == thread).collect();
        let approvals = self.store.list_approvals(thread).expect("the approvals read back");
        let audit = self.store.list_audit(thread).expect("the audit log reads back");
        let approved = |id: &str| {
            audit.iter().any(|e| e.kind == "approval.approved" && e.detail.get("approval") == Some(&json!(id)))
        };
        let mut by_binding: HashMap<(String, String, String, String), Vec<&Executed>> = HashMap::new();
        let mut by_key: HashMap<&str, Vec<&Executed>> = HashMap::new();
        for e in ledger.iter().filter(|e| e.tool != "lookup") {
            by_binding
                .entry((e.thread.clone(), e.node.clone(), e.tool.to_string(), e.args.clone()))
                .or_default()
                .push(e);
            by_key.entry(e.key.as_str()).or_default().push(e);
        }
        for ((thread, node, tool, args), runs) in &by_binding {
            let run_again = self.run_again.get(&(thread.clone(), node.clone(), tool.clone(), args.clone()));
            let run_again = run_again.copied().unwrap_or(0);
            // `tag_order` (reversible) and `open_ticket` (external) run by the
            // policy's `Run`; the irreversible tools only with an approval.
            if needs_approval(tool) {
                // 1. Each run matches an approval granted for exactly this call.
                let granted: Vec<_> = approvals
                    .iter()
                    .filter(|r| &r.thread == thread && &r.node == node && &r.tool == tool && &r.args == args)
                    .filter(|r| approved(&r.id))
                    .collect();
                assert!(
                    !granted.is_empty(),
                    "`{tool}` ran with {args} without an approval for exactly that call; approvals: {approvals:#?}"
                );
                // 2. No approval ran twice: one run per approval, plus one per
                // human's `RunAgain`.
                assert!(
                    runs.len() <= granted.len() + run_again,
                    "`{tool}` with {args} ran {} times under {} approvals ({run_again} run again): {runs:#?}",
                    runs.len(),
                    granted.len()
                );
            }
        }
        for (key, runs) in &by_key {
            let tool = runs[0].tool;
            let binding = (runs[0].thread.clone(), runs[0].node.clone(), tool.to_string(), runs[0].args.clone());
            let reruns = audit
                .iter()
                .filter(|e| e.kind == "effect.rerun" && e.detail.get("idempotency_key") == Some(&json!(key)))
                .count();
            if idempotent(tool) {
                // 2. An idempotent re-run is audited, each one.
                assert!(runs.len() <= 1 + reruns, "`{key}` ran {} times, {reruns} re-runs audited", runs.len());
            } else {
                // 3. A non-idempotent call is never re-run silently.
                assert_eq!(reruns, 0, "a non-idempotent call `{key}` was re-run on its own");
                let again = self.run_again.get(&binding).copied().unwrap_or(0);
                assert!(
                    runs.len() <= 1 + again,
                    "`{key}` ran {} times with {again} `RunAgain` decisions: {runs:#?}",
                    runs.len()
                );
            }
        }
    }
}

fn run_case(case: usize, short_ttl: bool, ops: &[Op]) {
    LEDGER.with(|l| l.borrow_mut().clear());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut world = World::new(&format!("adv-{case}"), short_ttl);
        for op in ops {
            world.apply(op).await;
            world.check();
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_gateway_keeps_its_guarantees_under_adversarial_sequences(
        short_ttl in prop::bool::weighted(0.25),
        ops in prop::collection::vec(op(), 1..24),
    ) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        run_case(case, short_ttl, &ops);
    }
}

// ---------------------------------------------------------------- regressions found by the suite

/// Drops `run` as soon as a tool body acted: a crash mid-call.
async fn cut_off_when_acted<F: Future>(run: F) {
    let acted = async {
        while ledger().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        _ = run => panic!("the run ended before its call acted"),
        () = acted => {}
    }
}

/// An approved refund cut off mid-call, after which the model (asked again
/// on resume) no longer asks for it: the step completes without the call.
/// The refund may have acted, so its record must not stay `EXECUTING` out
/// of sight: it is listed for a human as an unknown outcome.
#[tokio::test]
async fn an_approved_call_cut_off_and_never_asked_again_is_listed_as_an_unknown_outcome() {
    // With the suite's 25 ms node timeout a stalled machine could time out every attempt of a
    // run before it reached the approval, the refund or `stop`.
    let mut world = World::with_graph(patient_one_node::graph(), "orphan", false);
    let refund = GenCall { id: 0, tool: 3, order: 0, amount: 12.5 * 0.15, hold_ms: 60_000 };
    world.apply(&Op::Drive(vec![Reply::Calls(vec![refund])])).await;
    let waiting = world.waiting();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let id = waiting[0].id.clone();
    world.desk.approve(&id, &alice()).unwrap();
    world.script.lock().unwrap().queue.push_back(Reply::Repeat);
    cut_off_when_acted(world.go(None)).await;
    assert_eq!(ledger().len(), 1, "the refund acted once");
    // The model now answers without the refund; the thread completes.
    let done = world.go(None).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    world.check();
    assert_eq!(ledger().len(), 1, "not refunded again");
    let record = world.desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown, "{record:?}");
    assert!(world.desk.pending().unwrap().iter().any(|r| r.id == id), "listed for a human");
    let kinds: Vec<String> = world.graph.audit_log("orphan").unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"approval.outcome_unknown".to_string()), "{kinds:?}");
}
