//! The crash matrix's check of each thread's event log once the resumed run returned: the log is
//! what was committed, whatever the cut. Its ids run without a gap; every step of the run loop
//! has exactly one `step` event, naming a checkpoint the store holds; every `run.finished` ends
//! the run the last `run.started` before it started, and a run ends once at most (a run cut
//! off has no end: the run that goes on after it starts anew); a thread that ended says so in
//! its last event.

use std::collections::BTreeSet;

use agentflow_store::{CheckpointSource, EventId, Store, StoredEvent, ThreadRecord, ThreadStatus};

use super::checks::At;
use super::report::{Check, Violation};

/// The most events read of one thread (a matrix's graph is small).
const MOST_EVENTS: usize = 100_000;

/// The violations of every thread's log in `store`.
pub(crate) fn event_logs(at: &At<'_>, store: &dyn Store) -> Vec<Violation> {
    match store.list_threads() {
        Ok(threads) => threads.iter().flat_map(|t| event_log(at, store, t)).collect(),
        Err(e) => vec![at.violation(Check::EventLogBroken, format!("the store cannot list its threads: {e}"))],
    }
}

/// The violations of thread `thread`'s log in `store`.
fn event_log(at: &At<'_>, store: &dyn Store, thread: &ThreadRecord) -> Vec<Violation> {
    let broken = |detail: String| at.violation(Check::EventLogBroken, format!("thread `{}`: {detail}", thread.id));
    let events = match read_all(store, &thread.id) {
        Ok(events) => events,
        Err(e) => return vec![broken(format!("its event log cannot be read: {e}"))],
    };
    let mut found = Vec::new();
    if let Some(detail) = gap(&events) {
        found.push(broken(detail));
    }
    let checkpoints = match store.list_checkpoints(&thread.id) {
        Ok(list) => list,
        Err(e) => return vec![broken(format!("its checkpoints cannot be listed: {e}"))],
    };
    let stored: BTreeSet<u64> = checkpoints.iter().map(|c| c.seq).collect();
    let steps: BTreeSet<u64> =
        checkpoints.iter().filter(|c| c.metadata.source == CheckpointSource::Loop).map(|c| c.seq).collect();
    let mut logged = BTreeSet::new();
    for event in events.iter().filter(|e| e.kind == "step") {
        let Some(seq) = serde_json::from_slice::<serde_json::Value>(&event.data)
            .ok()
            .and_then(|d| d.get("checkpoint").and_then(serde_json::Value::as_u64))
        else {
            found.push(broken(format!("its `step` event {} names no checkpoint", event.id)));
            continue;
        };
        if !stored.contains(&seq) {
            found.push(broken(format!(
                "its `step` event {} names checkpoint {seq}, which the store does not hold",
                event.id
            )));
        }
        if !logged.insert(seq) {
            found.push(broken(format!("checkpoint {seq} has two `step` events (the second is {})", event.id)));
        }
    }
    let unlogged: Vec<u64> = steps.difference(&logged).copied().collect();
    if !unlogged.is_empty() {
        found.push(broken(format!("the steps committed as checkpoints {unlogged:?} have no `step` event")));
    }
    found.extend(runs(&events).into_iter().map(broken));
    let ended = matches!(thread.status, ThreadStatus::Completed | ThreadStatus::Failed | ThreadStatus::Cancelled);
    if ended && events.last().is_none_or(|e| e.kind != "run.finished") {
        found.push(broken(format!(
            "the thread is {} but its log's last event is {}",
            thread.status.as_str(),
            events.last().map_or("none".to_string(), |e| format!("`{}` ({})", e.kind, e.id))
        )));
    }
    found
}

/// Every event of the thread's log, oldest first.
fn read_all(store: &dyn Store, thread: &str) -> Result<Vec<StoredEvent>, agentflow_store::ReadError> {
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let page = store.read_events(thread, events.last().map(|e| e.id), 1_000)?;
        if page.events.is_empty() || events.len() >= MOST_EVENTS {
            return Ok(events);
        }
        events.extend(page.events);
    }
}

/// Where the runs of `events` do not start and end in order: a `run.finished` whose run is not
/// the one the last `run.started` before it started, or a run that ends twice. A log trimmed
/// by retention (it does not start at its first commit) is not judged before its first
/// `run.started`.
fn runs(events: &[StoredEvent]) -> Vec<String> {
    let run_of = |e: &StoredEvent| {
        serde_json::from_slice::<serde_json::Value>(&e.data)
            .ok()
            .and_then(|d| d.get("run").and_then(serde_json::Value::as_str).map(str::to_string))
    };
    let mut found = Vec::new();
    let mut started: Option<String> = None;
    let mut ended = BTreeSet::new();
    let whole = events.first().is_some_and(|e| e.id == EventId::new(1, 0));
    let mut judged = whole;
    for event in events {
        match event.kind.as_str() {
            "run.started" => {
                started = run_of(event);
                judged = true;
            }
            "run.finished" if judged => {
                let run = run_of(event);
                if run.is_none() || run != started {
                    found.push(format!(
                        "its `run.finished` event {} ends run {} but the last `run.started` before it started {}",
                        event.id,
                        run.as_deref().unwrap_or("(none named)"),
                        started.as_deref().unwrap_or("none")
                    ));
                }
                if let Some(run) = run
                    && !ended.insert(run.clone())
                {
                    found.push(format!("run {run} ends twice: its second `run.finished` event is {}", event.id));
                }
            }
            _ => {}
        }
    }
    found
}

/// Where the ids of `events` skip or repeat one: each follows the one before in its commit
/// (`idx` + 1), or opens the next commit (`seq` + 1, `idx` 0).
fn gap(events: &[StoredEvent]) -> Option<String> {
    let first = events.first()?;
    if first.id.idx != 0 {
        return Some(format!("its log starts at {}, in the middle of a commit", first.id));
    }
    events.windows(2).find_map(|pair| {
        let (a, b) = (pair[0].id, pair[1].id);
        let follows = b == EventId::new(a.seq, a.idx + 1) || b == EventId::new(a.seq + 1, 0);
        (!follows).then(|| format!("its log goes from event {a} to event {b}: an event is missing or repeated"))
    })
}

#[cfg(test)]
mod tests {
    use agentflow_store::{EventId, StoredEvent};

    use super::{gap, runs};

    fn at(ids: &[(u64, u32)]) -> Vec<StoredEvent> {
        ids.iter().map(|&(s, i)| StoredEvent::new(EventId::new(s, i), "step", b"{}".to_vec(), 0)).collect()
    }

    fn log(entries: &[(&str, &str)]) -> Vec<StoredEvent> {
        let id = |n: usize| EventId::new(u64::try_from(n).unwrap() + 1, 0);
        entries
            .iter()
            .enumerate()
            .map(|(n, (kind, run))| StoredEvent::new(id(n), *kind, format!(r#"{{"run":"{run}"}}"#).into_bytes(), 0))
            .collect()
    }

    #[test]
    fn runs_end_the_run_started_before_them_once() {
        // A run cut off (no end), the run that goes on after it ends: fine.
        let cut =
            log(&[("run.started", "a"), ("step", "a"), ("run.started", "b"), ("step", "b"), ("run.finished", "b")]);
        assert!(runs(&cut).is_empty(), "{:?}", runs(&cut));
        let twice = log(&[("run.started", "a"), ("run.finished", "a"), ("run.finished", "a")]);
        let found = runs(&twice);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("run a ends twice: its second `run.finished` event is 3-0"), "{found:?}");
        let other = log(&[("run.started", "a"), ("run.started", "b"), ("run.finished", "a")]);
        assert!(runs(&other)[0].contains("ends run a but the last `run.started` before it started b"));
        let unstarted = log(&[("step", "a"), ("run.finished", "a")]);
        assert!(runs(&unstarted)[0].contains("started none"));
        // A trimmed log is judged from its first run's start on.
        let mut trimmed = log(&[("step", "a"), ("run.finished", "a"), ("run.started", "b"), ("run.finished", "b")]);
        for (n, e) in trimmed.iter_mut().enumerate() {
            e.id = EventId::new(100 + u64::try_from(n).unwrap(), 0);
        }
        assert!(runs(&trimmed).is_empty());
    }

    #[test]
    fn a_log_without_a_gap_passes_and_each_kind_of_gap_is_named() {
        assert_eq!(gap(&at(&[])), None);
        assert_eq!(gap(&at(&[(1, 0), (1, 1), (2, 0), (3, 0), (3, 1)])), None);
        // Retention removed whole commits before the first kept one: still no gap.
        assert_eq!(gap(&at(&[(7, 0), (8, 0)])), None);
        assert!(gap(&at(&[(1, 1)])).unwrap().contains("middle of a commit"));
        assert!(gap(&at(&[(1, 0), (3, 0)])).unwrap().contains("from event 1-0 to event 3-0"));
        assert!(gap(&at(&[(1, 0), (1, 2)])).is_some());
        assert!(gap(&at(&[(1, 0), (1, 0)])).is_some());
        assert!(gap(&at(&[(1, 0), (2, 1)])).is_some());
    }
}
