//! Finding the lock files of older versions, and what a report says.

use std::path::PathBuf;

use super::{LockOutcome, LockReport, lock_version};

#[test]
fn only_lock_files_named_by_a_version_count() {
    assert_eq!(lock_version("v1.lock"), Some(1));
    assert_eq!(lock_version("v12.lock"), Some(12));
    for other in ["v.lock", "v1.lock.bak", "1.lock", "v-1.lock", "v+1.lock", "v1.json", "v99999999999.lock"] {
        assert_eq!(lock_version(other), None, "{other}");
    }
}

#[test]
fn a_report_says_what_became_of_the_lock_and_which_older_locks_were_checked() {
    let report = |outcome, older: Vec<u32>| {
        LockReport { id: "support".into(), version: 3, file: PathBuf::from("graphs/support/v3.lock"), outcome, older }
            .to_string()
    };
    assert_eq!(
        report(LockOutcome::Matched, vec![1, 2]),
        "graph `support` version 3 matches its lock graphs/support/v3.lock; checked against the locks of version 1, 2"
    );
    assert!(report(LockOutcome::Unlocked, vec![]).contains("has no lock yet"));
    assert!(report(LockOutcome::Written { changed: true }, vec![]).starts_with("wrote the lock"));
}
