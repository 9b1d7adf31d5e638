//! Read-only commands: `threads`, `show`, `history`, `diff`, `pending`, `graph`.

use std::sync::Arc;

use agentflow::approval::{ApprovalDesk, RoleAuthorizer};
use agentflow::server::inspect::description::{Names, description};
use agentflow::server::inspect::display::{ago, brief};
use agentflow::server::inspect::fold::{self, Folded};
use agentflow::server::inspect::personal;
use agentflow::server::inspect::waits::waits;
use agentflow::{Pending, PendingKind, Store};
use agentflow_store::{ApprovalRecord, ApprovalStatus, ThreadRecord, ThreadStatus};
use clap::Args;
use serde_json::{Value, json};

use crate::access::Guard;
use crate::out::{self, now_ms};
use crate::{Failure, Outcome};

/// The pending write (or checkpoint metadata key) holding the thread's budget.
pub const BUDGET: &str = "__budget__";

/// `threads` filters.
#[derive(Args, Debug)]
pub struct ThreadsArgs {
    /// Only threads with this status (repeatable): running, interrupted, sleeping, completed,
    /// failed, cancelled, budget_exhausted, compensating, compensated.
    #[arg(long)]
    pub status: Vec<String>,
    /// Only threads of this graph (its name or fingerprint).
    #[arg(long)]
    pub graph: Option<String>,
    /// Only threads not updated for this long (`30m`, `2h`, `7d`).
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<String>,
    /// Count the threads by graph id and version instead of listing them (from the stored graph
    /// descriptions; one stored before versions is version 1), with how many may still resume:
    /// once a version has none, the migrations from it can go.
    #[arg(long = "versions", visible_alias = "version")]
    pub versions: bool,
}

/// Reads a thread or fails with "not found".
pub fn thread_or_fail(store: &dyn Store, thread: &str) -> Result<ThreadRecord, Failure> {
    store.thread(thread).map_err(Failure::store)?.ok_or_else(|| crate::access::missing(thread))
}

/// A thread as JSON (stable field names).
pub fn thread_json(t: &ThreadRecord, graph: Option<&str>) -> Value {
    json!({
        "id": t.id,
        "status": t.status.as_str(),
        "graph": graph,
        "fingerprint": t.graph_fingerprint,
        "owner": t.owner,
        "schema_version": t.schema_version,
        "detail": t.detail,
        "created_at": t.created_at,
        "updated_at": t.updated_at,
        "lease": t.lease.as_ref().map(|l| json!({ "holder": l.holder, "expires_at": l.expires_at })),
    })
}

/// An approval as JSON: the stored record's fields, plus `arguments` (the arguments parsed)
/// and `waiting` (whether it waits for a person).
pub fn approval_json(a: &ApprovalRecord) -> Value {
    let mut v = serde_json::to_value(a).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.insert("status".into(), json!(a.status.as_str()));
        map.insert("arguments".into(), serde_json::from_str(&a.args).unwrap_or(Value::String(a.args.clone())));
        map.insert("waiting".into(), json!(a.status.is_waiting()));
    }
    v
}

fn status_of(name: &str) -> Result<ThreadStatus, Failure> {
    ThreadStatus::ALL.into_iter().find(|s| s.as_str() == name).ok_or_else(|| {
        let all: Vec<&str> = ThreadStatus::ALL.iter().map(|s| s.as_str()).collect();
        Failure::usage(format!("unknown status `{name}`; one of: {}", all.join(", ")))
    })
}

/// `threads`.
pub fn threads(store: &dyn Store, guard: &Guard, args: &ThreadsArgs, as_json: bool) -> Outcome {
    guard.list()?;
    let statuses = args.status.iter().map(|s| status_of(s)).collect::<Result<Vec<_>, _>>()?;
    let older = args.older_than.as_deref().map(out::parse_duration).transpose().map_err(Failure::usage)?;
    let now = now_ms();
    let listing = store.scan_threads().map_err(Failure::store)?;
    for skipped in &listing.skipped {
        eprintln!(
            "agentflow: skipped a thread record that does not decode: {}",
            out::printable_line(&skipped.to_string())
        );
    }
    let mut names = Names::default();
    let mut rows = Vec::new();
    for t in listing.items.iter().filter(|t| guard.sees(t)) {
        if !statuses.is_empty() && !statuses.contains(&t.status) {
            continue;
        }
        if older.is_some_and(|d| now.saturating_sub(t.updated_at) < d) {
            continue;
        }
        let name = names.of(store, t);
        if let Some(g) = &args.graph
            && name.as_deref() != Some(g.as_str())
            && &t.graph_fingerprint != g
        {
            continue;
        }
        rows.push((t, name));
    }
    if args.versions {
        let threads: Vec<&ThreadRecord> = rows.iter().map(|(t, _)| *t).collect();
        return crate::versions::print(store, &threads, as_json);
    }
    if as_json {
        out::json(&Value::Array(rows.iter().map(|(t, n)| thread_json(t, n.as_deref())).collect()))?;
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|(t, n)| {
                vec![
                    t.id.clone(),
                    t.status.to_string(),
                    n.clone().unwrap_or_else(|| t.graph_fingerprint.clone()),
                    t.owner.clone(),
                    ago(t.updated_at, now),
                    t.detail.clone(),
                ]
            })
            .collect();
        out::table(&["THREAD", "STATUS", "GRAPH", "OWNER", "UPDATED", "DETAIL"], &table)?;
    }
    Ok(())
}

fn pending_json(p: &Pending) -> Value {
    let mut v = json!({ "node": p.node, "kind": kind_name(p.kind), "payload": p.payload });
    if let Some(i) = p.instance {
        v["instance"] = json!(i);
    }
    // What `answer --question` takes: the answer is refused if the thread asks another
    // question by then.
    if p.kind == PendingKind::Interrupt {
        v["question"] = json!(p.question_id());
    }
    v
}

/// `show`'s line for the thread's timer `at`: when it wakes from a sleep, or, for a timer set
/// at an approval's expiry (the run wakes then to resolve the call as `APPROVAL_EXPIRED`), when
/// that approval expires.
fn timer_line(at: u64, now: u64, waiting: &[Pending]) -> String {
    let expiring = waiting.iter().find(|p| {
        matches!(p.kind, PendingKind::Approval) && p.payload.get("expires_at").and_then(Value::as_u64) == Some(at)
    });
    let Some(p) = expiring else { return format!("wakes:     {}", ago(at, now)) };
    let id = p.payload.get("approval").and_then(Value::as_str).map(|id| format!(" ({id})")).unwrap_or_default();
    if at > now {
        format!("timer:     approval expires {}{id}", ago(at, now))
    } else {
        format!("timer:     approval expired {}{id}", ago(at, now))
    }
}

fn kind_name(kind: PendingKind) -> String {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{kind:?}"))
}

/// `show`.
pub fn show(store: &dyn Store, guard: &Guard, thread: &str, as_json: bool) -> Outcome {
    let record = thread_or_fail(store, thread)?;
    let description = description(store, &record)?;
    let latest = store.latest_checkpoint(thread).map_err(Failure::store)?;
    let (mut state, next, seq) = match &latest {
        Some(cp) => {
            let fields = fold::fields(description.as_ref());
            (fold::state_at(store, thread, cp.seq, fields.as_ref())?, cp.cursor.clone(), Some(cp.seq))
        }
        None => (Folded::default(), vec![], None),
    };
    // A stored secret shows as `••• reference`.
    agentflow::secret::mask_secret_refs(&mut state.state);
    personal::show(store, guard.access(), "cli", thread, description.as_ref(), &mut [&mut state.state])?;
    // A failed thread still waits for a value where a node asked (an answer of the wrong shape
    // failed it there); other finished threads wait for nothing.
    let waiting = match record.status {
        ThreadStatus::Failed => {
            waits(store, thread)?.1.into_iter().filter(|p| p.kind == PendingKind::Interrupt).collect()
        }
        status if status.is_finished() => vec![],
        _ => waits(store, thread)?.1,
    };
    let approvals = store.list_approvals(thread).map_err(Failure::store)?;
    let open: Vec<&ApprovalRecord> = approvals.iter().filter(|a| !a.status.is_final()).collect();
    let budget = match &latest {
        Some(cp) => {
            let writes = store.pending_writes(thread, cp.seq).map_err(Failure::store)?;
            let stored = match writes.iter().find(|w| w.node == BUDGET) {
                Some(w) => serde_json::from_slice(&w.value).unwrap_or(Value::Null),
                None => cp.metadata.extra.get(BUDGET).cloned().unwrap_or(Value::Null),
            };
            full_budget(stored)
        }
        None => Value::Null,
    };
    let wake_at = store.thread_timer(thread).map_err(Failure::store)?;
    let graph = description.as_ref().and_then(|d| d["name"].as_str().map(str::to_string));
    if as_json {
        out::json(&json!({
            "thread": thread_json(&record, graph.as_deref()),
            "seq": seq,
            "next": next,
            "state": state.state,
            "warnings": state.warnings,
            "pending": waiting.iter().map(pending_json).collect::<Vec<_>>(),
            "approvals": open.iter().map(|a| approval_json(a)).collect::<Vec<_>>(),
            "budget": budget,
            "wake_at": wake_at,
        }))?;
        return Ok(());
    }
    let now = now_ms();
    outln!("thread:    {}", record.id)?;
    outln!(
        "status:    {}{}",
        record.status,
        if record.detail.is_empty() { String::new() } else { format!(" ({})", record.detail) }
    )?;
    outln!("graph:     {} ({})", graph.as_deref().unwrap_or("-"), record.graph_fingerprint)?;
    outln!("owner:     {}", record.owner)?;
    outln!("updated:   {}", ago(record.updated_at, now))?;
    outln!("seq:       {}", seq.map_or("-".to_string(), |s| s.to_string()))?;
    outln!("next:      {}", if next.is_empty() { "-".to_string() } else { next.join(", ") })?;
    if let Some(at) = wake_at {
        outln!("{}", timer_line(at, now, &waiting))?;
    }
    if let Some(limits) = budget.get("limits") {
        outln!("limits:    {}", limits)?;
    }
    if let Some(usage) = budget.get("usage") {
        outln!("used:      {}", usage)?;
    }
    for p in &waiting {
        outln!("waits for: {} at `{}`: {}", kind_name(p.kind), p.node, brief(&p.payload, 100))?;
        if p.kind == PendingKind::Interrupt {
            outln!(
                "question:  {} (`answer --question` refuses an answer if the thread asks another by then)",
                p.question_id()
            )?;
        }
    }
    for a in &open {
        outln!(
            "approval:  {} {} `{}` ({}) requested by {}: {}",
            a.id,
            a.status,
            a.tool,
            a.risk,
            a.requester,
            brief(&json!(a.args), 80)
        )?;
    }
    for w in &state.warnings {
        outln!("warning:   {w}")?;
    }
    outln!("state:")?;
    crate::out::write_block(&format!("{}\n", serde_json::to_string_pretty(&state.state).unwrap_or_default()))?;
    Ok(())
}

/// `history`.
pub fn history(store: &dyn Store, thread: &str, as_json: bool) -> Outcome {
    thread_or_fail(store, thread)?;
    let list = store.list_checkpoints(thread).map_err(Failure::store)?;
    if as_json {
        let v: Vec<Value> = list
            .iter()
            .map(|c| {
                json!({
                    "seq": c.seq,
                    "parent": c.parent,
                    "step": c.metadata.step,
                    "source": c.metadata.source,
                    "nodes": c.metadata.nodes,
                    "next": c.cursor,
                    "created_at": c.created_at,
                    "has_snapshot": c.has_snapshot,
                    "updates": c.delta_len,
                    "bytes": c.payload_bytes,
                })
            })
            .collect();
        out::json(&Value::Array(v))?;
        return Ok(());
    }
    let now = now_ms();
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.seq.to_string(),
                c.parent.map_or("-".to_string(), |p| p.to_string()),
                c.metadata.step.to_string(),
                serde_json::to_value(c.metadata.source)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                c.metadata.nodes.join(","),
                c.cursor.join(","),
                ago(c.created_at, now),
            ]
        })
        .collect();
    out::table(&["SEQ", "PARENT", "STEP", "SOURCE", "RAN", "NEXT", "CREATED"], &rows)?;
    Ok(())
}

/// `diff`.
pub fn diff(store: &dyn Store, guard: &Guard, thread: &str, a: u64, b: u64, as_json: bool) -> Outcome {
    let record = thread_or_fail(store, thread)?;
    let description = description(store, &record)?;
    let fields = fold::fields(description.as_ref());
    let mut before = fold::state_at(store, thread, a, fields.as_ref())?;
    let mut after = fold::state_at(store, thread, b, fields.as_ref())?;
    agentflow::secret::mask_secret_refs(&mut before.state);
    agentflow::secret::mask_secret_refs(&mut after.state);
    let states = &mut [&mut before.state, &mut after.state];
    personal::show(store, guard.access(), "cli", thread, description.as_ref(), states)?;
    let d = fold::diff(&before.state, &after.state);
    let mut warnings = before.warnings;
    warnings.extend(after.warnings);
    warnings.dedup();
    if as_json {
        out::json(&json!({
            "thread": thread,
            "from": a,
            "to": b,
            "added": d.added.iter().map(|(p, v)| json!({ "path": p, "value": v })).collect::<Vec<_>>(),
            "removed": d.removed.iter().map(|(p, v)| json!({ "path": p, "value": v })).collect::<Vec<_>>(),
            "changed": d.changed.iter().map(|(p, x, y)| json!({ "path": p, "from": x, "to": y })).collect::<Vec<_>>(),
            "warnings": warnings,
        }))?;
        return Ok(());
    }
    for w in &warnings {
        eprintln!("agentflow: warning: {}", out::printable_line(w));
    }
    if d.added.is_empty() && d.removed.is_empty() && d.changed.is_empty() {
        outln!("no change between checkpoints {a} and {b}")?;
    }
    for (p, v) in &d.added {
        outln!("+ {p}: {}", brief(v, 120))?;
    }
    for (p, v) in &d.removed {
        outln!("- {p}: {}", brief(v, 120))?;
    }
    for (p, x, y) in &d.changed {
        outln!("~ {p}: {} -> {}", brief(x, 60), brief(y, 60))?;
    }
    Ok(())
}

/// `pending`: a question asked inside a subgraph is listed once, as the parent thread's (the
/// thread to answer; its resume hands the answer down).
pub fn pending(shared: &Arc<dyn Store>, guard: &Guard, as_json: bool) -> Outcome {
    guard.list()?;
    let store = shared.as_ref();
    let desk = ApprovalDesk::for_store(Arc::clone(shared), RoleAuthorizer::new());
    let listing = store.scan_pending_approvals().map_err(Failure::store)?;
    for skipped in &listing.skipped {
        eprintln!(
            "agentflow: skipped an approval record that does not decode: {}",
            out::printable_line(&skipped.to_string())
        );
    }
    // Only what the actor may see: the approvals of threads of its tenants.
    let approvals: Vec<ApprovalRecord> =
        listing.items.into_iter().filter(|a| guard.sees_id(store, &a.thread)).collect();
    // Interrupts and breakpoints; approval and unknown-outcome waits are the records above,
    // and a sleep waits for a timer, not a person.
    let mut interrupts = Vec::new();
    for t in store.scan_threads().map_err(Failure::store)?.items.into_iter().filter(|t| guard.sees(t)) {
        // A failed thread still waits for a value where a node asked (an answer of the wrong
        // shape failed it there).
        let listed: &[PendingKind] = match t.status {
            ThreadStatus::Interrupted => &[PendingKind::Interrupt, PendingKind::Before, PendingKind::After],
            ThreadStatus::Failed => &[PendingKind::Interrupt],
            _ => continue,
        };
        // A subgraph run whose question its parent waits on is listed as the parent's; one whose
        // parent moved on (a fork) waits for no one.
        if desk.parent_waiting_on(&t.id).map_err(Failure::store)?.is_some()
            || desk.parent_moved_on(&t.id).map_err(Failure::store)?.is_some()
        {
            continue;
        }
        let (seq, waits) = waits(store, &t.id)?;
        // A question of a step that asks several, answered already while others wait, waits no
        // more.
        let answered: Vec<String> = match desk.waiting_questions(&t.id) {
            Ok((_, asks)) if asks.iter().any(|(_, a)| a.is_none()) => {
                asks.iter().filter(|(_, a)| a.is_some()).map(|(p, _)| p.question_id()).collect()
            }
            _ => Vec::new(),
        };
        for p in waits {
            if listed.contains(&p.kind) && !(p.kind == PendingKind::Interrupt && answered.contains(&p.question_id())) {
                interrupts.push((t.clone(), seq, p));
            }
        }
    }
    let now = now_ms();
    if as_json {
        out::json(&json!({
            "approvals": approvals.iter().map(approval_json).collect::<Vec<_>>(),
            "interrupts": interrupts.iter().map(|(t, seq, p)| {
                let mut v = pending_json(p);
                v["thread"] = json!(t.id);
                v["seq"] = json!(seq);
                v["since"] = json!(t.updated_at);
                v
            }).collect::<Vec<_>>(),
        }))?;
        return Ok(());
    }
    let mut rows: Vec<Vec<String>> = approvals
        .iter()
        .map(|a| {
            let what = if a.status == ApprovalStatus::OutcomeUnknown { "outcome_unknown" } else { "approval" };
            vec![
                what.to_string(),
                a.id.clone(),
                a.thread.clone(),
                format!("{} ({})", a.tool, a.risk),
                a.requester.clone(),
                if a.status == ApprovalStatus::Pending {
                    format!("expires {}", ago(a.expires_at, now))
                } else {
                    "-".into()
                },
                brief(&json!(a.args), 60),
            ]
        })
        .collect();
    for (t, _, p) in &interrupts {
        rows.push(vec![
            kind_name(p.kind),
            p.node.clone(),
            t.id.clone(),
            "-".into(),
            t.owner.clone(),
            format!("since {}", ago(t.updated_at, now)),
            brief(&p.payload, 60),
        ]);
    }
    out::table(&["KIND", "ID/NODE", "THREAD", "TOOL", "REQUESTER", "WHEN", "ARGS/PAYLOAD"], &rows)?;
    Ok(())
}

/// `graph`.
pub fn graph(store: &dyn Store, thread: &str, as_json: bool) -> Outcome {
    let record = thread_or_fail(store, thread)?;
    let mermaid = match description(store, &record)? {
        Some(d) => d["mermaid"].as_str().map(str::to_string),
        None => None,
    };
    let mermaid = match mermaid {
        Some(m) => m,
        None => from_first_checkpoint(store, thread)?.ok_or_else(|| {
            Failure::not_found(format!(
                "the store has no description of thread `{thread}`'s graph (fingerprint {}); run the graph once with this \
                 version of agentflow to store it",
                record.graph_fingerprint
            ))
        })?,
    };
    if as_json {
        out::json(&json!({ "thread": thread, "fingerprint": record.graph_fingerprint, "mermaid": mermaid }))?;
    } else {
        out::write_block(&mermaid)?;
    }
    Ok(())
}

/// A drawing from the graph outline an older agentflow kept in checkpoint 0 (nodes and their
/// targets), if that checkpoint is still there.
fn from_first_checkpoint(store: &dyn Store, thread: &str) -> Result<Option<String>, Failure> {
    let Some(cp) = store.checkpoint(thread, 0).map_err(Failure::store)? else { return Ok(None) };
    let Some(nodes) = cp.metadata.extra.get("graph").and_then(|g| g.get("nodes")).and_then(Value::as_object) else {
        return Ok(None);
    };
    let mut out = String::from("flowchart TD\n    __start__([START])\n    __end__([END])\n");
    if let Some(start) = cp.cursor.first() {
        out.push_str(&format!("    __start__ --> {start}\n"));
    }
    for (node, targets) in nodes {
        let targets: Vec<&str> = targets.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let arrow = if targets.len() > 1 { "-.->" } else { "-->" };
        for t in targets {
            let t = if t == "END" { "__end__" } else { t };
            out.push_str(&format!("    {node} {arrow} {t}\n"));
        }
    }
    Ok(Some(out))
}

/// A stored budget with every limit and counter shown: checkpoints store it compact (unset
/// limits and zero counters left out). Anything else is shown as stored (`null`: a thread
/// stored before budgets were).
fn full_budget(stored: Value) -> Value {
    if !stored.is_object() {
        return stored;
    }
    let limits = stored.get("limits").cloned().unwrap_or_else(|| json!({}));
    let usage = stored.get("usage").cloned().unwrap_or_else(|| json!({}));
    match (serde_json::from_value::<agentflow::Limits>(limits), serde_json::from_value::<agentflow::RunUsage>(usage)) {
        (Ok(limits), Ok(usage)) => json!({ "limits": limits, "usage": usage }),
        // Not a budget this version knows: shown as stored.
        _ => stored,
    }
}
