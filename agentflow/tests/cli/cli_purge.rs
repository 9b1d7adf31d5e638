//! `agentflow purge` and `agentflow hold`: a held thread refuses the purge and `compact` (exit 1), a
//! released one is purged with its data gone and its records and audit log kept as
//! tombstones; both need `--as`.

use std::sync::Arc;

use agentflow::Store;
use agentflow::persist::ThreadStatus;
use serde_json::Value;

use crate::access_fixture as fx;
use crate::cli_common::{af, stderr, stdout};
use crate::inbox_common::{temp_dir, with_redb};

#[test]
fn hold_refuses_purge_until_released_and_purge_leaves_tombstones() {
    crate::inbox_common::runtime().block_on(async {
        let dir = temp_dir("cli-purge");
        let path = dir.join("store.redb");
        fx::seeded_file(&path).await;
        let ok = |args: &[&str]| {
            let out = af(&path, args);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            stdout(&out)
        };

        // Who acts is recorded: without --as, a usage error.
        let out = af(&path, &["purge", "t-done"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("--as"), "{}", stderr(&out));

        ok(&["hold", "t-done", "--reason", "matter 42", "--as", "counsel"]);
        let out = af(&path, &["purge", "t-done", "--as", "dpo"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("legal hold") && stderr(&out).contains("matter 42"), "{}", stderr(&out));
        let kept = with_redb(&path, |s: &Arc<dyn Store>| s.list_checkpoints("t-done").unwrap().len());
        assert!(kept > 0, "a held thread keeps its checkpoints");
        // Nor is a held thread's history compacted.
        let out = af(&path, &["compact", "t-done", "--keep", "1"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("legal hold") && stderr(&out).contains("nothing was compacted"),
            "{}",
            stderr(&out)
        );
        let after = with_redb(&path, |s: &Arc<dyn Store>| s.list_checkpoints("t-done").unwrap().len());
        assert_eq!(after, kept, "a held thread keeps its checkpoints");

        let released: Value =
            serde_json::from_str(&ok(&["--json", "hold", "--release", "t-done", "--as", "counsel"])).unwrap();
        assert_eq!(released["released"], true);
        let report: Value = serde_json::from_str(&ok(&["--json", "purge", "t-done", "--as", "dpo"])).unwrap();
        assert_eq!(report["threads"], serde_json::json!(["t-done"]));
        assert_eq!(report["checkpoints"].as_u64(), Some(kept as u64));
        with_redb(&path, |s: &Arc<dyn Store>| {
            assert_eq!(s.thread("t-done").unwrap().unwrap().status, ThreadStatus::Purged);
            assert!(s.list_checkpoints("t-done").unwrap().is_empty());
            let log = s.list_audit("t-done").unwrap();
            let kinds: Vec<&str> = log.iter().map(|e| e.kind.as_str()).collect();
            assert!(kinds.ends_with(&["thread.held", "thread.released", "thread.purged"]), "{kinds:?}");
            assert_eq!(log.last().unwrap().actor, "dpo");
            s.verify_audit("t-done").unwrap().expect("the log verifies after the purge");
        });
        // The audit log still reads, and `verify` agrees.
        let verify = ok(&["audit", "verify", "t-done"]);
        assert!(!verify.is_empty());
        // Purging again is harmless.
        ok(&["purge", "t-done", "--as", "dpo"]);
        let out = af(&path, &["purge", "no-such-thread", "--as", "dpo"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    });
}
