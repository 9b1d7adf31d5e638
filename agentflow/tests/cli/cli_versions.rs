//! `agentflow threads --versions`: threads counted by graph id and version from the stored graph
//! descriptions (one stored before versions is version 1), with how many may still resume;
//! `agentflow graphs lock|check`: `cargo test` run on the lock tests, with the cargo `CARGO`
//! names, its arguments and exit code passed through.

use std::path::Path;
use std::sync::Arc;

use agentflow::__private::{Release, with_release};
use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde_json::{Value, json};

use super::cli_common::{Pay, af, af_json, fill, refund, runtime, stderr, stdout, temp_dir};

/// Version 2 of `payments`: the refund is followed by a receipt node.
#[graph(state = Pay, start = check)]
pub mod payments_v2 {
    use super::*;

    #[node(goto = [pay, END])]
    async fn check(s: &Pay) -> Result<Step<Pay>, NodeError> {
        if s.amount == 0 { Ok(goto!(END, Pay::update().steps(1))) } else { Ok(goto!(pay, Pay::update().steps(1))) }
    }

    #[node(goto = [receipt], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(receipt, Pay::update().receipt(Some(obs.body))))
    }

    #[node(goto = [END])]
    async fn receipt(_s: &Pay) -> Result<Step<Pay>, NodeError> {
        Ok(goto!(END, Pay::update().log(vec!["receipt".into()])))
    }
}

/// `payments` at version 1 (stored with a description from before versions): `t-paused`
/// waiting, `t-done` completed, `t-failed` failed; at version 2: `t-v2-paused` waiting and
/// `t-v2-done` completed.
fn two_versions(path: &Path) {
    fill(path);
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(path).expect("open store"));
    let v1 = super::cli_common::payments::graph();
    let text = store.graph_description(v1.fingerprint()).unwrap().expect("the description of version 1");
    let mut old: Value = serde_json::from_str(&text).unwrap();
    assert_eq!((old["id"].as_str(), old["version"].as_u64()), (Some("payments"), Some(1)), "{old}");
    let fields = old.as_object_mut().unwrap();
    fields.remove("id");
    fields.remove("version");
    store.put_graph_description(v1.fingerprint(), &old.to_string()).unwrap();

    let v2 = with_release(payments_v2::graph(), Release::new("payments", 2, &[], "{}", ""));
    let described = v2.description();
    assert_eq!((described["id"].as_str(), described["version"].as_u64()), (Some("payments"), Some(2)));
    let app = v2.app().store(Arc::clone(&store));
    runtime().block_on(async {
        let run = |thread: &'static str, amount: u32| {
            let app = app.clone();
            async move {
                let input = Pay { order: "B-1".into(), amount, ..Pay::default() };
                app.runner(&()).thread(thread).owner("agent").run(input).await.expect("a run").outcome
            }
        };
        assert!(matches!(run("t-v2-paused", 40).await, Outcome::Interrupted { .. }));
        assert_eq!(run("t-v2-done", 0).await, Outcome::Completed);
    });
}

#[test]
fn threads_are_counted_by_graph_version_with_those_that_may_still_resume() {
    let dir = temp_dir("versions");
    let path = dir.join("runs.redb");
    two_versions(&path);

    let out = af(&path, &["threads", "--versions"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Vec<String>> =
        stdout(&out).lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect();
    assert_eq!(
        rows,
        vec![
            vec!["GRAPH", "VERSION", "THREADS", "WAITING"],
            vec!["payments", "1", "3", "2"],
            vec!["payments", "2", "2", "1"],
        ],
        "{}",
        stdout(&out)
    );
    // `--version` says the same.
    assert_eq!(stdout(&af(&path, &["threads", "--version"])), stdout(&out));

    let listed = af_json(&path, &["threads", "--versions"]);
    let v1 = super::cli_common::payments::graph();
    // Version 2's fingerprint includes its version.
    let v2 = with_release(payments_v2::graph(), Release::new("payments", 2, &[], "{}", ""));
    assert_ne!(v2.fingerprint(), payments_v2::graph().fingerprint());
    assert_eq!(
        listed,
        json!([
            { "graph": "payments", "version": 1, "threads": 3, "waiting": 2, "fingerprints": [v1.fingerprint()] },
            { "graph": "payments", "version": 2, "threads": 2, "waiting": 1, "fingerprints": [v2.fingerprint()] },
        ])
    );
    // The filters of `threads` apply first: the completed threads are version 1's and 2's only
    // finished ones.
    let done = af_json(&path, &["threads", "--versions", "--status", "completed"]);
    let counts: Vec<(u64, u64, u64)> = done
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["version"].as_u64().unwrap(), r["threads"].as_u64().unwrap(), r["waiting"].as_u64().unwrap()))
        .collect();
    assert_eq!(counts, vec![(1, 1, 0), (2, 1, 0)]);
}

/// Threads whose fingerprint has no stored description: `t-moved` moved to version 3 (its last
/// `graph.migrated` says so), `t-root` whose first checkpoint recorded version 2, and `t-bare`
/// with neither (version 1).
#[test]
fn a_thread_without_a_stored_description_counts_at_the_version_a_resume_reads() {
    use agentflow_store::{Checkpoint, CheckpointMetadata, CheckpointSource, NewAuditEntry, StepCommit, ThreadRecord};
    let dir = temp_dir("versions-undescribed");
    let path = dir.join("runs.redb");
    let store = RedbStore::open(&path).expect("create the store");
    let root = |thread: &str, graph: Value| {
        let mut metadata = CheckpointMetadata::new(0, CheckpointSource::Input, vec![]);
        metadata.extra = json!({ "graph": graph });
        Checkpoint {
            thread: thread.into(),
            seq: 0,
            parent: None,
            cursor: vec!["check".into()],
            snapshot: Some(b"{}".to_vec()),
            delta: vec![],
            metadata,
            created_at: 1,
        }
    };
    for (thread, fingerprint, graph, moved_to) in [
        ("t-moved", "fp-moved", json!({ "name": "payments", "version": 2 }), Some(3)),
        ("t-root", "fp-root", json!({ "name": "payments", "version": 2 }), None),
        ("t-bare", "fp-bare", json!({ "name": "payments" }), None),
    ] {
        let mut commit = StepCommit::new(ThreadRecord::new(thread, "agent", fingerprint, 1, 1));
        commit.checkpoint = Some(root(thread, graph));
        commit.audit = moved_to
            .map(|to| NewAuditEntry::new(2, "agentflow", "graph.migrated", json!({ "from": 2, "to": to })))
            .into_iter()
            .collect();
        store.commit_step(commit).expect("write a thread");
        assert_eq!(store.graph_description(fingerprint).unwrap(), None);
    }
    drop(store);
    let listed = af_json(&path, &["threads", "--versions"]);
    let rows: Vec<(String, Value)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["graph"].as_str().unwrap().to_string(), r["version"].clone()))
        .collect();
    let expected = [("fp-bare", json!(1)), ("fp-moved", json!(3)), ("fp-root", json!(2))];
    assert_eq!(rows, expected.map(|(g, v)| (g.to_string(), v)));
    let out = af(&path, &["threads", "--versions"]);
    assert!(!stdout(&out).contains('?'), "{}", stdout(&out));
}

/// A stand-in for cargo that records its arguments and `AGENTFLOW_LOCK`, then exits with 7.
#[cfg(unix)]
fn fake_cargo(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("fake-cargo");
    let record = dir.join("cargo-called");
    let body = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{0}'\necho \"AGENTFLOW_LOCK=${{AGENTFLOW_LOCK-unset}}\" >> '{0}'\nexit 7\n",
        record.display()
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[cfg(unix)]
#[test]
fn graphs_lock_and_check_run_the_cargo_named_by_cargo_on_the_lock_tests() {
    let dir = temp_dir("graphs-cargo");
    let script = fake_cargo(&dir);
    let record = dir.join("cargo-called");
    let graphs = |args: &[&str], lock: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentflow"));
        command.arg("graphs").args(args).env("CARGO", &script).env_remove("AGENTFLOW_STORE");
        match lock {
            Some(value) => command.env("AGENTFLOW_LOCK", value),
            None => command.env_remove("AGENTFLOW_LOCK"),
        };
        let out = command.output().expect("run the agentflow binary");
        let called = std::fs::read_to_string(&record).expect("cargo was run");
        std::fs::remove_file(&record).unwrap();
        (out, called)
    };

    let (out, called) = graphs(&["lock", "-p", "support", "--", "--nocapture"], None);
    assert_eq!(out.status.code(), Some(7), "cargo's exit code: {}", stderr(&out));
    assert!(stderr(&out).contains("`cargo test` failed with exit code 7"), "{}", stderr(&out));
    assert_eq!(called, "test\n-p\nsupport\nagentflow_graph_lock\n--\n--nocapture\nAGENTFLOW_LOCK=write\n");

    // A check never writes, whatever the shell has set.
    let (out, called) = graphs(&["check", "--example", "support"], Some("write"));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(called, "test\n--example\nsupport\nagentflow_graph_lock\nAGENTFLOW_LOCK=unset\n");

    // No cargo to run: a clear message, not a panic.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["graphs", "check"])
        .env("CARGO", dir.join("no-such-cargo"))
        .output()
        .expect("run the agentflow binary");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no-such-cargo`: no such program; install Rust's cargo"), "{}", stderr(&out));
}
