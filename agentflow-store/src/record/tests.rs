//! Every record kind round-trips through its encoding, and a damaged or foreign value is a
//! decode error.

use super::*;
use crate::codec::{DecodeResult, Enc};
use crate::record::payload::RECORD_VERSION;

fn approval() -> ApprovalRecord {
    ApprovalRecord {
        id: "a".into(),
        thread: "t".into(),
        node: "n".into(),
        tool: "refund".into(),
        args: "{}".into(),
        args_hash: "h".into(),
        risk: "irreversible".into(),
        requester: "r".into(),
        reason: "why".into(),
        created_at: 1,
        expires_at: 2,
        status: ApprovalStatus::Executing,
        decided_by: Some("d".into()),
        decision_note: None,
        conditions: Some(serde_json::json!({"max": 1})),
        updated_at: 3,
    }
}

/// Every prefix of an encoded record, and every extension, is refused.
fn strict<T: std::fmt::Debug + PartialEq>(bytes: &[u8], decode: fn(&[u8]) -> DecodeResult<T>, value: &T) {
    assert_eq!(&decode(bytes).unwrap(), value);
    for cut in 0..bytes.len() {
        assert!(decode(&bytes[..cut]).is_err(), "prefix of {cut} bytes decoded");
    }
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(decode(&longer).is_err());
}

#[test]
fn every_thread_status_round_trips_and_only_compensating_may_continue_besides_running_and_interrupted() {
    for status in ThreadStatus::ALL {
        let mut thread = ThreadRecord::new("t", "o", "fp", 1, 2);
        thread.status = status;
        assert_eq!(ThreadRecord::decode(&thread.encode()).unwrap().status, status);
        let continues = matches!(
            status,
            ThreadStatus::Running
                | ThreadStatus::Interrupted
                | ThreadStatus::Compensating
                | ThreadStatus::Sleeping
                | ThreadStatus::Paused
        );
        assert_eq!(status.is_finished(), !continues, "{status}");
    }
    let names: std::collections::HashSet<&str> = ThreadStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(names.len(), ThreadStatus::ALL.len());
    assert_eq!(ThreadStatus::Compensating.as_str(), "compensating");
    assert_eq!(ThreadStatus::Compensated.as_str(), "compensated");
    // Stored tags never change: the later statuses were appended.
    assert_eq!((ThreadStatus::Sleeping.tag(), ThreadStatus::Paused.tag(), ThreadStatus::Purged.tag()), (8, 9, 10));
    assert_eq!(ThreadStatus::Paused.as_str(), "paused");
    assert_eq!(ThreadStatus::Purged.as_str(), "purged");
    assert!(!ThreadStatus::Purged.is_resumable(), "a purged thread has nothing to resume");
}

#[test]
fn a_thread_record_names_its_parent_and_an_older_one_gets_the_parent_its_id_shape_gave() {
    let child = ThreadRecord::new("acct/write.0.0.review", "o", "fp", 1, 2).child_of("acct");
    strict(&child.encode(), ThreadRecord::decode, &child);
    // A thread of its own, whatever its id's shape, stays one.
    let own = ThreadRecord::new("acct/write.0.0.review", "o", "fp", 1, 2);
    assert_eq!(ThreadRecord::decode(&own.encode()).unwrap().parent, None);
    // Store format 3 wrote no parent: the shape of the id decided.
    let format_3 = |id: &str| {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(id).str("o").str("fp").u32(1).u8(ThreadStatus::Running.tag()).str("").u64(2).u64(2);
        ThreadRecord::decode(&e.finish()).unwrap().parent
    };
    assert_eq!(format_3("acct/write.0.0.review").as_deref(), Some("acct"));
    assert_eq!(format_3("acct/write.0.0.review/check.1.2.0.vet").as_deref(), Some("acct/write.0.0.review"));
    assert_eq!(format_3("acct/2"), None);
    assert_eq!(format_3("acct"), None);
}

#[test]
fn a_thread_record_keeps_its_trace_and_an_older_one_has_none() {
    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = ThreadRecord::new("t/c", "o", "fp", 1, 2).child_of("t").with_tenant("acme").with_trace(TRACE);
    assert_eq!(traced.trace.as_deref(), Some(TRACE));
    strict(&traced.encode(), ThreadRecord::decode, &traced);
    // Store format 7 and older wrote no trace: it reads back as none, the rest as it was.
    let untraced = ThreadRecord { trace: None, ..traced.clone() };
    strict(&traced.encode_format_7(), ThreadRecord::decode, &untraced);
    assert_ne!(traced.encode_format_7(), untraced.encode(), "format 8 marks the absent trace");
    // A store writing a thread it holds encodes the tenant and trace it keeps.
    let kept = ThreadRecord::decode(&untraced.encode_kept(Some("globex"), Some(TRACE))).unwrap();
    assert_eq!((kept.tenant.as_deref(), kept.trace.as_deref()), (Some("globex"), Some(TRACE)));
    // In JSON (exports), an absent trace is left out and a missing one reads as none.
    let json = serde_json::to_value(&untraced).unwrap();
    assert!(json.get("trace").is_none(), "{json}");
    assert_eq!(serde_json::from_value::<ThreadRecord>(json).unwrap(), untraced);
    let json = serde_json::to_value(&traced).unwrap();
    assert_eq!(json["trace"], TRACE);
    assert_eq!(serde_json::from_value::<ThreadRecord>(json).unwrap(), traced);
}

#[test]
fn legacy_parents_follow_the_shape_of_a_child_level() {
    let parent = ThreadRecord::legacy_parent;
    assert_eq!(parent("acct/write.0.0.review"), Some("acct"));
    assert_eq!(parent("acct/write.3.7.1.review"), Some("acct"));
    assert_eq!(parent("a/b/write.0.0.review"), Some("a/b"));
    assert_eq!(parent("acct/r#type.0.0.r#match"), Some("acct"), "raw identifiers");
    assert_eq!(parent("acct"), None);
    assert_eq!(parent("acct/"), None);
    assert_eq!(parent("/write.0.0.review"), None);
    assert_eq!(parent("acct/2"), None);
    assert_eq!(parent("acct/write.x.0.review"), None);
    assert_eq!(parent("acct/write.0.0.review/notes"), None);
}

#[test]
fn records_round_trip_and_refuse_damage() {
    let mut thread = ThreadRecord::new("t", "o", "fp", 3, 9);
    thread.status = ThreadStatus::BudgetExhausted;
    strict(&thread.encode(), ThreadRecord::decode, &thread);
    let cp = Checkpoint {
        thread: "t".into(),
        seq: 4,
        parent: Some(2),
        cursor: vec!["a".into(), "b".into()],
        snapshot: None,
        delta: vec![vec![1, 2], vec![]],
        metadata: CheckpointMetadata {
            step: 4,
            source: CheckpointSource::Fork,
            nodes: vec!["x".into()],
            extra: serde_json::json!({"k": [1, 2]}),
        },
        created_at: 5,
    };
    let summary = cp.summary();
    let row = summary.encode_row(&cp.delta);
    assert_eq!(cp.encode_row(), row, "a checkpoint and its summary encode the same row");
    strict(&row, CheckpointSummary::decode, &summary);
    strict(&row, CheckpointSummary::decode_row, &(summary.clone(), cp.delta.clone()));
    strict(&Snapshot::encode(b"state"), Snapshot::decode, &b"state".to_vec());
    strict(&Payload::encode(b"write"), Payload::decode, &b"write".to_vec());
    let entry = AuditEntry {
        thread: "t".into(),
        seq: 1,
        at: 2,
        actor: "a".into(),
        kind: "k".into(),
        detail: serde_json::json!(null),
        detail_hash: "d".into(),
        link: "l".into(),
    };
    strict(&entry.encode(), AuditEntry::decode, &entry);
    // Store format 5 wrote no hashes: they read back empty.
    let old = AuditEntry { detail_hash: String::new(), link: String::new(), ..entry.clone() };
    strict(&entry.encode_format_5(), AuditEntry::decode, &old);
    strict(&approval().encode(), ApprovalRecord::decode, &approval());
}

#[test]
fn unknown_tags_are_errors() {
    let mut bytes = approval().encode();
    // The status tag sits right before the optional fields; find it by re-encoding.
    let mut other = approval();
    other.status = ApprovalStatus::Pending;
    let pos = bytes.iter().zip(other.encode()).position(|(a, b)| *a != b).unwrap();
    bytes[pos] = 200;
    // Damage is caught by the checksum first; a record written with the bad tag by the tag.
    assert!(ApprovalRecord::decode(&bytes).unwrap_err().contains("checksum mismatch"));
    let body = bytes.len() - 4;
    let sum = crate::codec::crc32(&bytes[..body]).to_le_bytes();
    bytes[body..].copy_from_slice(&sum);
    assert!(ApprovalRecord::decode(&bytes).unwrap_err().contains("unknown approval status"));
}

#[test]
fn approval_state_machine() {
    use ApprovalStatus::*;
    assert!(Pending.can_move_to(Approved));
    assert!(Approved.can_move_to(Executing));
    assert!(!Pending.can_move_to(Executing));
    assert!(!Rejected.can_move_to(Approved));
    assert!(Succeeded.is_final() && Failed.is_final() && Rejected.is_final());
    assert!(!Approved.is_final());
    assert!(Executing.can_move_to(OutcomeUnknown));
    assert!(OutcomeUnknown.can_move_to(Succeeded) && OutcomeUnknown.can_move_to(Approved));
    assert!(!OutcomeUnknown.can_move_to(Executing) && !OutcomeUnknown.is_final());
}

#[test]
fn outcome_unknown_roundtrips() {
    let mut r = approval();
    r.status = ApprovalStatus::OutcomeUnknown;
    strict(&r.encode(), ApprovalRecord::decode, &r);
}
