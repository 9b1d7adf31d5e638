//! Personal data on the command line: `show` and `diff` mask the fields a graph marks
//! `#[state(pii)]` for a user without `see_personal_data` and audit the unmasked read of one
//! who has it; an export, a backup, is never masked: it needs the permission and is audited.

use std::path::Path;

use serde_json::{Value, json};

use crate::access_fixture::{self as fx, EMAIL, PERSONAL, TENANT};
use crate::cli_common::{af, stderr, stdout};
use crate::inbox_common::{runtime, temp_dir, with_redb};

/// Reading state and history to `reader` and `ok`; personal data to `ok` only.
fn policy(dir: &Path) -> String {
    let path = dir.join("personal-access.json");
    let roles = json!(["ok", "reader"]);
    let policy = json!({ "read_state": roles, "read_history": roles, "see_personal_data": ["ok"] });
    std::fs::write(&path, policy.to_string()).unwrap();
    path.display().to_string()
}

fn run(store: &Path, policy: &str, who: (&str, &str), args: &[&str]) -> std::process::Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--as", who.0, "--role", who.1, "--tenant", TENANT, "--access", policy]);
    af(store, &all)
}

const VIC: (&str, &str) = ("vic", "reader");
const OLGA: (&str, &str) = ("olga", "ok");

#[test]
fn show_diff_and_export_mask_or_audit_personal_fields() {
    let dir = temp_dir("cli-personal");
    let store = dir.join("store.redb");
    runtime().block_on(fx::seeded_file(&store));
    let policy = policy(&dir);
    let reads = || with_redb(&store, |s| fx::personal_reads(s.as_ref(), PERSONAL));

    // The reader sees dots, in the text and the JSON form, and leaves no audit entry.
    for args in [&["show", PERSONAL][..], &["--json", "show", PERSONAL], &["diff", PERSONAL, "0", "1"]] {
        let out = run(&store, &policy, VIC, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains(EMAIL), "{args:?}: {}", stdout(&out));
        // The diff shows what changed: `visits`, not the unchanged `email`.
        assert_eq!(stdout(&out).contains("•••"), args[0] != "diff", "{args:?}: {}", stdout(&out));
    }
    assert!(reads().is_empty());

    // Olga sees the value; each read is one audit entry.
    let out = run(&store, &policy, OLGA, &["--json", "show", PERSONAL]);
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(shown["state"]["email"], EMAIL);
    let out = run(&store, &policy, OLGA, &["diff", PERSONAL, "0", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(reads(), [("olga".to_string(), "cli".to_string()), ("olga".to_string(), "cli".to_string())]);

    // An export is never masked: refused to the reader, audited for olga.
    let out = run(&store, &policy, VIC, &["export", PERSONAL]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stderr(&out).contains("never masked") && stdout(&out).is_empty(), "{}", stderr(&out));
    let out = run(&store, &policy, OLGA, &["export", PERSONAL]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(EMAIL));
    assert_eq!(reads().last(), Some(&("olga".to_string(), "cli export".to_string())));
    assert_eq!(reads().len(), 3);
}

/// Another e-mail, set by a manual update (its audit entry's detail is the update).
const UPDATED: &str = "grace@example.com";

#[test]
fn audit_masks_updated_personal_values_and_audits_an_unmasked_read() {
    let dir = temp_dir("cli-personal-audit");
    let store = dir.join("store.redb");
    runtime().block_on(fx::seeded_file(&store));
    let policy = policy(&dir);
    with_redb(&store, |s| {
        let blob = serde_json::to_vec(&json!({ "email": UPDATED })).unwrap();
        agentflow::persist::update_thread(s, PERSONAL, blob, "ops").expect("update");
    });
    let reads = || with_redb(&store, |s| fx::personal_reads(s.as_ref(), PERSONAL));

    for args in [&["audit", PERSONAL][..], &["--json", "audit", PERSONAL]] {
        let out = run(&store, &policy, VIC, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains(UPDATED), "{args:?}: {}", stdout(&out));
        assert!(stdout(&out).contains("state.updated") && stdout(&out).contains("•••"), "{}", stdout(&out));
    }
    assert!(reads().is_empty());

    let out = run(&store, &policy, OLGA, &["--json", "audit", PERSONAL]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(UPDATED), "{}", stdout(&out));
    assert_eq!(reads(), [("olga".to_string(), "cli audit".to_string())]);
}

#[test]
fn credential_fields_show_as_dots_to_everyone() {
    let dir = temp_dir("cli-credential");
    let store = dir.join("store.redb");
    runtime().block_on(fx::seeded_file(&store));
    let policy = policy(&dir);
    // The stored description marks `visits` a credential (a state with a raw credential is
    // kept only by a sealing store; the surfaces know the fields from the description).
    with_redb(&store, |s| {
        let fingerprint = s.thread(PERSONAL).unwrap().expect("t-pii").graph_fingerprint;
        let mut d: Value = serde_json::from_str(&s.graph_description(&fingerprint).unwrap().unwrap()).unwrap();
        let fields = d["state"]["fields"].as_array_mut().unwrap();
        let visits = fields.iter_mut().find(|f| f["name"] == "visits").expect("visits");
        visits["credential"] = json!(true);
        s.put_graph_description(&fingerprint, &d.to_string()).unwrap();
    });
    for who in [VIC, OLGA] {
        let out = run(&store, &policy, who, &["--json", "show", PERSONAL]);
        let shown: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        assert_eq!(shown["state"]["visits"], "•••", "{who:?}: {shown}");
        assert_eq!(shown["state"]["email"] == EMAIL, who == OLGA, "{who:?}: {shown}");
        let out = run(&store, &policy, who, &["diff", PERSONAL, "0", "1"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        // Both sides masked, the change of the credential is not shown.
        assert!(stdout(&out).contains("no change"), "{who:?}: {}", stdout(&out));
    }
}
