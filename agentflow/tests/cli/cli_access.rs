//! The CLI's access flags: who must be named and when, the policy file's errors, and the run
//! controls' answers (what was asked, `--json`, a thread with no queued run).

use serde_json::json;

use crate::access_fixture::{self as fx, TENANT, look};
use crate::cli_common::{af, af_json, expect_refusal, stdout};
use crate::inbox_common::{temp_dir, with_redb};

#[test]
fn commands_that_record_who_acted_and_every_command_under_a_policy_need_as() {
    let dir = temp_dir("access-flags");
    let store = dir.join("runs.redb");
    crate::inbox_common::runtime().block_on(fx::seeded_file(&store));
    let access = fx::policy_file(&dir);
    let access = access.to_str().unwrap();
    let (id, _) = with_redb(&store, |s| look::approval(s.as_ref(), "t-pay"));
    // Who acted goes to the audit log: these need --as, a usage error naming the flag.
    for args in [
        &["approve", id.as_str(), "--role", "irreversible"][..],
        &["answer", "t-ask", "--value", "3"],
        &["fork", "t-done", "1"],
        &["update", "t-done", "--set", r#"{"log": ["x"]}"#],
        &["run", "resume", "t-res"],
        &["run", "cancel", "t-q1"],
        &["run", "pause", "t-q2"],
    ] {
        expect_refusal(&af(&store, args), 2, "needs --as USER");
    }
    // Under a policy every command needs the real actor, reads included.
    expect_refusal(&af(&store, &["threads", "--access", access]), 2, "--access needs --as USER");
    expect_refusal(&af(&store, &["show", "t-done", "--access", access]), 2, "the real person");
    // The flags go before or after the command; a policy file that is not one is a usage error.
    let listed = af_json(&store, &["--as", "olga", "--role", "ok", "--access", access, "threads"]);
    assert!(listed.as_array().unwrap().iter().any(|t| t["id"] == "t-done"));
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"read": ["viewer"]}"#).unwrap();
    expect_refusal(&af(&store, &["threads", "--as", "olga", "--access", bad.to_str().unwrap()]), 2, "`read`");
    expect_refusal(&af(&store, &["threads", "--as", "olga", "--access", "/nonexistent/access.json"]), 2, "--access");
    // A denied operation: exit 1 with the policy's reason.
    let out = af(&store, &["show", "t-done", "--as", "vic", "--role", "viewer", "--access", access]);
    expect_refusal(&out, 1, "`vic` may not read a thread's state");
    expect_refusal(&out, 1, "`ok`");
    // The inbox checks its logged-in users, not the one who starts it.
    expect_refusal(&af(&store, &["serve", "--users", "users.json", "--as", "olga"]), 2, "do not apply");
}

#[test]
fn run_controls_say_what_was_asked_and_refuse_a_thread_with_no_queued_run() {
    let dir = temp_dir("run-controls");
    let store = dir.join("runs.redb");
    crate::inbox_common::runtime().block_on(fx::seeded_file(&store));
    let pause = af(&store, &["run", "pause", "t-q2", "--as", "ops"]);
    assert_eq!(pause.status.code(), Some(0));
    assert!(stdout(&pause).contains("asked thread t-q2's run to pause"), "{}", stdout(&pause));
    let cancel = af_json(&store, &["run", "cancel", "t-q1", "--as", "ops", "--tenant", TENANT]);
    assert_eq!(cancel, json!({ "thread": "t-q1", "asked": "cancel", "by": "ops" }));
    let resume = af_json(&store, &["run", "resume", "t-res", "--as", "ops"]);
    assert_eq!(resume["asked"], "resume");
    assert!(with_redb(&store, |s| look::queued(s.as_ref(), "t-res")));
    // Not queued, queued already, not there.
    expect_refusal(&af(&store, &["run", "cancel", "t-done", "--as", "ops"]), 1, "has no queued or running run");
    expect_refusal(&af(&store, &["run", "resume", "t-res", "--as", "ops"]), 1, "t-res");
    expect_refusal(
        &af(&store, &["run", "pause", "t-nowhere", "--as", "ops"]),
        1,
        "t-nowhere` has no queued or running run",
    );
    // A question no one answered: a worker could not go on.
    expect_refusal(&af(&store, &["run", "resume", "t-ask", "--as", "ops"]), 1, "t-ask");
}
