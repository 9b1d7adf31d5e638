//! Compile-time checks of the agentflow macros.
//!
//! The cases are grouped by area (`graph`, `node`, `state`, `tool`, `subgraph`, `map`, `mcp`),
//! one folder per area under `pass/` and `fail/`; an `mcp` case reads a snapshot (`.json`)
//! and a released graph its locks by a path relative to its own file.
//!
//! - `fail/`: each case must fail to compile with exactly the error in its `.stderr`, checked
//!   by trybuild (all cases in one `cargo check --keep-going`).
//! - `pass/`: each case is a small program using one valid form, compiled into this test
//!   binary as a module of its own (`include!`, so its relative paths stay its own) and its
//!   `main` run as a test. [`every_pass_case_is_listed`] keeps the list below whole.

#[test]
fn fail() {
    trybuild::TestCases::new().compile_fail("ui-tests/fail/*/*.rs");
}

/// One module per `pass/` case: its items, and a test running its `main`.
macro_rules! pass_cases {
    ($($case:ident => $file:literal,)*) => {
        $(
            mod $case {
                include!($file);

                #[test]
                fn compiles_and_runs() {
                    main()
                }
            }
        )*

        /// The files of the modules above, relative to this file.
        const PASS_CASES: &[&str] = &[$($file),*];
    };
}

pass_cases! {
    graph_acyclic_without_max_steps => "pass/graph/acyclic_without_max_steps.rs",
    graph_cycle_with_max_steps => "pass/graph/cycle_with_max_steps.rs",
    graph_fan_out_and_join => "pass/graph/fan_out_and_join.rs",
    graph_goto_end => "pass/graph/goto_end.rs",
    graph_graph_without_deps => "pass/graph/graph_without_deps.rs",
    graph_versioned_migrations => "pass/graph/versioned_migrations.rs",
    graph_versioned_with_lock => "pass/graph/versioned_with_lock.rs",
    map_map_each_forms => "pass/map/map_each_forms.rs",
    mcp_everything => "pass/mcp/everything.rs",
    mcp_nested => "pass/mcp/nested.rs",
    node_goto_without_update => "pass/node/goto_without_update.rs",
    node_node_result_ext => "pass/node/node_result_ext.rs",
    node_node_with_ctx_param => "pass/node/node_with_ctx_param.rs",
    node_node_with_deps_param => "pass/node/node_with_deps_param.rs",
    node_node_with_only_state => "pass/node/node_with_only_state.rs",
    node_retry_count => "pass/node/retry_count.rs",
    node_retry_policy => "pass/node/retry_policy.rs",
    node_returns_result => "pass/node/returns_result.rs",
    node_returns_step => "pass/node/returns_step.rs",
    node_sleep_node => "pass/node/sleep_node.rs",
    node_timeout => "pass/node/timeout.rs",
    node_writes_lists => "pass/node/writes_lists.rs",
    state_field_marks => "pass/state/field_marks.rs",
    state_reducer_custom => "pass/state/reducer_custom.rs",
    state_reducer_messages => "pass/state/reducer_messages.rs",
    state_reducers_builtin => "pass/state/reducers_builtin.rs",
    state_state_version => "pass/state/state_version.rs",
    subgraph_subgraphs => "pass/subgraph/subgraphs.rs",
    tool_tool_compensate => "pass/tool/tool_compensate.rs",
    tool_tool_cx_with_deps => "pass/tool/tool_cx_with_deps.rs",
    tool_tool_deps_param => "pass/tool/tool_deps_param.rs",
    tool_tool_idempotent => "pass/tool/tool_idempotent.rs",
    tool_tool_react_agent => "pass/tool/tool_react_agent.rs",
    tool_tool_risk_classes => "pass/tool/tool_risk_classes.rs",
    tool_tool_with_cx => "pass/tool/tool_with_cx.rs",
    tool_tool_without_cx => "pass/tool/tool_without_cx.rs",
    tool_tool_without_deps_in_any_graph => "pass/tool/tool_without_deps_in_any_graph.rs",
}

/// A case added under `pass/` and not listed above would not be compiled at all.
#[test]
fn every_pass_case_is_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui-tests");
    let mut on_disk = Vec::new();
    for area in std::fs::read_dir(dir.join("pass")).expect("ui-tests/pass") {
        let area = area.expect("an area of ui-tests/pass").path();
        for case in std::fs::read_dir(&area).expect("an area's cases") {
            let case = case.expect("a case").path();
            if case.extension().is_some_and(|e| e == "rs") {
                let rel = case.strip_prefix(&dir).expect("under ui-tests");
                on_disk.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    on_disk.sort();
    let mut listed: Vec<String> = PASS_CASES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "list every file of ui-tests/pass in `pass_cases!` (ui-tests/ui.rs)");
}
