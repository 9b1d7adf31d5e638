//! Unit tests of the graph rules, on graphs built by hand (no proc-macro types).

use super::*;
use crate::diag::Diagnostic;
use crate::graph::ir::{Named, NodeIr, Route, Signature, Written};
use crate::graph::resolve::resolve;

/// `("a", &["b", "END"], &[&["b"]])`: name, goto list, goto! call sites.
type Spec<'a> = (&'a str, &'a [&'a str], &'a [&'a [&'a str]]);

fn graph(start: &str, max_steps: Option<u32>, nodes: &[Spec]) -> GraphIr {
    GraphIr {
        name: "g".into(),
        loc: Loc::DUMMY,
        state: "S".into(),
        deps: None,
        start: Some(Named::new(start)),
        max_steps,
        max_depth: None,
        nodes: nodes
            .iter()
            .map(|(name, goto, routes)| NodeIr {
                name: Named::new(name),
                goto: goto.iter().map(|t| Named::new(t)).collect(),
                goto_loc: Some(Loc::DUMMY),
                writes: None,
                routes: routes
                    .iter()
                    .map(|r| Route { targets: r.iter().map(|t| Named::new(t)).collect(), each: vec![] })
                    .collect(),
                sets: vec![],
                tools: vec![],
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
            })
            .collect(),
    }
}

/// Resolves and checks `ir`, as the expansion does.
fn run(ir: &GraphIr) -> (Checked, Vec<Diagnostic>) {
    let mut d = Diagnostics::default();
    let checked = check_all(ir, &resolve(ir), &mut d);
    (checked, d.into_vec())
}

fn kinds(ir: &GraphIr) -> Vec<Kind> {
    run(ir).1.into_iter().map(|d| d.kind).collect()
}

fn messages(ir: &GraphIr) -> Vec<String> {
    run(ir).1.into_iter().map(|d| d.message).collect()
}

#[test]
fn a_valid_graph_has_no_errors() {
    let ir = graph(
        "classify",
        Some(10),
        &[
            ("classify", &["answer", "review"], &[&["answer"], &["review"]]),
            ("answer", &["review", "END"], &[&["review"], &["END"]]),
            ("review", &["answer", "END"], &[&["answer"], &["END"]]),
        ],
    );
    assert_eq!(kinds(&ir), vec![]);
}

#[test]
fn unknown_target_suggests_a_close_name() {
    let ir = graph("a", None, &[("a", &["retreive"], &[]), ("retrieve", &["END"], &[])]);
    let msgs = messages(&ir);
    assert!(
        msgs[0].contains("unknown node `retreive` in the `goto` list of `a`; did you mean `retrieve`?"),
        "{msgs:?}"
    );
}

#[test]
fn goto_outside_the_list_is_an_illegal_transition() {
    let ir = graph(
        "classify",
        None,
        &[
            ("classify", &["answer", "escalate"], &[&["send"]]),
            ("answer", &["END"], &[]),
            ("escalate", &["END"], &[]),
            ("send", &["END"], &[]),
        ],
    );
    let msgs = messages(&ir);
    assert!(
        msgs.iter()
            .any(|m| m.starts_with("illegal transition `classify -> send`: `classify` may go to `answer`, `escalate`")),
        "{msgs:?}"
    );
}

#[test]
fn duplicate_missing_and_unknown_start() {
    let ir = graph("a", None, &[("a", &["END"], &[]), ("a", &["END"], &[])]);
    assert!(kinds(&ir).contains(&Kind::DuplicateNode));
    let mut ir = graph("zz", None, &[("a", &["END"], &[])]);
    assert!(kinds(&ir).contains(&Kind::UnknownStart));
    ir.start = None;
    assert!(kinds(&ir).contains(&Kind::MissingStart));
}

#[test]
fn unreachable_node_is_named() {
    let ir = graph("a", None, &[("a", &["END"], &[]), ("orphan", &["END"], &[])]);
    let msgs = messages(&ir);
    assert_eq!(
        msgs,
        vec![
            "node `orphan` is unreachable from the start node `a`; route to it from another node's `goto` list, or remove it"
        ]
    );
}

#[test]
fn cycle_without_exit_names_the_loop() {
    let ir = graph("draft", Some(5), &[("draft", &["review"], &[]), ("review", &["draft"], &[])]);
    let msgs = messages(&ir);
    assert_eq!(kinds(&ir), vec![Kind::CycleWithoutExit]);
    assert!(msgs[0].starts_with("cycle `draft -> review -> draft` never reaches `END`"), "{msgs:?}");
}

#[test]
fn dead_end_node_cannot_reach_end() {
    let ir = graph("a", None, &[("a", &["b", "END"], &[]), ("b", &["c"], &[]), ("c", &[], &[])]);
    let msgs = messages(&ir);
    assert_eq!(
        msgs,
        vec![
            "node `c` has an empty `goto` list, so it cannot reach `END`; add `END` or a node that reaches it\n\
             because of it, `b` cannot reach `END` either"
        ]
    );
}

#[test]
fn cycle_needs_max_steps() {
    let ir = graph("a", None, &[("a", &["b"], &[]), ("b", &["a", "END"], &[])]);
    assert_eq!(kinds(&ir), vec![Kind::CycleWithoutBound]);
    let ir = graph("a", Some(3), &[("a", &["b"], &[]), ("b", &["a", "END"], &[])]);
    assert_eq!(kinds(&ir), vec![]);
}

#[test]
fn every_error_is_reported_together() {
    let ir = graph(
        "a",
        None,
        &[("a", &["b", "nope"], &[&["c"]]), ("b", &["b"], &[]), ("c", &["END"], &[]), ("d", &["END"], &[])],
    );
    let k = kinds(&ir);
    for want in [
        Kind::UnknownTarget,
        Kind::IllegalTransition,
        Kind::CycleWithoutExit,
        Kind::CycleWithoutBound,
        Kind::Unreachable,
    ] {
        assert!(k.contains(&want), "missing {want:?} in {k:?}");
    }
}

#[test]
fn writes_outside_the_list_and_same_step_conflicts() {
    let mut ir = graph(
        "split",
        None,
        &[
            ("split", &["left", "right"], &[&["left", "right"]]),
            ("left", &["END"], &[&["END"]]),
            ("right", &["END"], &[&["END"]]),
        ],
    );
    ir.nodes[1].sets = vec![Named::new("summary")];
    ir.nodes[2].writes = Some(vec![Named::new("summary")]);
    ir.nodes[2].sets = vec![Named::new("summary"), Named::new("draft")];
    let (a, diags) = run(&ir);
    assert_eq!(diags.len(), 1);
    assert!(diags[0].message.starts_with("node `right` sets `draft`, which is not in its `writes = [summary]`"));
    assert_eq!(
        a.conflicts,
        vec![Conflict { first: "left".into(), second: "right".into(), field: "summary".into(), loc: Loc::DUMMY }]
    );
}

#[test]
fn a_mistake_is_not_reported_again_as_its_consequences() {
    // `retreive` most likely means `retrieve`, and the illegal `goto!(c)`
    // means `c` is meant to be reachable: neither is "unreachable", and
    // `a` is not "unable to reach END".
    let ir = graph("a", None, &[("a", &["retreive"], &[&["c"]]), ("retrieve", &["END"], &[]), ("c", &["END"], &[])]);
    assert_eq!(kinds(&ir), vec![Kind::UnknownTarget, Kind::IllegalTransition]);
}

#[test]
fn a_missing_goto_list_is_suggested_from_the_body() {
    let mut ir = graph("a", None, &[("a", &[], &[&["b"], &["END"]]), ("b", &["END"], &[])]);
    ir.nodes[0].goto_loc = None;
    assert_eq!(
        messages(&ir),
        vec!["node `a` has no `goto` list, but its body routes to `b`, `END`; add `#[node(goto = [b, END])]`"]
    );
}

#[test]
fn a_write_resembling_a_listed_name_is_left_to_the_field_assertion() {
    let mut ir = graph("a", None, &[("a", &["END"], &[])]);
    ir.nodes[0].writes = Some(vec![Named::new("sumary")]);
    ir.nodes[0].sets = vec![Named::new("summary")];
    let (a, diags) = run(&ir);
    assert!(diags.is_empty());
    assert_eq!(a.guarded.len(), 1);
    assert_eq!(a.guarded[0].close, "sumary");
}

#[test]
fn signature_errors_point_at_the_part_to_change() {
    let mut ir = graph("a", None, &[("a", &["END"], &[])]);
    ir.nodes[0].sig.params = vec![Loc(0), Loc(1), Loc(2)];
    let (_, d) = run(&ir);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].loc, Loc(2));
    assert!(d[0].message.starts_with("node `a` takes 3 parameters"), "{}", d[0].message);
}

#[test]
fn signature_shapes_are_checked() {
    let mut ir = graph("a", None, &[("a", &["END"], &[])]);
    ir.nodes[0].sig.is_async = false;
    ir.nodes[0].sig.state = Param::Value;
    let msgs = messages(&ir);
    assert!(msgs[0].starts_with("node `a` must be an `async fn`"), "{msgs:?}");
    assert!(msgs[1].starts_with("node `a` takes the state by value"), "{msgs:?}");
}

#[test]
fn tools_outside_the_list_and_undeclared_interrupts_are_named() {
    let mut ir = graph("llm_call", None, &[("llm_call", &["END"], &[&["END"]])]);
    ir.nodes[0].tools = vec![Named::new("add"), Named::new("multiply")];
    ir.nodes[0].tool_uses = vec![Named::new("add"), Named::new("divide")];
    ir.nodes[0].interrupt_calls = vec![Loc::DUMMY];
    let msgs = messages(&ir);
    assert_eq!(
        msgs,
        vec![
            "tool `divide` is not allowed in node `llm_call`; allowed: `add`, `multiply`\n\
             to allow it, add `divide` to the `tools` list of `llm_call`"
                .to_string(),
            "node `llm_call` calls `interrupt` but is not marked as one that may pause; add `interrupt` to its attribute: `#[node(.., interrupt)]`".to_string(),
        ]
    );
    ir.nodes[0].interrupt = true;
    assert_eq!(messages(&ir).len(), 1);
}

#[test]
fn tools_named_by_path_match_by_their_end() {
    let mut ir = graph("llm_call", None, &[("llm_call", &["END"], &[&["END"]])]);
    ir.nodes[0].tools = vec![Named::new("everything::get_sum"), Named::new("echo")];
    ir.nodes[0].tool_uses = vec![
        Named::new("everything::get_sum"),
        Named::new("get_sum"),
        Named::new("crate::everything::get_sum"),
        Named::new("everything::echo"),
    ];
    assert!(messages(&ir).is_empty(), "{:?}", messages(&ir));
    ir.nodes[0].tool_uses = vec![Named::new("other::get_sum"), Named::new("everything::get_sum_x")];
    let msgs = messages(&ir);
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[0].starts_with(
            "tool `other::get_sum` is not allowed in node `llm_call`; allowed: `everything::get_sum`, `echo`"
        ),
        "{msgs:?}"
    );
}

#[test]
fn a_tool_in_a_node_with_no_tools_says_how_to_list_it() {
    let mut ir = graph("compute", None, &[("compute", &["END"], &[&["END"]])]);
    ir.nodes[0].tool_uses = vec![Named::new("add")];
    assert_eq!(
        messages(&ir),
        vec![
            "tool `add` is not allowed in node `compute`, which lists no tools\n\
             to allow it, list it in the node's attribute: `#[node(.., tools = [add])]`"
                .to_string()
        ]
    );
}

#[test]
fn subgraphs_outside_the_list_and_a_graph_running_itself_are_named() {
    let mut ir = graph("delegate", None, &[("delegate", &["END"], &[&["END"]])]);
    ir.nodes[0].subgraph_uses = vec![Named::new("research"), Named::new("writer")];
    assert_eq!(
        messages(&ir),
        vec![
            "node `delegate` runs subgraph `research`, which is not in its `subgraphs` list; declare it: `#[node(.., subgraphs = [research])]`",
            "node `delegate` runs subgraph `writer`, which is not in its `subgraphs` list; declare it: `#[node(.., subgraphs = [writer])]`",
        ]
    );
    ir.nodes[0].subgraphs = vec![Named::new("research")];
    assert_eq!(
        messages(&ir),
        vec![
            "node `delegate` runs subgraph `writer`, which is not in its `subgraphs` list; add it to the list: `subgraphs = [research, writer]`"
        ]
    );
    ir.nodes[0].subgraphs.push(Named::new("writer"));
    assert!(messages(&ir).is_empty());
    // The graph under test is named `g`.
    ir.nodes[0].subgraphs.push(Named::new("g"));
    assert_eq!(kinds(&ir), vec![Kind::SubgraphSelf]);
}

#[test]
fn undeclared_sleeps_are_named_with_the_method() {
    let mut ir = graph("wait", None, &[("wait", &["END"], &[&["END"]])]);
    ir.nodes[0].sleep_calls = vec![("sleep".into(), Loc::DUMMY), ("sleep_until".into(), Loc::DUMMY)];
    assert_eq!(
        messages(&ir),
        vec![
            "node `wait` calls `sleep` but is not marked as one that may wait on a durable timer; add `sleep` to its attribute: `#[node(.., sleep)]`".to_string(),
            "node `wait` calls `sleep_until` but is not marked as one that may wait on a durable timer; add `sleep` to its attribute: `#[node(.., sleep)]`".to_string(),
        ]
    );
    ir.nodes[0].sleep = true;
    assert!(messages(&ir).is_empty());
    // `interrupt` does not allow `sleep`.
    ir.nodes[0].sleep = false;
    ir.nodes[0].interrupt = true;
    assert_eq!(messages(&ir).len(), 2);
}

#[test]
fn a_typo_in_the_goto_list_is_reported_once() {
    // `goto = [retreive, END]` with `goto!(retrieve)` in the body: the
    // list is wrong, the `goto!` is what the user meant.
    let ir = graph(
        "a",
        None,
        &[("a", &["retreive", "END"], &[&["retrieve"], &["END"]]), ("retrieve", &["END"], &[&["END"]])],
    );
    assert_eq!(messages(&ir), vec!["unknown node `retreive` in the `goto` list of `a`; did you mean `retrieve`?"]);
}

#[test]
fn map_workers_are_reached_only_through_each() {
    // plan -> each(analyst) -> summarize; plan also routes plainly to a worker,
    // sends to a node without a payload, and `summarize` says `parallel`.
    let mut ir = graph(
        "plan",
        None,
        &[
            ("plan", &["analyst", "summarize"], &[&["analyst", "summarize"], &["analyst"]]),
            ("analyst", &["summarize"], &[&["summarize"]]),
            ("summarize", &["END"], &[&["END"]]),
        ],
    );
    ir.nodes[1].payload = Some(Loc::DUMMY);
    ir.nodes[1].sig.payload_at = Some(1);
    ir.nodes[1].sig.params = vec![Loc::DUMMY; 3];
    // `goto!([each(analyst, ..), each(summarize, ..)])`, then `goto!(analyst)`.
    ir.nodes[0].routes[0].each = vec![0, 1];
    assert_eq!(
        messages(&ir),
        vec![
            "node `plan` sends payloads to `summarize` with `each(summarize, ..)`, but `summarize` takes no payload; \
             add a `#[payload] item: &Item` parameter to `summarize`, or route to it with `goto!(summarize)`",
            "node `plan` routes to `analyst` with a plain `goto!`, but `analyst` takes a `#[payload]` parameter; \
             send it its payloads with `goto!(each(analyst, payloads))`: one instance of `analyst` runs per payload",
        ]
    );
    ir.nodes[0].routes[0].each = vec![0];
    ir.nodes[0].routes.truncate(1);
    assert_eq!(kinds(&ir), vec![]);
    // `each(END, ..)` is no map.
    ir.nodes[2].routes[0].each = vec![0];
    assert_eq!(
        messages(&ir),
        vec![
            "node `summarize` sends payloads to `END`; `each(worker, payloads)` names a map worker (a node with a `#[payload]` parameter)"
        ]
    );
    ir.nodes[2].routes[0].each = vec![];
    ir.nodes[2].parallel = Some(Loc::DUMMY);
    ir.start = Some(Named::new("analyst"));
    let msgs = messages(&ir);
    assert!(msgs.iter().any(|m| m.starts_with("`parallel` bounds how many instances")), "{msgs:?}");
    assert!(msgs.iter().any(|m| m.starts_with("the start node `analyst` takes a `#[payload]`")), "{msgs:?}");
}

#[test]
fn a_workers_writes_conflict_with_its_own_instances() {
    let mut ir = graph("plan", None, &[("plan", &["analyst"], &[&["analyst"]]), ("analyst", &["END"], &[&["END"]])]);
    ir.nodes[1].payload = Some(Loc::DUMMY);
    ir.nodes[1].sets = vec![Named::new("last")];
    ir.nodes[0].routes[0].each = vec![0];
    let (checked, diags) = run(&ir);
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(
        checked.conflicts,
        vec![Conflict { first: "analyst".into(), second: "analyst".into(), field: "last".into(), loc: Loc::DUMMY }]
    );
}

#[test]
fn a_payload_parameter_comes_second_and_allows_a_third() {
    let mut ir = graph("a", None, &[("a", &["END"], &[])]);
    ir.nodes[0].payload = Some(Loc::DUMMY);
    ir.nodes[0].sig.params = vec![Loc(0), Loc(1), Loc(2)];
    ir.nodes[0].sig.payload_at = Some(1);
    ir.start = Some(Named::new("b"));
    assert!(!kinds(&ir).contains(&Kind::Signature));
    ir.nodes[0].sig.payload_at = Some(2);
    let (_, d) = run(&ir);
    let sig: Vec<_> = d.iter().filter(|d| d.kind == Kind::Signature).collect();
    assert_eq!(sig.len(), 1);
    assert_eq!(sig[0].loc, Loc(2));
    assert!(sig[0].message.contains("`#[payload]` parameter in the wrong place"), "{}", sig[0].message);
}

/// A map worker whose payload parameter lacks `#[payload]` takes three parameters: reported
/// once, at the payload, as a missing `#[payload]`; not as a parameter too many, nor as `each`
/// to a node without a payload.
#[test]
fn a_payload_without_its_attribute_is_reported_once_at_the_payload() {
    let mut ir = graph("plan", None, &[("plan", &["analyst"], &[&["analyst"]]), ("analyst", &["END"], &[&["END"]])]);
    ir.nodes[0].routes[0].each = vec![0];
    // `async fn analyst(s: &S, ticker: &String, cx: &Ctx<D>)`.
    ir.nodes[1].sig.params = vec![Loc(0), Loc(1), Loc(2)];
    let written = |text: &str, at: u32| Written { text: text.into(), loc: Loc(at) };
    ir.nodes[1].sig.written = vec![written("s: &S", 3), written("ticker: &String", 4), written("cx: &Ctx<D>", 5)];
    ir.nodes[1].sig.ctx_at = vec![2];
    let (checked, d) = run(&ir);
    assert_eq!(d.len(), 1, "{d:?}");
    // At the whole parameter, which the help shows as written, with the attribute added.
    assert_eq!((d[0].kind, d[0].loc), (Kind::Signature, Loc(4)));
    assert_eq!(
        d[0].message,
        "node `analyst` is a map worker (node `plan` sends it payloads with `each(analyst, ..)`), so its second \
         parameter, the payload, needs `#[payload]`: `#[payload] ticker: &String`"
    );
    assert_eq!(checked.sig_ok, [true, false]);
    // `async fn analyst(s: &S, cx: &Ctx<D>, ticker: &String)`: the third, which must move too.
    ir.nodes[1].sig.written = vec![written("s: &S", 3), written("cx: &Ctx<D>", 4), written("ticker: &String", 5)];
    ir.nodes[1].sig.ctx_at = vec![1];
    let (_, d) = run(&ir);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].loc, Loc(5));
    assert!(
        d[0].message.contains(
            "so its third parameter, the payload, needs `#[payload]`: `#[payload] ticker: &String`, and move it second"
        ),
        "{}",
        d[0].message
    );
    // Not sent payloads: a parameter too many, as before.
    ir.nodes[0].routes[0].each = vec![];
    let msgs = messages(&ir);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].starts_with("node `analyst` takes 3 parameters; a node takes at most 2"), "{msgs:?}");
    // Sent payloads with two parameters: the `each` rule says to add one.
    ir.nodes[0].routes[0].each = vec![0];
    ir.nodes[1].sig.params = vec![Loc(0), Loc(1)];
    let msgs = messages(&ir);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("but `analyst` takes no payload; add a `#[payload] item: &Item` parameter"), "{msgs:?}");
}

#[test]
fn each_check_reads_only_the_resolved_graph() {
    // Every rule run alone reports the same errors as in `check_all`:
    // none depends on another having run first.
    let ir = graph(
        "a",
        None,
        &[("a", &["b", "nope"], &[&["c"]]), ("b", &["b"], &[]), ("c", &["END"], &[]), ("d", &["END"], &[])],
    );
    let r = resolve(&ir);
    let mut alone = Vec::new();
    let rules: [&dyn Fn(&mut Diagnostics); 12] = [
        &|d| check_duplicate_nodes(&ir, d),
        &|d| drop(check_signatures(&ir, &r, d)),
        &|d| check_start(&ir, &r, d),
        &|d| check_targets(&ir, &r, d),
        &|d| check_routes(&ir, &r, d),
        &|d| drop(check_writes(&ir, d)),
        &|d| check_tools(&ir, d),
        &|d| check_interrupts(&ir, d),
        &|d| check_sleeps(&ir, d),
        &|d| check_map(&ir, &r, d),
        &|d| check_reachable(&ir, &r, d),
        &|d| check_exits(&ir, &r, d),
    ];
    for rule in rules.iter().rev() {
        let mut d = Diagnostics::default();
        rule(&mut d);
        alone.extend(d.into_vec());
    }
    let mut all = run(&ir).1;
    let key = |d: &Diagnostic| (format!("{:?}", d.kind), d.message.clone());
    alone.sort_by_key(key);
    all.sort_by_key(key);
    assert_eq!(alone, all);
    assert!(all.len() >= 5, "{all:?}");
}
