//! Finding the lock files of older versions, and what a report says.

use std::path::PathBuf;

use super::{LockError, LockOutcome, LockReport, lock_version, older_locks, zero_padded_version};

#[test]
fn only_lock_files_named_by_a_version_count() {
    assert_eq!(lock_version("v1.lock"), Some(1));
    assert_eq!(lock_version("v12.lock"), Some(12));
    for other in ["v.lock", "v1.lock.bak", "1.lock", "v-1.lock", "v+1.lock", "v1.json", "v99999999999.lock", "v01.lock"]
    {
        assert_eq!(lock_version(other), None, "{other}");
    }
    assert_eq!(zero_padded_version("v01.lock"), Some(1));
    assert_eq!(zero_padded_version("v0010.lock"), Some(10));
    for other in ["v1.lock", "v10.lock", "v0.lock", "v00.lock", "v01.lock.bak", "v.lock"] {
        assert_eq!(zero_padded_version(other), None, "{other}");
    }
}

#[test]
fn a_lock_named_with_leading_zeros_is_refused_not_read_as_its_version() {
    let dir = std::env::temp_dir().join(format!("agentflow-older-locks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("v2.lock"), "{}").unwrap();
    std::fs::write(dir.join("notes.txt"), "").unwrap();
    assert_eq!(older_locks(&dir, 3).unwrap(), vec![(2, dir.join("v2.lock"))]);
    std::fs::write(dir.join("v01.lock"), "{}").unwrap();
    let err = older_locks(&dir, 3).unwrap_err();
    assert!(matches!(&err, LockError::Misnamed { path, version: 1 } if *path == dir.join("v01.lock")), "{err:?}");
    assert!(err.to_string().contains("the lock of version 1 is named `v1.lock`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
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
