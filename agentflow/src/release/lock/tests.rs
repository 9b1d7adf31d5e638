//! Reading and writing locks: the file named in every error, sorted keys.

use std::path::Path;

use serde_json::json;

use super::{GraphLock, sorted};
use crate::release::LockError;

#[test]
fn a_lock_reads_back_and_names_its_file_when_it_is_not_one() {
    let path = Path::new("graphs/support/v2.lock");
    let good = json!({ "format": 1, "id": "support", "version": 2, "nodes": {}, "tools": {}, "state": {} });
    let lock = GraphLock::parse(path, &good.to_string()).expect("a lock");
    assert_eq!((lock.id(), lock.version()), ("support", 2));
    assert!(lock.to_text().ends_with("}\n"));
    assert_eq!(GraphLock::parse(path, &lock.to_text()).expect("reads back"), lock);

    let err = GraphLock::parse(path, "{ nope").unwrap_err();
    assert!(matches!(err, LockError::Malformed { .. }), "{err:?}");
    assert!(err.to_string().contains("graphs/support/v2.lock is malformed: not JSON"), "{err}");
    let err = GraphLock::parse(path, r#"{"format": 2, "nodes": {}}"#).unwrap_err();
    assert!(matches!(err, LockError::Format { ref found, .. } if found == "2"), "{err:?}");
    assert!(err.to_string().contains("graphs/support/v2.lock has format 2"), "{err}");
    let err = GraphLock::parse(path, r#"{"format": 1, "version": 2, "nodes": [], "tools": {}}"#).unwrap_err();
    assert!(err.to_string().contains("`nodes` is missing or not an object"), "{err}");
    let err = GraphLock::parse(path, r#"{"format": 1, "nodes": {}, "tools": {}, "state": {}}"#).unwrap_err();
    assert!(err.to_string().contains("`version` is missing"), "{err}");
}

#[test]
fn keys_are_sorted_at_every_depth_and_lists_keep_their_order() {
    let value = sorted(json!({ "b": { "z": 1, "a": [ { "y": 1, "x": 2 } ] }, "a": [3, 1] }));
    assert_eq!(value.to_string(), r#"{"a":[3,1],"b":{"a":[{"x":2,"y":1}],"z":1}}"#);
}
