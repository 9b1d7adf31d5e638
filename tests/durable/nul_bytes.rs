//! A NUL byte, which PostgreSQL `text` cannot hold, behaves the same on every store:
//!
//! - a model's tool-call id may hold one: the call runs once and its journaled result is
//!   replayed to a retry of the node, on redb and on PostgreSQL alike (the effect key escapes
//!   it);
//! - a key given to `cx.effect`, a new thread's id and its owner (run or submitted to a
//!   worker) may not: they are refused before anything runs, is written or is queued, with an
//!   error that says why, on every store;
//! - a value PostgreSQL still refuses (an approver's name) is reported as such, not as a
//!   store to reopen.

use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::message::ToolCall;
use agentflow::model::{ChatReply, ScriptedModel};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::{RedbStore, RunError, Store};
use agentflow_store::{PostgresStore, StorageError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A store of each kind: redb always, PostgreSQL when `AGENTFLOW_PG_URL` is set (skipped
/// otherwise, failed under CI).
fn stores(tag: &str) -> Vec<(&'static str, Arc<dyn Store>)> {
    let mut stores: Vec<(&'static str, Arc<dyn Store>)> = vec![("redb", Arc::new(RedbStore::in_memory().unwrap()))];
    if let Some(url) = pg::pg_url() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let schema = format!("nul_{tag}_{}_{nanos}", std::process::id());
        let store = PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store");
        stores.push(("postgres", Arc::new(store)));
    }
    stores
}

// ---------------------------------------------------------------- a model's call id

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Ticket {
    title: String,
}

static FILED: AtomicU32 = AtomicU32::new(0);

/// Files a ticket.
#[tool(risk = reversible)]
async fn file_ticket(args: Ticket) -> Result<Value, ToolError> {
    let n = FILED.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(json!({ "filed": args.title, "ticket": n }))
}

static OPENED: AtomicU32 = AtomicU32::new(0);

/// Opens an incident.
#[tool(risk = reversible)]
async fn open_incident(args: Ticket) -> Result<Value, ToolError> {
    OPENED.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "opened": args.title }))
}

agentflow::react_agent!(mod responder, tools = [open_incident], max_steps = 8);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Log {
    #[reduce(append)]
    log: Vec<String>,
}

/// How many times `file` ran; it fails (transiently) the first time, after its call.
static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

#[graph(state = Log, deps = (), start = file)]
mod retried {
    use super::*;

    #[node(goto = [END], tools = [file_ticket], retry = 2)]
    async fn file(_s: &Log, cx: &Ctx<()>) -> Result<Step<Log>, NodeError> {
        let call = ToolCall::new("call\0a", "file_ticket", json!({ "title": "disk\0full" }));
        let observation = cx.call_tool(&call).await?;
        if ATTEMPTS.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            return Err(NodeError::transient("the node fails after its call; the retry replays it"));
        }
        assert_eq!(observation.call_id, "call\0a");
        Ok(goto!(END, Log::update().log(vec![observation.body["result"].to_string()])))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_id_with_a_nul_byte_runs_once_and_replays_on_every_store() {
    for (kind, store) in stores("call") {
        let filed = FILED.load(Ordering::SeqCst);
        let app = retried::graph().app().store(store);
        let run = app.runner(&()).thread(format!("retried-{kind}")).run(Log::default()).await.unwrap();
        assert_eq!(run.outcome, Outcome::Completed, "{kind}");
        assert_eq!(FILED.load(Ordering::SeqCst), filed + 1, "{kind}: the retry filed the ticket again");
        let body: Value = serde_json::from_str(&run.state.log[0]).unwrap();
        assert_eq!(body["filed"], "disk\0full", "{kind}");
        assert_eq!(body["ticket"], filed + 1, "{kind}: the retry did not get the journaled result");
        let stored = app.state(&format!("retried-{kind}")).unwrap().unwrap();
        assert_eq!(stored.state, run.state, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_react_agent_takes_a_call_id_with_a_nul_byte_on_every_store() {
    for (kind, store) in stores("react") {
        let opened = OPENED.load(Ordering::SeqCst);
        let app = responder::graph().app().store(store);
        let mut reply = ChatReply::text("");
        reply.tool_calls = vec![ToolCall::new("call\0one", "open_incident", json!({ "title": "x" }))];
        let model = ScriptedModel::new().reply(reply).reply_text("filed");
        let deps = ReactDeps::new(Arc::new(model));
        let thread = format!("react-{kind}");
        let run = app.runner(&deps).thread(&thread).run(ReactState::ask("file it")).await.unwrap();
        assert_eq!(run.outcome, Outcome::Completed, "{kind}");
        assert_eq!(OPENED.load(Ordering::SeqCst), opened + 1, "{kind}");
        let answer = run.state.messages.iter().find(|m| m.tool_call_id.as_deref() == Some("call\0one"));
        assert!(answer.is_some(), "{kind}: the tool result lost its call id: {:?}", run.state.messages);
        assert_eq!(app.state(&thread).unwrap().unwrap().state, run.state, "{kind}");
    }
}

/// The same call id where a circuit breaker guards the tool and its cool-down is over: the
/// call takes the probe (its holder, kept in a text column, escapes the NUL), runs once and
/// closes the breaker, on every store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_id_with_a_nul_byte_takes_a_circuit_breakers_probe_on_every_store() {
    use agentflow::breaker::Breaker;
    use agentflow_store::{BreakerOp, BreakerRule, BreakerState, BreakerUpdate};
    for (kind, store) in stores("probe") {
        let opened = OPENED.load(Ordering::SeqCst);
        let app = responder::graph()
            .app()
            .store(Arc::clone(&store))
            .circuit_breaker("open_incident", Breaker::after(1).cool_down(std::time::Duration::from_millis(1)))
            .unwrap();
        // Opened by a failure a moment ago; its cool-down of 1 ms is over by the call.
        let now = agentflow::timer::now_ms();
        let failed = BreakerUpdate::new(
            "open_incident",
            BreakerOp::Failed,
            "earlier",
            BreakerRule::new(1, 1, 60_000),
            now,
            "other",
            "executor:x",
        );
        store.update_breaker(failed).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut reply = ChatReply::text("");
        reply.tool_calls = vec![ToolCall::new("probe\0call", "open_incident", json!({ "title": "x" }))];
        let model = ScriptedModel::new().reply(reply).reply_text("filed");
        let deps = ReactDeps::new(Arc::new(model));
        let run = app.runner(&deps).thread(format!("probe-{kind}")).run(ReactState::ask("file it")).await.unwrap();
        assert_eq!(run.outcome, Outcome::Completed, "{kind}");
        assert_eq!(OPENED.load(Ordering::SeqCst), opened + 1, "{kind}");
        assert_eq!(store.breaker("open_incident").unwrap().unwrap().state, BreakerState::Closed, "{kind}");
    }
}

// ---------------------------------------------------------------- what is refused alike

#[graph(state = Log, deps = String, start = act)]
mod keyed {
    use super::*;

    #[node(goto = [END])]
    async fn act(_s: &Log, cx: &Ctx<String>) -> Result<Step<Log>, NodeError> {
        let key = cx.deps().clone();
        let done = cx.effect(&key, |_| async { Ok::<_, NodeError>(key.clone()) }).await?;
        Ok(goto!(END, Log::update().log(vec![done])))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_key_with_a_nul_byte_is_refused_on_every_store_and_the_effect_never_runs() {
    for (kind, store) in stores("effect") {
        let app = keyed::graph().app().store(store);
        let run = app.runner(&"pay\0ment".to_string()).thread(format!("effect-{kind}")).run(Log::default()).await;
        let run = run.unwrap();
        let Outcome::Failed { node, error } = &run.outcome else { panic!("{kind}: {:?}", run.outcome) };
        assert_eq!(node, "act");
        assert_eq!(error.class, agentflow::ErrorClass::Fatal, "{kind}: {error}");
        assert!(error.to_string().contains("contains a NUL byte"), "{kind}: {error}");
        assert!(run.state.log.is_empty(), "{kind}");
    }
}

/// The unit separator (U+001F) is the journal's own: a key holding it could name another
/// effect's marker. Refused the same way, the effect not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_key_with_the_journals_separator_is_refused_and_the_effect_never_runs() {
    for (kind, store) in stores("separator") {
        let app = keyed::graph().app().store(Arc::clone(&store));
        let key = "pay\u{1f}started\u{1f}1".to_string();
        let run = app.runner(&key).thread(format!("separator-{kind}")).run(Log::default()).await.unwrap();
        let Outcome::Failed { error, .. } = &run.outcome else { panic!("{kind}: {:?}", run.outcome) };
        assert_eq!(error.class, agentflow::ErrorClass::Fatal, "{kind}: {error}");
        assert!(error.to_string().contains("U+001F"), "{kind}: {error}");
        assert!(run.state.log.is_empty(), "{kind}");
        let journal = store.thread_effects(&format!("separator-{kind}")).unwrap();
        assert!(journal.is_empty(), "{kind}: {journal:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_id_or_owner_with_a_nul_byte_is_refused_on_every_store_before_anything_is_written() {
    for (kind, store) in stores("thread") {
        let app = keyed::graph().app().store(Arc::clone(&store));
        let key = "k".to_string();
        let err = app.runner(&key).thread("a\0b").run(Log::default()).await.unwrap_err();
        assert!(matches!(err, RunError::NulByte { what: "thread id", .. }), "{kind}: {err:?}");
        assert!(err.to_string().contains("contains a NUL byte"), "{err}");
        let err = app.runner(&key).thread(format!("owned-{kind}")).owner("o\0wner").run(Log::default()).await;
        let err = err.unwrap_err();
        assert!(matches!(err, RunError::NulByte { what: "owner", .. }), "{kind}: {err:?}");
        let err = app.submit("a\0b", &Log::default()).unwrap_err();
        assert!(matches!(err, agentflow::WorkerError::NulByte { what: "thread id", .. }), "{kind}: {err:?}");
        let err = app.submit_as(&format!("queued-{kind}"), &Log::default(), "o\0wner").unwrap_err();
        assert!(matches!(err, agentflow::WorkerError::NulByte { what: "owner", .. }), "{kind}: {err:?}");
        assert!(store.list_threads().unwrap().is_empty(), "{kind}: a refused thread was written");
        assert!(store.list_runs().unwrap().is_empty(), "{kind}: a refused run was queued");
    }
}

#[test]
fn postgres_names_a_nul_byte_it_cannot_hold_instead_of_asking_to_reopen_the_store() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("nul_lease_{}", std::process::id());
    let store = PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store");
    let err = store.acquire_lease("a\0b", "me", 60_000, 1).unwrap_err();
    let agentflow_store::LeaseError::Storage(storage) = &err else { panic!("{err:?}") };
    assert!(matches!(storage, StorageError::Unstorable { .. }), "{storage:?}");
    let message = err.to_string();
    assert!(message.contains("remove the NUL byte") && !message.contains("reopen"), "{message}");
}
