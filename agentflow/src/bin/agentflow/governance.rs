//! `purge` and `hold`: removing a thread's data for good (with its subgraph children's), and
//! the legal hold that refuses it. Both need `--as` (recorded in the audit log) and the
//! `purge` operation under `--access`.

use std::sync::Arc;

use agentflow::Store;
use agentflow::persist::{HistoryError, LegalHold, PurgeError};
use agentflow::{HELD_KIND, RELEASED_KIND, purge_thread};
use agentflow_store::NewAuditEntry;
use clap::Args;
use serde_json::json;

use crate::out::{self, now_ms};
use crate::{Failure, Outcome, code};

/// `purge` arguments.
#[derive(Args, Debug)]
pub struct PurgeArgs {
    /// The thread id. Its subgraph children are purged with it; who purges is `--as`.
    pub thread: String,
}

/// `hold` arguments.
#[derive(Args, Debug)]
pub struct HoldArgs {
    /// The thread id.
    pub thread: String,
    /// Why the thread is held (a case or ticket); required to set a hold.
    #[arg(long, required_unless_present = "release")]
    pub reason: Option<String>,
    /// Lift the thread's hold instead of setting one.
    #[arg(long, conflicts_with = "reason")]
    pub release: bool,
}

fn purge_failure(e: HistoryError) -> Failure {
    match e {
        HistoryError::UnknownThread { .. } | HistoryError::Purge(PurgeError::UnknownThread { .. }) => {
            Failure::not_found(e.to_string())
        }
        HistoryError::Purge(PurgeError::Held { .. }) => Failure::not_found(e.to_string()),
        HistoryError::InUse { .. } => Failure::new(code::BUSY, e.to_string()),
        other => Failure::store(other),
    }
}

/// `purge`: the thread's and its children's data goes; their records, approvals' statuses
/// and audit logs stay as tombstones.
pub fn purge(store: &Arc<dyn Store>, args: &PurgeArgs, user: &str, as_json: bool) -> Outcome {
    let report = purge_thread(store, &args.thread, user, now_ms()).map_err(purge_failure)?;
    if as_json {
        let mut detail = report.detail();
        detail["thread"] = json!(args.thread);
        detail["file_compacted"] = json!(report.file_compacted);
        out::json(&detail)?;
    } else {
        outln!(
            "thread {} purged ({} thread(s)): {} checkpoint(s), {} pending write(s), {} effect(s), {} approval(s) \
             emptied, {} audit detail(s) erased; the records and the audit log stay as tombstones",
            args.thread,
            report.threads.len(),
            report.checkpoints,
            report.pending_writes,
            report.effects,
            report.approvals,
            report.audit_details
        )?;
    }
    Ok(())
}

/// `hold THREAD --reason ..` and `hold --release THREAD`.
pub fn hold(store: &Arc<dyn Store>, args: &HoldArgs, user: &str, as_json: bool) -> Outcome {
    let now = now_ms();
    let fail = |e: PurgeError| purge_failure(HistoryError::Purge(e));
    if args.release {
        let before = store.legal_hold(&args.thread).map_err(Failure::store)?;
        let detail = json!({ "hold": before.as_ref().map(|h| json!({ "by": h.by, "reason": h.reason, "at": h.at })) });
        let entry = NewAuditEntry::new(now, user, RELEASED_KIND, detail);
        store.set_legal_hold(&args.thread, None, entry).map_err(fail)?;
        if as_json {
            out::json(&json!({ "thread": args.thread, "released": before.is_some() }))?;
        } else if before.is_some() {
            outln!("thread {}: hold released", args.thread)?;
        } else {
            outln!("thread {}: it had no hold", args.thread)?;
        }
        return Ok(());
    }
    let reason = args.reason.clone().unwrap_or_default();
    let hold = LegalHold::new(user, reason.clone(), now);
    let entry = NewAuditEntry::new(now, user, HELD_KIND, json!({ "reason": reason }));
    store.set_legal_hold(&args.thread, Some(hold), entry).map_err(fail)?;
    if as_json {
        out::json(&json!({ "thread": args.thread, "held": true, "by": user, "reason": reason, "at": now }))?;
    } else {
        outln!("thread {}: held by {user} ({reason}); it cannot be purged until released", args.thread)?;
    }
    Ok(())
}
