//! `export` and `import`: a thread as JSON lines, for backups and for moving threads between
//! stores (a redb file to PostgreSQL, one machine to another).
//!
//! The file starts with a header line, then one line per record, each an object with a
//! `type`: `thread`, `graph`, `checkpoint`, `pending_write`, `effect`, `audit`, `approval`.
//! Stored bytes (snapshots, updates, writes, effect results) are written as `{"json": ..}`
//! when the JSON reads back to the very same bytes, else `{"text": ".."}` (the UTF-8 text),
//! else `{"hex": ".."}`, so an import restores them byte for byte. Several exports
//! concatenated import as several threads; an export of a thread holds its subgraph children
//! too (each a thread of its own), so the tree moves whole.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use agentflow::Store;
use agentflow::persist::MAX_DOCUMENT_DEPTH;
use agentflow_store::{
    ApprovalRecord, AuditEntry, Checkpoint, CheckpointMetadata, CommitError, EffectKey, EventId, PendingWrite,
    StoredEvent, ThreadDump, ThreadRecord,
};
use clap::Args;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::out;
use crate::{Failure, Outcome};

/// The header's `type`.
const HEADER: &str = "agentflow.export";
/// The layout version this build writes (2: a child's `record` names its `parent`).
const FORMAT: u64 = 2;
/// The oldest layout this build reads: format 1 records name no parent, and a child is told by
/// the shape of its id, as it was then ([`ThreadRecord::legacy_parent`]).
const OLDEST_FORMAT: u64 = 1;
/// The deepest nesting of arrays and objects in a line `export` writes: a stored document (at
/// most [`MAX_DOCUMENT_DEPTH`] levels) as `{"json": ..}` in a checkpoint's `delta` list, in its
/// line. serde_json reads at most 127 levels by default, so `import` reads lines with this limit.
const MAX_LINE_DEPTH: usize = MAX_DOCUMENT_DEPTH + 3;

/// `export` arguments.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The thread id.
    pub thread: String,
    /// Write to this file instead of standard output.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// `import` arguments.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The export file (`-`: standard input).
    pub file: PathBuf,
}

/// Stored bytes as JSON (see the module docs).
fn blob(bytes: &[u8]) -> Value {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes)
        && serde_json::to_vec(&v).is_ok_and(|again| again == bytes)
    {
        return json!({ "json": v });
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "text": text }),
        Err(_) => json!({ "hex": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() }),
    }
}

fn unblob(v: &Value, line: usize) -> Result<Vec<u8>, Failure> {
    let bad = || Failure::usage(format!("line {line}: stored bytes must be {{\"json\"|\"text\"|\"hex\": ..}}"));
    if let Some(j) = v.get("json") {
        return serde_json::to_vec(j).map_err(|_| bad());
    }
    if let Some(t) = v.get("text").and_then(Value::as_str) {
        return Ok(t.as_bytes().to_vec());
    }
    let hex = v.get("hex").and_then(Value::as_str).ok_or_else(bad)?.as_bytes();
    if hex.len() % 2 != 0 {
        return Err(bad());
    }
    // Pairs of bytes, not of characters: a character outside ASCII is no hex digit.
    hex.chunks(2)
        .map(|pair| match pair {
            [high, low] => Some(hex_digit(*high)? << 4 | hex_digit(*low)?),
            _ => None,
        })
        .map(|byte| byte.ok_or_else(bad))
        .collect()
}

/// The value of an ASCII hex digit (either case); `None` for any other byte.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `export`: the thread, then its subgraph children at every level (the threads whose records'
/// parents lead to it), each as its own header and lines, so an import moves a paused tree whole: a
/// child's progress, journal and waiting approval go with its parent.
pub fn export(store: &std::sync::Arc<dyn Store>, args: &ExportArgs) -> Outcome {
    let store = store.as_ref();
    let dump = store.dump_thread(&args.thread).map_err(Failure::store)?.ok_or_else(|| {
        Failure::not_found(format!("no thread `{}` in the store; list them with `agentflow threads`", args.thread))
    })?;
    let threads = store.scan_threads().map_err(Failure::store)?.items;
    // Parents before their children, so an import restores them in that order.
    let children: Vec<String> =
        agentflow_store::descendants(&threads, &args.thread).into_iter().map(|t| t.id.clone()).collect();
    let mut lines = thread_lines(store, &dump)?;
    for child in children {
        // A child removed since the listing is simply not exported.
        if let Some(dump) = store.dump_thread(&child).map_err(Failure::store)? {
            lines.extend(thread_lines(store, &dump)?);
        }
    }
    let mut text = String::new();
    for line in lines {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    // The control characters JSON leaves as they are (DEL, C1) written as JSON escapes: the same
    // JSON, which no terminal takes for commands.
    let text = out::printable(&text).into_owned();
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Failure::usage(format!("cannot write the export: {}: {e}", path.display()))),
        None => out::write_bytes(text.as_bytes()),
    }
}

/// One thread's lines: its header, record, graph description and stored records.
fn thread_lines(store: &dyn Store, dump: &ThreadDump) -> Result<Vec<Value>, Failure> {
    let mut lines: Vec<Value> = vec![json!({ "type": HEADER, "format": FORMAT, "thread": dump.thread.id })];
    let record = ThreadRecord { lease: None, ..dump.thread.clone() };
    lines.push(json!({ "type": "thread", "record": record, "wake_at": dump.wake_at }));
    if let Some(text) = store.graph_description(&dump.thread.graph_fingerprint).map_err(Failure::store)? {
        lines.push(json!({ "type": "graph", "fingerprint": dump.thread.graph_fingerprint, "description": text }));
    }
    for cp in &dump.checkpoints {
        lines.push(json!({
            "type": "checkpoint",
            "seq": cp.seq,
            "parent": cp.parent,
            "cursor": cp.cursor,
            "metadata": cp.metadata,
            "created_at": cp.created_at,
            "snapshot": cp.snapshot.as_deref().map(blob),
            "delta": cp.delta.iter().map(|d| blob(d)).collect::<Vec<_>>(),
        }));
    }
    for w in &dump.pending_writes {
        lines.push(
            json!({ "type": "pending_write", "seq": w.seq, "node": w.node, "idx": w.idx, "value": blob(&w.value) }),
        );
    }
    for (k, result) in &dump.effects {
        lines.push(json!({ "type": "effect", "seq": k.seq, "node": k.node, "key": k.key, "result": blob(result) }));
    }
    for e in &dump.audit {
        // With its place in the thread's hash chain, which an import keeps.
        lines.push(json!({
            "type": "audit", "seq": e.seq, "at": e.at, "actor": e.actor, "kind": e.kind, "detail": e.detail,
            "detail_hash": e.detail_hash, "link": e.link,
        }));
    }
    for a in &dump.approvals {
        lines.push(json!({ "type": "approval", "record": a }));
    }
    for e in &dump.events {
        lines.push(
            json!({ "type": "event", "id": e.id.to_string(), "kind": e.kind, "at": e.at, "data": blob(&e.data) }),
        );
    }
    Ok(lines)
}

/// One thread read from a file, with its graph description.
pub struct Imported {
    dump: ThreadDump,
    graph: Option<(String, String)>,
}

impl Imported {
    /// The thread's record as the file gives it.
    pub fn thread(&self) -> &ThreadRecord {
        &self.dump.thread
    }
}

/// How deep `text` nests arrays and objects, brackets inside strings not counted (a count that
/// does not recurse, so any line can be measured before it is parsed).
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Line `n` of an export file as JSON, nested up to [`MAX_LINE_DEPTH`] levels (deeper than
/// serde_json reads by default); a deeper line is refused before it is parsed.
fn parse_line(line: &str, n: usize) -> Result<Value, Failure> {
    let depth = nesting(line);
    if depth > MAX_LINE_DEPTH {
        return Err(Failure::usage(format!(
            "line {n}: nested {depth} levels deep; an export line nests at most {MAX_LINE_DEPTH}"
        )));
    }
    let mut de = serde_json::Deserializer::from_str(line);
    de.disable_recursion_limit();
    Value::deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| Failure::usage(format!("line {n}: not JSON: {e}")))
}

fn field<T: serde::de::DeserializeOwned>(v: &Value, name: &str, line: usize) -> Result<T, Failure> {
    serde_json::from_value(v.get(name).cloned().unwrap_or(Value::Null))
        .map_err(|e| Failure::usage(format!("line {line}: field `{name}`: {e}")))
}

/// Reads the threads of an export file; a thread id reserved for a schedule's audit stream
/// (`schedule:`, [`is_reserved_thread_id`](agentflow::schedule::is_reserved_thread_id)) is
/// refused.
pub fn read(file: &PathBuf) -> Result<Vec<Imported>, Failure> {
    let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(file).map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
        Box::new(BufReader::new(f))
    };
    let mut threads: Vec<Imported> = Vec::new();
    let mut current: Option<String> = None;
    // Whether the current header is of format 1.
    let mut legacy = false;
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| Failure::usage(format!("line {n}: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let v = parse_line(&line, n)?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == HEADER {
            let format = v.get("format").and_then(Value::as_u64).unwrap_or(0);
            if !(OLDEST_FORMAT..=FORMAT).contains(&format) {
                return Err(Failure::usage(format!(
                    "line {n}: export format {format}; this build reads formats {OLDEST_FORMAT} to {FORMAT}"
                )));
            }
            legacy = format < 2;
            current = Some(field(&v, "thread", n)?);
            continue;
        }
        let Some(id) = current.clone() else {
            return Err(Failure::usage(format!(
                "line {n}: no `{HEADER}` header before it; is this an agentflow export?"
            )));
        };
        if kind == "thread" {
            let mut record: ThreadRecord = field(&v, "record", n)?;
            if legacy && record.parent.is_none() {
                record.parent = ThreadRecord::legacy_parent(&record.id).map(str::to_string);
            }
            if record.id != id {
                return Err(Failure::usage(format!("line {n}: thread `{}` under the header of `{id}`", record.id)));
            }
            // Such an id names a schedule's refusal audit stream; a thread under it would share
            // that stream.
            if agentflow::schedule::is_reserved_thread_id(&id) {
                return Err(Failure::usage(format!(
                    "line {n}: thread id `{id}` starts with `{}`, which names a schedule's audit stream and no \
                     thread may take; give the thread another id; nothing of the file was imported",
                    agentflow::schedule::RESERVED_THREAD_PREFIX
                )));
            }
            let mut dump = ThreadDump::new(record);
            dump.wake_at = field(&v, "wake_at", n)?;
            threads.push(Imported { dump, graph: None });
            continue;
        }
        let Some(t) = threads.last_mut().filter(|t| t.dump.thread.id == id) else {
            return Err(Failure::usage(format!("line {n}: a `{kind}` line before the `thread` line")));
        };
        match kind {
            "graph" => t.graph = Some((field(&v, "fingerprint", n)?, field(&v, "description", n)?)),
            "checkpoint" => {
                let snapshot = match v.get("snapshot") {
                    Some(Value::Null) | None => None,
                    Some(s) => Some(unblob(s, n)?),
                };
                let delta = v
                    .get("delta")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|d| unblob(d, n))
                    .collect::<Result<Vec<_>, _>>()?;
                let metadata: CheckpointMetadata = field(&v, "metadata", n)?;
                t.dump.checkpoints.push(Checkpoint {
                    thread: id.clone(),
                    seq: field(&v, "seq", n)?,
                    parent: field(&v, "parent", n)?,
                    cursor: field(&v, "cursor", n)?,
                    snapshot,
                    delta,
                    metadata,
                    created_at: field(&v, "created_at", n)?,
                });
            }
            "pending_write" => t.dump.pending_writes.push(PendingWrite {
                seq: field(&v, "seq", n)?,
                node: field(&v, "node", n)?,
                idx: field(&v, "idx", n)?,
                value: unblob(v.get("value").unwrap_or(&Value::Null), n)?,
            }),
            "effect" => t.dump.effects.push((
                EffectKey::new(
                    id.clone(),
                    field(&v, "seq", n)?,
                    field::<String>(&v, "node", n)?,
                    field::<String>(&v, "key", n)?,
                ),
                unblob(v.get("result").unwrap_or(&Value::Null), n)?,
            )),
            "audit" => t.dump.audit.push(AuditEntry {
                thread: id.clone(),
                seq: field(&v, "seq", n)?,
                at: field(&v, "at", n)?,
                actor: field(&v, "actor", n)?,
                kind: field(&v, "kind", n)?,
                detail: v.get("detail").cloned().unwrap_or(Value::Null),
                // The entry's place in the thread's hash chain; a line of an older export has
                // none, and the store chains it on restore.
                detail_hash: v.get("detail_hash").and_then(Value::as_str).unwrap_or_default().to_string(),
                link: v.get("link").and_then(Value::as_str).unwrap_or_default().to_string(),
            }),
            "approval" => t.dump.approvals.push(field::<ApprovalRecord>(&v, "record", n)?),
            "event" => {
                let id: String = field(&v, "id", n)?;
                let id = id.parse::<EventId>().map_err(|e| Failure::usage(format!("line {n}: {e}")))?;
                let data = unblob(v.get("data").unwrap_or(&Value::Null), n)?;
                t.dump.events.push(StoredEvent::new(id, field::<String>(&v, "kind", n)?, data, field(&v, "at", n)?));
            }
            other => return Err(Failure::usage(format!("line {n}: unknown line type `{other}`"))),
        }
    }
    if threads.is_empty() {
        return Err(Failure::usage(format!("{}: no thread in it", file.display())));
    }
    Ok(threads)
}

/// Refuses a file whose subgraph child names a parent that is neither in the file nor a
/// stored thread of the child's tenant (`stored` reads one from the target store, if it
/// exists): a child planted under another tenant's parent would be taken for its child.
pub fn check_parents(
    threads: &[Imported],
    stored: impl Fn(&str) -> Option<agentflow::persist::ThreadRecord>,
) -> Outcome {
    let ids: std::collections::HashSet<&str> = threads.iter().map(|t| t.thread().id.as_str()).collect();
    for t in threads {
        let child = t.thread();
        let Some(parent) = child.parent.as_deref() else { continue };
        if ids.contains(parent) {
            let in_file = threads.iter().map(|t| t.thread()).find(|p| p.id == parent);
            if in_file.is_some_and(|p| p.tenant == child.tenant) {
                continue;
            }
        } else if stored(parent).is_some_and(|p| p.tenant == child.tenant) {
            continue;
        }
        return Err(Failure::not_found(format!(
            "thread `{}` is a subgraph child of `{parent}`, which is neither in the file nor a thread of the same \
             tenant in this store; export the parent with its children; nothing of the file was imported",
            child.id
        )));
    }
    Ok(())
}

/// `import` of the threads [`read`] from a file (read before the store is opened or created,
/// so a file that does not parse leaves no new store behind).
///
/// Each imported thread's audit log ends with a `thread.imported` entry naming `importer`: the
/// log says the thread came from a file, and who brought it.
pub fn import(store: &std::sync::Arc<dyn Store>, threads: Vec<Imported>, importer: &str, as_json: bool) -> Outcome {
    let store = store.as_ref();
    let mut done = Vec::new();
    let mut dumps = Vec::new();
    let mut graphs = Vec::new();
    for t in threads {
        if let Some((fingerprint, description)) = t.graph {
            // A description is kept under the fingerprint of the thread that carries it, never
            // under one the file names for no thread of it.
            if fingerprint != t.dump.thread.graph_fingerprint {
                return Err(Failure::usage(format!(
                    "the graph line of thread `{}` names fingerprint `{fingerprint}`, not the thread's `{}`; nothing of the file was imported",
                    t.dump.thread.id, t.dump.thread.graph_fingerprint
                )));
            }
            graphs.push((fingerprint, description));
        }
        done.push(t.dump.thread.id.clone());
        dumps.push(t.dump);
    }
    // Every thread of the file, or none: a parent without its subgraph children would start
    // them afresh once resumed, making their calls again.
    store.restore_threads(dumps).map_err(|e| match e {
        CommitError::Invalid { .. } | CommitError::TooDeep { .. } | CommitError::Approval(_) => {
            Failure::not_found(format!("{e}; nothing of the file was imported"))
        }
        other => Failure::store(other),
    })?;
    let at = crate::out::now_ms();
    for id in &done {
        let entry =
            agentflow_store::NewAuditEntry::new(at, importer, "thread.imported", json!({ "threads": done.len() }));
        store.append_audit(id, entry).map_err(|e| {
            Failure::store(format!(
                "the threads were imported, but thread `{id}`'s `thread.imported` audit entry was not: {e}"
            ))
        })?;
    }
    // The graphs' descriptions once the threads are in (a refused file writes none); one
    // stored already is kept.
    for (fingerprint, description) in graphs {
        if store.graph_description(&fingerprint).map_err(Failure::store)?.is_none() {
            store.put_graph_description(&fingerprint, &description).map_err(|e| {
                Failure::store(format!(
                    "the threads were imported, but the description of graph `{fingerprint}` could not be stored: {e}"
                ))
            })?;
        }
    }
    if as_json {
        out::json(&json!({ "imported": done }))?;
    } else {
        for id in &done {
            outln!("imported thread {id}")?;
        }
    }
    Ok(())
}
