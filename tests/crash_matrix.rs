//! The crash matrix (`agentflow::testing`, feature `testing`): every durable boundary of a
//! run, cut before and after.
//!
//! - A graph with a map whose instances ask a model, a journaled effect, a durable timer, a
//!   question for a person and an irreversible tool call behind an approval survives every
//!   cut.
//! - Planted defects are caught, each by its check: a store that drops per-instance writes
//!   (the model-reply check), a store that keeps no effect journal (the ledger), a store that
//!   leaves a finished thread `running`.
//! - A sample of cuts made by killing a child process (SIGKILL) on a redb file, and on
//!   PostgreSQL, agrees with the in-memory matrix.
//! - Every example graph survives every cut (`crash_matrix/examples.rs`), and so do calls of an
//!   MCP server's tools (`crash_matrix/mcp.rs`).
//! - Probes of the matrix itself: compensations, subgraphs, retries, determinism, misuse
//!   (`crash_matrix/probes.rs`).
//! - A thread parked on one version of its graph and resumed on the next moves to it wholly or
//!   not at all at every cut (`crash_matrix/upgrade.rs`).

#[path = "crash_matrix/defects.rs"]
mod defects;
#[path = "crash_matrix/examples.rs"]
mod examples;
#[path = "crash_matrix/mcp.rs"]
mod mcp;
#[path = "support/pg.rs"]
mod pg;
#[path = "crash_matrix/probes.rs"]
mod probes;
#[path = "support/stores.rs"]
mod stores;
#[path = "crash_matrix/upgrade.rs"]
mod upgrade;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agentflow::Store;
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel};
use agentflow::prelude::*;
use agentflow::testing::{Answers, BoundaryKind, Check, CrashMatrix, CrashMatrixError, Ending};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stores::open_redb;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Vendor {
    documents: Vec<String>,
    #[reduce(append)]
    notes: Vec<String>,
    receipt: Option<String>,
    confirmed: bool,
    activation: Option<Value>,
}

/// One document to review: a map instance's payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document(String);

pub struct Services {
    pub model: ScriptedModel,
    /// Every charge made, by idempotency key.
    pub charges: Mutex<Vec<String>>,
    pub activations: AtomicU32,
}

impl Default for Services {
    fn default() -> Self {
        // Answers by what it is asked, so any number of calls gets a reply.
        let model = ScriptedModel::new().respond_with(|req: &ChatRequest| {
            let asked = req.messages.last().map(|m| m.content.clone()).unwrap_or_default();
            Ok(ChatReply::text(format!("reviewed: {asked}")))
        });
        Services { model, charges: Mutex::default(), activations: AtomicU32::new(0) }
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Activation {
    vendor: String,
}

/// Activates the vendor's account. Irreversible: a person approves it first.
#[tool(risk = irreversible)]
async fn activate(args: Activation, cx: &ToolCx) -> Result<Value, ToolError> {
    Ok(json!({ "active": args.vendor, "key": cx.idempotency_key() }))
}

#[graph(state = Vendor, deps = Services, start = plan)]
mod onboarding {
    use super::*;

    #[node(goto = [review])]
    async fn plan(s: &Vendor) -> Step<Vendor> {
        goto!(each(review, s.documents.iter().cloned().map(Document).collect::<Vec<_>>()))
    }

    #[node(goto = [pay], parallel = 2)]
    async fn review(_s: &Vendor, #[payload] doc: &Document, cx: &Ctx<Services>) -> Result<Step<Vendor>, NodeError> {
        let req = ChatRequest::new(vec![agentflow::message::Message::human(doc.0.clone())]);
        let reply = cx.chat(&cx.deps().model, &req).await?;
        Ok(goto!(pay, Vendor::update().notes(vec![reply.text])))
    }

    #[node(goto = [cooling_off])]
    async fn pay(_s: &Vendor, cx: &Ctx<Services>) -> Result<Step<Vendor>, NodeError> {
        let receipt = cx
            .effect("setup-fee", |key| async move {
                cx.deps().charges.lock().unwrap().push(key.clone());
                Ok(format!("charged:{key}"))
            })
            .await?;
        Ok(goto!(cooling_off, Vendor::update().receipt(Some(receipt))))
    }

    /// A durable timer: the run ends `Sleeping` and is resumed when it is due.
    #[node(goto = [confirm], sleep)]
    async fn cooling_off(_s: &Vendor, cx: &Ctx<Services>) -> Result<Step<Vendor>, NodeError> {
        cx.sleep(std::time::Duration::from_millis(20)).await?;
        Ok(goto!(confirm))
    }

    #[node(goto = [activate_account], interrupt)]
    async fn confirm(_s: &Vendor, cx: &Ctx<Services>) -> Result<Step<Vendor>, NodeError> {
        let yes: bool = cx.interrupt(json!({ "question": "activate the vendor?" }))?;
        Ok(goto!(activate_account, Vendor::update().confirmed(yes)))
    }

    #[node(goto = [END], tools = [activate])]
    async fn activate_account(s: &Vendor, cx: &Ctx<Services>) -> Result<Step<Vendor>, NodeError> {
        if !s.confirmed {
            return Ok(goto!(END));
        }
        cx.deps().activations.fetch_add(1, Ordering::SeqCst);
        let obs = cx.run_tool(activate, json!({ "vendor": "acme" })).await?;
        Ok(goto!(END, Vendor::update().activation(Some(obs.body))))
    }
}

pub fn input() -> Vendor {
    Vendor { documents: vec!["w9.pdf".into(), "bank.pdf".into(), "iso.pdf".into()], ..Vendor::default() }
}

pub fn answers() -> Answers {
    Answers::new().interrupt("confirm", true)
}

#[test]
fn a_graph_survives_every_cut() {
    let deps = Services::default();
    let mut matrix = CrashMatrix::new(onboarding::graph().app(), &deps).input(input()).answers(answers());
    if let Ok(only) = std::env::var("ONLY") {
        matrix = matrix.only(only);
    }
    let report = matrix.run().unwrap();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    let Ending::Finished { outcome, state } = &report.reference else { panic!("{:?}", report.reference) };
    assert_eq!(outcome, "completed");
    assert_eq!(state["notes"].as_array().unwrap().len(), 3);
    assert_eq!(state["activation"]["result"]["active"], "acme", "{state}");
    // Every kind the graph writes was cut.
    let kinds: std::collections::BTreeSet<BoundaryKind> = report.boundaries.iter().map(|b| b.kind).collect();
    for kind in [
        BoundaryKind::Step,
        BoundaryKind::Timer,
        BoundaryKind::Write,
        BoundaryKind::EffectStarted,
        BoundaryKind::EffectResult,
        BoundaryKind::ApprovalMoved,
        BoundaryKind::Audit,
    ] {
        assert!(kinds.contains(&kind), "no {kind:?} boundary in {:#?}", report.boundaries);
    }
    // Each of the three instances' writes is a boundary of its own or shares one.
    let writes: usize = report.boundaries.iter().flat_map(|b| &b.items).filter(|i| i.starts_with("write ")).count();
    assert_eq!(writes, 3, "{:#?}", report.boundaries);
    assert!(report.trials.iter().all(|t| t.reached), "{report}");
    // A process that dies between keeping a pause's questions and recording the thread as
    // `interrupted` leaves a thread that is answered and runs to its end like the others.
    let pause = report
        .trials
        .iter()
        .find(|t| {
            t.boundary.starts_with("timer crash-matrix interrupted")
                || t.boundary.starts_with("status crash-matrix interrupted")
        })
        .unwrap();
    assert_eq!(pause.ending.as_ref(), Some(&report.reference), "{pause:?}");
    // A cut between the fee's *started* marker and its result leaves the charge unknown: the
    // thread waits for a person, who is told why.
    let started = report.boundaries.iter().find(|b| b.key.contains("setup-fee started")).unwrap();
    let waits = report.trials.iter().find(|t| t.boundary == started.key && t.cut == agentflow::testing::Cut::After);
    assert!(
        matches!(waits.and_then(|t| t.ending.as_ref()), Some(Ending::WaitsForHuman { reason }) if reason.contains("setup-fee")),
        "{waits:?}"
    );
}

#[test]
fn the_matrix_refuses_to_run_inside_a_runtime() {
    let deps = Services::default();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let err = rt.block_on(async {
        CrashMatrix::new(onboarding::graph().app(), &deps).input(input()).answers(answers()).run().unwrap_err()
    });
    assert!(matches!(err, CrashMatrixError::InsideRuntime), "{err}");
    let err = CrashMatrix::new(onboarding::graph().app(), &deps).answers(answers()).run().unwrap_err();
    assert!(matches!(err, CrashMatrixError::NoInput), "{err}");
}

#[test]
fn an_unanswered_question_is_an_error_of_the_uncut_run() {
    let deps = Services::default();
    let err = CrashMatrix::new(onboarding::graph().app(), &deps).input(input()).run().unwrap_err();
    let CrashMatrixError::Reference(Ending::Error { error }) = &err else { panic!("{err}") };
    assert!(error.contains("Answers::interrupt(\"confirm\""), "{error}");
}

/// A kill sample of the onboarding graph on the stores `open` opens: each of its 10 cuts is
/// reached and agrees with the in-memory matrix.
fn kills_agree(test: &str, open: impl Fn(&str) -> Result<Arc<dyn Store>, String>) {
    let deps = Services::default();
    let kills = CrashMatrix::new(onboarding::graph().app(), &deps)
        .input(input())
        .answers(answers())
        .kill_sample(test, 10, open);
    let kills = kills.unwrap();
    println!("{kills}");
    assert!(kills.trials.len() >= 8, "{kills}");
    assert!(kills.trials.iter().all(|t| t.reached), "{kills}");
    assert_eq!(kills.failures().count(), 0, "{kills}");
}

#[test]
fn killed_processes_agree_with_the_matrix_on_redb() {
    let dir = std::env::temp_dir().join("agentflow-kill-samples");
    std::fs::create_dir_all(&dir).unwrap();
    kills_agree("killed_processes_agree_with_the_matrix_on_redb", |name| {
        Ok(Arc::new(open_redb(dir.join(format!("{name}.redb"))).map_err(|e| e.to_string())?))
    });
}

#[test]
fn killed_processes_agree_with_the_matrix_on_postgres() {
    let Some(url) = pg::pg_url() else { return };
    kills_agree("killed_processes_agree_with_the_matrix_on_postgres", |name| {
        let store = agentflow_store::PostgresStore::builder().schema(name).open(&url).map_err(|e| e.to_string())?;
        Ok(Arc::new(store))
    });
}

#[test]
fn planted_defects_are_caught_each_by_its_check() {
    let deps = Services::default();
    let matrix = || CrashMatrix::new(onboarding::graph().app(), &deps).input(input()).answers(answers());

    let report = matrix().store(|| defects::wrap(defects::Defect::DropsInstanceWrites)).run().unwrap();
    assert!(report.violations_of(Check::ModelReplyConsumedTwice).count() > 0, "{report}");
    assert_eq!(report.violations_of(Check::EffectRanTwice).count(), 0, "{report}");

    let report = matrix().store(|| defects::wrap(defects::Defect::KeepsNoJournal)).run().unwrap();
    assert!(report.violations_of(Check::EffectRanTwice).count() > 0, "{report}");

    let report = matrix().store(|| defects::wrap(defects::Defect::LeavesRunning)).run().unwrap();
    assert!(report.violations_of(Check::LeftRunning).count() > 0, "{report}");
    assert_eq!(report.violations_of(Check::EffectRanTwice).count(), 0, "{report}");
}
