//! Child processes of a test binary: a test that kills or restarts "another process" re-runs
//! its own binary with one ignored test selected by its full name.

use std::collections::HashSet;
use std::process::Command;
use std::sync::Mutex;

/// The name the test harness knows a test by: `module` is the test's `module_path!()` (the
/// binary's crate name first, which the harness leaves out) and `test` its function's name.
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_string(),
    }
}

/// This binary, set to run only the ignored test `module::test` (see [`test_name`]), with its
/// output not captured, on one test thread. Panics when this binary has no such ignored test,
/// so a child never runs nothing and exits as if it had passed.
pub fn own_test(module: &str, test: &str) -> Command {
    let name = test_name(module, test);
    let exe = std::env::current_exe().expect("the test binary's path");
    static CHECKED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    if !checked.get_or_insert_with(HashSet::new).contains(&name) {
        let listed = Command::new(&exe)
            .args(["--list", "--ignored", "--exact", &name])
            .output()
            .expect("list this binary's tests");
        let listing = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listing.lines().any(|line| line == format!("{name}: test")),
            "this test binary has no ignored test named `{name}`:\n{listing}"
        );
        checked.as_mut().unwrap().insert(name.clone());
    }
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", &name, "--ignored", "--nocapture", "--test-threads=1"]);
    cmd
}
