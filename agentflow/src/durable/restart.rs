//! A follow-up run's restart: the checkpoint that starts a thread's next run. Its input, an
//! update of the thread's state, goes through the reducers onto the thread's latest state (or,
//! for a rollback, onto the state at an earlier checkpoint), and the graph runs again from its
//! start node. History is never rewritten: the restart is a new checkpoint (source `Input`), and
//! the branch it leaves stays in the history.
//!
//! The restart is written by the worker that claimed the follow-up, fenced by that claim's
//! lease, and marked with the follow-up's identity ([`follow_up_mark`]): a worker that claims the
//! same follow-up again (the first one died after the restart) finds the mark and resumes the
//! run instead of applying the input twice.

use std::sync::Arc;

use agentflow_store::{
    Checkpoint, CheckpointMetadata, CheckpointSource, CheckpointSummary, EventId, NewAuditEntry, StepCommit, Store,
    ThreadRecord, ThreadStatus,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::budget::stored_budget;
use super::chain::next_seq;
use super::checkpoint_version::written_by;
use super::document::refuse_credentials_skipping;
use super::error::{HistoryError, PersistError};
use super::event_log::RUN_STARTED;
use super::history::{
    abandon_head, cancel_children_approvals, credential_fields, latest_of, settle_abandoned_children,
};
use super::keys::{BUDGET, WRITTEN_BY};
use crate::core::clock::now_ms;

/// The checkpoint `extra` key of a restart: the mark of the follow-up run it started.
pub(crate) const FOLLOW_UP: &str = "follow_up";

/// The checkpoint `extra` key of a restart that first went back to an earlier checkpoint: that
/// checkpoint's seq.
pub(crate) const ROLLED_BACK: &str = "rolled_back";

/// The audit entry kind of a follow-up run's restart.
pub(crate) const FOLLOW_UP_KIND: &str = "run.follow_up";

/// The status a follow-up that could not run is reported with (to a `wait` for it, in its
/// webhook's body): the reason is its `run.follow_up_failed` entry's.
pub(crate) const FOLLOW_UP_FAILED_STATUS: &str = "follow_up_failed";

/// The audit entry kind of a follow-up run that could not run (its worker says why): it left
/// the queue, the thread as it was.
pub(crate) const FOLLOW_UP_FAILED: &str = "run.follow_up_failed";

/// The audit entry kind of a restart that first went back to an earlier checkpoint (the
/// `rollback` strategy).
pub(crate) const ROLLED_BACK_KIND: &str = "thread.rolled_back";

/// The identity of the follow-up run queued at `enqueued_at` (unix millis) with input `update`:
/// the time and the first 64 bits of the input's SHA-256, in hex. Submissions give each
/// follow-up of a thread its own time (`App::submit_follow_up`), so identical inputs submitted
/// at once are told apart.
pub(crate) fn follow_up_mark(enqueued_at: u64, update: &[u8]) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(update);
    let mut mark = format!("{enqueued_at}-");
    for byte in &digest[..8] {
        // Writing to a `String` cannot fail.
        let _ = write!(mark, "{byte:02x}");
    }
    mark
}

/// The checkpoint that the restart marked `mark` made, if the thread has it.
pub(crate) fn restarted_at(checkpoints: &[CheckpointSummary], mark: &str) -> Option<u64> {
    checkpoints
        .iter()
        .rev()
        .find(|c| c.metadata.extra.get(FOLLOW_UP).and_then(Value::as_str) == Some(mark))
        .map(|c| c.seq)
}

/// The checkpoint that started the thread's current run, for a rollback: the latest whose
/// source is `Input` or `Fork` (a new thread's input, a fork by a person, the restart of a
/// follow-up run). `None` for a thread without checkpoints.
pub(crate) fn run_start(checkpoints: &[CheckpointSummary]) -> Option<u64> {
    checkpoints.iter().rev().find(|c| starts_a_run(c)).map(|c| c.seq)
}

/// Whether checkpoint `c` starts a run (see [`run_start`]).
fn starts_a_run(c: &CheckpointSummary) -> bool {
    matches!(c.metadata.source, CheckpointSource::Input | CheckpointSource::Fork)
}

/// Where a rollback bounded by `bound` goes back to, decided when its follow-up is claimed
/// (see `NewRun::fork_from`): the earliest run whose starting checkpoint is at or after `bound`
/// is the one replaced, and the thread goes back to the checkpoint it started from (its own,
/// or for a follow-up's restart the one before its input). `Ok(None)`: no run started since,
/// nothing to roll back. A run that wrote steps at or after `bound` before any checkpoint
/// starting a run (the resume of a finished thread, a failed one retried: it continues the
/// thread without an `Input` checkpoint of its own) is the one replaced: the thread goes back to
/// the checkpoint its first step continued from. `Err` with the seq when the checkpoint the run
/// started from is gone (the thread was compacted past the run's start) and runs were written
/// since.
pub(crate) fn rollback_point(checkpoints: &[CheckpointSummary], bound: u64) -> Result<Option<u64>, u64> {
    let since =
        |c: &&CheckpointSummary| c.seq >= bound && (starts_a_run(c) || c.metadata.source == CheckpointSource::Loop);
    let Some(start) = checkpoints.iter().find(since) else { return Ok(None) };
    if !starts_a_run(start) {
        return match start.parent {
            Some(parent) if checkpoints.iter().any(|c| c.seq == parent) => Ok(Some(parent)),
            Some(parent) => Err(parent),
            None => Ok(None),
        };
    }
    if start.seq != bound && !checkpoints.iter().any(|c| c.seq == bound) {
        return Err(bound);
    }
    Ok(Some(match (start.metadata.extra.get(FOLLOW_UP), start.parent) {
        (Some(_), Some(parent)) => parent,
        _ => start.seq,
    }))
}

/// What a restart writes.
pub(crate) struct Restart<'a> {
    /// The thread.
    pub(crate) thread: &'a str,
    /// The lease holder its commit is fenced by: the worker that claimed the follow-up.
    pub(crate) holder: &'a str,
    /// The follow-up's input: the JSON of an update of the thread's state.
    pub(crate) update: Vec<u8>,
    /// Roll back first (the `rollback` strategy), the run replaced bounded by this seq (see
    /// [`rollback_point`]).
    pub(crate) rollback: Option<u64>,
    /// The graph's start node.
    pub(crate) start: &'a str,
    /// Who the audit entries name.
    pub(crate) actor: &'a str,
    /// The follow-up's identity ([`follow_up_mark`]).
    pub(crate) mark: String,
}

/// What a restart did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restarted {
    /// It wrote this checkpoint.
    Now(u64),
    /// The follow-up had restarted the thread already, at this checkpoint: nothing written.
    Already(u64),
}

/// Writes the restart of a follow-up run (see the module docs): one step-like commit, fenced by
/// `r.holder`'s lease, with a `run.follow_up` audit entry (and a `thread.rolled_back` entry
/// naming the checkpoint gone back to and the run it replaced, for a rollback). What the
/// abandoned head left open (approvals, calls cut off mid-way) is settled as a fork settles it.
/// The new checkpoint counts its super-steps from 0: the graph's `max_steps` bounds each run,
/// while the thread's budget (model calls, tool calls, tokens) carries over.
pub(crate) fn restart_thread(store: &Arc<dyn Store>, r: Restart<'_>) -> Result<Restarted, HistoryError> {
    let thread = r.thread;
    let checkpoints = store.list_checkpoints(thread).map_err(PersistError::from)?;
    if let Some(seq) = restarted_at(&checkpoints, &r.mark) {
        // A worker that died between the restart and the cancels after it: they are made now
        // (of the approvals requested before the restart, so none of the new branch's).
        let restart = checkpoints.iter().find(|c| c.seq == seq);
        if let Some(c) = restart.filter(|c| c.metadata.extra.get(ROLLED_BACK).is_some()) {
            let note = rolled_back_note(c.metadata.extra.get(ROLLED_BACK).and_then(Value::as_u64).unwrap_or(0));
            cancel_children_approvals(store, thread, r.holder, &note, r.actor, c.created_at);
        }
        return Ok(Restarted::Already(seq));
    }
    let fork_from = match r.rollback {
        Some(bound) => rollback_point(&checkpoints, bound)
            .map_err(|seq| HistoryError::UnknownCheckpoint { thread: thread.to_string(), seq })?,
        None => None,
    };
    let record = store
        .thread(thread)
        .map_err(PersistError::from)?
        .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })?;
    if record.status == ThreadStatus::Compensating {
        // Being undone: restarted now, the rest of the undo would never be done.
        return Err(HistoryError::Undone { thread: thread.to_string(), status: record.status.as_str() });
    }
    let latest = latest_of(store, thread)?;
    let base = match fork_from {
        Some(seq) if checkpoints.iter().any(|c| c.seq == seq) => seq,
        Some(seq) => return Err(HistoryError::UnknownCheckpoint { thread: thread.to_string(), seq }),
        None => latest.seq,
    };
    // The state at a checkpoint from before a move that changed the state's version is the
    // older version's: a restart (updates on top of it) would read it as the current one.
    if fork_from.is_some()
        && let Some(by) = written_by(&**store, &record, base)?
        && by.schema_version != record.schema_version
    {
        return Err(HistoryError::RollbackAcrossStateVersions {
            thread: thread.to_string(),
            seq: base,
            stored: by.schema_version,
            current: record.schema_version,
        });
    }
    // Refused before anything is written, as a run's updates are.
    refuse_credentials_skipping(&r.update, "the follow-up's input", &credential_fields(store, thread))?;
    let fields: Vec<String> = match serde_json::from_slice::<Value>(&r.update) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let writes = store.pending_writes(thread, latest.seq).map_err(PersistError::from)?;
    let budget = stored_budget(&latest, &writes)?;
    let seq = next_seq(thread, checkpoints.last().map_or(latest.seq, |c| c.seq))?;
    let now = now_ms();
    let mut extra = json!({ BUDGET: budget, FOLLOW_UP: r.mark });
    if let Some(from) = fork_from {
        extra[ROLLED_BACK] = from.into();
        // Its parent may be from before a move to this version: say which version wrote it.
        extra[WRITTEN_BY] = json!({ "fingerprint": record.graph_fingerprint, "state": record.schema_version });
    }
    let metadata = CheckpointMetadata { extra, ..CheckpointMetadata::new(0, CheckpointSource::Input, vec![]) };
    let checkpoint = Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: Some(base),
        cursor: vec![r.start.to_string()],
        snapshot: None,
        delta: vec![r.update],
        metadata,
        created_at: now,
    };
    let record =
        ThreadRecord { updated_at: now, lease: None, status: ThreadStatus::Running, detail: String::new(), ..record };
    let mut commit = StepCommit::new(record).with_checkpoint(checkpoint).fenced_by(r.holder, now);
    let note = match fork_from {
        Some(from) => rolled_back_note(from),
        None => "a follow-up run started the thread over: this request belongs to the run before it".to_string(),
    };
    if fork_from.is_some() {
        settle_abandoned_children(store, thread, r.holder, base);
    }
    abandon_head(store, thread, base, r.actor, &note, now, &mut commit)?;
    commit.audit.push(NewAuditEntry::new(
        now,
        r.actor,
        FOLLOW_UP_KIND,
        json!({ "from": base, "checkpoint": seq, "fields": fields }),
    ));
    if let Some(from) = fork_from {
        let replaced = json!({ "head": latest.seq, "run": last_run(&**store, thread) });
        commit.audit.push(NewAuditEntry::new(
            now,
            r.actor,
            ROLLED_BACK_KIND,
            json!({ "from": from, "checkpoint": seq, "replaced": replaced }),
        ));
    }
    let receipt = store.commit_step(commit).map_err(PersistError::from)?;
    if fork_from.is_some() {
        cancel_children_approvals(store, thread, r.holder, &note, r.actor, now);
    }
    Ok(Restarted::Now(receipt.checkpoint.unwrap_or(seq)))
}

/// The note of the approvals a rollback to checkpoint `from` cancels.
fn rolled_back_note(from: u64) -> String {
    format!(
        "the thread was rolled back to checkpoint {from} for a follow-up run: this request belongs to the run it replaced"
    )
}

/// How many of the newest commits of a thread's event log are read to find its last run's id.
const RECENT_LOG_COMMITS: u64 = 256;

/// The id of the thread's last run, as the `run.started` event of its event log names it: among
/// the newest [`RECENT_LOG_COMMITS`] commits of the log; `None` without a log (or when that
/// cannot be read).
fn last_run(store: &dyn Store, thread: &str) -> Option<String> {
    let newest = store.read_events(thread, None, 1).ok()?.newest?;
    let mut after = newest.seq.checked_sub(RECENT_LOG_COMMITS).map(|seq| EventId::new(seq, u32::MAX));
    let mut run = None;
    loop {
        let page = store.read_events(thread, after, 512).ok()?;
        let Some(last) = page.events.last() else { break };
        after = Some(last.id);
        for event in page.events.iter().filter(|e| e.kind == RUN_STARTED) {
            if let Ok(data) = serde_json::from_slice::<Value>(&event.data) {
                run = data.get("run").and_then(Value::as_str).map(str::to_string);
            }
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(seq: u64, parent: Option<u64>, source: CheckpointSource, extra: Value) -> CheckpointSummary {
        CheckpointSummary {
            thread: "t".into(),
            seq,
            parent,
            cursor: vec![],
            metadata: CheckpointMetadata { extra, ..CheckpointMetadata::new(0, source, vec![]) },
            created_at: 0,
            has_snapshot: false,
            delta_len: 0,
            payload_bytes: 0,
        }
    }

    #[test]
    fn a_mark_names_the_time_and_the_input() {
        let mark = follow_up_mark(1_700_000_000_000, br#"{"n":1}"#);
        let (at, digest) = mark.split_once('-').unwrap();
        assert_eq!(at, "1700000000000");
        assert_eq!(digest.len(), 16);
        assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(mark, follow_up_mark(1_700_000_000_000, br#"{"n":2}"#));
        assert_ne!(mark, follow_up_mark(1_700_000_000_001, br#"{"n":1}"#));
    }

    #[test]
    fn a_rollback_goes_back_to_where_the_run_it_replaces_started() {
        use CheckpointSource::{Fork, Input, Loop, UpdateState};
        let plain = [summary(0, None, Input, Value::Null), summary(1, Some(0), Loop, Value::Null)];
        assert_eq!(run_start(&plain), Some(0));
        assert_eq!(rollback_point(&plain, 0), Ok(Some(0)));
        assert_eq!(rollback_point(&plain, 2), Ok(None), "no run started since");
        let forked = [
            summary(0, None, Input, Value::Null),
            summary(1, Some(0), Loop, Value::Null),
            summary(2, Some(0), Fork, Value::Null),
            summary(3, Some(2), UpdateState, Value::Null),
            summary(4, Some(3), Loop, Value::Null),
        ];
        assert_eq!(run_start(&forked), Some(2));
        assert_eq!(rollback_point(&forked, 2), Ok(Some(2)));
        let followed = [
            summary(0, None, Input, Value::Null),
            summary(1, Some(0), Loop, Value::Null),
            summary(2, Some(1), Input, json!({ FOLLOW_UP: "5-00" })),
            summary(3, Some(2), Loop, Value::Null),
        ];
        assert_eq!(run_start(&followed), Some(2));
        assert_eq!(rollback_point(&followed, 2), Ok(Some(1)), "before the follow-up's input");
        // Bounded after the thread's latest checkpoint when the rollback came (its run was still
        // queued): the run that started since is the one replaced.
        assert_eq!(rollback_point(&followed[..2], 2), Ok(None));
        assert_eq!(restarted_at(&followed, "5-00"), Some(2));
        assert_eq!(restarted_at(&followed, "6-00"), None);
        assert_eq!(run_start(&[]), None);
        // The run replaced started at a checkpoint compaction removed: refused, not guessed.
        let compacted =
            [summary(2, Some(1), Input, json!({ FOLLOW_UP: "5-00" })), summary(3, Some(2), Loop, Value::Null)];
        assert_eq!(rollback_point(&compacted, 0), Err(0));
    }

    #[test]
    fn a_rollback_bounded_after_a_finished_thread_replaces_the_resume_that_ran_since() {
        use CheckpointSource::{Input, Loop, UpdateState};
        // Failed at 1; the rollback came then (bounded at 2); a resume retried the step since.
        let resumed = [
            summary(0, None, Input, Value::Null),
            summary(1, Some(0), Loop, Value::Null),
            summary(2, Some(1), Loop, Value::Null),
            summary(3, Some(2), Loop, Value::Null),
        ];
        assert_eq!(rollback_point(&resumed, 2), Ok(Some(1)), "back to where the resume started");
        assert_eq!(rollback_point(&resumed[..2], 2), Ok(None), "nothing ran since");
        // A person's edit since is kept: the resume started from it.
        let edited = [
            summary(0, None, Input, Value::Null),
            summary(1, Some(0), Loop, Value::Null),
            summary(2, Some(1), UpdateState, Value::Null),
            summary(3, Some(2), Loop, Value::Null),
        ];
        assert_eq!(rollback_point(&edited, 2), Ok(Some(2)));
        assert_eq!(rollback_point(&edited[..3], 2), Ok(None), "an edit alone is no run");
        // The checkpoint it started from compacted away: refused, not guessed.
        assert_eq!(rollback_point(&resumed[2..], 2), Err(1));
    }
}
