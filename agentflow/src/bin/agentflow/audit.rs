//! `audit verify [THREAD]`: checks the audit log of one thread, or of every thread, against its
//! hash chain (`Store::verify_audit`), and says where it was changed.
//!
//! Intact: `audit log of N thread(s) intact: M entries`, exit code 0. A broken log: one line per
//! thread whose log does not verify, naming its first broken entry and why (`thread t-1, entry
//! 4: its details were changed after it was written`), exit code 1. A log that cannot be read
//! (an entry that does not decode) is reported the same way, exit code 4 when no log is broken.
//! `--json` prints `{"intact", "threads", "entries", "purged", "verified": [..], "broken": [..],
//! "unreadable": [..]}`.

use agentflow::Store;
use agentflow::access::Operation;
use agentflow_store::{BrokenLink, ChainReport};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::access::Guard;
use crate::out;
use crate::{Failure, Outcome, code};

/// `audit` arguments: the log of a thread (or of every thread), or `verify`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    /// The thread id (every thread when left out).
    pub thread: Option<String>,
    /// What to do with the log instead of printing it.
    #[command(subcommand)]
    pub action: Option<AuditAction>,
}

/// `audit` subcommands.
#[derive(Subcommand, Debug)]
pub enum AuditAction {
    /// Check that the audit log is as it was written: no entry changed, removed or moved since.
    /// Exit code 1 names the first broken entry of each thread whose log does not verify.
    Verify {
        /// The thread id (every thread when left out).
        thread: Option<String>,
    },
}

/// What verifying one thread's log found.
enum Verdict {
    Intact(ChainReport),
    Broken(BrokenLink),
    Unreadable(String, String),
}

/// `audit verify`.
pub fn verify(store: &dyn Store, guard: &Guard, thread: Option<&str>, as_json: bool) -> Outcome {
    let threads: Vec<String> = match thread {
        Some(t) => vec![guard.thread(store, Operation::ReadHistory, t)?.id],
        None => {
            guard.list()?;
            let listing = store.scan_threads().map_err(Failure::store)?;
            for skipped in &listing.skipped {
                eprintln!(
                    "agentflow: skipped a thread record that does not decode: {}",
                    out::printable_line(&skipped.to_string())
                );
            }
            listing.items.into_iter().filter(|t| guard.sees(t)).map(|t| t.id).collect()
        }
    };
    let verdicts: Vec<Verdict> = threads
        .iter()
        .map(|t| match store.verify_audit(t) {
            Ok(Ok(report)) => Verdict::Intact(report),
            Ok(Err(broken)) => Verdict::Broken(broken),
            Err(e) => Verdict::Unreadable(t.clone(), e.to_string()),
        })
        .collect();
    let intact: Vec<&ChainReport> =
        verdicts.iter().filter_map(|v| if let Verdict::Intact(r) = v { Some(r) } else { None }).collect();
    let broken: Vec<&BrokenLink> =
        verdicts.iter().filter_map(|v| if let Verdict::Broken(b) = v { Some(b) } else { None }).collect();
    let unreadable: Vec<(&str, &str)> = verdicts
        .iter()
        .filter_map(|v| if let Verdict::Unreadable(t, e) = v { Some((t.as_str(), e.as_str())) } else { None })
        .collect();
    let entries: u64 = intact.iter().map(|r| r.entries).sum();
    let purged: u64 = intact.iter().map(|r| r.purged).sum();
    if as_json {
        let verified: Vec<Value> = intact
            .iter()
            .map(|r| json!({ "thread": r.thread, "entries": r.entries, "purged": r.purged, "head": r.head }))
            .collect();
        let broken_json: Vec<Value> = broken
            .iter()
            .map(|b| {
                let mut v = json!({
                    "thread": b.thread,
                    "seq": b.seq,
                    "reason": b.reason.as_str(),
                    "message": b.to_string(),
                });
                if let agentflow_store::BrokenReason::OutOfOrder { found } = b.reason {
                    v["found"] = json!(found);
                }
                v
            })
            .collect();
        let unreadable_json: Vec<Value> = unreadable.iter().map(|(t, e)| json!({ "thread": t, "error": e })).collect();
        out::json(&json!({
            "intact": broken.is_empty() && unreadable.is_empty(),
            "threads": threads.len(),
            "entries": entries,
            "purged": purged,
            "verified": verified,
            "broken": broken_json,
            "unreadable": unreadable_json,
        }))?;
    } else {
        for b in &broken {
            out::write(format_args!("{b}"))?;
        }
        for (t, e) in &unreadable {
            out::write(format_args!("thread {t}: its audit log cannot be read: {e}"))?;
        }
        if broken.is_empty() && unreadable.is_empty() {
            let purged_note = if purged > 0 { format!(" ({purged} with purged details)") } else { String::new() };
            out::write(format_args!(
                "audit log of {} thread(s) intact: {entries} entries{purged_note}",
                threads.len()
            ))?;
        }
    }
    if !broken.is_empty() {
        return Err(Failure::not_found(format!(
            "the audit log of {} of {} thread(s) was changed after it was written",
            broken.len(),
            threads.len()
        )));
    }
    if !unreadable.is_empty() {
        return Err(Failure::new(
            code::STORE,
            format!("the audit log of {} thread(s) cannot be read: restore it from a backup", unreadable.len()),
        ));
    }
    Ok(())
}
