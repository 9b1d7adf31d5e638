//! Unit tests of the release rules, on graphs and locks built by hand (no proc-macro types).

use std::path::PathBuf;

use super::*;
use crate::diag::Diagnostic;
use crate::graph::ir::{Named, NodeIr, Signature};
use crate::graph::lock::LockFile;

/// Where `version = N` stands, to tell the errors placed there.
const VERSION_AT: Loc = Loc(1);

fn named(name: &str, at: u32) -> Named {
    Named { name: name.into(), loc: Loc(at) }
}

/// A node with its `goto` list and `tools`.
fn node(name: &str, goto: &[&str], tools: &[&str]) -> NodeIr {
    NodeIr {
        name: Named::new(name),
        goto: goto.iter().map(|t| Named::new(t)).collect(),
        goto_loc: Some(Loc::DUMMY),
        writes: None,
        routes: vec![],
        sets: vec![],
        tools: tools.iter().map(|t| Named::new(t)).collect(),
        tool_uses: vec![],
        subgraphs: vec![],
        subgraph_uses: vec![],
        interrupt: false,
        interrupt_calls: vec![],
        sleep: false,
        sleep_calls: vec![],
        sig: Signature::valid(),
        payload: None,
        parallel: None,
    }
}

fn graph(nodes: Vec<NodeIr>) -> GraphIr {
    GraphIr {
        name: "support".into(),
        loc: Loc(0),
        state: "Doc".into(),
        deps: None,
        start: nodes.first().map(|n| n.name.clone()),
        max_steps: None,
        max_depth: None,
        nodes,
    }
}

/// `triage -> review -> END`, `review` listing `send_email`.
fn v1() -> GraphIr {
    graph(vec![node("triage", &["review", "END"], &["lookup"]), node("review", &["END"], &["send_email"])])
}

/// The lock a graph would have, with `lookup` read-only and `send_email` held for approval.
fn lock_of(ir: &GraphIr) -> Lock {
    let tools = [("lookup".to_string(), false), ("send_email".to_string(), true)].into_iter().collect();
    Lock { nodes: shape(ir), tools }
}

fn locks(files: Vec<(u32, Result<Lock, String>)>) -> Locks {
    let dir = PathBuf::from("/crate/graphs/support");
    let files = files
        .into_iter()
        .map(|(version, lock)| LockFile { version, path: lock_path(&dir, version), readable: true, lock })
        .collect();
    Locks { dir, files, error: None, misnamed: vec![] }
}

fn release(version: u32, migrations: Vec<MigrationIr>) -> ReleaseIr {
    ReleaseIr { id: None, version: Some((version, VERSION_AT)), locks: None, migrations }
}

/// `migrate(from = K, nodes(..), tools(..))`; a tool mapped to `None` is cancelled.
fn migrate(from: u32, nodes: &[(&str, &str)], tools: &[(&str, Option<&str>)]) -> MigrationIr {
    MigrationIr {
        from,
        from_loc: Loc(10 + from),
        nodes: nodes.iter().map(|(a, b)| (named(a, 20), named(b, 21))).collect(),
        tools: tools
            .iter()
            .map(|(a, b)| (named(a, 30), b.map_or(ToolTarget::Cancel, |b| ToolTarget::Rename(named(b, 31)))))
            .collect(),
        args: vec![],
    }
}

fn run(ir: &GraphIr, rel: &ReleaseIr, locks: &Locks, rewriting: bool) -> Vec<Diagnostic> {
    let mut d = Diagnostics::default();
    check_release(ir, rel, locks, rewriting, &mut d);
    d.into_vec()
}

fn only(diags: Vec<Diagnostic>) -> Diagnostic {
    assert_eq!(diags.len(), 1, "{diags:#?}");
    diags.into_iter().next().unwrap()
}

#[test]
fn a_graph_matching_its_lock_and_covering_older_ones_passes() {
    let ir = v1();
    assert_eq!(run(&ir, &release(1, vec![]), &locks(vec![(1, Ok(lock_of(&ir)))]), false), vec![]);
    // Version 2 renames `review`; threads of version 1 parked there move to `human_review`.
    let v2 = graph(vec![
        node("triage", &["human_review", "END"], &["lookup"]),
        node("human_review", &["END"], &["send_email"]),
    ]);
    let rel = release(2, vec![migrate(1, &[("review", "human_review")], &[])]);
    assert_eq!(run(&v2, &rel, &locks(vec![(1, Ok(lock_of(&ir))), (2, Ok(lock_of(&v2)))]), false), vec![]);
}

#[test]
fn a_shape_change_at_the_same_version_names_every_change_at_version() {
    let locked = v1();
    let mut ir = v1();
    ir.nodes[0].goto = vec![Named::new("review")];
    ir.nodes[0].tools.push(Named::new("search"));
    ir.nodes[1].writes = Some(vec![Named::new("reply")]);
    ir.nodes.push(node("escalate", &["END"], &[]));
    let d = only(run(&ir, &release(1, vec![]), &locks(vec![(1, Ok(lock_of(&locked)))]), false));
    assert_eq!((d.kind, d.loc), (Kind::LockChanged, VERSION_AT));
    assert_eq!(
        d.message,
        "graph `support` differs from its lock of version 1 (`/crate/graphs/support/v1.lock`):\n  \
         - node `escalate` was added\n  \
         - `writes` of `review` changed from none declared to [reply]\n  \
         - routes of `triage` changed from [END, review] to [review]\n  \
         - tools of `triage` changed from [lookup] to [lookup, search]\n\
         raise `version`, or if version 1 was never released, lock it again with `agentflow graphs lock`"
    );
    // Relocking (`AGENTFLOW_LOCK=write`) does not compare with the lock about to be rewritten.
    assert_eq!(run(&ir, &release(1, vec![]), &locks(vec![(1, Ok(lock_of(&locked)))]), true), vec![]);
}

#[test]
fn removed_nodes_and_marks_are_changes_too() {
    let mut old = shape(&v1());
    let mut new = old.clone();
    new.remove("review");
    new.get_mut("triage").unwrap().interrupt = true;
    assert_eq!(shape_changes(&old, &new), ["node `review` was removed", "`triage` is now marked `interrupt`"]);
    old.get_mut("triage").unwrap().map = true;
    assert_eq!(shape_changes(&old, &shape(&v1())), ["`triage` is no longer a map worker (a `#[payload]` parameter)"]);
}

#[test]
fn a_node_of_an_older_version_gone_without_a_mapping_is_reported() {
    let v2 = graph(vec![node("triage", &["END"], &["lookup", "send_email"])]);
    let one = locks(vec![(1, Ok(lock_of(&v1())))]);
    let d = only(run(&v2, &release(2, vec![]), &one, false));
    assert_eq!((d.kind, d.loc), (Kind::NodeGone, VERSION_AT));
    assert_eq!(
        d.message,
        "threads of version 1 may be parked in node `review`, which version 2 no longer has: \
         declare where they go with `migrate(from = 1, nodes(review -> <node or END>))`"
    );
    // Mapped to a node, or to `END`, it is fine.
    assert_eq!(run(&v2, &release(2, vec![migrate(1, &[("review", "triage")], &[])]), &one, false), vec![]);
    assert_eq!(run(&v2, &release(2, vec![migrate(1, &[("review", "END")], &[])]), &one, false), vec![]);
}

#[test]
fn a_node_carried_through_several_versions_is_asked_for_at_the_step_it_was_lost() {
    let v3 = graph(vec![node("triage", &["END"], &["lookup", "send_email"])]);
    // Lost between 1 and 2 (the lock of 2 has no `review`): map it in `migrate(from = 1)`.
    let v2 = v3.clone();
    let d = only(run(&v3, &release(3, vec![]), &locks(vec![(1, Ok(lock_of(&v1()))), (2, Ok(lock_of(&v2)))]), false));
    assert!(
        d.message.contains("threads of version 1 may be parked in node `review`, which version 3"),
        "{}",
        d.message
    );
    assert!(d.message.ends_with("`migrate(from = 1, nodes(review -> <node or END>))`"), "{}", d.message);
    // Renamed to `check` at 2, then lost: map `check` in `migrate(from = 2)`, for both versions.
    let v2 = graph(vec![node("triage", &["check", "END"], &["lookup"]), node("check", &["END"], &["send_email"])]);
    let rel = release(3, vec![migrate(1, &[("review", "check")], &[])]);
    let d = only(run(&v3, &rel, &locks(vec![(1, Ok(lock_of(&v1()))), (2, Ok(lock_of(&v2)))]), false));
    assert_eq!(
        d.message,
        "threads of versions 1 and 2 may be parked in node `check` (`review` in version 1), which version 3 no longer has: \
         declare where they go with `migrate(from = 2, nodes(check -> <node or END>))`"
    );
}

#[test]
fn node_mappings_must_name_nodes_that_exist() {
    let v2 = graph(vec![
        node("triage", &["human_review", "END"], &["lookup"]),
        node("human_review", &["END"], &["send_email"]),
    ]);
    let rel = release(2, vec![migrate(1, &[("reveiw", "human_reveiw")], &[])]);
    let diags = run(&v2, &rel, &locks(vec![(1, Ok(lock_of(&v1())))]), false);
    let found: Vec<(Kind, Loc, &str)> = diags.iter().map(|d| (d.kind, d.loc, d.message.as_str())).collect();
    assert_eq!(
        found,
        vec![
            (
                Kind::ReleaseArg,
                Loc(20),
                "`reveiw` is not a node of version 1 (its lock lists `review`, `triage`); did you mean `review`?"
            ),
            (
                Kind::ReleaseArg,
                Loc(21),
                "`human_reveiw` is not a node of version 2, this graph; \
                 map `reveiw` to one of `human_review`, `triage`, or to `END` to drop it; did you mean `human_review`?"
            ),
            (
                Kind::NodeGone,
                VERSION_AT,
                "threads of version 1 may be parked in node `review`, which version 2 no longer has: \
                 declare where they go with `migrate(from = 1, nodes(review -> <node or END>))`"
            ),
        ]
    );
}

#[test]
fn a_tool_that_may_await_approval_must_stay_or_be_renamed_or_cancelled() {
    // Version 2 drops `send_email` (held for approval) and `lookup` (read-only, never held).
    let v2 = graph(vec![node("triage", &["review", "END"], &[]), node("review", &["END"], &["send_message"])]);
    let one = locks(vec![(1, Ok(lock_of(&v1())))]);
    let d = only(run(&v2, &release(2, vec![]), &one, false));
    assert_eq!((d.kind, d.loc), (Kind::ApprovalGone, VERSION_AT));
    assert_eq!(
        d.message,
        "an approval of `send_email` may be pending in threads of version 1, and version 2 lists no such tool: \
         add `migrate(from = 1, tools(send_email -> <tool> or cancel))`"
    );
    let renamed = release(2, vec![migrate(1, &[], &[("send_email", Some("send_message"))])]);
    assert_eq!(run(&v2, &renamed, &one, false), vec![]);
    let cancelled = release(2, vec![migrate(1, &[], &[("send_email", None)])]);
    assert_eq!(run(&v2, &cancelled, &one, false), vec![]);
    // A tool the lock has no entry for may be held.
    let mut unknown = lock_of(&v1());
    unknown.tools.clear();
    let diags = run(&v2, &release(2, vec![]), &locks(vec![(1, Ok(unknown))]), false);
    let tools: Vec<bool> =
        ["`lookup`", "`send_email`"].iter().map(|t| diags.iter().any(|d| d.message.contains(t))).collect();
    assert_eq!(tools, [true, true]);
}

#[test]
fn a_mapping_to_a_name_that_does_not_exist_is_reported_once_at_the_mapping() {
    let v2 = graph(vec![node("triage", &["human_review", "END"], &["lookup"]), node("human_review", &["END"], &[])]);
    let one = locks(vec![(1, Ok(lock_of(&v1())))]);
    let rel = release(2, vec![migrate(1, &[("review", "human_reveiw")], &[("send_email", Some("send_mesage"))])]);
    let at: Vec<(Kind, Loc)> = run(&v2, &rel, &one, false).iter().map(|d| (d.kind, d.loc)).collect();
    assert_eq!(at, [(Kind::ReleaseArg, Loc(21)), (Kind::ReleaseArg, Loc(31))]);
}

#[test]
fn tool_mappings_must_name_tools_that_exist() {
    let v2 = graph(vec![node("triage", &["review", "END"], &["lookup"]), node("review", &["END"], &["send_message"])]);
    let rel = release(2, vec![migrate(1, &[], &[("send_mail", Some("send_msg"))])]);
    let diags = run(&v2, &rel, &locks(vec![(1, Ok(lock_of(&v1())))]), false);
    let at: Vec<(Kind, Loc)> = diags.iter().map(|d| (d.kind, d.loc)).collect();
    assert_eq!(at, [(Kind::ReleaseArg, Loc(30)), (Kind::ReleaseArg, Loc(31)), (Kind::ApprovalGone, VERSION_AT)]);
    assert_eq!(diags[0].message, "no node of version 1 lists tool `send_mail`, so no approval of it can be pending");
    assert_eq!(
        diags[1].message,
        "no node of version 2 lists tool `send_msg`; map `send_mail` to a tool a node of version 2 lists, or to `cancel`"
    );
}

#[test]
fn attribute_errors_are_reported_where_they_are_written() {
    let ir = v1();
    let d = only(run(&ir, &release(0, vec![]), &locks(vec![]), false));
    assert_eq!((d.kind, d.loc), (Kind::ReleaseArg, VERSION_AT));
    assert!(d.message.starts_with("`version` counts a graph's releases from 1"), "{}", d.message);

    let rel = release(2, vec![migrate(2, &[], &[]), migrate(1, &[], &[]), migrate(1, &[], &[]), migrate(0, &[], &[])]);
    let diags = run(&ir, &rel, &locks(vec![]), false);
    let found: Vec<(Loc, &str)> = diags.iter().map(|d| (d.loc, d.message.as_str())).collect();
    assert_eq!(
        found,
        vec![
            (
                Loc(12),
                "`migrate(from = 2)` leads from version 2 to 3, but graph `support` is at version 2; `from` is an older version: 1"
            ),
            (
                Loc(11),
                "`migrate(from = 1)` is declared twice; put all of version 1's changes in one `migrate(from = 1, ..)`"
            ),
            (
                Loc(10),
                "`migrate(from = 0)` leads from version 0 to 1, but graph `support` is at version 2; `from` is an older version: 1"
            ),
        ]
    );
    let first = release(1, vec![migrate(1, &[], &[])]);
    assert!(
        only(run(&ir, &first, &locks(vec![]), false))
            .message
            .ends_with("version 1 is its first, so it has none to migrate from")
    );
}

#[test]
fn a_malformed_lock_is_an_error_naming_the_file() {
    let ir = v1();
    let d = only(run(&ir, &release(1, vec![]), &locks(vec![(1, Err("it is not JSON: EOF".into()))]), false));
    assert_eq!((d.kind, d.loc), (Kind::LockUnreadable, VERSION_AT));
    assert_eq!(
        d.message,
        "the lock of version 1 (`/crate/graphs/support/v1.lock`) cannot be used: it is not JSON: EOF; \
         restore it from version control, or delete it and lock the version again with `agentflow graphs lock`"
    );
}

#[test]
fn an_unreleased_graph_is_checked_for_nothing_but_stray_release_arguments() {
    let ir = v1();
    assert_eq!(run(&ir, &ReleaseIr::default(), &Locks::default(), false), vec![]);
    let stray = ReleaseIr { migrations: vec![migrate(1, &[], &[])], ..ReleaseIr::default() };
    let d = only(run(&ir, &stray, &Locks::default(), false));
    assert_eq!((d.kind, d.loc), (Kind::ReleaseArg, Loc(11)));
    assert!(d.message.contains("declare its version"), "{}", d.message);
}

#[test]
fn an_id_names_a_directory_inside_the_lock_directory() {
    assert!(valid_id("support-v2.x_1"));
    for bad in ["", "../escape", ".hidden", "a/b", "a b"] {
        assert!(!valid_id(bad), "{bad:?}");
    }
    let rel = ReleaseIr { id: Some(("../up".into(), Loc(5))), ..release(1, vec![]) };
    let d = only(run(&v1(), &rel, &locks(vec![]), false));
    assert_eq!((d.kind, d.loc), (Kind::ReleaseArg, Loc(5)));
}

/// `migrate(from = K, nodes(..))` with each mapping's old name at a place of its own (`Loc(40)`,
/// `Loc(41)`, ..).
fn migrate_nodes(from: u32, nodes: &[(&str, &str)]) -> MigrationIr {
    let mut m = migrate(from, &[], &[]);
    m.nodes = nodes.iter().zip(40..).map(|((a, b), at)| (named(a, at), named(b, 21))).collect();
    m
}

/// `triage -> review | escalate -> END`.
fn three_nodes() -> GraphIr {
    graph(vec![
        node("triage", &["review", "escalate", "END"], &["lookup"]),
        node("review", &["END"], &["send_email"]),
        node("escalate", &["END"], &[]),
    ])
}

#[test]
fn two_nodes_mapped_to_one_are_refused_at_the_second_mapping() {
    let v2 = graph(vec![node("triage", &["desk", "END"], &["lookup"]), node("desk", &["END"], &["send_email"])]);
    let rel = release(2, vec![migrate_nodes(1, &[("review", "desk"), ("escalate", "desk")])]);
    let expected = "`escalate -> desk` maps a second node to `desk`: nodes `review`, `escalate` of version 1 would \
                    all continue at `desk`, and a thread waiting in more than one of them would have their kept \
                    writes and questions collide; map each old node to a node of its own";
    // With the lock of version 1, and without it (the mappings name the old nodes).
    for locked in [locks(vec![(1, Ok(lock_of(&three_nodes())))]), locks(vec![])] {
        let d = only(run(&v2, &rel, &locked, false));
        assert_eq!((d.kind, d.loc), (Kind::ReleaseArg, Loc(41)));
        assert_eq!(d.message, expected);
    }
    // Each to a node of its own, or one of them dropped, is fine.
    let v2 = graph(vec![
        node("triage", &["desk", "bench", "END"], &["lookup"]),
        node("desk", &["END"], &["send_email"]),
        node("bench", &["END"], &[]),
    ]);
    let one = locks(vec![(1, Ok(lock_of(&three_nodes())))]);
    let apart = release(2, vec![migrate_nodes(1, &[("review", "desk"), ("escalate", "bench")])]);
    assert_eq!(run(&v2, &apart, &one, false), vec![]);
    let dropped = release(2, vec![migrate_nodes(1, &[("review", "desk"), ("escalate", "END")])]);
    let v2_without_bench =
        graph(vec![node("triage", &["desk", "END"], &["lookup"]), node("desk", &["END"], &["send_email"])]);
    assert_eq!(run(&v2_without_bench, &dropped, &one, false), vec![]);
}

#[test]
fn two_nodes_of_one_version_mapped_to_one_along_the_chain_are_refused() {
    // Version 2 moves `review` to `desk` and keeps `escalate`; version 3 moves `escalate` to
    // `desk` too: threads of version 1 in `review` and `escalate` would both end at `desk`.
    let v2 = graph(vec![
        node("triage", &["desk", "escalate", "END"], &["lookup"]),
        node("desk", &["END"], &["send_email"]),
        node("escalate", &["END"], &[]),
    ]);
    let v3 = graph(vec![node("triage", &["desk", "END"], &["lookup"]), node("desk", &["END"], &["send_email"])]);
    let rel = release(3, vec![migrate_nodes(1, &[("review", "desk")]), migrate_nodes(2, &[("escalate", "desk")])]);
    let both = locks(vec![(1, Ok(lock_of(&three_nodes()))), (2, Ok(lock_of(&v2)))]);
    let d = only(run(&v3, &rel, &both, false));
    assert_eq!((d.kind, d.loc), (Kind::ReleaseArg, Loc(40)));
    assert!(
        d.message.starts_with(
            "`escalate -> desk` maps a second node to `desk`: nodes `review`, `escalate` of version 1 would all continue"
        ),
        "{}",
        d.message
    );
    // A thread of version 2 in `escalate` alone goes to `desk`, which stayed: fine, as is a
    // node removed and its threads sent to a node that stays.
    let v1_lock = locks(vec![(2, Ok(lock_of(&v2)))]);
    assert_eq!(run(&v3, &release(3, vec![migrate_nodes(2, &[("escalate", "desk")])]), &v1_lock, false), vec![]);
}

#[test]
fn a_lock_named_with_leading_zeros_is_an_error_naming_the_file() {
    let ir = v1();
    let mut misnamed = locks(vec![]);
    misnamed.misnamed.push(PathBuf::from("/crate/graphs/support/v01.lock"));
    let d = only(run(&ir, &release(1, vec![]), &misnamed, false));
    assert_eq!((d.kind, d.loc), (Kind::LockUnreadable, VERSION_AT));
    assert_eq!(
        d.message,
        "`/crate/graphs/support/v01.lock` is not a lock name agentflow reads: the lock of version 1 is named \
         `v1.lock`, its version written without leading zeros; rename the file, or delete it"
    );
}
