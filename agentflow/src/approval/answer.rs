//! Answers to `cx.interrupt` given by a person from any process, kept until the
//! thread is resumed.
//!
//! A thread waiting in [`Ctx::interrupt`](crate::Ctx::interrupt) is continued by
//! [`Runner::resume_with`](crate::Runner::resume_with), which needs the graph's Rust
//! types. The people who answer are often elsewhere: the approval inbox
//! (`agentflow serve`), the `agentflow answer` command, a service. They record the
//! answer with [`ApprovalDesk::answer_interrupt`](crate::approval::ApprovalDesk::answer_interrupt); the next plain
//! [`Runner::resume`](crate::Runner::resume) of the thread, in whatever process runs
//! the graph, continues it with that value exactly as `resume_with(value)` would. A thread a
//! [`Worker`](crate::Worker) ran is parked in the run queue; recording the answer wakes it there
//! and a worker continues it.
//!
//! A step may ask several questions at once (two nodes, map instances, subgraph children of
//! several nodes). Each answer is for one of them, named by its
//! [`Pending::question_id`]; the thread goes on once every question of the step has its
//! answer (and a parked run is woken by the answer that completes the set), each node getting
//! its own. An answer that names no question is refused while several wait
//! ([`AnswerError::SeveralQuestions`]); one value for all is recorded only when asked for, and
//! only for questions that ask the very same thing.
//!
//! The answer is an entry of the thread's append-only audit log (kind
//! [`ANSWER_KIND`], the person as its actor), bound to the checkpoint the thread waits
//! at and to its question: once the thread moves on, the answer no longer applies. The first
//! answer to a question at a checkpoint wins; a later one is refused with
//! [`AnswerError::AlreadyAnswered`], also when two people answer at the same moment from two
//! processes.

use agentflow_store::{AuditEntry, AuditError, LeaseError, NewAuditEntry, ReadError, RunWait, Store, ThreadStatus};
use serde_json::{Value, json};

use crate::interrupt::{Pending, PendingKind};

pub use crate::interrupt::{ANSWER_FAILED_KIND, ANSWER_KIND, ANSWER_USED_KIND};

/// An answer to a thread's `cx.interrupt`, as recorded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InterruptAnswer {
    /// The thread.
    pub thread: String,
    /// The checkpoint the thread waited at when it was answered.
    pub checkpoint: u64,
    /// The node that asked.
    pub node: String,
    /// The map worker instance of `node` that asked, if it is one.
    pub instance: Option<u32>,
    /// The id of the question answered ([`Pending::question_id`]); `None` for an answer recorded
    /// before answers named their question.
    pub question: Option<String>,
    /// The value `cx.interrupt` returns on resume (deserialized into the type the node asks for).
    pub value: Value,
    /// Who answered.
    pub by: String,
    /// When (unix millis).
    pub at: u64,
}

/// The questions a thread's step asks at a checkpoint, each with the answer recorded for it so
/// far ([`ApprovalDesk::waiting_questions`](crate::approval::ApprovalDesk::waiting_questions)).
pub type QuestionsAnswered = Vec<(Pending, Option<InterruptAnswer>)>;

pub use crate::answer_error::AnswerError;

/// Which waiting question an answer is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The only question the thread's step asks (refused when it asks several); with an id,
    /// that question (refused if the thread does not ask it).
    One(Option<&'a str>),
    /// Every question of the step that has no answer yet, with the same value: only when they
    /// all ask the very same thing.
    Alike,
}

/// The checkpoint thread `thread` waits at in `interrupt`, and what it asks.
pub(crate) fn waiting(store: &dyn Store, thread: &str) -> Result<(u64, Pending), AnswerError> {
    let record = store.thread(thread)?.ok_or_else(|| AnswerError::NotFound { thread: thread.to_string() })?;
    let not_waiting = |status: String| AnswerError::NotWaiting { thread: thread.to_string(), status };
    // A thread that failed where it waits (a spent answer of the wrong shape) still waits.
    if !matches!(record.status, ThreadStatus::Interrupted | ThreadStatus::Failed) {
        return Err(not_waiting(record.status.as_str().to_string()));
    }
    let latest = store.latest_checkpoint(thread)?.ok_or_else(|| not_waiting("no checkpoint".into()))?;
    let waits = interrupts_at(store, thread, latest.seq)?;
    match waits.into_iter().find(|p| p.kind == PendingKind::Interrupt) {
        Some(p) => Ok((latest.seq, p)),
        None if record.status == ThreadStatus::Failed => Err(not_waiting("failed".into())),
        None => Err(not_waiting("it waits for an approval or a breakpoint".into())),
    }
}

/// The checkpoint thread `thread` waits at in `interrupt`, and every question its step asks
/// there (one per node, or map instance, that waits for a value), in the order stored.
pub(crate) fn waiting_all(store: &dyn Store, thread: &str) -> Result<(u64, Vec<Pending>), AnswerError> {
    let (seq, _) = waiting(store, thread)?;
    let mut asks = interrupts_at(store, thread, seq)?;
    asks.retain(|p| p.kind == PendingKind::Interrupt);
    Ok((seq, asks))
}

/// What thread `thread` waits for at checkpoint `seq`, as stored there.
fn interrupts_at(store: &dyn Store, thread: &str, seq: u64) -> Result<Vec<Pending>, ReadError> {
    let writes = store.pending_writes(thread, seq)?;
    Ok(writes
        .iter()
        .find(|w| w.node == crate::durable::INTERRUPTS)
        .and_then(|w| serde_json::from_slice(&w.value).ok())
        .unwrap_or_default())
}

/// Records `value` as the answer to `target` of the question(s) thread `thread` waits on at
/// `checkpoint`. The answers recorded (one, or one per question answered alike), and whether
/// every question of the step has its answer now (a plain resume continues the thread).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record(
    store: &dyn Store,
    thread: &str,
    checkpoint: u64,
    target: Target<'_>,
    value: Value,
    by: &str,
    now: u64,
) -> Result<(Vec<InterruptAnswer>, bool), AnswerError> {
    if by.trim().is_empty() {
        return Err(AnswerError::Anonymous);
    }
    // Recorded, a value `resume_with` refuses would stop every plain resume of the thread.
    crate::durable::check_json(&value, "answer").map_err(AnswerError::Value)?;
    refuse_credentials(&value)?;
    // The thread is held while the answer is checked and written: a run (a `resume_with` with
    // its own value) cannot take it in between and move it on without the answer while the
    // person is told it was recorded. A run that holds it already refuses the answer; one that
    // starts meanwhile is refused as busy, for that moment.
    let _held = AnswerLease::take(store, thread, now)?;
    let (latest, questions) = waiting_all(store, thread)?;
    if let Some(parent) = parent_waiting_on(store, thread)? {
        return Err(AnswerError::AnswerTheParent { thread: thread.to_string(), parent });
    }
    if let Some(parent) = parent_moved_on(store, thread)? {
        return Err(AnswerError::ParentMovedOn { thread: thread.to_string(), parent });
    }
    if latest != checkpoint {
        return Err(AnswerError::Stale { thread: thread.to_string(), checkpoint, latest });
    }
    let before = recorded_all(store, thread, checkpoint, &questions)?;
    let ids = |all: bool| -> Vec<String> {
        questions.iter().zip(&before).filter(|(_, a)| all || a.is_none()).map(|(p, _)| p.question_id()).collect()
    };
    // The questions this answer is for.
    let chosen: Vec<usize> = match target {
        Target::One(Some(id)) => match questions.iter().position(|p| p.question_id() == id) {
            Some(i) => vec![i],
            None => return Err(AnswerError::QuestionChanged { thread: thread.to_string(), checkpoint }),
        },
        Target::One(None) if questions.len() > 1 => {
            return Err(AnswerError::SeveralQuestions {
                thread: thread.to_string(),
                checkpoint,
                questions: ids(false),
            });
        }
        Target::One(None) => vec![0],
        Target::Alike => {
            let open: Vec<usize> = (0..questions.len()).filter(|i| before[*i].is_none()).collect();
            if open.iter().any(|i| questions[*i].payload != questions[open[0]].payload) {
                return Err(AnswerError::QuestionsDiffer { thread: thread.to_string(), questions: ids(false) });
            }
            open
        }
    };
    for i in &chosen {
        if let Some(first) = &before[*i] {
            return Err(AnswerError::AlreadyAnswered { thread: thread.to_string(), checkpoint, by: first.by.clone() });
        }
    }
    // Every question of the step is answered once these are written.
    let complete = before.iter().enumerate().all(|(i, a)| a.is_some() || chosen.contains(&i));
    for (n, i) in chosen.iter().enumerate() {
        let asked = &questions[*i];
        let detail = json!({
            "checkpoint": checkpoint, "node": asked.node, "instance": asked.instance, "value": value,
            "asks": question_hash(&asked.payload), "question": asked.question_id(),
        });
        let entry = NewAuditEntry::new(now, by, ANSWER_KIND, detail);
        // A run parked in the queue for the answers is woken in the write that records the last
        // one: two writes, a process dying in between would leave the run parked beside it.
        let last = complete && n + 1 == chosen.len();
        if !(last && matches!(store.wake_run_audited(thread, RunWait::Answer, entry.clone()), Ok(true))) {
            // Not parked (not queued, or not yet parked: the worker that parks it afterwards sees
            // the answers and wakes it), or the queue failed, or more answers are to come:
            // recorded alone, and woken by the caller once every question has its answer.
            store.append_audit(thread, entry)?;
        }
    }
    // Two processes may both have seen no answer: the log's order decides, the first wins.
    let after = recorded_all(store, thread, checkpoint, &questions)?;
    let mut answers = Vec::new();
    for i in chosen {
        match after[i].clone() {
            Some(first) if first.by == by && first.value == value => answers.push(first),
            Some(first) => {
                return Err(AnswerError::AlreadyAnswered { thread: thread.to_string(), checkpoint, by: first.by });
            }
            None => return Err(AnswerError::NotReadBack { thread: thread.to_string(), checkpoint }),
        }
    }
    Ok((answers, after.iter().all(Option::is_some)))
}

/// Records `value`, given to a parent thread for its subgraph child `thread`'s question, as the
/// answer to the first of the child's `questions` at `checkpoint` that has none yet. Written by
/// the parent's run, which holds the child's lease and hands the answer down: no lease is
/// taken and the child is not refused for waiting on its parent.
pub(crate) fn record_handed_down(
    store: &dyn Store,
    thread: &str,
    checkpoint: u64,
    questions: &[Pending],
    value: Value,
    by: &str,
    now: u64,
) -> Result<(), AnswerError> {
    crate::durable::check_json(&value, "answer").map_err(AnswerError::Value)?;
    refuse_credentials(&value)?;
    let answers = recorded_all(store, thread, checkpoint, questions)?;
    let Some((asked, _)) = questions.iter().zip(&answers).find(|(_, a)| a.is_none()) else { return Ok(()) };
    let detail = json!({
        "checkpoint": checkpoint, "node": asked.node, "instance": asked.instance, "value": value,
        "asks": question_hash(&asked.payload), "question": asked.question_id(),
    });
    store.append_audit(thread, NewAuditEntry::new(now, by, ANSWER_KIND, detail))?;
    Ok(())
}

/// What of `pending` (what thread `thread` waits for at its latest checkpoint) still waits:
/// while some questions of the step have no answer, those answered already are left out.
pub(crate) fn unanswered(
    store: &dyn Store,
    thread: &str,
    mut pending: Vec<Pending>,
) -> Result<Vec<Pending>, ReadError> {
    let asks: Vec<Pending> = pending.iter().filter(|p| p.kind == PendingKind::Interrupt).cloned().collect();
    if asks.len() < 2 {
        return Ok(pending);
    }
    let Some(latest) = store.latest_checkpoint(thread)? else { return Ok(pending) };
    let answers = recorded_all(store, thread, latest.seq, &asks)?;
    let answered: Vec<String> =
        asks.iter().zip(&answers).filter(|(_, a)| a.is_some()).map(|(p, _)| p.question_id()).collect();
    if answered.len() < asks.len() {
        pending.retain(|p| p.kind != PendingKind::Interrupt || !answered.contains(&p.question_id()));
    }
    Ok(pending)
}

/// How the lease holder of an answer being recorded begins.
const ANSWER_HOLDER: &str = "answer:";

/// How long an answer holds its thread at most: a process that dies while it records one
/// leaves the thread to others after this.
const ANSWER_LEASE_MS: u64 = 10_000;

/// The thread's lease, held while an answer is checked and recorded; released when dropped.
struct AnswerLease<'a> {
    store: &'a dyn Store,
    thread: &'a str,
    holder: String,
}

impl<'a> AnswerLease<'a> {
    /// Takes the thread. Another answer that holds it is waited for (it holds it for a few
    /// writes; then this one finds it recorded and is refused naming who gave it), a run that
    /// holds it is not: [`AnswerError::Busy`].
    fn take(store: &'a dyn Store, thread: &'a str, now: u64) -> Result<Self, AnswerError> {
        let holder = format!("{ANSWER_HOLDER}{}", crate::durable::holder_id());
        let began = std::time::Instant::now();
        let mut now = now;
        loop {
            match store.acquire_lease(thread, &holder, ANSWER_LEASE_MS, now) {
                Ok(_) => return Ok(AnswerLease { store, thread, holder }),
                Err(LeaseError::ThreadBusy { holder: other, .. })
                    if other.starts_with(ANSWER_HOLDER)
                        && began.elapsed() < std::time::Duration::from_millis(ANSWER_LEASE_MS) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    now = now.max(crate::durable::now_ms());
                }
                Err(LeaseError::ThreadBusy { holder, .. }) => {
                    return Err(AnswerError::Busy { thread: thread.to_string(), holder });
                }
                Err(source) => return Err(AnswerError::Lease { thread: thread.to_string(), source }),
            }
        }
    }
}

impl Drop for AnswerLease<'_> {
    fn drop(&mut self) {
        // A failed release leaves the lease to expire (`ANSWER_LEASE_MS`).
        if let Err(e) = self.store.release_lease(self.thread, &self.holder) {
            tracing::warn!(thread = %self.thread, error = %e, "could not release the lease an answer held");
        }
    }
}

/// The first answer recorded for question `asked` at checkpoint `checkpoint` of `thread` since
/// the last answers there were spent ([`ANSWER_FAILED_KIND`], [`ANSWER_USED_KIND`]), in the
/// audit log's order.
pub(crate) fn recorded(
    store: &dyn Store,
    thread: &str,
    checkpoint: u64,
    asked: &Pending,
) -> Result<Option<InterruptAnswer>, ReadError> {
    Ok(recorded_all(store, thread, checkpoint, std::slice::from_ref(asked))?.pop().flatten())
}

/// [`recorded`] for each of `questions`, read in one pass of the audit log.
///
/// An answer counts for the question it names ([`Pending::question_id`]: the node, the map
/// instance and what it asks), and only while the thread asks it there: if a run moved the
/// thread past the answered question without leaving the checkpoint (a subgraph's next
/// question) and did not get to mark the answer used, the answer does not answer the next
/// question either. (An answer recorded before answers named their question counts for any
/// question with its payload, or any at all if it names no payload either.)
pub(crate) fn recorded_all(
    store: &dyn Store,
    thread: &str,
    checkpoint: u64,
    questions: &[Pending],
) -> Result<Vec<Option<InterruptAnswer>>, ReadError> {
    let keys: Vec<(String, String)> = questions.iter().map(|p| (p.question_id(), question_hash(&p.payload))).collect();
    let mut first: Vec<Option<InterruptAnswer>> = vec![None; questions.len()];
    for e in store.list_audit(thread)? {
        if (e.kind == ANSWER_FAILED_KIND || e.kind == ANSWER_USED_KIND)
            && e.detail.get("checkpoint").and_then(Value::as_u64) == Some(checkpoint)
        {
            first.iter_mut().for_each(|f| *f = None);
            continue;
        }
        let Some(answer) = answer_of(&e, checkpoint) else { continue };
        let named = e.detail.get("question").and_then(Value::as_str);
        let asks = e.detail.get("asks").and_then(Value::as_str);
        for ((id, hash), slot) in keys.iter().zip(first.iter_mut()) {
            let answers = match (named, asks) {
                (Some(q), _) => q == id,
                (None, Some(h)) => h == hash,
                (None, None) => true,
            };
            if answers && slot.is_none() {
                *slot = Some(answer.clone());
            }
        }
    }
    Ok(first)
}

/// What names a question in its answer's audit entry (`asks`): the hash of its payload alone.
/// ([`Pending::question_id`], which the inbox sends back, also names the node that asks.)
fn question_hash(asks: &Value) -> String {
    crate::tool::args_hash(asks)
}

/// The thread that waits on subgraph child `thread`'s question as its own: of the threads its
/// record's parents lead to, the first from the root that is paused with a question naming
/// `thread` or a child of it. Answers go to it, and its resume hands them down. `None` for a
/// thread that is no child, or whose parents do not wait on it.
pub(crate) fn parent_waiting_on(store: &dyn Store, thread: &str) -> Result<Option<String>, AnswerError> {
    // The chain of parents, nearest first. A child's id extends its parent's, so a chain that
    // does not shrink (only an edited store holds one) ends there.
    let mut parents: Vec<String> = Vec::new();
    let mut at = thread.to_string();
    while let Some(parent) = store.thread(&at)?.and_then(|r| r.parent).filter(|p| p.len() < at.len()) {
        parents.push(parent.clone());
        at = parent;
    }
    let below = format!("{thread}/");
    // The root answers for the whole tree.
    for parent in parents.iter().rev() {
        let Some(record) = store.thread(parent)? else { continue };
        if !matches!(record.status, ThreadStatus::Interrupted | ThreadStatus::Failed) {
            continue;
        }
        let Some(latest) = store.latest_checkpoint(parent)? else { continue };
        let asks_through = interrupts_at(store, parent, latest.seq)?.iter().any(|p| {
            p.kind == PendingKind::Interrupt
                && p.payload.get("thread").and_then(Value::as_str).is_some_and(|c| c == thread || c.starts_with(&below))
        });
        if asks_through {
            return Ok(Some(parent.clone()));
        }
    }
    Ok(None)
}

/// The parent of subgraph child `thread` when no thread of its parent chain waits on the child's
/// question (the parent was forked or updated past the step that ran it, or runs now): an answer
/// given to the child would be read by no run. `None` for a thread that is no child, or that its
/// parents wait on.
pub(crate) fn parent_moved_on(store: &dyn Store, thread: &str) -> Result<Option<String>, AnswerError> {
    let Some(parent) = store.thread(thread)?.and_then(|r| r.parent) else { return Ok(None) };
    if parent_waiting_on(store, thread)?.is_some() {
        return Ok(None);
    }
    Ok(Some(parent))
}

/// Whether thread `thread` waits in `cx.interrupt` with an answer recorded for every question
/// of the checkpoint it waits at (a plain resume continues it).
pub(crate) fn answered_now(store: &dyn Store, thread: &str) -> Result<bool, ReadError> {
    match waiting_all(store, thread) {
        Ok((seq, asks)) => Ok(recorded_all(store, thread, seq, &asks)?.iter().all(Option::is_some)),
        Err(AnswerError::Read(e)) => Err(e),
        Err(_) => Ok(false),
    }
}

/// Records that the run that continued `thread` from `checkpoint` with `answer` failed: the
/// answer is spent.
pub(crate) fn spent(store: &dyn Store, answer: &InterruptAnswer, now: u64) -> Result<(), AuditError> {
    let detail = json!({ "checkpoint": answer.checkpoint, "node": answer.node, "answered_by": answer.by });
    store.append_audit(&answer.thread, NewAuditEntry::new(now, &answer.by, ANSWER_FAILED_KIND, detail))?;
    Ok(())
}

/// Records that the run that continued `thread` with `answer` stopped to ask again at the
/// checkpoint the answer was given at ([`ANSWER_USED_KIND`]); nothing when the thread moved on
/// (the answer no longer applies there anyway). Whether it was recorded.
pub(crate) fn used_if_asked_again(store: &dyn Store, answer: &InterruptAnswer, now: u64) -> Result<bool, AnswerError> {
    let latest = store.latest_checkpoint(&answer.thread)?;
    if latest.map(|c| c.seq) != Some(answer.checkpoint) {
        return Ok(false);
    }
    let detail = json!({ "checkpoint": answer.checkpoint, "node": answer.node, "answered_by": answer.by });
    store.append_audit(&answer.thread, NewAuditEntry::new(now, &answer.by, ANSWER_USED_KIND, detail))?;
    Ok(true)
}

fn answer_of(entry: &AuditEntry, checkpoint: u64) -> Option<InterruptAnswer> {
    if entry.kind != ANSWER_KIND || entry.detail.get("checkpoint")?.as_u64()? != checkpoint {
        return None;
    }
    Some(InterruptAnswer {
        thread: entry.thread.clone(),
        checkpoint,
        node: entry.detail.get("node")?.as_str()?.to_string(),
        instance: entry.detail.get("instance").and_then(Value::as_u64).and_then(|i| u32::try_from(i).ok()),
        question: entry.detail.get("question").and_then(Value::as_str).map(str::to_string),
        value: entry.detail.get("value")?.clone(),
        by: entry.actor.clone(),
        at: entry.at,
    })
}

/// Refuses an answer holding text that looks like a credential: it would be kept in the audit
/// log and the thread's checkpoint.
fn refuse_credentials(value: &Value) -> Result<(), AnswerError> {
    match crate::secret::scan_value(value) {
        Some(hit) => Err(AnswerError::Credential { pointer: hit.pointer, kind: hit.kind }),
        None => Ok(()),
    }
}
