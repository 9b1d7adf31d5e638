//! [`AnswerError`]: why an answer to `cx.interrupt` was not recorded (see [`crate::answer`]).

use agentflow_store::{AuditError, LeaseError, ReadError};

/// Recording an answer was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// No thread has this id.
    #[error("no thread `{thread}` in the store")]
    NotFound {
        /// The thread asked for.
        thread: String,
    },
    /// The thread does not wait in `cx.interrupt` (it runs, finished, or waits for something else).
    #[error("thread `{thread}` is not waiting in `interrupt` ({status}); there is nothing to answer")]
    NotWaiting {
        /// The thread.
        thread: String,
        /// What it is doing instead.
        status: String,
    },
    /// The thread moved on since the answer was written: it waits at another checkpoint now.
    #[error(
        "thread `{thread}` no longer waits at checkpoint {checkpoint} (it is at {latest}); \
         read what it asks now and answer that"
    )]
    Stale {
        /// The thread.
        thread: String,
        /// The checkpoint answered.
        checkpoint: u64,
        /// Where the thread is now.
        latest: u64,
    },
    /// The thread asks another question at the checkpoint than the one answered (a subgraph's
    /// next question asked since the person read the first).
    #[error(
        "thread `{thread}` asks another question at checkpoint {checkpoint} than the one answered; \
         read what it asks now and answer that"
    )]
    QuestionChanged {
        /// The thread.
        thread: String,
        /// The checkpoint answered.
        checkpoint: u64,
    },
    /// Someone answered this checkpoint first.
    #[error("thread `{thread}` was already answered at checkpoint {checkpoint} by `{by}`")]
    AlreadyAnswered {
        /// The thread.
        thread: String,
        /// The checkpoint.
        checkpoint: u64,
        /// Who answered first.
        by: String,
    },
    /// The answer was written but does not read back from the audit log (a damaged store).
    #[error(
        "the answer to thread `{thread}` at checkpoint {checkpoint} was written but does not read back; check the store"
    )]
    NotReadBack {
        /// The thread.
        thread: String,
        /// The checkpoint.
        checkpoint: u64,
    },
    /// The answer has no author.
    #[error("an answer needs the name of who gives it")]
    Anonymous,
    /// Reading the thread failed.
    #[error("reading the thread: {0}")]
    Read(#[from] ReadError),
    /// Writing the answer's audit entry failed.
    #[error("recording the answer: {0}")]
    Audit(#[from] AuditError),
    /// A run holds the thread right now (a `resume_with` or a resume in progress): it could
    /// move the thread on without this answer. (Appended last.)
    #[error(
        "thread `{thread}` is held right now by `{holder}` (a run resuming it, or another answer being recorded); \
         nothing was recorded: \
         look at the thread again once that run stopped and answer what it asks then, if anything"
    )]
    Busy {
        /// The thread.
        thread: String,
        /// The holder of the thread's lease.
        holder: String,
    },
    /// The value could not be a resume value (nested deeper than
    /// [`MAX_JSON_DEPTH`](crate::persist::MAX_JSON_DEPTH), as `resume_with` refuses it);
    /// nothing was recorded. (Appended last.)
    #[error("the answer cannot be a resume value: {0}")]
    Value(crate::durable::ValueError),
    /// The thread is a subgraph child whose question its parent thread waits on as its own:
    /// answer the parent, whose resume hands the answer down. Nothing was recorded. (Appended
    /// last.)
    #[error(
        "thread `{thread}` is a subgraph run of thread `{parent}`, which waits on its question: \
         answer `{parent}` (its resume hands the answer down); nothing was recorded"
    )]
    AnswerTheParent {
        /// The child thread.
        thread: String,
        /// The thread to answer.
        parent: String,
    },
    /// The answer is recorded, but the thread's run, parked in the run queue for it, could not
    /// be handed back to the workers. (Appended last.)
    #[error(
        "the answer to thread `{thread}` is recorded, but its queued run could not be woken ({source}); \
         submit it again with `App::submit_resume` once the store is reachable"
    )]
    NotWoken {
        /// The thread.
        thread: String,
        /// What the run queue said.
        source: Box<agentflow_store::QueueError>,
    },
    /// The thread is a subgraph child whose parent does not wait on its question (the parent
    /// was forked or updated past the step that ran it, or runs now): no run would read an
    /// answer given here. Nothing was recorded. (Appended last.)
    #[error(
        "thread `{thread}` is a subgraph run of thread `{parent}`, which does not wait on its question (it \
         moved on: forked, updated, or running); no run would read an answer; nothing was recorded"
    )]
    ParentMovedOn {
        /// The child thread.
        thread: String,
        /// Its parent.
        parent: String,
    },
    /// Taking the thread's lease to record the answer failed (not because a run holds it:
    /// that is [`AnswerError::Busy`]). Nothing was recorded. (Appended last.)
    #[error("taking thread `{thread}` to record the answer: {source}; nothing was recorded")]
    Lease {
        /// The thread.
        thread: String,
        /// What the store said.
        source: LeaseError,
    },
    /// The thread's step waits for answers to several questions and the answer names none:
    /// one value is not given to all of them unasked. Nothing was recorded. (Appended last.)
    #[error(
        "thread `{thread}` waits for answers to {} questions at checkpoint {checkpoint} (ids {}); an answer \
         that names no question is not recorded: answer each by its id (`ApprovalDesk::answer_question`, \
         `agentflow answer --question ID`), or, only if one value is meant for all and they ask the very \
         same thing, answer them alike (`ApprovalDesk::answer_all_alike`, `agentflow answer --all-alike`); \
         nothing was recorded",
        questions.len(),
        questions.join(", ")
    )]
    SeveralQuestions {
        /// The thread.
        thread: String,
        /// The checkpoint it waits at.
        checkpoint: u64,
        /// The ids of the questions it waits on ([`Pending::question_id`](crate::Pending::question_id)).
        questions: Vec<String>,
    },
    /// An answer for every question alike, but the questions that wait ask different things:
    /// each needs its own answer. Nothing was recorded. (Appended last.)
    #[error(
        "thread `{thread}` waits on questions that ask different things (ids {}); answer each by its id; \
         nothing was recorded",
        questions.join(", ")
    )]
    QuestionsDiffer {
        /// The thread.
        thread: String,
        /// The ids of the questions that wait for an answer.
        questions: Vec<String>,
    },
    /// The desk's access policy does not let the person answer. (Appended last.)
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    /// The answer holds text that looks like a credential; nothing was recorded, and the error
    /// names where, never the value. (Appended last.)
    #[error(
        "the answer's `{pointer}` looks like {}; nothing was recorded: keep the secret in a secret store \
         and answer with its reference (`{{\"secretRef\": \"scheme:name\"}}`)",
        kind.with_article()
    )]
    Credential {
        /// The JSON pointer (RFC 6901) of the string in the answer.
        pointer: String,
        /// What it looks like.
        kind: crate::secret::CredentialKind,
    },
}
