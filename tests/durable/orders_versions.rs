//! The orders graph at versions 1 and 2, as threads parked on version 1 and moved to version 2
//! meet it: version 2 renames nodes (one of which runs a subgraph, one of which books through an
//! idempotent effect), renames the tool `send_email` to `send_message` with its arguments
//! mapped, adds a state field and changes a field's type (a state migration).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentflow::__private::with_release;
use agentflow::approval::RoleAuthorizer;
use agentflow::message::ToolCall;
use agentflow::model::ChatReply;
use agentflow::prelude::*;
use agentflow::release::{GraphMigration, Release};
use agentflow::tool::{Observation, Risk};
use agentflow::{PendingKind, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every message a tool sent: (tool, arguments).
pub static SENT: Mutex<Vec<(String, Value)>> = Mutex::new(Vec::new());

pub fn sent_to(customer: &str) -> Vec<(String, Value)> {
    SENT.lock().unwrap().iter().filter(|(_, args)| args.to_string().contains(customer)).cloned().collect()
}

/// How often the nodes whose finished writes a resume must reuse ran.
#[derive(Default)]
pub struct Deps {
    pub packs: AtomicU32,
    pub plain_inspections: AtomicU32,
    /// How often the model was asked (its reply is journaled).
    pub asked: AtomicU32,
    /// How often the courier subgraph started.
    pub child_starts: AtomicU32,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Email {
    to: String,
    body: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Message {
    recipient: String,
    text: String,
}

/// Sends an email.
#[tool(risk = irreversible)]
pub async fn send_email(args: Email) -> Result<Value, ToolError> {
    SENT.lock().unwrap().push(("send_email".into(), json!({ "to": args.to, "body": args.body })));
    Ok(json!({ "sent": true }))
}

/// Sends a message.
#[tool(risk = irreversible)]
pub async fn send_message(args: Message) -> Result<Value, ToolError> {
    SENT.lock().unwrap().push(("send_message".into(), json!({ "recipient": args.recipient, "text": args.text })));
    Ok(json!({ "sent": true }))
}

pub fn body_for(customer: &str) -> String {
    format!("your refund, {customer}")
}

/// What the model answers for `order` (counted): a call of `send_email`, as version 1 named it.
pub fn model_reply(deps: &Deps, order: &impl Customer) -> ChatReply {
    deps.asked.fetch_add(1, Ordering::SeqCst);
    let mut reply = ChatReply::text("");
    let args = json!({ "to": order.customer(), "body": body_for(order.customer()) });
    reply.tool_calls = vec![ToolCall::new("call-1", "send_email", args)];
    // A customer named `two..` gets a copy sent to their office too, in a second call.
    if order.customer().starts_with("two") {
        let office = format!("office of {}", order.customer());
        let copy = json!({ "to": office, "body": body_for(order.customer()) });
        reply.tool_calls.push(ToolCall::new("call-2", "send_email", copy));
    }
    reply
}

/// The customer of an order of either version.
pub trait Customer {
    fn customer(&self) -> &str;
}

impl Customer for v1::Order {
    fn customer(&self) -> &str {
        &self.customer
    }
}

impl Customer for v2::Order {
    fn customer(&self) -> &str {
        &self.customer
    }
}

/// An observation as a node logs it: `tool: code or body`.
pub fn observed(o: &Observation) -> String {
    match o.code() {
        Some(code) => format!("{}: {}: {}", o.tool, code.as_str(), o.body["detail"].as_str().unwrap_or_default()),
        None => format!("{}: {}", o.tool, o.body),
    }
}

/// Every idempotency key a reservation was made under: (customer, key).
pub static RESERVED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Reserves for `customer` under `key`; `up`: the service answers (else it went away).
pub fn reserve(customer: &str, key: String, up: bool) -> Result<String, NodeError> {
    RESERVED.lock().unwrap().push((customer.to_string(), key.clone()));
    if up { Ok(format!("reserved under {key}")) } else { Err(NodeError::fatal("the reservation service went away")) }
}

/// The keys reservations for `customer` were made under.
pub fn reserved_for(customer: &str) -> Vec<String> {
    RESERVED.lock().unwrap().iter().filter(|(c, _)| c == customer).map(|(_, k)| k.clone()).collect()
}

/// A parcel the courier subgraph delivers; it asks who signed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Parcel {
    pub to: String,
    #[reduce(append)]
    pub log: Vec<String>,
}

#[graph(state = Parcel, deps = Deps, start = receive)]
pub mod courier {
    use super::*;

    #[node(goto = [sign])]
    async fn receive(s: &Parcel, deps: &Deps) -> Step<Parcel> {
        deps.child_starts.fetch_add(1, Ordering::SeqCst);
        goto!(sign, Parcel::update().log(vec![format!("received for {}", s.to)]))
    }

    #[node(goto = [END], interrupt)]
    async fn sign(s: &Parcel, cx: &Ctx<Deps>) -> Result<Step<Parcel>, NodeError> {
        let by: String = cx.interrupt(json!({ "sign for": s.to }))?;
        Ok(goto!(END, Parcel::update().log(vec![format!("signed by {by}")])))
    }
}

pub mod v1 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    pub struct Order {
        pub kind: String,
        pub customer: String,
        /// In cents.
        pub amount: u32,
        pub items: Vec<String>,
        #[reduce(append)]
        pub log: Vec<String>,
    }

    #[graph(state = Order, deps = Deps, start = intake, max_steps = 10, id = "orders")]
    pub mod flow {
        use super::*;

        #[node(goto = [review, wait, pay, split, spread, ask, delegate, book])]
        async fn intake(s: &Order) -> Step<Order> {
            match s.kind.as_str() {
                "review" => goto!(review),
                "wait" => goto!(wait),
                "pay" => goto!(pay),
                "crash" => goto!(split),
                "ask" => goto!(ask),
                "delegate" => goto!(delegate),
                "book" => goto!(book),
                _ => goto!(spread),
            }
        }

        /// The model asks for the tool: its reply is journaled, and its calls run from it.
        #[node(goto = [END], tools = [send_email])]
        async fn ask(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(model_reply(cx.deps(), s)) }).await?;
            let observations = cx.call_tools(&reply.tool_calls).await?;
            Ok(goto!(END, Order::update().log(observations.iter().map(observed).collect())))
        }

        #[node(goto = [END], subgraphs = [courier])]
        async fn delegate(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let done = cx.subgraph(courier::graph(), Parcel { to: s.customer.clone(), ..Parcel::default() }).await?;
            Ok(goto!(END, Order::update().log(done.log)))
        }

        /// Books through a service that honours idempotency keys; on version 1 it goes away.
        #[node(goto = [END])]
        async fn book(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let customer = s.customer.clone();
            let receipt = cx.idempotent_effect("reserve", |key| async move { reserve(&customer, key, false) }).await?;
            Ok(goto!(END, Order::update().log(vec![receipt])))
        }

        #[node(goto = [END], interrupt)]
        async fn review(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let answer: String = cx.interrupt(json!({ "order": s.customer }))?;
            Ok(goto!(END, Order::update().log(vec![format!("reviewed: {answer}")])))
        }

        #[node(goto = [END], sleep)]
        async fn wait(_s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            cx.sleep(Duration::from_millis(200)).await?;
            Ok(goto!(END, Order::update().log(vec!["woke".into()])))
        }

        #[node(goto = [END], tools = [send_email])]
        async fn pay(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let obs = cx.run_tool(send_email, json!({ "to": s.customer, "body": body_for(&s.customer) })).await?;
            Ok(goto!(END, Order::update().log(vec![format!("sent: {}", obs.body)])))
        }

        #[node(goto = [pack, flaky])]
        async fn split(_s: &Order) -> Step<Order> {
            goto!([pack, flaky])
        }

        #[node(goto = [END])]
        async fn pack(_s: &Order, deps: &Deps) -> Step<Order> {
            deps.packs.fetch_add(1, Ordering::SeqCst);
            goto!(END, Order::update().log(vec!["packed".into()]))
        }

        /// The process "dies" in this node: its step fails after `pack` finished.
        #[node(goto = [END])]
        async fn flaky(_s: &Order) -> Result<Step<Order>, NodeError> {
            Err(NodeError::fatal("the process died mid-step"))
        }

        #[node(goto = [inspect])]
        async fn spread(s: &Order) -> Step<Order> {
            goto!(each(inspect, s.items.clone()))
        }

        #[node(goto = [END], interrupt)]
        async fn inspect(_s: &Order, #[payload] item: &String, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let verdict = if item.starts_with("fragile") {
                cx.interrupt::<_, String>(json!({ "open": item }))?
            } else {
                cx.deps().plain_inspections.fetch_add(1, Ordering::SeqCst);
                "ok".into()
            };
            Ok(goto!(END, Order::update().log(vec![format!("{item}: {verdict}")])))
        }
    }
}

pub mod v2 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    #[state(version = 2)]
    pub struct Order {
        pub kind: String,
        pub customer: String,
        /// In currency units (was cents).
        pub amount: f64,
        pub items: Vec<String>,
        #[reduce(append)]
        pub log: Vec<String>,
        /// New in version 2.
        #[serde(default)]
        pub note: String,
    }

    #[graph(state = Order, deps = Deps, start = intake, max_steps = 10, id = "orders", version = 2,
            migrate(from = 1, nodes(review -> human_review, pack -> boxing, inspect -> check, delegate -> hand_off,
                                    book -> booking),
                              tools(send_email -> send_message),
                              args(send_message = super::email_to_message)))]
    pub mod flow {
        use super::*;

        #[node(goto = [human_review, wait, pay, split, spread, ask, hand_off, booking])]
        async fn intake(s: &Order) -> Step<Order> {
            match s.kind.as_str() {
                "review" => goto!(human_review),
                "wait" => goto!(wait),
                "pay" => goto!(pay),
                "crash" => goto!(split),
                "ask" => goto!(ask),
                "delegate" => goto!(hand_off),
                "book" => goto!(booking),
                _ => goto!(spread),
            }
        }

        #[node(goto = [END], tools = [send_message])]
        async fn ask(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(model_reply(cx.deps(), s)) }).await?;
            let observations = cx.call_tools(&reply.tool_calls).await?;
            Ok(goto!(END, Order::update().log(observations.iter().map(observed).collect())))
        }

        #[node(goto = [END], subgraphs = [courier])]
        async fn hand_off(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let done = cx.subgraph(courier::graph(), Parcel { to: s.customer.clone(), ..Parcel::default() }).await?;
            Ok(goto!(END, Order::update().log(done.log)))
        }

        #[node(goto = [END])]
        async fn booking(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let customer = s.customer.clone();
            let receipt = cx.idempotent_effect("reserve", |key| async move { reserve(&customer, key, true) }).await?;
            Ok(goto!(END, Order::update().log(vec![receipt])))
        }

        #[node(goto = [END], interrupt)]
        async fn human_review(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let answer: String = cx.interrupt(json!({ "order": s.customer }))?;
            Ok(goto!(END, Order::update().log(vec![format!("reviewed: {answer}")]).note("reviewed".into())))
        }

        #[node(goto = [END], sleep)]
        async fn wait(_s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            cx.sleep(Duration::from_millis(200)).await?;
            Ok(goto!(END, Order::update().log(vec!["woke".into()])))
        }

        #[node(goto = [END], tools = [send_message])]
        async fn pay(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let args = json!({ "recipient": s.customer, "text": body_for(&s.customer) });
            let obs = cx.run_tool(send_message, args).await?;
            Ok(goto!(END, Order::update().log(vec![format!("sent: {}", obs.body)])))
        }

        #[node(goto = [boxing, flaky])]
        async fn split(_s: &Order) -> Step<Order> {
            goto!([boxing, flaky])
        }

        #[node(goto = [END])]
        async fn boxing(_s: &Order, deps: &Deps) -> Step<Order> {
            deps.packs.fetch_add(1, Ordering::SeqCst);
            goto!(END, Order::update().log(vec!["packed".into()]))
        }

        #[node(goto = [END])]
        async fn flaky(_s: &Order) -> Step<Order> {
            goto!(END, Order::update().log(vec!["flaky ran".into()]))
        }

        #[node(goto = [check])]
        async fn spread(s: &Order) -> Step<Order> {
            goto!(each(check, s.items.clone()))
        }

        #[node(goto = [END], interrupt)]
        async fn check(_s: &Order, #[payload] item: &String, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let verdict = if item.starts_with("fragile") {
                cx.interrupt::<_, String>(json!({ "open": item }))?
            } else {
                cx.deps().plain_inspections.fetch_add(1, Ordering::SeqCst);
                "ok".into()
            };
            Ok(goto!(END, Order::update().log(vec![format!("{item}: {verdict}")])))
        }
    }
}

/// `send_email {to, body}` became `send_message {recipient, text}`; a body that mentions
/// "forbidden" is refused.
pub fn email_to_message(args: Value) -> Result<Value, String> {
    let field = |name: &str| args.get(name).and_then(Value::as_str).map(str::to_string);
    let (Some(to), Some(body)) = (field("to"), field("body")) else { return Err("no `to` or `body`".into()) };
    if body.contains("forbidden") {
        return Err(format!("a message to {to} cannot say that"));
    }
    Ok(json!({ "recipient": to, "text": body }))
}

/// Version 2 declaring that threads in `review` end there.
pub static REVIEW_ENDS: [GraphMigration; 1] = [GraphMigration::new(1, &[("review", "END")], &[], &[])];

pub fn old_app(store: &Arc<dyn Store>) -> App<v1::Order, Deps> {
    v1::flow::graph().app().store(Arc::clone(store))
}

/// Version 2 as `#[graph(version = 2, migrate(..))]` declares it.
pub fn new_app(store: &Arc<dyn Store>) -> App<v2::Order, Deps> {
    with_state_migration(v2::flow::graph().app().store(Arc::clone(store)))
}

/// Version 2 with other migrations declared.
pub fn new_app_with(store: &Arc<dyn Store>, migrations: &'static [GraphMigration]) -> App<v2::Order, Deps> {
    let release = Release::new("orders", 2, migrations, "{}", "");
    with_state_migration(with_release(v2::flow::graph(), release).app().store(Arc::clone(store)))
}

pub fn with_state_migration(app: App<v2::Order, Deps>) -> App<v2::Order, Deps> {
    app.migration(1, |mut old| {
        let cents = old["amount"].as_u64().ok_or("`amount` is not a number of cents")?;
        old["amount"] = json!(cents as f64 / 100.0);
        Ok(old)
    })
}

pub const OWNER: &str = "agent:orders";

pub fn order(kind: &str, customer: &str) -> v1::Order {
    let items = ["a", "fragile-b", "c"].map(String::from).to_vec();
    v1::Order { kind: kind.into(), customer: customer.into(), amount: 1250, items, log: vec![] }
}

pub fn migrated_entries<S: State, D>(app: &App<S, D>, thread: &str) -> Vec<Value> {
    app.audit_log(thread).unwrap().into_iter().filter(|e| e.kind == "graph.migrated").map(|e| e.detail).collect()
}

pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "payments")
}

pub fn waits_for_approval<S>(run: &agentflow::Run<S>) -> (String, Value) {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    (pending[0].payload["approval"].as_str().expect("an approval id").to_string(), pending[0].payload.clone())
}
