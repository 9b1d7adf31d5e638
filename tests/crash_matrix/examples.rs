//! Every example graph, through the crash matrix.
//!
//! Each test builds the graph, deps and input as the example's `main` does (the same scripted
//! models, the same people deciding), so the uncut run is the example's scenario; then every
//! durable boundary of it is cut before and after, and the resumed run must end as the uncut
//! one did. Examples whose `main` needs a file, an HTTP server or PostgreSQL run their graph on
//! the matrix's in-memory stores.

#[path = "../../examples/approval_inbox.rs"]
#[allow(dead_code)]
mod approval_inbox;
#[path = "../../examples/arithmetic.rs"]
#[allow(dead_code)]
mod arithmetic;
#[path = "../../examples/delegation.rs"]
#[allow(dead_code)]
mod delegation;
#[path = "../../examples/email_triage.rs"]
#[allow(dead_code)]
mod email_triage;
#[path = "../../examples/flaky_service.rs"]
#[allow(dead_code)]
mod flaky_service;
#[path = "../../examples/follow_up.rs"]
#[allow(dead_code)]
mod follow_up;
#[path = "../../examples/governance.rs"]
#[allow(dead_code)]
mod governance;
#[path = "../../examples/incident_504.rs"]
#[allow(dead_code)]
mod incident_504;
#[path = "../../examples/market_analysis.rs"]
#[allow(dead_code)]
mod market_analysis;
#[path = "../../examples/otel.rs"]
#[allow(dead_code)]
mod otel;
#[path = "../../examples/refund_approval.rs"]
#[allow(dead_code)]
mod refund_approval;
#[path = "../../examples/support_router.rs"]
#[allow(dead_code)]
mod support_router;
#[path = "../../examples/two_tenants.rs"]
#[allow(dead_code)]
mod two_tenants;
#[path = "../../examples/workers.rs"]
#[allow(dead_code)]
mod workers;

use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::model::ChatModel;
use agentflow::sealed::{Kek, MemoryKeyStore, SealedStore, StaticKeyProvider};
use agentflow::testing::{Answers, CrashMatrix, CrashReport, Ending};
use agentflow::tool::Risk;
use agentflow::{RedbStore, Store};

/// Prints the report's line and asserts that no check was broken and every cut was reached.
fn survives(name: &str, report: &CrashReport) {
    println!("{name}: {report}");
    clean(name, report);
}

/// Asserts that no check was broken and every cut was reached.
fn clean(name: &str, report: &CrashReport) {
    assert!(report.is_clean(), "{name}: {report}");
    let missed: Vec<String> =
        report.trials.iter().filter(|t| !t.reached).map(|t| format!("{} `{}`", t.cut, t.boundary)).collect();
    assert!(missed.is_empty(), "{name}: cuts not reached: {missed:?}\n{report}");
}

/// The status the uncut run left its thread in (`completed`, `compensated`, ...).
fn outcome(report: &CrashReport) -> &str {
    match &report.reference {
        Ending::Finished { outcome, .. } => outcome,
        other => panic!("the uncut run did not finish: {other}"),
    }
}

#[test]
fn approval_inbox() {
    // The refund waits in the inbox, where `alice` approves it: `agentflow serve` lets holders of
    // the role named after a risk class decide its calls, and `agent` requested the call.
    let answers = Answers::new().approvers(
        RoleAuthorizer::new().role_for(Risk::Irreversible, "irreversible"),
        [Approver::new("alice", ["irreversible"])],
    );
    let report = CrashMatrix::new(approval_inbox::refunds::graph().app(), &())
        .thread("refund-1")
        .owner("agent")
        .input(approval_inbox::claim(1))
        .answers(answers)
        .run()
        .unwrap();
    survives("approval_inbox", &report);
    assert_eq!(outcome(&report), "completed");
}

/// The example's four questions, each with its own script and limits: the fourth, a model
/// that never stops calling tools, ends at its limit of 4 model calls.
#[test]
fn arithmetic() {
    let mut reports = Vec::new();
    for (i, scenario) in arithmetic::scenarios().into_iter().enumerate() {
        let name = format!("arithmetic {}. {}", i + 1, scenario.title);
        let model: Arc<dyn ChatModel> = Arc::new(scenario.script);
        let deps = arithmetic::deps(model);
        let report = CrashMatrix::new(arithmetic::calculator::graph().app(), &deps)
            .limits(scenario.limits)
            .input(agentflow::prebuilt::react::ReactState::ask(scenario.question))
            .run()
            .unwrap();
        println!("{name}: {report}");
        reports.push((name, report));
    }
    for (name, report) in &reports {
        clean(name, report);
    }
    let outcomes: Vec<&str> = reports.iter().map(|(_, r)| outcome(r)).collect();
    assert_eq!(outcomes, ["completed", "completed", "completed", "budget_exhausted"]);
}

#[test]
fn delegation() {
    // The supervisor's graph runs both research children and the writer child; `dana`, an
    // editor, approves the writer's `publish_post`.
    let newsroom = delegation::Newsroom::default();
    let answers = Answers::new()
        .approvers(RoleAuthorizer::new().role_for(Risk::Irreversible, "editor"), [Approver::new("dana", ["editor"])]);
    let report = CrashMatrix::new(delegation::supervisor::graph().app(), &newsroom)
        .thread("post-1")
        .owner("agent:editor-bot")
        .input(delegation::assignment())
        .answers(answers)
        .run()
        .unwrap();
    survives("delegation", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn email_triage() {
    use email_triage::ReviewDecision;
    // The demo's four samples, each with the reviewer's decision when it pauses for review.
    let [edit, reject] = email_triage::demo_decisions();
    let decisions = [Some(ReviewDecision::Approve), None, Some(edit), Some(reject)];
    let services = email_triage::Services { model: Arc::new(email_triage::scripted_model()) };
    let mut reports = Vec::new();
    for (i, ((name, raw), decision)) in email_triage::SAMPLES.iter().zip(decisions).enumerate() {
        let answers = match decision {
            Some(decision) => Answers::new().interrupt("review", decision),
            None => Answers::new(),
        };
        let report = CrashMatrix::new(email_triage::triage::graph().app(), &services)
            .thread(format!("demo-{}", i + 1))
            .owner("email_triage")
            .input(email_triage::input(raw))
            .answers(answers)
            .run()
            .unwrap();
        let name = format!("email_triage {name}");
        println!("{name}: {report}");
        reports.push((name, report));
    }
    for (name, report) in &reports {
        clean(name, report);
    }
}

/// One lookup through the breaker, against the example's service (here one that never fails),
/// started on a runtime of its own while the matrix runs the graph.
#[test]
fn flaky_service() {
    let server = tokio::runtime::Runtime::new().unwrap();
    let service = server.block_on(flaky_service::FlakyService::start(0)).unwrap();
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build().unwrap();
    let inventory = flaky_service::Inventory { url: service.url.clone(), client };
    // The app with its circuit breaker; the matrix replaces the store.
    let app = flaky_service::app(Arc::new(RedbStore::in_memory().unwrap()), std::time::Duration::from_secs(1)).unwrap();
    let report = CrashMatrix::new(app, &inventory).thread("lookup-1").input(flaky_service::input(1)).run().unwrap();
    survives("flaky_service", &report);
    assert_eq!(outcome(&report), "completed");
}

/// The follow-up sleeps 50 ms on its durable timer (the matrix waits timers out in real time);
/// both messages go to an outbox file.
#[test]
fn follow_up() {
    let dir = std::env::temp_dir().join(format!("agentflow-crash-matrix-follow-up-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let services = follow_up::Services {
        model: Arc::new(follow_up::scripted_model()),
        outbox: follow_up::Outbox { path: dir.join("outbox.txt") },
    };
    let report = CrashMatrix::new(follow_up::reminder::graph().app(), &services)
        .thread("follow-up-1")
        .input(follow_up::input(std::time::Duration::from_millis(50)))
        .run();
    let _ = std::fs::remove_dir_all(&dir);
    let report = report.unwrap();
    survives("follow_up", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn incident_504() {
    // The restart service keeps its per-key markers and its log in a directory.
    let dir = std::env::temp_dir().join(format!("agentflow-crash-matrix-incident-504-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ops = incident_504::Ops::new(&dir, false);
    // The app with its circuit breaker; the matrix replaces the store.
    let app = incident_504::app(Arc::new(RedbStore::in_memory().unwrap()));
    let answers = Answers::new()
        .approvers(RoleAuthorizer::new().role_for(Risk::External, "sre"), [Approver::new("alice", ["sre"])]);
    let report = CrashMatrix::new(app, &ops)
        .thread(incident_504::THREAD)
        .owner("agent:oncall")
        .input(incident_504::alert())
        .answers(answers)
        .run();
    let _ = std::fs::remove_dir_all(&dir);
    let report = report.unwrap();
    survives("incident_504", &report);
    assert_eq!(outcome(&report), "compensated", "{:?}", report.reference);
}

#[test]
fn market_analysis() {
    let desk = market_analysis::desk();
    let report = CrashMatrix::new(market_analysis::analysis::graph().app(), &desk)
        .input(market_analysis::input(&market_analysis::TICKERS))
        .run()
        .unwrap();
    survives("market_analysis", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn refund_approval() {
    use refund_approval::{OWNER, agent, alice, authorizer, question};
    let deps = refund_approval::deps();
    let people = || Answers::new().approvers(authorizer(), [alice()]);
    // 1. approved: alice approves, the refund runs once. 2. edited: alice approves 199 where
    // the model asked 299. 3. rejected: alice rejects with the example's reason, and the model
    // answers without refunding. The other scenarios are not a person's answers (4 replays a
    // used approval; 5a and 5b tamper with the store and the state; 6 decides after the TTL).
    let scenarios = [
        ("approved", "ORD-1001", people()),
        (
            "edited",
            "ORD-1002",
            people().edit("process_refund", serde_json::json!({ "order_id": "ORD-1002", "amount": 199 })),
        ),
        (
            "rejected",
            "ORD-1003",
            people().reject("process_refund", "the customer already got a voucher for this order"),
        ),
    ];
    let mut reports = Vec::new();
    for (thread, order, answers) in scenarios {
        let report = CrashMatrix::new(agent(), &deps)
            .thread(thread)
            .owner(OWNER)
            .input(question(order, 299))
            .answers(answers)
            .run()
            .unwrap();
        let name = format!("refund_approval {thread}");
        println!("{name}: {report}");
        reports.push((name, report));
    }
    for (name, report) in &reports {
        clean(name, report);
    }
}

#[test]
fn support_router() {
    let services = support_router::services();
    let report = CrashMatrix::new(support_router::support::graph().app(), &services)
        .input(support_router::input())
        .run()
        .unwrap();
    survives("support_router", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn workers() {
    // The pool's graph, run by the matrix rather than a worker on PostgreSQL.
    let report = CrashMatrix::new(workers::digest::graph().app(), &()).input(workers::job(0)).run().unwrap();
    survives("workers", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn governance() {
    // The support case on a sealed store (payloads sealed with per-thread data keys kept in a
    // key store beside it): every cut resumes and opens what the run before it sealed.
    let secrets = std::env::temp_dir().join(format!("agentflow-crash-matrix-governance-{}", std::process::id()));
    std::fs::create_dir_all(&secrets).unwrap();
    let vault = governance::Vault::in_dir(&secrets);
    let report = CrashMatrix::new(governance::support::graph().app(), &vault)
        .store(|| {
            let inner = RedbStore::in_memory().map_err(|e| e.to_string())?;
            let provider = StaticKeyProvider::new(Kek::new([7; 32]), vec![]);
            Ok(Arc::new(SealedStore::new(inner, MemoryKeyStore::new(), provider)) as Arc<dyn Store>)
        })
        .thread("case-1")
        .input(governance::Case { customer: "ada@example.com".into(), ..Default::default() })
        .run()
        .unwrap();
    survives("governance", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn two_tenants() {
    // acme's refund, in a thread of tenant acme, approved by acme's `alice` (an approver of
    // every tenant here: the matrix's desk checks roles, the example's policy is the app's).
    let answers = Answers::new().approvers(two_tenants::authorizer(), [Approver::new("alice", ["approver"])]);
    let report = CrashMatrix::new(two_tenants::refunds::graph().app(), &())
        .thread("acme-refund-1")
        .owner("acme-agent")
        .tenant("acme")
        .input(two_tenants::Claim { amount: 40, outcome: None })
        .answers(answers)
        .run()
        .unwrap();
    survives("two_tenants", &report);
    assert_eq!(outcome(&report), "completed");
}

#[test]
fn otel() {
    // The traced refund: the model asks for it, `alice` approves it, it runs once and the model
    // answers. No OpenTelemetry layer is installed here: the graph's durability is the matrix's.
    let o = otel::Options {
        store: std::path::PathBuf::new(),
        thread: "refund-1".into(),
        customer: "Ada Lovelace".into(),
        message: "Hello, this is Ada Lovelace. Please refund order=ORD-1001 amount=120.".into(),
        instructions: "You are a refund agent.".into(),
    };
    let answers = Answers::new().approvers(
        RoleAuthorizer::new().role_for(Risk::Irreversible, otel::APPROVER_ROLE),
        [Approver::new("alice", [otel::APPROVER_ROLE])],
    );
    let deps = otel::deps(&o.instructions);
    let app = otel::refunds::graph().app().policy(agentflow::tool::RiskPolicy::default());
    let report = CrashMatrix::new(app, &deps)
        .thread(&o.thread)
        .owner(otel::OWNER)
        .input(otel::RefundCase { customer: o.customer, message: o.message, ..Default::default() })
        .answers(answers)
        .run()
        .unwrap();
    survives("otel", &report);
    assert_eq!(outcome(&report), "completed");
}
