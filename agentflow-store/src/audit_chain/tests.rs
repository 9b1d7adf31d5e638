//! The audit chain's pure functions: every kind of tampering is found at the right entry.

use serde_json::json;

use super::*;

fn log(n: u64) -> Vec<AuditEntry> {
    let mut prev = String::new();
    (1..=n)
        .map(|seq| {
            let mut e = AuditEntry {
                thread: "t-1".into(),
                seq,
                at: 1_000 + seq,
                actor: "alice".into(),
                kind: "note".into(),
                detail: json!({ "i": seq, "who": ["x", "y"] }),
                detail_hash: String::new(),
                link: String::new(),
            };
            seal(&mut e, &prev);
            prev.clone_from(&e.link);
            e
        })
        .collect()
}

fn broken(entries: &[AuditEntry]) -> (u64, BrokenReason) {
    let b = verify_chain("t-1", entries).unwrap_err();
    assert_eq!(b.thread, "t-1");
    (b.seq, b.reason)
}

#[test]
fn an_untouched_log_verifies_and_reports_its_head() {
    let entries = log(5);
    let report = verify_chain("t-1", &entries).unwrap();
    assert_eq!((report.entries, report.purged), (5, 0));
    assert_eq!(report.head, entries[4].link);
    assert_eq!(report.head.len(), 64);
    let empty = verify_chain("t-1", &[]).unwrap();
    assert_eq!((empty.entries, empty.head.as_str()), (0, ""));
}

#[test]
fn an_edited_detail_is_found_at_its_entry() {
    let mut entries = log(5);
    entries[3].detail = json!({ "i": 99 });
    assert_eq!(broken(&entries), (4, BrokenReason::DetailChanged));
    let message = verify_chain("t-1", &entries).unwrap_err().to_string();
    assert_eq!(message, "thread t-1, entry 4: its details were changed after it was written");
}

#[test]
fn an_edited_detail_with_its_hash_recomputed_breaks_the_link() {
    let mut entries = log(5);
    entries[1].detail = json!({ "i": 99 });
    entries[1].detail_hash = detail_hash(&entries[1].detail);
    assert_eq!(broken(&entries), (2, BrokenReason::EntryChanged));
}

#[test]
fn an_edited_actor_kind_or_time_breaks_the_link() {
    for edit in [
        (|e: &mut AuditEntry| e.actor = "mallory".into()) as fn(&mut AuditEntry),
        |e| e.kind = "approval.approved".into(),
        |e| e.at += 1,
        |e| e.thread = "t-2".into(),
    ] {
        let mut entries = log(4);
        edit(&mut entries[2]);
        assert_eq!(broken(&entries), (3, BrokenReason::EntryChanged));
    }
}

#[test]
fn a_removed_entry_is_missing() {
    let mut entries = log(5);
    entries.remove(2);
    assert_eq!(broken(&entries), (3, BrokenReason::EntryMissing));
    let mut first = log(3);
    first.remove(0);
    assert_eq!(broken(&first), (1, BrokenReason::EntryMissing));
}

#[test]
fn removed_and_renumbered_entries_break_the_link() {
    // The later entries renumbered to close the gap: their links name their old seqs.
    let mut entries = log(5);
    entries.remove(1);
    for (i, e) in entries.iter_mut().enumerate() {
        e.seq = i as u64 + 1;
    }
    let (seq, _) = broken(&entries);
    assert_eq!(seq, 2);
}

#[test]
fn swapped_entries_are_out_of_order() {
    // Swapped as a store keyed by seq returns them: each keeps the seq it was written with.
    let mut entries = log(5);
    entries.swap(1, 3);
    assert_eq!(broken(&entries), (2, BrokenReason::OutOfOrder { found: 4 }));
    // Swapped by rewriting their seqs (what SQL on the seq column does), far apart and side by side.
    for (a, b) in [(1usize, 3usize), (1, 2), (0, 1)] {
        let mut entries = log(5);
        entries.swap(a, b);
        entries[a].seq = a as u64 + 1;
        entries[b].seq = b as u64 + 1;
        assert_eq!(broken(&entries), (a as u64 + 1, BrokenReason::OutOfOrder { found: b as u64 + 1 }), "{a} {b}");
    }
}

/// A log of `n` entries whose last one is a purge's `thread.purged` entry.
fn purged_log(n: u64) -> Vec<AuditEntry> {
    let mut entries = log(n);
    let mut prev = String::new();
    for e in entries.iter_mut() {
        if e.seq == n {
            e.kind = crate::record::PURGED_KIND.into();
        }
        seal(e, &prev);
        prev.clone_from(&e.link);
    }
    entries
}

#[test]
fn a_purged_detail_still_verifies_and_is_counted() {
    let mut entries = purged_log(4);
    entries[1].detail = purged_detail();
    let report = verify_chain("t-1", &entries).unwrap();
    assert_eq!((report.entries, report.purged), (4, 1));
    assert_eq!(serde_json::to_string(&purged_detail()).unwrap(), PURGED_DETAIL);
    assert!(is_purged(&serde_json::from_str(PURGED_DETAIL).unwrap()));
    // Only the exact marker is exempt.
    entries[2].detail = json!({ "purged": true, "i": 3 });
    assert_eq!(broken(&entries), (3, BrokenReason::DetailChanged));
}

#[test]
fn a_purged_detail_no_purge_explains_is_a_changed_detail() {
    // The marker written over a detail by someone with the store, not by a purge.
    let mut entries = log(4);
    entries[1].detail = purged_detail();
    assert_eq!(broken(&entries), (2, BrokenReason::DetailChanged));
    // Nor does a purge explain a marker written after it.
    let mut entries = purged_log(3);
    entries.extend(log(5).into_iter().skip(3));
    let mut prev = entries[2].link.clone();
    for e in entries.iter_mut().skip(3) {
        seal(e, &prev);
        prev.clone_from(&e.link);
    }
    assert!(verify_chain("t-1", &entries).is_ok());
    entries[4].detail = purged_detail();
    assert_eq!(broken(&entries), (5, BrokenReason::DetailChanged));
}

#[test]
fn the_detail_hash_is_canonical_and_fields_cannot_slide() {
    let a: Value = serde_json::from_str(r#"{"b":1,"a":{"d":[1,2],"c":"x"}}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{ "a": {"c": "x", "d": [1, 2]}, "b": 1 }"#).unwrap();
    assert_eq!(detail_hash(&a), detail_hash(&b));
    assert_ne!(detail_hash(&a), detail_hash(&json!({"b": 2})));
    assert_ne!(link("", "t", 1, 2, "ab", "c", "h"), link("", "t", 1, 2, "a", "bc", "h"));
    assert_ne!(link("", "t", 1, 2, "a", "b", "h"), link("", "t", 2, 1, "a", "b", "h"));
}

#[test]
fn reasons_have_stable_names_and_json() {
    let b = BrokenLink { thread: "t".into(), seq: 2, reason: BrokenReason::OutOfOrder { found: 4 } };
    assert_eq!(
        serde_json::to_value(&b).unwrap(),
        json!({ "thread": "t", "seq": 2, "reason": "out_of_order", "found": 4 })
    );
    assert_eq!(BrokenReason::EntryMissing.as_str(), "entry_missing");
}
