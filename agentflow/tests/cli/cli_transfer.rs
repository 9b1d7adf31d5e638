//! `agentflow export` and `import` moving threads between stores (redb files and PostgreSQL),
//! refusing damaged or edited export files, and the binary's output into a closed pipe.

use crate::cli_common::*;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use agentflow_store::{StepCommit, ThreadRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[test]
fn export_then_import_moves_a_thread_as_it_was() {
    let dir = temp_dir("export");
    let (first, second) = (dir.join("runs.redb"), dir.join("copy.redb"));
    fill(&first);
    let file = dir.join("t-paused.jsonl");
    let out = af(&first, &["export", "t-paused", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Standard output carries the same lines.
    let piped = af(&first, &["export", "t-paused"]);
    assert_eq!(piped.stdout, std::fs::read(&file).unwrap());

    let imported = af_json(&second, &["import", file.to_str().unwrap()]);
    assert_eq!(imported["imported"], json!(["t-paused"]));
    // Everything reads back the same: the export of the copy is the same file, and its audit
    // log one entry longer, saying who imported it.
    let (copy, imported_by) = without_import_entry(&stdout(&af(&second, &["export", "t-paused"])));
    assert_eq!(copy, std::fs::read_to_string(&file).unwrap());
    assert_eq!(imported_by, ["process"], "one `thread.imported` entry, by the importer");
    assert_eq!(af_json(&second, &["show", "t-paused"]), af_json(&first, &["show", "t-paused"]));
    let mut copied_log = af_json(&second, &["audit", "t-paused"]);
    assert_eq!(copied_log.as_array_mut().unwrap().pop().unwrap()["kind"], "thread.imported");
    assert_eq!(copied_log, af_json(&first, &["audit", "t-paused"]));
    assert_eq!(stdout(&af(&second, &["graph", "t-paused"])), payments::graph().mermaid());
    // The thread's event log travels with it, ids and all.
    let event_ids: Vec<Value> = export_lines(&first, "t-paused")
        .into_iter()
        .filter(|l| l["type"] == "event")
        .map(|l| l["id"].clone())
        .collect();
    assert_eq!(event_ids.first(), Some(&json!("1-0")), "{event_ids:?}");
    {
        let store = RedbStore::open(&second).unwrap();
        let copied: Vec<Value> =
            store.read_events("t-paused", None, 100).unwrap().events.iter().map(|e| json!(e.id.to_string())).collect();
        store.close().unwrap();
        assert_eq!(copied, event_ids);
    }
    // Importing again is refused; nothing changes.
    expect_refusal(&af(&second, &["import", file.to_str().unwrap()]), 1, "exists already");
    // The audit log keeps its hash chain: each line carries the entry's hash and link, the copy
    // holds the same ones, and its log verifies.
    let audit_lines: Vec<Value> =
        export_lines(&first, "t-paused").into_iter().filter(|l| l["type"] == "audit").collect();
    assert!(!audit_lines.is_empty());
    for line in &audit_lines {
        for key in ["detail_hash", "link"] {
            assert_eq!(line[key].as_str().map(str::len), Some(64), "{key} of {line}");
        }
    }
    {
        // The entries of the export, and after them (in the copy) the import's own, chained on.
        let chain = |path: &Path, more: u64| -> Vec<(String, String)> {
            let store = RedbStore::open(path).unwrap();
            let mut links: Vec<(String, String)> =
                store.list_audit("t-paused").unwrap().into_iter().map(|e| (e.detail_hash, e.link)).collect();
            let report = store.verify_audit("t-paused").unwrap().expect("the audit log verifies");
            assert_eq!(report.entries, audit_lines.len() as u64 + more);
            store.close().unwrap();
            links.truncate(audit_lines.len());
            links
        };
        let exported: Vec<(String, String)> = audit_lines
            .iter()
            .map(|l| (l["detail_hash"].as_str().unwrap().to_string(), l["link"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(chain(&first, 0), exported);
        assert_eq!(chain(&second, 1), exported, "the import keeps every link");
    }

    // The copy is a working thread: approve it there, and the run completes there.
    let id = af_json(&second, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let ok = af(&second, &["approve", &id, "--as", "alice", "--role", "irreversible"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let app = app(Arc::new(RedbStore::open(&second).unwrap()));
    let done = runtime().block_on(app.runner(&()).thread("t-paused").resume()).unwrap();
    assert_eq!(done.outcome, Outcome::Completed);

    expect_refusal(&af(&first, &["export", "nope"]), 1, "no thread `nope`");
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, "{\"type\": \"thread\"}\n").unwrap();
    expect_refusal(
        &af(&dir.join("third.redb"), &["import", junk.to_str().unwrap()]),
        2,
        "no `agentflow.export` header",
    );
    assert!(!dir.join("third.redb").exists(), "a file that does not parse leaves no store behind");
}

/// A thread id reserved for a schedule's audit stream (`schedule:`) is refused: no store is
/// created, and nothing is written to one that exists.
#[test]
fn import_refuses_a_thread_id_reserved_for_a_schedule() {
    let dir = temp_dir("import-reserved");
    let first = dir.join("runs.redb");
    fill(&first);
    let file = dir.join("t-paused.jsonl");
    let out = af(&first, &["export", "t-paused", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let renamed = std::fs::read_to_string(&file).unwrap().replace("\"t-paused\"", "\"schedule:nightly\"");
    assert!(renamed.contains("\"schedule:nightly\""), "{renamed}");
    let reserved = dir.join("reserved.jsonl");
    std::fs::write(&reserved, renamed).unwrap();

    let fresh = dir.join("fresh.redb");
    expect_refusal(
        &af(&fresh, &["import", reserved.to_str().unwrap()]),
        2,
        "`schedule:nightly` starts with `schedule:`",
    );
    assert!(!fresh.exists(), "a refused file leaves no store behind");
    let refused = af(&first, &["import", reserved.to_str().unwrap()]);
    expect_refusal(&refused, 2, "nothing of the file was imported");
    let store = RedbStore::open(&first).unwrap();
    assert!(store.thread("schedule:nightly").unwrap().is_none());
    assert!(store.list_audit("schedule:nightly").unwrap().is_empty());
}

/// A graph's description comes in with the threads that carry it: a refused import writes none,
/// and a graph line naming a fingerprint that is not its thread's is refused.
#[test]
fn import_writes_a_graph_description_only_with_its_threads() {
    let dir = temp_dir("import-graph");
    let first = dir.join("runs.redb");
    fill(&first);
    let file = dir.join("t-paused.jsonl");
    let out = af(&first, &["export", "t-paused", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let fingerprint = RedbStore::open(&first).unwrap().thread("t-paused").unwrap().unwrap().graph_fingerprint;

    // Refused (the id is taken by a thread of another graph): no description either.
    let taken = dir.join("taken.redb");
    {
        let store = RedbStore::open(&taken).unwrap();
        store.commit_step(StepCommit::new(ThreadRecord::new("t-paused", "x", "other", 1, 1))).unwrap();
    }
    expect_refusal(&af(&taken, &["import", file.to_str().unwrap()]), 1, "nothing of the file was imported");
    assert_eq!(RedbStore::open(&taken).unwrap().graph_description(&fingerprint).unwrap(), None);

    // A graph line naming another fingerprint than its thread's.
    let planted: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "graph" {
                v["fingerprint"] = json!("victim-fp");
            }
            v.to_string()
        })
        .collect();
    let planted_file = dir.join("planted.jsonl");
    std::fs::write(&planted_file, planted.join("\n") + "\n").unwrap();
    let fresh = dir.join("fresh.redb");
    expect_refusal(&af(&fresh, &["import", planted_file.to_str().unwrap()]), 2, "not the thread's");
    let fresh = RedbStore::open(&fresh).unwrap();
    assert_eq!(fresh.graph_description("victim-fp").unwrap(), None);
    assert!(fresh.thread("t-paused").unwrap().is_none());
}

/// A paused tree moves whole: the export of a parent holds its subgraph child (which holds
/// the waiting approval and the child's progress), so in the other store the approval is
/// there to decide and the resumed parent completes with the approved refund.
#[test]
fn export_of_a_parent_carries_its_subgraph_children() {
    let dir = temp_dir("export-tree");
    let (first, second) = (dir.join("runs.redb"), dir.join("copy.redb"));
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&first).expect("open store"));
        let app = front::graph().app().store(store);
        let input = Pay { order: "A-7".into(), amount: 70, ..Pay::default() };
        let run = runtime().block_on(app.runner(&()).thread("f-1").owner("agent").run(input.clone())).unwrap();
        assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
        // A thread of its own whose id has a child's shape, with a child of its own: not f-1's.
        let other = app.runner(&()).thread("f-1/delegate.0.1.payments").owner("bob").run(input);
        assert!(matches!(runtime().block_on(other).unwrap().outcome, Outcome::Interrupted { .. }));
    }
    let file = dir.join("f-1.jsonl");
    let out = af(&first, &["export", "f-1", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let records: Vec<Value> = export_lines(&first, "f-1")
        .into_iter()
        .filter(|l| l["type"] == "thread")
        .map(|l| l["record"].clone())
        .collect();
    assert_eq!(records.len(), 2, "the other thread and its child stay out: {records:?}");
    assert_eq!((&records[0]["parent"], &records[1]["parent"]), (&Value::Null, &json!("f-1")));
    // A store where the child's id is taken: nothing of the file is imported, not the parent
    // either (resumed without its child, it would start the child afresh and pay again).
    let taken = dir.join("taken.redb");
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&taken).expect("open store"));
        let app = front::graph().app().store(store);
        let input = Pay { order: "B-1".into(), amount: 5, ..Pay::default() };
        let squatter = app.runner(&()).thread("f-1/delegate.0.0.payments").owner("carol").run(input);
        assert!(matches!(runtime().block_on(squatter).unwrap().outcome, Outcome::Interrupted { .. }));
    }
    let refused = af(&taken, &["import", file.to_str().unwrap()]);
    expect_refusal(&refused, 1, "nothing of the file was imported");
    assert!(RedbStore::open(&taken).unwrap().thread("f-1").unwrap().is_none(), "the parent came without its child");
    let imported = af_json(&second, &["import", file.to_str().unwrap()]);
    assert_eq!(imported["imported"], json!(["f-1", "f-1/delegate.0.0.payments"]));
    let f1_approvals = |store: &Path| -> Vec<Value> {
        let all = af_json(store, &["pending"])["approvals"].as_array().unwrap().clone();
        all.into_iter().filter(|a| a["thread"] == "f-1/delegate.0.0.payments").collect()
    };
    assert_eq!(af_json(&second, &["pending"])["approvals"].as_array().unwrap().clone(), f1_approvals(&first));
    // An export of format 1, which named no parents: the child is told by its id's shape.
    let old = dir.join("f-1.format-1.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "agentflow.export" {
                v["format"] = json!(1);
            }
            if let Some(record) = v.get_mut("record").and_then(Value::as_object_mut) {
                record.remove("parent");
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&old, lines.join("\n") + "\n").unwrap();
    let third = dir.join("third.redb");
    assert_eq!(
        af_json(&third, &["import", old.to_str().unwrap()])["imported"],
        json!(["f-1", "f-1/delegate.0.0.payments"])
    );
    let child = RedbStore::open(&third).unwrap().thread("f-1/delegate.0.0.payments").unwrap().unwrap();
    assert_eq!(child.parent.as_deref(), Some("f-1"));

    let id = af_json(&second, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let ok = af(&second, &["approve", &id, "--as", "alice", "--role", "irreversible"]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let app = front::graph().app().store(Arc::new(RedbStore::open(&second).unwrap()));
    let done = runtime().block_on(app.runner(&()).thread("f-1").resume()).unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 70);
}

/// PostgreSQL: a thread exported from a redb file imports into a PostgreSQL store and reads
/// back the same there (skipped without AGENTFLOW_PG_URL; `source .ci/postgres.sh`).
#[test]
fn postgres_smoke_import_and_read_back() {
    let Ok(url) = std::env::var("AGENTFLOW_PG_URL") else {
        eprintln!("skipped: AGENTFLOW_PG_URL is not set");
        return;
    };
    let dir = temp_dir("pg");
    let store = dir.join("runs.redb");
    fill(&store);
    let file = dir.join("t-paused.jsonl");
    assert_eq!(af(&store, &["export", "t-paused", "--output", file.to_str().unwrap()]).status.code(), Some(0));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let schema = format!("cli_smoke_{}_{nanos}", std::process::id());
    let pg = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_agentflow"))
            .args(["--store", &url, "--schema", &schema, "--json"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "agentflow {args:?} on PostgreSQL: {}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(pg(&["import", file.to_str().unwrap()])["imported"], json!(["t-paused"]));
    assert_eq!(pg(&["threads"])[0]["status"], "interrupted");
    assert_eq!(pg(&["show", "t-paused"]), af_json(&store, &["show", "t-paused"]));
    let id = pg(&["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(pg(&["approve", &id, "--as", "alice", "--role", "irreversible"])["status"], "APPROVED");
    // A run holding the thread (here: a lease taken by this process): changes wait for it.
    let held = agentflow_store::PostgresStore::builder().schema(schema.clone()).open(&url).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    held.acquire_lease("t-paused", "worker-elsewhere", 60_000, now).unwrap();
    let busy = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["--store", &url, "--schema", &schema, "update", "t-paused", "--set", r#"{"steps": 1}"#, "--as", "ops"])
        .output()
        .unwrap();
    expect_refusal(&busy, 3, "a run holds the thread");
    // An answer to a thread a run holds is busy too (exit 3), and nothing is recorded.
    let held: Arc<dyn Store> = Arc::new(held);
    let asked = asking::graph().app().store(Arc::clone(&held));
    let run =
        runtime().block_on(asked.runner(&()).thread("q-held").run(Ask { question: "how many?".into(), answer: None }));
    assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    held.acquire_lease("q-held", "worker-elsewhere", 60_000, now).unwrap();
    let busy = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["--store", &url, "--schema", &schema, "answer", "q-held", "--value", "3", "--as", "ops"])
        .output()
        .unwrap();
    expect_refusal(&busy, 3, "worker-elsewhere");
    assert!(!held.list_audit("q-held").unwrap().iter().any(|e| e.kind == "interrupt.answered"));
    let unreachable = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["--store", "postgres://agentflow:x@127.0.0.1:1/none", "threads"])
        .output()
        .unwrap();
    expect_refusal(&unreachable, 3, "cannot reach the PostgreSQL store");
}

/// The lines of an export of `thread` from `store`, parsed.
/// An export's text without its `thread.imported` audit lines, and who each of those names
/// (`process` for this process's actor).
fn without_import_entry(text: &str) -> (String, Vec<String>) {
    let mut by = Vec::new();
    let kept: String = text
        .lines()
        .filter(|line| {
            // Only the candidates are read as JSON: a state line may nest deeper than the parser.
            if !line.contains("thread.imported") {
                return true;
            }
            let v: Value = serde_json::from_str(line).expect("an export line is JSON");
            let imported = v["type"] == "audit" && v["kind"] == "thread.imported";
            if imported {
                let actor = v["actor"].as_str().unwrap_or_default();
                by.push(if actor.starts_with("process:") { "process".to_string() } else { actor.to_string() });
            }
            !imported
        })
        .map(|line| format!("{line}\n"))
        .collect();
    (kept, by)
}

fn export_lines(store: &Path, thread: &str) -> Vec<Value> {
    let out = af(store, &["export", thread]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out).lines().map(|l| serde_json::from_str(l).expect("an export line is JSON")).collect()
}

/// Writes `lines` as an export file.
fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// A `{"hex": ..}` blob that is not ASCII hex (here with a two-byte character, so its byte
/// length is even but a pair of bytes splits the character) is a usage error naming the line,
/// like any other bad blob, and nothing is imported.
#[test]
fn import_refuses_a_hex_blob_that_is_not_ascii_hex() {
    let dir = temp_dir("import-hex");
    let store = dir.join("runs.redb");
    fill(&store);
    let lines = export_lines(&store, "t-done");
    let at = lines.iter().position(|l| l["type"] == "checkpoint").expect("a checkpoint line");
    for (i, hex) in ["aé0", "éé", "zz", "+f"].into_iter().enumerate() {
        let mut bad = lines.clone();
        bad[at]["snapshot"] = json!({ "hex": hex });
        let file = dir.join(format!("bad-{i}.jsonl"));
        write_lines(&file, &bad);
        let copy = dir.join(format!("copy-{i}.redb"));
        let out = af(&copy, &["import", file.to_str().unwrap()]);
        expect_refusal(&out, 2, &format!("line {}: stored bytes must be", at + 1));
        assert!(!stderr(&out).contains("panicked"), "{hex}: {}", stderr(&out));
        assert!(!copy.exists(), "{hex}: nothing is imported, not even a new store");
    }
    // Well-formed hex, in either case, still imports byte for byte.
    let mut good = lines.clone();
    let snapshot = &lines[at]["snapshot"];
    let bytes = match (snapshot.get("json"), snapshot.get("text").and_then(Value::as_str)) {
        (Some(j), _) => serde_json::to_vec(j).unwrap(),
        (None, Some(text)) => text.as_bytes().to_vec(),
        _ => panic!("a snapshot written as JSON or text expected: {snapshot}"),
    };
    let hex: String = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| if i % 2 == 0 { format!("{b:02X}") } else { format!("{b:02x}") })
        .collect();
    good[at]["snapshot"] = json!({ "hex": hex });
    let file = dir.join("good.jsonl");
    write_lines(&file, &good);
    let copy = dir.join("copy-good.redb");
    assert_eq!(af_json(&copy, &["import", file.to_str().unwrap()])["imported"], json!(["t-done"]));
    assert_eq!(af_json(&copy, &["show", "t-done"])["state"], af_json(&store, &["show", "t-done"])["state"]);
}

/// Runs the binary with its standard output a pipe whose reading end is closed after
/// `read` bytes were read (0: before the binary writes anything); returns its status and
/// standard error.
fn af_into_closed_pipe(store: &Path, args: &[&str], read: usize) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let mut child = af_command(store, args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the agentflow binary");
    let mut reader = child.stdout.take().expect("piped stdout");
    let mut first = vec![0; read];
    reader.read_exact(&mut first).expect("the first bytes of the output");
    drop(reader);
    let out = child.wait_with_output().expect("wait for the agentflow binary");
    (out.status, stderr(&out))
}

/// A reader that stops reading (`agentflow audit | head -1`) ends the command quietly with
/// success, as it would a C tool's: no panic, no message, exit code 0.
#[test]
fn output_into_a_closed_pipe_ends_quietly_with_success() {
    let dir = temp_dir("pipe");
    let store = dir.join("runs.redb");
    fill(&store);
    {
        // Enough audit entries for every output below to be larger than a pipe's buffer.
        let s = RedbStore::open(&store).unwrap();
        for i in 0..2_000u64 {
            let detail = json!({ "note": format!("entry {i} of a long audit log, written to fill the pipe") });
            s.append_audit("t-done", agentflow_store::NewAuditEntry::new(1_700_000_000_000 + i, "ops", "note", detail))
                .unwrap();
        }
    }
    let big = af(&store, &["--json", "audit"]);
    assert_eq!(big.status.code(), Some(0), "{}", stderr(&big));
    assert!(big.stdout.len() > 256 * 1024, "{} bytes", big.stdout.len());
    for args in [
        &["--json", "audit"][..],
        &["audit"],
        &["audit", "t-done"],
        &["export", "t-done"],
        &["--json", "show", "t-done"],
    ] {
        for read in [0, 10] {
            let (status, err) = af_into_closed_pipe(&store, args, read);
            assert!(status.success(), "agentflow {args:?} (closed after {read} bytes): {status}, stderr: {err}");
            assert_eq!(err, "", "agentflow {args:?} (closed after {read} bytes)");
        }
    }
    // Any other write error is a failure that says so.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = af_command(&store, &["audit"]).stdout(full).output().expect("run the agentflow binary");
        expect_refusal(&out, 2, "cannot write to standard output");
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

/// Runs the binary, killing it after `limit`: `None` when it ran that long.
fn af_within(store: &Path, args: &[&str], limit: std::time::Duration) -> Option<Output> {
    let mut child = af_command(store, args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the agentflow binary");
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().expect("poll the agentflow binary").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("collect the output"))
}

/// A stored description whose field type nests very deeply (`Box<Box<..>>`, from an edited
/// export file) neither overflows the stack nor takes long when `update` checks a value
/// against it: past a depth the type counts as not understood, and the value is checked
/// against the kind the field holds now.
#[test]
fn update_against_a_deeply_nested_stored_type_neither_crashes_nor_hangs() {
    let dir = temp_dir("deep-type");
    let (store, copy) = (dir.join("runs.redb"), dir.join("copy.redb"));
    fill(&store);
    let mut lines = export_lines(&store, "t-done");
    let graph = lines.iter_mut().find(|l| l["type"] == "graph").expect("a graph line");
    let mut description: Value = serde_json::from_str(graph["description"].as_str().unwrap()).unwrap();
    let depth = 100_000;
    let deep = format!("{}u32{}", "Box<".repeat(depth), ">".repeat(depth));
    let fields = description["state"]["fields"].as_array_mut().unwrap();
    fields.iter_mut().find(|f| f["name"] == "amount").expect("the `amount` field")["type"] = json!(deep);
    graph["description"] = json!(description.to_string());
    let file = dir.join("deep.jsonl");
    write_lines(&file, &lines);
    assert_eq!(af_json(&copy, &["import", file.to_str().unwrap()])["imported"], json!(["t-done"]));

    let limit = std::time::Duration::from_secs(20);
    let set = ["--json", "update", "t-done", "--set", r#"{"amount": 7}"#, "--as", "ops"];
    let ok = af_within(&copy, &set, limit).expect("update finishes in time");
    assert_eq!(ok.status.code(), Some(0), "stderr: {}", stderr(&ok));
    assert_eq!(af_json(&copy, &["show", "t-done"])["state"]["amount"], 7);
    // A value of another kind than the field holds is still refused.
    let set = ["update", "t-done", "--set", r#"{"amount": "seven"}"#, "--as", "ops"];
    let refused = af_within(&copy, &set, limit).expect("update finishes in time");
    expect_refusal(&refused, 2, "`amount` holds an integer");
}

/// Its fields in the order `serde_json` sorts keys, so `export` writes the stored documents
/// as JSON (not as text), nested inside the lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
struct Deep {
    doc: Value,
    label: String,
}

#[graph(state = Deep, start = copy)]
mod nesting {
    use super::*;

    #[node(goto = [END])]
    async fn copy(s: &Deep) -> Step<Deep> {
        goto!(END, Deep::update().label("copied".into()).doc(s.doc.clone()))
    }
}

/// A state nested as deep as a store accepts (`MAX_DOCUMENT_DEPTH`) exports, with the lines
/// around it, and imports back: the same state, the same export.
#[test]
fn export_then_import_keeps_a_state_nested_as_deep_as_stored() {
    let dir = temp_dir("export-deep");
    let (first, second) = (dir.join("first.redb"), dir.join("second.redb"));
    let open = |path: &Path| nesting::graph().app().store(Arc::new(RedbStore::open(path).unwrap()) as Arc<dyn Store>);
    // The state object holds the value: one level more than the value's own nesting.
    let levels = agentflow::persist::MAX_DOCUMENT_DEPTH - 1;
    let doc = (0..levels).fold(json!("core"), |inner, _| json!([inner]));
    let input = Deep { doc: doc.clone(), label: "input".into() };
    runtime().block_on(async {
        let run = open(&first).runner(&()).thread("d-1").run(input).await.expect("completed run");
        assert_eq!(run.outcome, Outcome::Completed);
    });
    let file = dir.join("deep.jsonl");
    let out = af(&first, &["export", "d-1", "--output", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(af_json(&second, &["import", file.to_str().unwrap()])["imported"], json!(["d-1"]));
    let (copy, _) = without_import_entry(&stdout(&af(&second, &["export", "d-1"])));
    assert_eq!(copy, std::fs::read_to_string(&file).unwrap());
    let copied = open(&second).state("d-1").unwrap().expect("a checkpoint").state;
    assert_eq!(copied, Deep { doc, label: "copied".into() });
    // A line nested deeper than any export writes (an edited file) is refused, not parsed.
    let text = std::fs::read_to_string(&file).unwrap();
    let deeper = format!("{}\"core\"{}", "[".repeat(100_000), "]".repeat(100_000));
    let edited = dir.join("deeper.jsonl");
    std::fs::write(&edited, text.replacen("\"core\"", &deeper, 1)).unwrap();
    let out = af(&dir.join("third.redb"), &["import", edited.to_str().unwrap()]);
    expect_refusal(&out, 2, "levels deep; an export line nests at most");
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}
