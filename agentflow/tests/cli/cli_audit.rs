//! `agentflow audit verify`: an intact store verifies (exit code 0), and an audit entry edited
//! in the file is named with its thread, its seq and what was done (exit code 1).

use crate::cli_common::*;

use agentflow_store::{AuditEntry, tables};
use redb::ReadableTable;
use serde_json::json;

/// Rewrites entry `seq` of `thread` in the store file with `edit`, as a valid record.
fn tamper(store: &std::path::Path, thread: &str, seq: u64, edit: impl FnOnce(&mut AuditEntry)) {
    let db = redb::Database::open(store).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut audit = txn.open_table(tables::AUDIT).unwrap();
        let mut entry = AuditEntry::decode_stored(audit.get((thread, seq)).unwrap().unwrap().value()).unwrap();
        edit(&mut entry);
        audit.insert((thread, seq), entry.encode_stored().as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn audit_verify_passes_an_intact_store_and_names_an_edited_entry() {
    let dir = temp_dir("audit-verify");
    let store = dir.join("runs.redb");
    fill(&store);
    let entries: u64 = ["t-paused", "t-done", "t-failed"]
        .iter()
        .map(|t| af_json(&store, &["audit", t]).as_array().unwrap().len() as u64)
        .sum();
    let out = af(&store, &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("audit log of 3 thread(s) intact: {entries} entries\n"));
    let report = af_json(&store, &["audit", "verify", "t-paused"]);
    assert_eq!((report["intact"].clone(), report["threads"].clone()), (json!(true), json!(1)));
    assert_eq!(report["verified"][0]["head"].as_str().unwrap().len(), 64);

    tamper(&store, "t-paused", 1, |e| e.detail = json!({ "note": "nothing happened" }));
    let out = af(&store, &["audit", "verify"]);
    expect_refusal(&out, 1, "the audit log of 1 of 3 thread(s) was changed after it was written");
    assert_eq!(stdout(&out), "thread t-paused, entry 1: its details were changed after it was written\n");
    let out = af(&store, &["--json", "audit", "verify", "t-paused"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["intact"], json!(false));
    assert_eq!(
        report["broken"],
        json!([{
            "thread": "t-paused",
            "seq": 1,
            "reason": "detail_changed",
            "message": "thread t-paused, entry 1: its details were changed after it was written",
        }])
    );
    // The other threads still verify, and the plain listing still reads the log.
    assert_eq!(af(&store, &["audit", "verify", "t-done"]).status.code(), Some(0));
    assert_eq!(af_json(&store, &["audit", "t-paused"])[0]["detail"], json!({ "note": "nothing happened" }));
}
