//! Compile-time checks of the agentflow macros, driven by trybuild.
//!
//! The cases are grouped by area (`graph`, `node`, `state`, `tool`, `subgraph`, `map`), one
//! folder per area under `pass/` and `fail/`.
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui-tests/pass/*/*.rs");
    t.compile_fail("ui-tests/fail/*/*.rs");
}
