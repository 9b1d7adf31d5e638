//! Whatever a run writes to the store reads back as it was written, or the
//! write is refused with an error naming the value:
//!
//! - computed floats survive a pause and a resume bit for bit, so an approved
//!   refund of `total * 0.15` runs with the approved amount (serde_json reads
//!   floats exactly: its `float_roundtrip` feature);
//! - NaN and infinities are refused at commit, naming the field, instead of
//!   being stored as `null` and read back changed;
//! - JSON nested deeper than the store reads back is refused at write: tool
//!   arguments, approval conditions, audit details, states.

use crate::support::pg;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, DecisionError, RoleAuthorizer};
use agentflow::message::Role;
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel};
use agentflow::persist::{HistoryError, MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, PersistError, ValueError};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::{Code, Risk};
use agentflow::{PendingKind, RedbStore, Run, RunError, Store};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- computed floats through an approval

/// Every refund that ran: (order, amount).
static REFUNDS: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

#[derive(Deserialize, schemars::JsonSchema)]
pub struct FloatRefund {
    order_id: String,
    amount: f64,
}

/// Refunds a computed amount. Irreversible.
#[tool(risk = irreversible)]
async fn refund_share(args: FloatRefund) -> Result<Value, ToolError> {
    REFUNDS.lock().unwrap().push((args.order_id.clone(), args.amount));
    Ok(json!({ "refunded": args.amount }))
}

agentflow::react_agent!(mod share_refunds, tools = [refund_share], max_steps = 8);

const ROLE: &str = "refund-approver";

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE)
}

fn done(_req: &ChatRequest) -> Result<ChatReply, agentflow::model::ModelError> {
    Ok(ChatReply::text("done"))
}

fn approval_of<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

fn last_observation(state: &ReactState) -> Value {
    let m = state.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a tool result");
    serde_json::from_str(&m.content).unwrap()
}

/// Prices in cents from 1.00 to 100.00 whose 15% share has no short decimal
/// form (`1.50 * 0.15 == 0.22499999999999998`): before the fix, a fifth of
/// them read back rounded and their approval was refused as tampered.
fn awkward_shares() -> Vec<f64> {
    let mut shares = vec![1.5 * 0.15];
    shares.extend(
        (100..=10_000u32)
            .map(|cents| f64::from(cents) / 100.0 * 0.15)
            .filter(|share| share.to_string().len() > 12)
            .step_by(37),
    );
    shares
}

#[tokio::test]
async fn computed_refund_amounts_run_exactly_as_approved() {
    let shares = awkward_shares();
    assert!(shares.len() >= 40, "{} cases", shares.len());
    assert!(shares.contains(&0.224_999_999_999_999_98), "the reported case is among them");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = share_refunds::graph().app().store(store);
    let desk = graph.approvals(authorizer()).unwrap();
    for (i, &share) in shares.iter().enumerate() {
        let order = format!("F-{i}");
        let model = ScriptedModel::new()
            .reply_tool_call("refund_share", json!({ "order_id": order, "amount": share }))
            .respond_with(done);
        let deps = ReactDeps::new(Arc::new(model));
        let run = graph.runner(&deps).thread(&order).owner("bot").run(ReactState::ask("refund")).await.unwrap();
        let id = approval_of(&run);
        desk.approve(&id, &alice()).unwrap();
        let resumed = graph.runner(&deps).thread(&order).resume().await.unwrap();
        assert_eq!(resumed.outcome, Outcome::Completed, "{order}: share {share:?}");
        let observation = last_observation(&resumed.state);
        assert_eq!(observation["ok"], json!(true), "{order}: share {share:?}: {observation}");
        let ran: Vec<f64> = REFUNDS.lock().unwrap().iter().filter(|(o, _)| *o == order).map(|(_, a)| *a).collect();
        assert_eq!(ran.len(), 1, "{order}");
        assert_eq!(ran[0].to_bits(), share.to_bits(), "{order}: approved {share:?}, refunded {:?}", ran[0]);
        assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded, "{order}");
    }
}

#[test]
fn floats_read_back_bit_for_bit() {
    for text in ["0.22499999999999998", "2.9999999999999996", "1e-7", "123456.78901234567"] {
        let x: f64 = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&x).unwrap(), text, "{text}");
    }
}

// ---------------------------------------------------------------- non-finite floats

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Quotes {
    #[reduce(append)]
    prices: Vec<f64>,
    best: Option<f64>,
    tree: Value,
}

/// What the nodes write, and how often the effect ran.
#[derive(Default)]
pub struct Feed {
    price: f64,
    best: Option<f64>,
    tree: Value,
    effect_value: f64,
    effects: AtomicU32,
}

#[graph(state = Quotes, deps = Feed, start = quote, max_steps = 10)]
mod quoting {
    use super::*;

    #[node(goto = [END])]
    async fn quote(_s: &Quotes, feed: &Feed) -> Step<Quotes> {
        goto!(END, Quotes::update().prices(vec![1.0, 2.0, feed.price]).best(feed.best).tree(feed.tree.clone()))
    }
}

#[derive(Serialize)]
pub struct Offer {
    offer: f64,
}

#[graph(state = Quotes, deps = Feed, start = ask, max_steps = 10)]
mod asking {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Quotes, cx: &Ctx<Feed>) -> Result<Step<Quotes>, NodeError> {
        // A typed payload: `json!` would already have turned a NaN into null.
        let price: f64 = cx.interrupt(Offer { offer: cx.deps().price })?;
        Ok(goto!(END, Quotes::update().prices(vec![price])))
    }
}

#[graph(state = Quotes, deps = Feed, start = fetch_tree, max_steps = 10)]
mod fetching_trees {
    use super::*;

    #[node(goto = [END])]
    async fn fetch_tree(_s: &Quotes, cx: &Ctx<Feed>) -> Result<Step<Quotes>, NodeError> {
        let tree: Value = cx
            .effect("fetch", |_key| async move {
                cx.deps().effects.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>(cx.deps().tree.clone())
            })
            .await?;
        Ok(goto!(END, Quotes::update().tree(tree)))
    }
}

#[graph(state = Quotes, deps = Feed, start = fetch, max_steps = 10)]
mod fetching {
    use super::*;

    #[node(goto = [END])]
    async fn fetch(_s: &Quotes, cx: &Ctx<Feed>) -> Result<Step<Quotes>, NodeError> {
        let price: f64 = cx
            .effect("fetch", |_key| async move {
                cx.deps().effects.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>(cx.deps().effect_value)
            })
            .await?;
        Ok(goto!(END, Quotes::update().prices(vec![price])))
    }
}

fn memory() -> Arc<dyn Store> {
    Arc::new(RedbStore::in_memory().unwrap())
}

fn feed(price: f64) -> Feed {
    Feed { price, ..Feed::default() }
}

/// The refusal inside a run error.
fn refused(err: RunError) -> (&'static str, ValueError) {
    match err {
        RunError::Persist(PersistError::Value { what, source }) => (what, source),
        other => panic!("expected a refused value, got {other:?}"),
    }
}

fn not_finite(e: ValueError) -> (String, &'static str) {
    match e {
        ValueError::NotFinite { path, value } => (path, value),
        other => panic!("expected a non-finite float, got {other:?}"),
    }
}

#[tokio::test]
async fn nan_in_an_update_is_refused_naming_the_field_and_the_thread_stays_readable() {
    let graph = quoting::graph().app().store(memory());
    let deps = feed(f64::NAN);
    let err = graph.runner(&deps).thread("nan").run(Quotes::default()).await.unwrap_err();
    let message = err.to_string();
    let (what, source) = refused(err);
    assert_eq!(what, "an update");
    assert_eq!(not_finite(source), ("update.prices[2]".to_string(), "NaN"));
    assert!(message.contains("`update.prices[2]` is NaN"), "{message}");
    // Nothing changed was stored: the thread reads back as it was, and a
    // resume with a finite price completes.
    assert_eq!(graph.state("nan").unwrap().unwrap().state, Quotes::default());
    let done = graph.runner(&feed(3.0)).thread("nan").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(graph.state("nan").unwrap().unwrap().state.prices, vec![1.0, 2.0, 3.0]);
}

#[tokio::test]
async fn an_infinite_option_is_refused_rather_than_read_back_as_none() {
    let graph = quoting::graph().app().store(memory());
    for (best, value) in [(f64::INFINITY, "inf"), (f64::NEG_INFINITY, "-inf")] {
        let deps = Feed { price: 1.0, best: Some(best), ..Feed::default() };
        let thread = format!("inf-{value}");
        let (_, source) = refused(graph.runner(&deps).thread(&thread).run(Quotes::default()).await.unwrap_err());
        assert_eq!(not_finite(source), ("update.best".to_string(), value));
    }
}

#[tokio::test]
async fn nan_in_the_input_state_is_refused_before_the_thread_exists() {
    let graph = quoting::graph().app().store(memory());
    let input = Quotes { prices: vec![1.0, 2.0, 3.0, f64::NAN], ..Quotes::default() };
    let (what, source) = refused(graph.runner(&feed(1.0)).thread("input").run(input).await.unwrap_err());
    assert_eq!(what, "the input state");
    assert_eq!(not_finite(source), ("state.prices[3]".to_string(), "NaN"));
    assert!(graph.thread("input").unwrap().is_none());
}

#[tokio::test]
async fn update_state_refuses_nan() {
    let graph = quoting::graph().app().store(memory());
    graph.runner(&feed(1.0)).thread("manual").run(Quotes::default()).await.unwrap();
    let err = graph.update_state("manual", Quotes::update().prices(vec![f64::NAN]), "operator").unwrap_err();
    match err {
        HistoryError::Persist(PersistError::Value { source, .. }) => {
            assert_eq!(not_finite(source).0, "update.prices[0]");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(graph.history("manual").unwrap().len(), 2, "nothing was appended");
    assert!(graph.audit_log("manual").unwrap().iter().all(|e| e.kind != "state.updated"));
}

#[tokio::test]
async fn interrupt_payloads_and_resume_values_must_be_finite() {
    let graph = asking::graph().app().store(memory());
    let run = graph.runner(&feed(f64::NAN)).thread("ask-nan").run(Quotes::default()).await.unwrap();
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert!(error.to_string().contains("`payload.offer` is NaN"), "{error}");

    let run = graph.runner(&feed(1.0)).thread("ask").run(Quotes::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let (what, source) = refused(graph.runner(&feed(1.0)).thread("ask").resume_with(f64::NAN).await.unwrap_err());
    assert_eq!((what, not_finite(source)), ("the resume value", ("resume".to_string(), "NaN")));
    // Still waiting: a finite value continues it.
    let done = graph.runner(&feed(1.0)).thread("ask").resume_with(2.5).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.prices, vec![2.5]);
}

#[tokio::test]
async fn an_effect_with_a_nan_result_fails_and_never_runs_again() {
    let graph = fetching::graph().app().store(memory());
    let deps = Feed { effect_value: f64::NAN, ..Feed::default() };
    for attempt in 0..2 {
        let run = if attempt == 0 {
            graph.runner(&deps).thread("fx").run(Quotes::default()).await.unwrap()
        } else {
            graph.runner(&deps).thread("fx").resume().await.unwrap()
        };
        let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
        let message = error.to_string();
        assert!(message.contains("`result` is NaN") && message.contains("will not run again"), "{message}");
    }
    assert_eq!(deps.effects.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_effect_with_a_result_too_deep_to_read_back_fails_and_never_runs_again() {
    let graph = fetching_trees::graph().app().store(memory());
    let deps = Feed { tree: nested_value(MAX_DOCUMENT_DEPTH + 1), ..Feed::default() };
    for attempt in 0..2 {
        let run = if attempt == 0 {
            graph.runner(&deps).thread("fx-deep").run(Quotes::default()).await.unwrap()
        } else {
            graph.runner(&deps).thread("fx-deep").resume().await.unwrap()
        };
        let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
        let message = error.to_string();
        assert!(message.contains("nests deeper") && message.contains("will not run again"), "{message}");
    }
    assert_eq!(deps.effects.load(Ordering::SeqCst), 1);
}

fn nested_value(depth: usize) -> Value {
    (0..depth).fold(json!(0), |inner, _| json!([inner]))
}

// ---------------------------------------------------------------- nesting depth

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!("leaf"), |inner, _| json!([inner]))
}

#[tokio::test]
async fn a_state_nested_deeper_than_the_store_reads_is_refused() {
    let graph = quoting::graph().app().store(memory());
    let deps = Feed { price: 1.0, tree: nested(MAX_DOCUMENT_DEPTH), ..Feed::default() };
    let (_, source) = refused(graph.runner(&deps).thread("deep").run(Quotes::default()).await.unwrap_err());
    assert!(
        matches!(&source, ValueError::TooDeep { path, limit: MAX_DOCUMENT_DEPTH } if path.starts_with("update.tree[0][0]")),
        "{source}"
    );
    assert_eq!(graph.state("deep").unwrap().unwrap().state, Quotes::default());
    // Within the limit, it is stored and reads back.
    let deps = Feed { price: 1.0, tree: nested(MAX_DOCUMENT_DEPTH - 2), ..Feed::default() };
    graph.runner(&deps).thread("fits").run(Quotes::default()).await.unwrap();
    assert_eq!(graph.state("fits").unwrap().unwrap().state.tree, nested(MAX_DOCUMENT_DEPTH - 2));
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Blob {
    data: Value,
}

/// Files a blob. Read-only for the test's purpose.
#[tool(risk = read)]
async fn file_blob(args: Blob) -> Result<Value, ToolError> {
    Ok(json!({ "filed": args.data.is_array() }))
}

agentflow::react_agent!(mod filer, tools = [file_blob], max_steps = 8);

fn blob_bot(depth: usize) -> ReactDeps {
    let model = ScriptedModel::new().reply_tool_call("file_blob", json!({ "data": nested(depth) })).respond_with(done);
    ReactDeps::new(Arc::new(model))
}

#[tokio::test]
async fn tool_arguments_deeper_than_the_limit_get_an_invalid_argument_observation() {
    let graph = filer::graph().app().store(memory());
    let run = graph.runner(&blob_bot(MAX_JSON_DEPTH + 6)).thread("args").run(ReactState::ask("file it")).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let observation = last_observation(&run.state);
    assert_eq!(observation["code"], json!(serde_json::to_value(Code::InvalidArgument).unwrap()), "{observation}");
    let detail = observation["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("nests deeper than {MAX_JSON_DEPTH} levels")), "{detail}");
    assert_eq!(graph.state("args").unwrap().unwrap().state, run.state);
    // At the limit, the call runs.
    let run = graph.runner(&blob_bot(MAX_JSON_DEPTH - 1)).thread("ok").run(ReactState::ask("file it")).await.unwrap();
    assert_eq!(last_observation(&run.state)["ok"], json!(true));
}

#[tokio::test]
async fn a_models_125_deep_arguments_never_make_the_thread_unreadable() {
    let graph = filer::graph().app().store(memory());
    let run = graph.runner(&blob_bot(125)).thread("react").run(ReactState::ask("file it")).await.unwrap();
    // The reply is stored with its arguments cut one level past the limit, and the call gets
    // the same observation as any too-deep arguments; the run goes on.
    assert_eq!(run.outcome, Outcome::Completed);
    let observation = last_observation(&run.state);
    assert_eq!(observation["code"], json!(serde_json::to_value(Code::InvalidArgument).unwrap()), "{observation}");
    assert!(observation["detail"].as_str().unwrap().contains(&format!("nests deeper than {MAX_JSON_DEPTH} levels")));
    // Everything stored reads back.
    assert_eq!(graph.state("react").unwrap().unwrap().state, run.state);
    graph.audit_log("react").unwrap();
}

#[tokio::test]
async fn deep_approval_conditions_are_refused_and_the_audit_log_stays_readable() {
    deep_approval_conditions(memory(), "D-1").await;
}

/// The same on PostgreSQL (`AGENTFLOW_PG_URL`; skipped when unset), whose
/// reader refuses what the redb one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_approval_conditions_are_refused_and_the_audit_log_stays_readable_on_postgres() {
    let Some(url) = pg::pg_url() else { return };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let schema = format!("values_{}_{nanos}", std::process::id());
    let store = PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store");
    deep_approval_conditions(Arc::new(store), "D-1-pg").await;
}

async fn deep_approval_conditions(store: Arc<dyn Store>, order: &str) {
    let graph = share_refunds::graph().app().store(store);
    let desk = graph.approvals(authorizer()).unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("refund_share", json!({ "order_id": order, "amount": 12.5 }))
        .respond_with(done);
    let deps = ReactDeps::new(Arc::new(model));
    let run = graph.runner(&deps).thread(order).owner("bot").run(ReactState::ask("refund")).await.unwrap();
    let id = approval_of(&run);
    let err = desk.approve_with_conditions(&id, &alice(), json!({ "rules": nested(126) })).unwrap_err();
    assert!(matches!(err, DecisionError::Transition(_)), "{err:?}");
    assert!(err.to_string().contains("conditions.rules[0]"), "{err}");
    assert!(err.to_string().contains(&format!("nests deeper than {MAX_JSON_DEPTH} levels")), "{err}");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending);
    graph.audit_log(order).unwrap();
    // Conditions within the limit are kept and reach the model.
    let conditions = json!({ "rules": nested(MAX_JSON_DEPTH - 2) });
    desk.approve_with_conditions(&id, &alice(), conditions.clone()).unwrap();
    let done = graph.runner(&deps).thread(order).resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["conditions"], conditions);
    assert!(graph.audit_log(order).unwrap().iter().any(|e| e.kind == "approval.succeeded"));
}
