//! The approval desk's side of answers to `cx.interrupt`: recording a person's answer to a
//! waiting question, and reading what a thread asks and what is answered so far.

use serde_json::Value;

use crate::approval::answer::{AnswerError, InterruptAnswer, QuestionsAnswered};
use crate::approval::{ApprovalDesk, Approver};
use crate::durable::now_ms;
use crate::interrupt::Pending;

/// The one answer recorded for a question named alone.
fn one(answers: Vec<InterruptAnswer>, thread: &str, checkpoint: u64) -> Result<InterruptAnswer, AnswerError> {
    answers.into_iter().next().ok_or_else(|| AnswerError::NotReadBack { thread: thread.to_string(), checkpoint })
}

impl ApprovalDesk {
    /// Records `value` as the answer to the `cx.interrupt` that thread `thread`
    /// waits in at checkpoint `checkpoint`, given by `by`. A thread whose resume with a
    /// recorded answer failed there (a value of the wrong shape) waits there still and
    /// takes a new answer: the failed one is spent ([`ANSWER_FAILED_KIND`](crate::approval::ANSWER_FAILED_KIND)).
    ///
    /// The value is checked as a `resume_with` value is ([`AnswerError::Value`]).
    /// Nothing runs here: the next [`Runner::resume`](crate::Runner::resume) of the
    /// thread, in any process that runs its graph, continues it as
    /// `resume_with(value)` would. A thread a [`Worker`](crate::Worker) ran waits parked in
    /// the run queue; recording the answer makes it claimable, and a worker continues it. A
    /// value of the wrong shape fails the node there, as with `resume_with`. The answer names
    /// the question it answers: a run that moves on to another question at the same checkpoint
    /// (a subgraph's next one) does not take it for that one. A subgraph's question is answered
    /// through the parent thread that waits on it ([`AnswerError::AnswerTheParent`]). Refused when the thread does not wait in
    /// `interrupt`, waits at another checkpoint (it moved on), or was answered
    /// there already (the first answer wins, also across processes); refused with
    /// [`AnswerError::Busy`] while a run holds the thread's lease (a `resume_with` in
    /// progress would move the thread on without this answer). A run that takes the thread
    /// in the instant between that check and the write is not detected: an explicit
    /// `resume_with` started then still wins over the answer.
    ///
    /// An answer that names no question is for a step that asks one: when several nodes (or
    /// map instances) of the step wait for a value, it is refused with
    /// [`AnswerError::SeveralQuestions`], naming their ids: answer each with
    /// [`ApprovalDesk::answer_question`] (the thread goes on once each has its answer), or,
    /// only when they ask the very same thing, all alike with [`ApprovalDesk::answer_all_alike`].
    pub fn answer_interrupt(
        &self,
        thread: &str,
        checkpoint: u64,
        value: Value,
        by: &Approver,
    ) -> Result<InterruptAnswer, AnswerError> {
        self.answer(thread, checkpoint, crate::approval::answer::Target::One(None), value, by)
            .and_then(|v| one(v, thread, checkpoint))
    }

    /// [`ApprovalDesk::answer_interrupt`] for the question a person read: also refused, with
    /// [`AnswerError::QuestionChanged`], unless the thread still asks the question named
    /// `question_id` ([`Pending::question_id`] of what [`ApprovalDesk::waiting_interrupt`]
    /// returned). Between reading a question and answering it, the thread may have moved on to
    /// another question at the same checkpoint (a subgraph's next one): the answer typed for the
    /// first is not recorded for the second. The approval inbox answers this way.
    ///
    /// When the step asks several questions (two nodes, map instances, subgraph children of
    /// several nodes), each is answered on its own by its id; the answers are kept in the audit
    /// log until the last one is recorded, and only then does a plain resume (or a worker)
    /// continue the thread, giving each node its own answer.
    /// [`ApprovalDesk::waiting_questions`] lists them with what is answered so far.
    ///
    /// ```
    /// # use agentflow::approval::{ApprovalDesk, Approver};
    /// # fn answer(desk: &ApprovalDesk) -> Result<(), agentflow::Error> {
    /// let (checkpoint, question) = desk.waiting_interrupt("triage-1")?;
    /// // ... a person reads `question.payload` and decides ...
    /// let maria = Approver::new("maria", ["reviewer"]);
    /// desk.answer_question("triage-1", checkpoint, &question.question_id(), serde_json::json!({ "decision": "approve" }), &maria)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn answer_question(
        &self,
        thread: &str,
        checkpoint: u64,
        question_id: &str,
        value: Value,
        by: &Approver,
    ) -> Result<InterruptAnswer, AnswerError> {
        self.answer(thread, checkpoint, crate::approval::answer::Target::One(Some(question_id)), value, by)
            .and_then(|v| one(v, thread, checkpoint))
    }

    /// Records `value` as the answer to every question thread `thread` waits on at checkpoint
    /// `checkpoint` that has no answer yet, alike: for a step whose nodes or map instances ask
    /// the very same thing (the same payload) and one value is meant for all of them. Refused
    /// with [`AnswerError::QuestionsDiffer`] when they ask different things (answer each with
    /// [`ApprovalDesk::answer_question`]); otherwise refused as
    /// [`ApprovalDesk::answer_interrupt`] is. The answers recorded, one per question.
    pub fn answer_all_alike(
        &self,
        thread: &str,
        checkpoint: u64,
        value: Value,
        by: &Approver,
    ) -> Result<Vec<InterruptAnswer>, AnswerError> {
        self.answer(thread, checkpoint, crate::approval::answer::Target::Alike, value, by)
    }

    fn answer(
        &self,
        thread: &str,
        checkpoint: u64,
        target: crate::approval::answer::Target<'_>,
        value: Value,
        by: &Approver,
    ) -> Result<Vec<InterruptAnswer>, AnswerError> {
        let store = &**self.store();
        self.may_answer(thread, by)?;
        let (answer, complete) =
            crate::approval::answer::record(store, thread, checkpoint, target, value, &by.id, now_ms())?;
        // Questions of the step still wait for answers: the run goes on only with all of them.
        if !complete {
            return Ok(answer);
        }
        // A worker parked the thread's run for this answer since it was recorded, or the queue
        // failed as it was written, or the store's audited wake is two writes (the default for
        // backends outside this crate wakes first: a claim in between parks the run again
        // before the answer is there): hand it back to the workers. Already woken, the row is
        // not parked for an answer any more and nothing is written.
        match store.wake_run(thread, agentflow_store::RunWait::Answer) {
            Ok(_) | Err(agentflow_store::QueueError::Unsupported { .. }) => Ok(answer),
            Err(source) => Err(AnswerError::NotWoken { thread: thread.to_string(), source: Box::new(source) }),
        }
    }

    /// The checkpoint thread `thread` waits at in `cx.interrupt`, and what the node asks
    /// (its payload): what a person reads before answering with
    /// [`ApprovalDesk::answer_interrupt`].
    pub fn waiting_interrupt(&self, thread: &str) -> Result<(u64, Pending), AnswerError> {
        self.reader_reads(thread)?;
        crate::approval::answer::waiting(&**self.store(), thread)
    }

    /// The thread that waits on subgraph child `thread`'s question as its own, if `thread` is
    /// such a child: that thread is the one to answer (its resume hands the answer down), and
    /// [`ApprovalDesk::answer_interrupt`] refuses the child with [`AnswerError::AnswerTheParent`].
    pub fn parent_waiting_on(&self, thread: &str) -> Result<Option<String>, AnswerError> {
        self.reader_reads(thread)?;
        crate::approval::answer::parent_waiting_on(&**self.store(), thread)
    }

    /// The parent of subgraph child `thread` when its parent does not wait on the child's
    /// question (the parent was forked or updated past the step that ran it, or runs now): no
    /// run would read an answer given to the child, and [`ApprovalDesk::answer_interrupt`]
    /// refuses it with [`AnswerError::ParentMovedOn`]. `None` for a thread that is no child, or
    /// that its parents wait on. Lists of questions for people leave such a child out.
    pub fn parent_moved_on(&self, thread: &str) -> Result<Option<String>, AnswerError> {
        self.reader_reads(thread)?;
        crate::approval::answer::parent_moved_on(&**self.store(), thread)
    }

    /// The answer recorded for the interrupt thread `thread` waits in now, if any (for the
    /// first question of its step; [`ApprovalDesk::waiting_questions`] gives each question's).
    pub fn recorded_answer(&self, thread: &str) -> Result<Option<InterruptAnswer>, AnswerError> {
        self.reader_reads(thread)?;
        let store = &**self.store();
        let (seq, asks) = crate::approval::answer::waiting(store, thread)?;
        Ok(crate::approval::answer::recorded(store, thread, seq, &asks)?)
    }

    /// The checkpoint thread `thread` waits at in `cx.interrupt`, and every question its step
    /// asks there (one per node, or map instance, that waits for a value), each with the answer
    /// recorded for it so far. The thread goes on once every one has its answer; until then a
    /// plain resume asks for the rest.
    pub fn waiting_questions(&self, thread: &str) -> Result<(u64, QuestionsAnswered), AnswerError> {
        self.reader_reads(thread)?;
        let store = &**self.store();
        let (seq, asks) = crate::approval::answer::waiting_all(store, thread)?;
        let answers = crate::approval::answer::recorded_all(store, thread, seq, &asks)?;
        Ok((seq, asks.into_iter().zip(answers).collect()))
    }
}
