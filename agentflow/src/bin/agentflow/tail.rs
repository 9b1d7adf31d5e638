//! `tail THREAD [--after ID] [--follow]`: a thread's event log, one line a log entry (`SEQ-IDX
//! kind summary`), or with `--json` each of its AG-UI events as a JSON line, as the server's
//! stream sends them (personal fields masked unless the `--access` policy lets the `--as` user
//! see personal data, a read then recorded in the thread's audit log). `--after` starts after an
//! entry (`SEQ-IDX`) or a stream event (`SEQ-IDX-K`); an id past the log's newest entry is
//! refused (exit code 2). Without `--follow`, what the log holds is printed and `tail` ends;
//! with it, `tail` waits for more until a run that started after the position has ended and no
//! other has started since (or Ctrl-C): a run in the middle of which it starts is followed by
//! the run that goes on after it.
//!
//! The log is read from the store; for a redb file a server holds, through the server's socket
//! (its stream route), as the person the server maps this OS user to.

use std::sync::Arc;
use std::time::Duration;

use agentflow::Store;
use agentflow::access::Operation;
use agentflow::server::stream::cursor::Cursor;
use agentflow::server::stream::error::StreamError;
use agentflow::server::stream::reader::{Item, LogReader};
use clap::Args;
use serde_json::Value;

use crate::access::Guard;
use crate::{Failure, Outcome};

/// How often `--follow` reads the log again.
const POLL: Duration = Duration::from_millis(500);
/// How many log entries one read takes.
const PAGE: usize = 256;

/// `tail` arguments.
#[derive(Args, Debug, Clone)]
pub struct TailArgs {
    /// The thread id.
    pub thread: String,
    /// Start after this id: a log entry's `SEQ-IDX` (as the lines show it), or a stream event's
    /// `SEQ-IDX-K`.
    #[arg(long, value_name = "ID")]
    pub after: Option<String>,
    /// Wait for more until a run that starts after the position ends (or Ctrl-C).
    #[arg(long)]
    pub follow: bool,
}

impl TailArgs {
    /// Where to start.
    pub fn from(&self) -> Result<Option<Cursor>, Failure> {
        self.after
            .as_deref()
            .map(|text| text.parse::<Cursor>().map_err(|e| Failure::usage(format!("--after: {e}"))))
            .transpose()
    }
}

/// `tail` on a store opened here.
pub fn tail(store: &Arc<dyn Store>, guard: &Guard, args: &TailArgs, json: bool) -> Outcome {
    let from = args.from()?;
    let record = guard.thread(store.as_ref(), Operation::ReadState, &args.thread)?;
    let mut reader = LogReader::new(Arc::clone(store), guard.access(), &record, from, "cli")?;
    let mut printer = Printer::new(json);
    loop {
        let page = reader.next_page(PAGE).map_err(failure)?;
        for item in page.items {
            printer.event(Shown::from(item))?;
        }
        if !page.caught_up {
            continue;
        }
        printer.flush()?;
        if !args.follow || printer.followed_run_ended() {
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}

/// A stream's failure as `tail`'s: a position past the log's end is the caller's (exit code 2).
fn failure(e: StreamError) -> Failure {
    match e {
        StreamError::Read(e) => e.into(),
        other => Failure::usage(format!("--after: {other}")),
    }
}

/// An event to print: its stream id (`None`: the gap notice), its log entry's kind if known, and
/// the AG-UI event.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Its stream id, `SEQ-IDX-K`.
    pub id: Option<String>,
    /// Its log entry's kind, when the reader knows it.
    pub kind: Option<String>,
    /// The AG-UI event.
    pub event: Value,
}

impl From<Item> for Shown {
    fn from(item: Item) -> Self {
        Shown { id: item.id, kind: Some(item.kind), event: item.event }
    }
}

impl Shown {
    /// The log entry (`SEQ-IDX`) of its id.
    fn entry(&self) -> Option<&str> {
        self.id.as_deref().and_then(|id| id.rsplit_once('-')).map(|(entry, _)| entry)
    }

    /// Whether it is the gap notice.
    fn is_gap(&self) -> bool {
        self.id.is_none() && self.event["type"] == "CUSTOM" && self.event["name"] == "agentflow.gap"
    }
}

/// Prints events: each as JSON, or each log entry's as one line, and follows the runs they
/// start and end.
pub struct Printer {
    json: bool,
    /// The events of the entry being read.
    group: Vec<Shown>,
    /// Whether the events come over a stream opened again after the events printed: what brings
    /// a reader in step is not printed again.
    resumed: bool,
    /// The run whose `RUN_STARTED` (an entry's own, with an id) was printed and that has not
    /// ended.
    open: Option<String>,
    /// Whether a run whose start was printed has ended, and none started since.
    ended: bool,
}

impl Printer {
    /// A printer of JSON lines (`json`) or of one line a log entry.
    pub fn new(json: bool) -> Self {
        Printer { json, group: Vec::new(), resumed: false, open: None, ended: false }
    }

    /// The events that come next come over a stream opened again after the last one printed.
    pub fn resume(&mut self) {
        self.resumed = true;
    }

    /// Takes one event: printed at once as JSON, else once its entry's events are all in. An
    /// event without an id (what brings a reader in step) is printed as JSON only, once; the
    /// gap notice always.
    pub fn event(&mut self, shown: Shown) -> Outcome {
        self.follow(&shown);
        if shown.id.is_none() && !shown.is_gap() && (self.resumed || !self.json) {
            return Ok(());
        }
        if self.json {
            return outln!("{}", shown.event);
        }
        if self.group.first().is_some_and(|first| first.entry() != shown.entry() || first.id.is_none()) {
            self.flush()?;
        }
        self.group.push(shown);
        Ok(())
    }

    /// Follows the runs an event starts and ends (an entry's own events only).
    fn follow(&mut self, shown: &Shown) {
        if shown.id.is_none() {
            return;
        }
        match shown.event["type"].as_str() {
            Some("RUN_STARTED") => {
                self.open = shown.event["runId"].as_str().map(str::to_string);
                self.ended = false;
            }
            Some("RUN_FINISHED") => {
                let open = self.open.take();
                self.ended |= open.is_some_and(|run| shown.event["runId"].as_str() == Some(run.as_str()));
            }
            // A run that stopped without finishing is followed by the run that goes on after it.
            Some("RUN_ERROR") if shown.event["code"] == "abandoned" => self.open = None,
            Some("RUN_ERROR") => self.ended |= self.open.take().is_some(),
            _ => {}
        }
    }

    /// Prints the entry being read.
    pub fn flush(&mut self) -> Outcome {
        let group = std::mem::take(&mut self.group);
        let Some(first) = group.first() else { return Ok(()) };
        let kind = kind_of(first);
        let entry = first.entry().unwrap_or("-").to_string();
        let line = summary(&kind, &group);
        outln!("{entry} {kind} {line}")
    }

    /// Whether a run whose start was printed has ended, and no run started since.
    pub fn followed_run_ended(&self) -> bool {
        self.ended
    }
}

/// The kind of the log entry an event is of: given, or told by the event.
fn kind_of(shown: &Shown) -> String {
    if let Some(kind) = &shown.kind {
        return kind.clone();
    }
    let name = shown.event["name"].as_str().unwrap_or("");
    match shown.event["type"].as_str().unwrap_or("") {
        "RUN_STARTED" => "run.started".into(),
        "STATE_SNAPSHOT" | "RUN_FINISHED" | "RUN_ERROR" => "run.finished".into(),
        "CUSTOM" if name == "agentflow.gap" => "gap".into(),
        "CUSTOM" if name == "agentflow.interrupt" => "interrupt".into(),
        "CUSTOM" => name.strip_prefix("agentflow.").unwrap_or(name).to_string(),
        _ => "step".into(),
    }
}

/// What an entry's events say, in a few words.
fn summary(kind: &str, group: &[Shown]) -> String {
    let events: Vec<&Value> = group.iter().map(|s| &s.event).collect();
    let strings = |ty: &str, field: &str| -> Vec<String> {
        events.iter().filter(|e| e["type"] == ty).filter_map(|e| e[field].as_str().map(str::to_string)).collect()
    };
    match kind {
        "run.started" => {
            let mut line = format!("run {}", strings("RUN_STARTED", "runId").join(", "));
            for stopped in strings("RUN_ERROR", "message") {
                line.push_str(&format!(" (after: {stopped})"));
            }
            line
        }
        "unreadable" => {
            let value = &events[0]["value"];
            let mut line = format!("cannot be read: {}", value["error"].as_str().unwrap_or("?"));
            if let Some(from) = value["from"].as_str() {
                line.push_str(&format!(" (the entries after {from} up to it were passed over)"));
            }
            line
        }
        "gap" => {
            let value = &events[0]["value"];
            format!(
                "the log no longer keeps what came after {}; it goes on at {}",
                value["from"].as_str().unwrap_or("?"),
                value["to"].as_str().unwrap_or("?")
            )
        }
        "interrupt" => {
            let value = &events[0]["value"];
            let count = |key: &str| value[key].as_array().map_or(0, Vec::len);
            let tools: Vec<&str> =
                value["approvals"].as_array().into_iter().flatten().filter_map(|a| a["tool"].as_str()).collect();
            let mut line = format!("waits for {} answer(s), {} approval(s)", count("questions"), count("approvals"));
            if !tools.is_empty() {
                line.push_str(&format!(" ({})", tools.join(", ")));
            }
            line
        }
        "run.finished" => {
            if let Some(error) = events.iter().find(|e| e["type"] == "RUN_ERROR") {
                return format!("failed: {}", error["message"].as_str().unwrap_or(""));
            }
            let result = events.iter().find(|e| e["type"] == "RUN_FINISHED").map(|e| &e["result"]);
            let status = result.and_then(|r| r["status"].as_str()).unwrap_or("finished");
            match result.and_then(|r| r["detail"].as_str()).filter(|d| !d.is_empty()) {
                Some(detail) => format!("{status}: {detail}"),
                None => status.to_string(),
            }
        }
        "step" => {
            let nodes = strings("STEP_STARTED", "stepName");
            let messages =
                events.iter().filter(|e| e["type"] == "TEXT_MESSAGE_START" || e["type"] == "TOOL_CALL_RESULT");
            let calls = strings("TOOL_CALL_START", "toolCallName");
            let mut fields: Vec<String> = events
                .iter()
                .filter(|e| e["type"] == "STATE_DELTA")
                .flat_map(|e| e["delta"].as_array().cloned().unwrap_or_default())
                .filter_map(|op| op["path"].as_str().map(field_of))
                .collect();
            let mut seen = std::collections::BTreeSet::new();
            fields.retain(|f| seen.insert(f.clone()));
            let mut parts = vec![format!("nodes {}", if nodes.is_empty() { "-".into() } else { nodes.join(", ") })];
            let messages = messages.count();
            if messages > 0 {
                parts.push(format!("{messages} message(s)"));
            }
            if !calls.is_empty() {
                parts.push(format!("calls {}", calls.join(", ")));
            }
            if !fields.is_empty() {
                parts.push(format!("set {}", fields.join(", ")));
            }
            parts.join("; ")
        }
        _ => events.first().map_or_else(String::new, |e| e["value"].to_string()),
    }
}

/// The top-level field a JSON Pointer names (`/log/-` -> `log`, `/a~1b` -> `a/b`).
fn field_of(pointer: &str) -> String {
    let top = pointer.trim_start_matches('/').split('/').next().unwrap_or("");
    top.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown(id: &str, event: Value) -> Shown {
        Shown { id: Some(id.into()), kind: None, event }
    }

    #[test]
    fn an_entrys_events_read_as_one_line() {
        let step = [
            shown("4-1-0", json!({ "type": "STEP_STARTED", "stepName": "agent" })),
            shown("4-1-1", json!({ "type": "TEXT_MESSAGE_START", "messageId": "m" })),
            shown("4-1-2", json!({ "type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "refund" })),
            shown(
                "4-1-3",
                json!({ "type": "STATE_DELTA", "delta": [
                { "op": "add", "path": "/log/-", "value": 1 }, { "op": "add", "path": "/log/-", "value": 2 },
                { "op": "add", "path": "/a~1b", "value": 3 },
            ] }),
            ),
        ];
        assert_eq!(kind_of(&step[0]), "step");
        assert_eq!(step[3].entry(), Some("4-1"));
        assert_eq!(summary("step", &step), "nodes agent; 1 message(s); calls refund; set log, a/b");
        let end = [
            shown("5-0-0", json!({ "type": "STATE_SNAPSHOT", "snapshot": {} })),
            shown(
                "5-0-1",
                json!({ "type": "RUN_FINISHED", "result": { "status": "interrupted", "detail": "waiting" } }),
            ),
        ];
        assert_eq!(kind_of(&end[1]), "run.finished");
        assert_eq!(summary("run.finished", &end), "interrupted: waiting");
        let failed = [shown("6-0-1", json!({ "type": "RUN_ERROR", "message": "boom" }))];
        assert_eq!(summary("run.finished", &failed), "failed: boom");
        let waits = [shown(
            "5-0-0",
            json!({ "type": "CUSTOM", "name": "agentflow.interrupt", "value": {
            "questions": [], "approvals": [{ "tool": "refund" }] } }),
        )];
        assert_eq!(kind_of(&waits[0]), "interrupt");
        assert_eq!(summary("interrupt", &waits), "waits for 0 answer(s), 1 approval(s) (refund)");
        let gap = Shown {
            id: None,
            kind: None,
            event: json!({ "type": "CUSTOM", "name": "agentflow.gap", "value": { "from": "1-0", "to": "9-0" } }),
        };
        assert_eq!(kind_of(&gap), "gap");
        assert_eq!(gap.entry(), None);
        assert_eq!(summary("gap", &[gap]), "the log no longer keeps what came after 1-0; it goes on at 9-0");
    }
}
