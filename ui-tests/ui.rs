//! Compile-time checks of the agentflow macros, driven by trybuild.
//!
//! The cases are grouped by area (`graph`, `node`, `state`, `tool`, `subgraph`, `map`, `mcp`),
//! one folder per area under `pass/` and `fail/`; an `mcp` case reads a snapshot (`.json`)
//! by a path relative to its own file.
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui-tests/pass/*/*.rs");
    t.compile_fail("ui-tests/fail/*/*.rs");
}
