//! Compile-time checks of the agentflow macros, driven by trybuild.
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui-tests/pass/*.rs");
    t.compile_fail("ui-tests/fail/*.rs");
}
