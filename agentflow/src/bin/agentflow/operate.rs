//! Commands that read the audit log or change a thread: `audit`, `fork`, `update`, `compact`.
//! The changes go through the library (`fork_thread`, `update_thread`, `Store::compact`), so
//! they take the thread's lease, write a new checkpoint and audit entry, and refuse while a
//! run holds the thread.

use std::sync::Arc;

use agentflow::Store;
use agentflow::access::Operation;
use agentflow::persist::{HistoryError, PersistError, fork_thread, update_thread};
use agentflow::server::inspect::description::description;
use agentflow::server::inspect::display::{ago, brief};
use agentflow::server::inspect::{field_type, fold};
use agentflow_store::{AuditEntry, CompactError, LeaseError, StateChain};
use clap::Args;
use serde_json::{Value, json};

use crate::access::Guard;
use crate::inspect::thread_or_fail;
use crate::out::{self, now_ms};
use crate::{Failure, Outcome, code};

/// `fork` arguments.
#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The thread id.
    pub thread: String,
    /// The checkpoint to branch from (see `agentflow history`). Who forks is `--as`
    /// (recorded in the audit log).
    pub seq: u64,
}

/// `update` arguments.
#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// The thread id.
    pub thread: String,
    /// The update: a JSON object of state fields, merged through each field's reducer. Who
    /// changes the state is `--as` (recorded in the audit log).
    #[arg(long, value_name = "JSON")]
    pub set: String,
}

/// `compact` arguments.
#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The thread id (a finished thread).
    pub thread: String,
    /// How many of the newest checkpoints to keep.
    #[arg(long, default_value_t = 1)]
    pub keep: usize,
}

fn entry_json(e: &AuditEntry) -> Value {
    json!({ "thread": e.thread, "seq": e.seq, "at": e.at, "actor": e.actor, "kind": e.kind, "detail": e.detail })
}

/// `audit`.
/// One thread's log needs `read_history` on it; every thread's needs `list` and shows the
/// threads of the actor's tenants.
pub fn audit(store: &Arc<dyn Store>, guard: &Guard, thread: Option<&str>, as_json: bool) -> Outcome {
    let threads: Vec<agentflow_store::ThreadRecord> = match thread {
        Some(t) => vec![guard.thread(store.as_ref(), Operation::ReadHistory, t)?],
        None => {
            guard.list()?;
            let listing = store.scan_threads().map_err(Failure::store)?;
            listing.items.into_iter().filter(|t| guard.sees(t)).collect()
        }
    };
    let mut entries = Vec::new();
    for t in &threads {
        let mut listing = store.scan_audit(&t.id).map_err(Failure::store)?;
        // The values of state updates and answers, masked as `show` masks the state.
        crate::personal::audit(store.as_ref(), guard.access(), t, &mut listing.items)?;
        for skipped in &listing.skipped {
            eprintln!(
                "agentflow: skipped an audit entry that does not decode: {}",
                crate::out::printable_line(&skipped.to_string())
            );
        }
        entries.extend(listing.items);
    }
    if thread.is_none() {
        entries.sort_by(|a, b| (a.at, &a.thread, a.seq).cmp(&(b.at, &b.thread, b.seq)));
    }
    if as_json {
        out::json(&Value::Array(entries.iter().map(entry_json).collect()))?;
        return Ok(());
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.thread.clone(),
                e.seq.to_string(),
                ago(e.at, now),
                e.actor.clone(),
                e.kind.clone(),
                brief(&e.detail, 90),
            ]
        })
        .collect();
    out::table(&["THREAD", "SEQ", "WHEN", "ACTOR", "KIND", "DETAIL"], &rows)?;
    Ok(())
}

/// A failed history change as an exit code and message.
fn history_failure(e: HistoryError) -> Failure {
    match e {
        HistoryError::UnknownThread { .. } | HistoryError::UnknownCheckpoint { .. } => {
            Failure::not_found(e.to_string())
        }
        HistoryError::Persist(PersistError::Lease(LeaseError::ThreadBusy { .. })) => Failure::new(
            code::BUSY,
            format!("{e}; a run holds the thread: wait for it to pause or finish, then try again"),
        ),
        HistoryError::Persist(PersistError::Value { .. }) => Failure::usage(e.to_string()),
        // Names the place and the kind, never the value.
        HistoryError::Persist(PersistError::Credential { .. }) => {
            Failure::usage(format!("{e}; the update was not written"))
        }
        other => Failure::store(other),
    }
}

/// `fork`.
pub fn fork(store: &Arc<dyn Store>, args: &ForkArgs, user: &str, as_json: bool) -> Outcome {
    thread_or_fail(store.as_ref(), &args.thread)?;
    let seq = fork_thread(store, &args.thread, args.seq, user).map_err(history_failure)?;
    if as_json {
        out::json(&json!({ "thread": args.thread, "from": args.seq, "seq": seq }))?;
    } else {
        outln!(
            "thread {} forked at checkpoint {}: new head {seq}; resume it to continue from there",
            args.thread,
            args.seq
        )?;
    }
    Ok(())
}

/// `update`: the fields must be the state's (when the graph's description is stored), and
/// the value is checked as the library checks values it stores.
pub fn update(store: &Arc<dyn Store>, args: &UpdateArgs, user: &str, as_json: bool) -> Outcome {
    let record = thread_or_fail(store.as_ref(), &args.thread)?;
    let update = out::parse_json("--set", &args.set)?;
    let Some(fields) = update.as_object() else {
        return Err(Failure::usage("--set must be a JSON object of state fields, like {\"intent\": \"billing\"}"));
    };
    if fields.is_empty() {
        return Err(Failure::usage("--set sets no field"));
    }
    let description = description(store.as_ref(), &record)?;
    if let Some(known) = fold::fields(description.as_ref())
        && let Some(bad) = fields.keys().find(|k| !known.reducers.contains_key(*k))
    {
        let names: Vec<&str> = known.reducers.keys().map(String::as_str).collect();
        return Err(Failure::usage(format!(
            "`{}` is not a field of the thread's state; its fields: {}",
            agentflow::secret::redact_credentials(bad),
            names.join(", ")
        )));
    }
    // The app decodes the update with its own types when it resumes: refuse a value the
    // field's Rust type (as the description names it) cannot hold. Where that type is not
    // understood here, refuse a value whose JSON kind differs from the one the field holds now
    // (a string for a number, ...). `null` sets the field to null (clears an `Option`).
    let types = field_type::field_types(description.as_ref());
    let mut checked = std::collections::BTreeSet::new();
    for (name, value) in fields {
        let Some(ty) = types.get(name) else { continue };
        match field_type::check(ty, value, &format!("`{name}`")) {
            Ok(field_type::Fit::Checked) => {
                checked.insert(name.clone());
            }
            // Partly checked (or a fit a later release adds): compared with the value held now.
            Ok(_) => {}
            Err(why) => return Err(Failure::usage(format!("{why}; the app's state could not hold it"))),
        }
    }
    if let Some(seq) = store.latest_checkpoint(&args.thread).map_err(Failure::store)?.map(|c| c.seq) {
        let known = fold::fields(description.as_ref());
        let current = fold::state_at(store.as_ref(), &args.thread, seq, known.as_ref())?;
        for (name, value) in fields.iter().filter(|(name, _)| !checked.contains(*name)) {
            if let Some(now) = current.state.get(name)
                && let Some((held, given)) = kind_clash(now, value)
            {
                return Err(Failure::usage(format!(
                    "`{name}` holds {held} in the thread's state; --set gives {given}, which the app could not read back"
                )));
            }
        }
    }
    agentflow::persist::check_json(&update, "update").map_err(|e| Failure::usage(e.to_string()))?;
    let blob = serde_json::to_vec(&update).map_err(|e| Failure::usage(e.to_string()))?;
    let seq = update_thread(store, &args.thread, blob, user).map_err(history_failure)?;
    if as_json {
        out::json(&json!({ "thread": args.thread, "seq": seq, "update": update }))?;
    } else {
        outln!("thread {} updated by {user}: checkpoint {seq}", args.thread)?;
    }
    Ok(())
}

/// The JSON kinds of `now` and `given` when they differ (a field holding `null` takes any
/// kind; `null` fits only a field holding `null`, since the app reads `null` as the value
/// null; an integer field given a fraction counts as differing).
fn kind_clash(now: &Value, given: &Value) -> Option<(&'static str, &'static str)> {
    fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(n) if n.is_f64() => "a number with a fraction",
            Value::Number(_) => "an integer",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
    let (a, b) = (kind(now), kind(given));
    let fits = a == b || a == "null" || (a == "a number with a fraction" && b == "an integer");
    if fits { None } else { Some((a, b)) }
}

/// `compact`: folds retained checkpoints as JSON, refusing (exit 5) where the fold would not
/// be exact (a custom reducer, an update naming a key the stored state does not hold).
pub fn compact(store: &Arc<dyn Store>, args: &CompactArgs, as_json: bool) -> Outcome {
    let record = thread_or_fail(store.as_ref(), &args.thread)?;
    if !record.status.is_finished() {
        return Err(Failure::not_found(format!(
            "thread `{}` is {}, not finished; compact only finished threads",
            args.thread, record.status
        )));
    }
    let description = description(store.as_ref(), &record)?;
    let fields = fold::fields(description.as_ref());
    if fields.is_none() {
        return Err(Failure::new(
            code::OPAQUE,
            format!(
                "the store has no description of thread `{}`'s graph, so its state cannot be folded here; compact it from the app",
                args.thread
            ),
        ));
    }
    let thread = args.thread.clone();
    let fold_fn = |chain: &StateChain| -> Result<Vec<u8>, agentflow_store::BoxError> {
        let folded = fold::fold(&thread, chain, fields.as_ref())?;
        fold::require_exact(&folded)?;
        Ok(serde_json::to_vec(&folded.state)?)
    };
    let report = store.compact(&args.thread, args.keep, &fold_fn).map_err(|e| match &e {
        CompactError::Fold { source, .. } if source.downcast_ref::<fold::Inexact>().is_some() => Failure::new(
            code::OPAQUE,
            format!(
                "{e}; nothing was changed: compact it with `App::compact` from the application, which folds with \
                 the graph's Rust types"
            ),
        ),
        // Held (the thread or a thread above it): refused as a purge of it is (exit 1).
        CompactError::Held { .. } => Failure::not_found(e.to_string()),
        _ => Failure::store(e),
    })?;
    if as_json {
        out::json(&json!({
            "thread": args.thread,
            "dropped": report.dropped,
            "folded": report.folded,
            "file_compacted": report.file_compacted,
        }))?;
    } else {
        outln!(
            "thread {}: dropped {} checkpoint(s), folded {} snapshot(s){}",
            args.thread,
            report.dropped,
            report.folded,
            if report.file_compacted { ", file compacted" } else { "" }
        )?;
    }
    Ok(())
}
