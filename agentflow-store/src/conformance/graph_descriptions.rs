//! Graph descriptions, stored and read by fingerprint.

use crate::Store;

/// A graph's description is kept by fingerprint, read back as written, and replaced by a later
/// write under the same fingerprint; another fingerprint has none.
pub fn graph_descriptions_by_fingerprint(store: &dyn Store) {
    assert_eq!(store.graph_description("f1").unwrap(), None);
    let text = "{\"mermaid\": \"flowchart TD\\n    a --> b\\n\", \"name\": \"g\u{e9}\"}";
    store.put_graph_description("f1", text).unwrap();
    assert_eq!(store.graph_description("f1").unwrap().as_deref(), Some(text));
    assert_eq!(store.graph_description("f2").unwrap(), None);
    store.put_graph_description("f1", "second").unwrap();
    assert_eq!(store.graph_description("f1").unwrap().as_deref(), Some("second"));
}
