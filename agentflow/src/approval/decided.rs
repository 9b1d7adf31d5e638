//! What a decision leaves besides the record: its metrics, and its span in the thread's trace.

use agentflow_store::{ApprovalRecord, Store};

/// Counts a decision this desk made, and how long the request waited for it; traced as an
/// `approval_decision` span in the thread's trace (`edited`: approved with other arguments).
pub(super) fn decided(store: &dyn Store, record: ApprovalRecord, edited: bool) -> ApprovalRecord {
    let status = record.status.as_str().to_ascii_lowercase();
    let waited_ms = record.updated_at.saturating_sub(record.created_at);
    trace_decision(store, &record, if edited { "edited" } else { &status }, waited_ms);
    let waited = waited_ms as f64 / 1e3;
    ::metrics::counter!(crate::metrics::APPROVAL_DECISIONS, "status" => status.clone()).increment(1);
    ::metrics::histogram!(crate::metrics::APPROVAL_DECISION_SECONDS, "status" => status).record(waited);
    record
}

/// The `approval_decision` span, a child of the thread's stored trace context (the store is read
/// only when an OpenTelemetry layer can take the span).
fn trace_decision(store: &dyn Store, record: &ApprovalRecord, decision: &str, waited_ms: u64) {
    use crate::telemetry::{TraceParent, parent, spans};
    let span = spans::approval_decision(&record.tool, &record.id, decision, waited_ms);
    if !parent::linkable(&span) {
        return;
    }
    if let Some(tp) = thread_trace(store, &record.thread).as_deref().and_then(TraceParent::parse) {
        parent::link(&span, &tp);
    }
    span.in_scope(|| ());
}

/// The stored trace of `thread`, or of its nearest ancestor with one (a subgraph child's record
/// has none: its spans are in its parent's trace).
fn thread_trace(store: &dyn Store, thread: &str) -> Option<String> {
    nearest_trace(thread, |id| store.thread(id).ok().flatten().map(|t| (t.trace, t.parent)))
}

/// Walks up from `thread` through `record` (a thread's trace and parent) to the first trace;
/// stops at a missing record or a cycle.
fn nearest_trace(thread: &str, record: impl Fn(&str) -> Option<(Option<String>, Option<String>)>) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let mut id = thread.to_string();
    loop {
        let (trace, parent) = record(&id)?;
        if trace.is_some() {
            return trace;
        }
        let parent = parent?;
        if !seen.insert(id) {
            return None;
        }
        id = parent;
    }
}

#[cfg(test)]
mod tests {
    use super::nearest_trace;
    use std::collections::HashMap;

    fn walk(records: &[(&str, Option<&str>, Option<&str>)], from: &str) -> Option<String> {
        let map: HashMap<&str, (Option<String>, Option<String>)> = records
            .iter()
            .map(|(id, trace, parent)| (*id, (trace.map(String::from), parent.map(String::from))))
            .collect();
        nearest_trace(from, |id| map.get(id).cloned())
    }

    #[test]
    fn a_child_decision_finds_its_ancestors_trace() {
        let records =
            [("root", Some("00-t-s-01"), None), ("child", None, Some("root")), ("grandchild", None, Some("child"))];
        assert_eq!(walk(&records, "grandchild").as_deref(), Some("00-t-s-01"));
        assert_eq!(walk(&records, "root").as_deref(), Some("00-t-s-01"));
    }

    #[test]
    fn the_walk_stops_at_a_missing_record_or_a_cycle() {
        assert_eq!(walk(&[("child", None, Some("gone"))], "child"), None);
        assert_eq!(walk(&[("a", None, Some("b")), ("b", None, Some("a"))], "a"), None);
        assert_eq!(walk(&[], "nobody"), None);
    }
}
