//! The locks of a released graph: written once a version is released, then each later build is
//! checked against them. A field whose type changed under the same state version, an approval
//! tool whose arguments changed with no `args(..)` migration, a risk class changed at the same
//! version and a node changed at the same version are each refused with what to declare;
//! writing the lock again (a version never released) makes the check pass.

use std::path::Path;

use agentflow::__private::with_release;
use agentflow::CompiledGraph;
use agentflow::prelude::*;
use agentflow::release::{
    ArgsMigration, GraphLock, GraphMigration, LockError, LockMode, LockOutcome, Release, check_lock, check_lock_in,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::temp::temp_dir;

/// The node shape `#[graph]` records for `support` (`triage` routes to `review` or ends).
const NODES: &str = r#"{"review":{"goto":["END"],"interrupt":false,"map":false,"sleep":false,"subgraphs":[],"tools":["refund"],"writes":null},"triage":{"goto":["END","review"],"interrupt":false,"map":false,"sleep":false,"subgraphs":[],"tools":[],"writes":null}}"#;

/// The same graph with `triage` routing to `review` only.
const NODES_REROUTED: &str = r#"{"review":{"goto":["END"],"interrupt":false,"map":false,"sleep":false,"subgraphs":[],"tools":["refund"],"writes":null},"triage":{"goto":["review"],"interrupt":false,"map":false,"sleep":false,"subgraphs":[],"tools":[],"writes":null}}"#;

/// Writes a `support` graph: state `Doc` (its `amount` of type `$amount`) and the tool
/// `refund` (risk `$risk`, its `amount` argument of type `$arg`).
macro_rules! support_graph {
    ($module:ident, amount: $amount:ty, risk: $risk:ident, arg: $arg:ty) => {
        pub mod $module {
            use super::*;

            #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
            pub struct Doc {
                pub amount: $amount,
                pub note: String,
            }

            #[derive(Deserialize, schemars::JsonSchema)]
            pub struct RefundArgs {
                pub amount: $arg,
            }

            /// Refunds an amount.
            #[tool(risk = $risk)]
            pub async fn refund(args: RefundArgs) -> Result<Value, ToolError> {
                Ok(json!({ "refunded": args.amount }))
            }

            #[graph(state = Doc, start = triage)]
            pub mod support {
                use super::*;

                #[node(goto = [review, END])]
                async fn triage(_s: &Doc) -> Step<Doc> {
                    goto!(END, Doc::update())
                }

                #[node(goto = [END], tools = [refund])]
                async fn review(_s: &Doc) -> Step<Doc> {
                    goto!(END, Doc::update())
                }
            }
        }
    };
}

support_graph!(first, amount: u32, risk: irreversible, arg: u32);
support_graph!(retyped, amount: f64, risk: irreversible, arg: u32);
support_graph!(reargued, amount: u32, risk: irreversible, arg: f64);
support_graph!(reclassed, amount: u32, risk: external, arg: u32);

/// `graph` as version `version` of `support`, with `migrations` and the node shape `nodes`.
fn released<S: State>(
    graph: CompiledGraph<S>,
    version: u32,
    migrations: &'static [GraphMigration],
    nodes: &'static str,
) -> CompiledGraph<S> {
    with_release(graph, Release::new("support", version, migrations, nodes, ""))
}

fn write<S: State>(graph: &CompiledGraph<S>, dir: &Path) {
    let report = check_lock_in(graph, dir, LockMode::Write).expect("the lock is written");
    assert_eq!(report.outcome, LockOutcome::Written { changed: true });
}

/// The message of a failed check.
fn refused<S: State>(graph: &CompiledGraph<S>, dir: &Path) -> String {
    match check_lock_in(graph, dir, LockMode::Check) {
        Err(e @ LockError::Mismatch { .. }) => e.to_string(),
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

fn keep(args: Value) -> Result<Value, String> {
    Ok(args)
}

#[test]
fn a_written_lock_matches_the_graph_and_reads_back_sorted() {
    let dir = temp_dir("locks-written");
    let graph = released(first::support::graph(), 1, &[], NODES);
    // No lock yet: the version is free.
    let report = check_lock_in(&graph, &dir, LockMode::Check).expect("an unlocked version passes");
    assert_eq!(report.outcome, LockOutcome::Unlocked);
    write(&graph, &dir);
    let file = dir.join("support").join("v1.lock");
    let text = std::fs::read_to_string(&file).expect("the lock file");
    assert!(text.ends_with("}\n"), "{text}");
    let lock: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(lock["format"], 1);
    assert_eq!((lock["id"].as_str(), lock["version"].as_u64()), (Some("support"), Some(1)));
    assert_eq!(lock["graph"], "support");
    assert_eq!(lock["start"], "triage");
    assert_eq!(lock["fingerprint"], graph.fingerprint());
    assert_eq!(lock["nodes"], serde_json::from_str::<Value>(NODES).unwrap());
    assert_eq!(lock["tools"]["refund"]["risk"], "irreversible");
    assert_eq!(lock["tools"]["refund"]["approval"], true);
    assert_eq!(lock["tools"]["refund"]["schema"], agentflow::tool::Tool::parameters(&first::refund));
    assert_eq!(lock["state"]["name"], "Doc");
    let fields: Vec<&str> =
        lock["state"]["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(fields, ["amount", "note"]);
    assert_eq!(lock["state"]["fields"][0]["type"], "u32");
    // Keys sorted at every depth, as written.
    assert_eq!(GraphLock::read(&file).unwrap().to_text(), text);
    assert_eq!(text.find("\"fingerprint\""), Some(text.find('"').unwrap()), "the first key is the smallest");

    let report = check_lock_in(&graph, &dir, LockMode::Check).expect("the graph matches its lock");
    assert_eq!(report.outcome, LockOutcome::Matched);
    // Written again unchanged, the file is left as it is.
    let again = check_lock_in(&graph, &dir, LockMode::Write).unwrap();
    assert_eq!(again.outcome, LockOutcome::Written { changed: false });
}

#[test]
fn a_field_whose_type_changed_under_the_same_state_version_is_refused() {
    let dir = temp_dir("locks-field-type");
    write(&released(first::support::graph(), 1, &[], NODES), &dir);
    let next = released(retyped::support::graph(), 2, &[], NODES);
    let message = refused(&next, &dir);
    assert!(
        message.contains(
            "field `amount` of `Doc` changed type from u32 to f64 between version 1 and 2, and the state's version \
             stayed 1: raise `#[state(version = 2)]` and register `App::migration(1, ..)`"
        ),
        "{message}"
    );
    // Locking version 2 does not help: the older lock still holds threads of version 1.
    write(&next, &dir);
    assert!(refused(&next, &dir).contains("field `amount` of `Doc` changed type"));
}

#[test]
fn an_approval_tools_changed_arguments_need_an_args_migration() {
    let dir = temp_dir("locks-args");
    write(&released(first::support::graph(), 1, &[], NODES), &dir);
    let message = refused(&released(reargued::support::graph(), 2, &[], NODES), &dir);
    assert!(
        message.contains(
            "an approval of `refund` may be pending in threads of version 1, and the argument schema of `refund` \
             changed since"
        ),
        "{message}"
    );
    assert!(message.contains("add `migrate(from = 1, args(refund = path::to::fn))`"), "{message}");
    assert!(message.contains("or `args(refund = cancel)`"), "{message}");

    static MAPPED: [GraphMigration; 1] = [GraphMigration::new(1, &[], &[], &[("refund", ArgsMigration::Map(keep))])];
    let report = check_lock_in(&released(reargued::support::graph(), 2, &MAPPED, NODES), &dir, LockMode::Check)
        .expect("the migration rewrites the pending arguments");
    assert_eq!((report.outcome, report.older), (LockOutcome::Unlocked, vec![1]));
}

#[test]
fn a_risk_class_changed_at_the_same_version_is_refused() {
    let dir = temp_dir("locks-risk");
    write(&released(first::support::graph(), 1, &[], NODES), &dir);
    let same = released(reclassed::support::graph(), 1, &[], NODES);
    let message = refused(&same, &dir);
    assert!(message.contains("the risk class of tool `refund` changed from irreversible to external"), "{message}");
    assert!(message.contains("raise `version = 2` in `#[graph]`"), "{message}");
    assert!(message.contains("lock it again with `agentflow graphs lock`"), "{message}");
    // At a new version, the class may change.
    assert!(check_lock_in(&released(reclassed::support::graph(), 2, &[], NODES), &dir, LockMode::Check).is_ok());
}

#[test]
fn a_node_changed_at_the_same_version_is_refused_until_locked_again() {
    let dir = temp_dir("locks-nodes");
    write(&released(first::support::graph(), 1, &[], NODES), &dir);
    let rerouted = released(first::support::graph(), 1, &[], NODES_REROUTED);
    let message = refused(&rerouted, &dir);
    assert!(message.contains("routes of `triage` changed from [\"END\",\"review\"] to [\"review\"]"), "{message}");
    assert!(message.contains("graph `support` version 1 does not match its locks"), "{message}");
    // Version 1 was never released: lock it again, and the check passes.
    write(&rerouted, &dir);
    assert_eq!(check_lock_in(&rerouted, &dir, LockMode::Check).unwrap().outcome, LockOutcome::Matched);
}

#[test]
fn a_malformed_lock_is_named_and_check_lock_reads_the_graphs_lock_directory() {
    let dir = temp_dir("locks-malformed");
    let locks: &'static str = Box::leak(dir.display().to_string().into_boxed_str());
    std::fs::create_dir_all(dir.join("support")).unwrap();
    std::fs::write(dir.join("support").join("v1.lock"), "{ \"format\": 1, ").unwrap();
    let graph = with_release(first::support::graph(), Release::new("support", 2, &[], NODES, locks));
    let err = check_lock(&graph).expect_err("the lock does not read");
    assert!(matches!(err, LockError::Malformed { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("{} is malformed", dir.join("support").join("v1.lock").display())));
}
