//! Probes of the crash matrix itself: graphs and planted defects it must flag (a compensation
//! run twice, a subgraph child's or a map's lost journal, a graph that does not run the same
//! way twice), correct graphs it must pass (compensations, subgraphs, maps behind approvals,
//! retries, two questions in one step), that it is deterministic, and clear errors on misuse.

#[path = "probe_stores.rs"]
mod faulty;
#[path = "probe_graphs.rs"]
mod graphs;
#[path = "../support/questions.rs"]
mod questions;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::testing::{Answers, BoundaryKind, Check, CrashMatrix, CrashMatrixError, CrashReport, Cut, Ending};
use agentflow::tool::Risk;
use graphs::{World, count, trip};

fn missed(report: &CrashReport) -> Vec<String> {
    report.trials.iter().filter(|t| !t.reached).map(|t| format!("{} `{}`", t.cut, t.boundary)).collect()
}

fn outcome(report: &CrashReport) -> String {
    match &report.reference {
        Ending::Finished { outcome, .. } => outcome.clone(),
        other => panic!("the uncut run did not finish: {other}"),
    }
}

/// Every trial that ends waiting for a human was cut while a call was in flight: some call's
/// *started* marker was committed at the cut and its result was not.
fn waits_only_for_calls_in_flight(report: &CrashReport) {
    for t in report.trials.iter().filter(|t| matches!(t.ending, Some(Ending::WaitsForHuman { .. }))) {
        let i = report.boundaries.iter().position(|b| b.key == t.boundary).unwrap();
        let upto = if t.cut == Cut::After { i + 1 } else { i };
        let committed: BTreeSet<&str> =
            report.boundaries[..upto].iter().flat_map(|b| b.items.iter().map(String::as_str)).collect();
        let in_flight = committed
            .iter()
            .any(|item| item.rsplit_once(" started#").is_some_and(|(call, _)| !committed.contains(call)));
        assert!(in_flight, "{} `{}` waits for a human though no call was in flight: {:?}", t.cut, t.boundary, t.ending);
    }
}

// ------------------------------------------------------------------ compensations

#[test]
fn a_saga_compensation_is_cut_and_survives() {
    let world = World::default();
    let report = CrashMatrix::new(graphs::saga::graph().app(), &world).input(trip()).run().unwrap();
    println!("{report}");
    assert_eq!(outcome(&report), "compensated", "{report}");
    let kinds: BTreeSet<BoundaryKind> = report.boundaries.iter().map(|b| b.kind).collect();
    assert!(kinds.contains(&BoundaryKind::Compensation), "no compensation boundary: {:#?}", report.boundaries);
    assert!(report.is_clean(), "{report}");
    assert!(missed(&report).is_empty(), "{:?}", missed(&report));
    waits_only_for_calls_in_flight(&report);
}

/// A store that keeps no journal of a saga's compensations lets a resume run the
/// (non-idempotent) compensation again: the ledger must see it.
#[test]
fn a_compensation_run_twice_is_flagged() {
    let world = World::default();
    let report = CrashMatrix::new(graphs::saga::graph().app(), &world)
        .input(trip())
        .store(faulty::dropping(faulty::is_compensation))
        .run()
        .unwrap();
    println!("{report}");
    let reached = report.trials.iter().filter(|t| t.reached).count();
    // Each trial runs `unbook` at most once when nothing is run twice, plus once in the uncut run.
    let unbooks = count(&world.unbooks);
    assert!(
        report.violations_of(Check::EffectRanTwice).count() > 0,
        "`unbook` ran {unbooks} times over the uncut run and {reached} trials (at most {} if never twice), and the \
         matrix saw no effect run twice:\n{report}",
        reached + 1
    );
}

// ------------------------------------------------------------------ subgraphs

#[test]
fn a_subgraph_childs_writes_are_boundaries_and_survive() {
    let world = World::default();
    let report = CrashMatrix::new(graphs::parent::graph().app(), &world).input(trip()).run().unwrap();
    println!("{report}");
    let child_items: Vec<&String> =
        report.boundaries.iter().flat_map(|b| &b.items).filter(|i| i.contains("crash-matrix/")).collect();
    assert!(child_items.iter().any(|i| i.contains(" fee started#1")), "{:#?}", report.boundaries);
    assert!(child_items.iter().any(|i| i.starts_with("step crash-matrix/")), "{:#?}", report.boundaries);
    assert!(report.is_clean(), "{report}");
    assert!(missed(&report).is_empty(), "{:?}", missed(&report));
    waits_only_for_calls_in_flight(&report);
}

#[test]
fn a_child_whose_journal_is_lost_is_flagged() {
    let world = World::default();
    let report = CrashMatrix::new(graphs::parent::graph().app(), &world)
        .input(trip())
        .store(faulty::dropping(|k| k.thread.contains('/')))
        .run()
        .unwrap();
    println!("{report}");
    assert!(report.violations_of(Check::EffectRanTwice).count() > 0, "{report}");
}

// ------------------------------------------------------------------ maps, approvals, retries

#[test]
fn a_map_of_irreversible_calls_behind_approvals_survives() {
    let world = World::default();
    let answers = Answers::new()
        .approvers(RoleAuthorizer::new().role_for(Risk::Irreversible, "ops"), [Approver::new("alice", ["ops"])]);
    let report = CrashMatrix::new(graphs::mailer::graph().app(), &world).input(trip()).answers(answers).run().unwrap();
    println!("{report}");
    let Ending::Finished { state, .. } = &report.reference else { panic!() };
    assert_eq!(state["log"].as_array().unwrap().len(), 2, "{state}");
    let kinds: BTreeSet<BoundaryKind> = report.boundaries.iter().map(|b| b.kind).collect();
    assert!(kinds.contains(&BoundaryKind::ApprovalMoved), "{:#?}", report.boundaries);
    assert!(report.is_clean(), "{report}");
    assert!(missed(&report).is_empty(), "{:?}", missed(&report));
}

/// The module docs: "The full matrix runs on in-memory stores and is deterministic". Map
/// instances run in parallel; the same cut, run again, must end the same way.
#[test]
fn the_matrix_is_deterministic() {
    let run = || {
        let world = World::default();
        CrashMatrix::new(graphs::mailer::graph().app(), &world).input(trip()).run().unwrap()
    };
    let first = run();
    let sorted = |r: &CrashReport| {
        let mut keys: Vec<String> = r.boundaries.iter().map(|b| b.key.clone()).collect();
        keys.sort();
        keys
    };
    let endings = |r: &CrashReport| {
        let mut e: Vec<(String, Cut, bool, Option<Ending>)> =
            r.trials.iter().map(|t| (t.boundary.clone(), t.cut, t.reached, t.ending.clone())).collect();
        e.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        e
    };
    let mut orders = 0;
    for round in 1..=3 {
        let again = run();
        assert_eq!(sorted(&first), sorted(&again), "round {round}: the boundaries named differ");
        if first.boundaries.iter().map(|b| &b.key).ne(again.boundaries.iter().map(|b| &b.key)) {
            orders += 1;
        }
        let differ: Vec<String> = endings(&first)
            .into_iter()
            .zip(endings(&again))
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("{} `{}`: {:?} / then {:?}", a.1, a.0, a.3, b.3))
            .collect();
        assert!(differ.is_empty(), "round {round}: the same cuts ended otherwise:\n{}", differ.join("\n"));
    }
    assert_eq!(
        orders, 0,
        "the boundaries came in another order in {orders} of 3 runs: `report.boundaries` is not stable"
    );
}

#[test]
fn a_retry_after_a_transient_model_error_survives() {
    let world = World::flaky_model();
    let report = CrashMatrix::new(graphs::retrying::graph().app(), &world).input(trip()).run().unwrap();
    println!("{report}");
    let Ending::Finished { state, .. } = &report.reference else { panic!() };
    assert_eq!(state["log"][1], "second time lucky", "{state}");
    assert!(report.is_clean(), "{report}");
    assert!(missed(&report).is_empty(), "{:?}", missed(&report));
    waits_only_for_calls_in_flight(&report);
}

// ------------------------------------------------------------------ questions

#[test]
fn two_nodes_asking_in_one_step_survive() {
    let ran = questions::Ran::default();
    let answers = Answers::new().interrupt("refund", true).interrupt("delete", false);
    let report = CrashMatrix::new(questions::two_questions::graph().app(), &ran)
        .input(questions::Support::default())
        .answers(answers)
        .run()
        .unwrap();
    println!("{report}");
    let Ending::Finished { state, .. } = &report.reference else { panic!() };
    assert_eq!((state["refunded"].clone(), state["deleted"].clone()), (true.into(), false.into()));
    assert!(report.is_clean(), "{report}");
    assert!(missed(&report).is_empty(), "{:?}", missed(&report));
}

/// `cx.interrupt` called twice in one node run is a fatal error of the node: the uncut run
/// fails, and the matrix refuses it rather than compare every cut with a failure.
#[test]
fn a_node_that_interrupts_twice_is_not_reported_clean() {
    let world = World::default();
    let result = CrashMatrix::new(graphs::two_asks::graph().app(), &world)
        .input(trip())
        .answers(Answers::new().interrupt("ask", true))
        .run();
    let err = result.map(|r| r.to_string()).unwrap_err();
    let CrashMatrixError::Reference(Ending::Finished { outcome, .. }) = &err else { panic!("{err}") };
    assert_eq!(outcome, "failed");
    assert!(err.to_string().contains(".failure_expected()"), "{err}");
}

// ------------------------------------------------------------------ misuse

#[test]
fn a_graph_that_always_fails_is_not_reported_clean() {
    let world = World::default();
    let err = CrashMatrix::new(graphs::broken::graph().app(), &world).input(trip()).run().map(|r| r.to_string());
    assert!(matches!(err, Err(CrashMatrixError::Reference(Ending::Finished { .. }))), "{err:?}");
    // Said to be the scenario, the failure is the reference: every cut fails alike.
    let report =
        CrashMatrix::new(graphs::broken::graph().app(), &world).input(trip()).failure_expected().run().unwrap();
    assert!(report.to_string().starts_with("crash matrix: the uncut run ended failed;"), "{report}");
}

#[test]
fn an_approval_nobody_may_decide_is_a_clear_error() {
    let world = World::default();
    // No approver at all: the approval waits forever.
    let answers = Answers::new().approvers(RoleAuthorizer::new().role_for(Risk::Irreversible, "ops"), []);
    let started = Instant::now();
    let err = CrashMatrix::new(graphs::mailer::graph().app(), &world).input(trip()).answers(answers).run().unwrap_err();
    println!("{err} (after {:?})", started.elapsed());
    let CrashMatrixError::Reference(Ending::Error { error }) = &err else { panic!("{err}") };
    assert!(error.contains("approv"), "the error does not say an approval waits: {error}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

/// A durable timer is waited out in real time, once per trial: a graph that sleeps an hour
/// keeps the matrix busy for days.
#[test]
fn a_long_durable_timer_does_not_hang_the_matrix() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let world = World::default();
        let report = CrashMatrix::new(graphs::sleeper::graph().app(), &world).input(trip()).run();
        let _ = tx.send(report.map(|r| r.to_string()).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(done) => {
            let error = done.unwrap_err();
            assert!(error.contains("give the graph a shorter timer"), "{error}");
        }
        Err(_) => panic!(
            "a graph with `cx.sleep(1 h)` has not been through the matrix after 20 s (timers are waited out in real time)"
        ),
    }
}

/// A node that decides by state outside the graph (a counter in the deps) ends otherwise.
#[test]
fn a_graph_that_does_not_run_the_same_way_twice_is_flagged() {
    let world = World::default();
    let report = CrashMatrix::new(graphs::drifting::graph().app(), &world).input(trip()).run().unwrap();
    println!("{report}");
    assert!(report.violations_of(Check::EndingDiffers).count() > 0, "{report}");
}

/// A store that keeps no journal of tool calls, under a map whose instances each send an
/// irreversible mail behind an approval: a resume that sends again must be flagged.
#[test]
fn a_map_whose_tool_journal_is_lost_is_flagged() {
    let world = World::default();
    let report = CrashMatrix::new(graphs::mailer::graph().app(), &world)
        .input(trip())
        .store(faulty::dropping(|k| k.key.starts_with("tool:")))
        .run()
        .unwrap();
    println!("{report}");
    let reached = report.trials.iter().filter(|t| t.reached).count();
    assert!(
        report.violations_of(Check::EffectRanTwice).count() > 0,
        "{} mails sent over the uncut run and {reached} trials (at most {} if none twice):\n{report}",
        count(&world.sends),
        2 * (reached + 1)
    );
}
