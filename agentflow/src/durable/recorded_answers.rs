//! The answers a thread's questions have at a checkpoint, read from its audit log: what a
//! move to a newer graph version records again for the questions as they are asked after it.

use std::collections::BTreeMap;

use agentflow_store::AuditEntry;
use serde_json::Value;

use crate::interrupt::{ANSWER_FAILED_KIND, ANSWER_KIND, ANSWER_USED_KIND};

/// The answers recorded at checkpoint `seq` and not spent there, by the question they answer
/// (the first one of each counts, as for the run that reads them).
pub(super) fn answers_at(audit: &[AuditEntry], seq: u64) -> BTreeMap<String, AuditEntry> {
    let mut answers = BTreeMap::new();
    for e in audit {
        if e.detail.get("checkpoint").and_then(Value::as_u64) != Some(seq) {
            continue;
        }
        if e.kind == ANSWER_FAILED_KIND || e.kind == ANSWER_USED_KIND {
            answers.clear();
        } else if e.kind == ANSWER_KIND
            && let Some(question) = e.detail.get("question").and_then(Value::as_str)
        {
            answers.entry(question.to_string()).or_insert_with(|| e.clone());
        }
    }
    answers
}
