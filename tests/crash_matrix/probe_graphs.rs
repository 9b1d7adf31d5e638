//! Graphs the crash matrix is attacked with: a saga, a subgraph, a map of irreversible calls,
//! retries, timers, questions, and graphs with defects of their own.

#![allow(dead_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::model::{ChatReply, ChatRequest, ModelError, ScriptedModel};
use agentflow::prelude::*;
use agentflow::saga::Compensates;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The outside world: what each call did, by idempotency key.
pub struct World {
    pub model: ScriptedModel,
    pub books: Mutex<Vec<String>>,
    pub unbooks: Mutex<Vec<String>>,
    pub fees: Mutex<Vec<String>>,
    pub sends: Mutex<Vec<String>>,
    pub raw: AtomicU32,
}

impl Default for World {
    fn default() -> Self {
        World::with(ScriptedModel::new().respond_with(|req: &ChatRequest| {
            let asked = req.messages.last().map(|m| m.content.clone()).unwrap_or_default();
            Ok(ChatReply::text(format!("ok: {asked}")))
        }))
    }
}

impl World {
    pub fn with(model: ScriptedModel) -> Self {
        World {
            model,
            books: Mutex::default(),
            unbooks: Mutex::default(),
            fees: Mutex::default(),
            sends: Mutex::default(),
            raw: AtomicU32::new(0),
        }
    }

    /// A model that times out once (transient), then answers.
    pub fn flaky_model() -> Self {
        World::with(ScriptedModel::new().fail(ModelError::Timeout).reply_text("second time lucky"))
    }
}

pub fn count(v: &Mutex<Vec<String>>) -> usize {
    v.lock().unwrap().len()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Trip {
    pub items: Vec<String>,
    #[reduce(append)]
    pub log: Vec<String>,
    pub ticket: Option<String>,
    pub done: bool,
}

pub fn trip() -> Trip {
    Trip { items: vec!["a".into(), "b".into()], ..Trip::default() }
}

// ------------------------------------------------------------------ tools

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Booking {
    pub what: String,
}

#[derive(Deserialize, Serialize)]
pub struct Ticket {
    pub id: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct TicketRef {
    pub id: String,
}

/// Books; undone by `unbook`.
#[tool(risk = reversible, compensate = unbook)]
pub async fn book(args: Booking, cx: &ToolCx<World>) -> Result<Ticket, ToolError> {
    cx.deps().books.lock().unwrap().push(cx.idempotency_key().to_string());
    Ok(Ticket { id: format!("t-{}", args.what) })
}

/// Cancels a booking. Not idempotent: every call cancels (and charges a cancellation fee).
#[tool(risk = reversible)]
pub async fn unbook(_args: TicketRef, cx: &ToolCx<World>) -> Result<(), ToolError> {
    cx.deps().unbooks.lock().unwrap().push(cx.idempotency_key().to_string());
    Ok(())
}

impl Compensates<book> for TicketRef {
    fn from_call(_args: Booking, t: Ticket) -> Self {
        TicketRef { id: t.id }
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Mail {
    pub to: String,
}

/// Sends a mail to the outside world. Irreversible: a person approves it first.
#[tool(risk = irreversible)]
pub async fn send(args: Mail, cx: &ToolCx<World>) -> Result<Value, ToolError> {
    cx.deps().sends.lock().unwrap().push(cx.idempotency_key().to_string());
    Ok(json!({ "sent": args.to }))
}

// ------------------------------------------------------------------ graphs

/// Books, then fails and compensates: `unbook` runs as the saga's undo.
#[graph(state = Trip, deps = World, start = reserve)]
pub mod saga {
    use super::*;

    #[node(goto = [confirm], tools = [book])]
    async fn reserve(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let obs = cx.run_tool(book, json!({ "what": "hotel" })).await?;
        let id = obs.body["result"]["id"].as_str().map(str::to_string);
        Ok(goto!(confirm, Trip::update().ticket(id)))
    }

    #[node(goto = [END])]
    async fn confirm(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        Err(cx.compensate("the airline cancelled the flight"))
    }
}

/// A child that charges a fee (a journaled, non-idempotent effect) and asks a model.
#[graph(state = Trip, deps = World, start = charge)]
pub mod child {
    use super::*;

    #[node(goto = [END])]
    async fn charge(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let fee = cx
            .effect("fee", |key| async move {
                cx.deps().fees.lock().unwrap().push(key.clone());
                Ok(format!("fee:{key}"))
            })
            .await?;
        let req = ChatRequest::new(vec![agentflow::message::Message::human("receipt?".to_string())]);
        let reply = cx.chat(&cx.deps().model, &req).await?;
        Ok(goto!(END, Trip::update().log(vec![fee, reply.text])))
    }
}

/// A parent whose one node runs `child` as a subgraph.
#[graph(state = Trip, deps = World, start = delegate)]
pub mod parent {
    use super::*;

    #[node(goto = [END], subgraphs = [child])]
    async fn delegate(s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let done = cx.subgraph(child::graph(), s.clone()).await?;
        Ok(goto!(END, Trip::update().log(done.log).done(true)))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Item(pub String);

/// Each map instance asks a model, then sends an irreversible mail behind an approval.
#[graph(state = Trip, deps = World, start = fan)]
pub mod mailer {
    use super::*;

    #[node(goto = [mail])]
    async fn fan(s: &Trip) -> Step<Trip> {
        goto!(each(mail, s.items.iter().cloned().map(Item).collect::<Vec<_>>()))
    }

    #[node(goto = [END], tools = [send], parallel = 2)]
    async fn mail(_s: &Trip, #[payload] item: &Item, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let req = ChatRequest::new(vec![agentflow::message::Message::human(item.0.clone())]);
        let reply = cx.chat(&cx.deps().model, &req).await?;
        let obs = cx.run_tool(send, json!({ "to": item.0 })).await?;
        Ok(goto!(END, Trip::update().log(vec![format!("{} {}", reply.text, obs.body["result"]["sent"])])))
    }
}

/// Charges a fee with a journaled effect, then asks a flaky model, with retries.
#[graph(state = Trip, deps = World, start = pay)]
pub mod retrying {
    use super::*;

    #[node(goto = [END], retry = 2)]
    async fn pay(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let fee = cx
            .effect("fee", |key| async move {
                cx.deps().fees.lock().unwrap().push(key.clone());
                Ok(format!("fee:{key}"))
            })
            .await?;
        let req = ChatRequest::new(vec![agentflow::message::Message::human("ok?".to_string())]);
        let reply = cx.chat(&cx.deps().model, &req).await?;
        Ok(goto!(END, Trip::update().log(vec![fee, reply.text])))
    }
}

/// Charges outside any journal: a raw side effect, invisible to the runtime.
#[graph(state = Trip, deps = World, start = pay)]
pub mod raw {
    use super::*;

    #[node(goto = [after])]
    async fn pay(_s: &Trip, cx: &Ctx<World>) -> Step<Trip> {
        cx.deps().raw.fetch_add(1, Ordering::SeqCst);
        goto!(after, Trip::update().log(vec!["paid".into()]))
    }

    #[node(goto = [END])]
    async fn after(_s: &Trip) -> Step<Trip> {
        goto!(END, Trip::update().done(true))
    }
}

/// Sends through an effect declared idempotent, though every run of it sends a mail.
#[graph(state = Trip, deps = World, start = notify)]
pub mod liar {
    use super::*;

    #[node(goto = [END])]
    async fn notify(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let n = cx
            .idempotent_effect("notify", |key| async move {
                cx.deps().sends.lock().unwrap().push(key.clone());
                Ok("sent".to_string())
            })
            .await?;
        Ok(goto!(END, Trip::update().log(vec![n])))
    }
}

/// Sleeps on a durable timer for an hour.
#[graph(state = Trip, deps = World, start = wait)]
pub mod sleeper {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn wait(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        cx.sleep(std::time::Duration::from_secs(3600)).await?;
        Ok(goto!(END, Trip::update().done(true)))
    }
}

/// A node that asks two questions in turn.
#[graph(state = Trip, deps = World, start = ask)]
pub mod two_asks {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let first: bool = cx.interrupt(json!({ "question": "go?" }))?;
        let second: bool = cx.interrupt(json!({ "question": "really?" }))?;
        Ok(goto!(END, Trip::update().done(first && second)))
    }
}

/// A graph that fails every time: its one node returns a fatal error.
#[graph(state = Trip, deps = World, start = broken)]
pub mod broken {
    use super::*;

    #[node(goto = [END])]
    async fn broken(_s: &Trip) -> Result<Step<Trip>, NodeError> {
        Err(NodeError::fatal("this graph is broken"))
    }
}

/// A node that charges, then decides where to go by how often it ran in this process (a
/// counter in the deps, shared by every run of the matrix): it does not run the same way twice.
#[graph(state = Trip, deps = World, start = pick)]
pub mod drifting {
    use super::*;

    #[node(goto = [END])]
    async fn pick(_s: &Trip, cx: &Ctx<World>) -> Result<Step<Trip>, NodeError> {
        let n = cx.deps().raw.fetch_add(1, Ordering::SeqCst);
        Ok(goto!(END, Trip::update().done(n == 0)))
    }
}
