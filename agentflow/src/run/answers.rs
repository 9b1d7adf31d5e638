//! Resuming a thread that waits in `cx.interrupt`: each waiting question gets its own answer.
//!
//! A step may ask several questions at once (two nodes, map instances, subgraph children of
//! several nodes, each in `cx.interrupt`). Each is named by its [`Pending::question_id`] and
//! answered on its own ([`Runner::resume_answering`], or a person's answer recorded with
//! [`ApprovalDesk::answer_question`](crate::approval::ApprovalDesk::answer_question)); the
//! answers are kept in the thread's audit log until the last one arrives, and the thread goes
//! on only then, each node (and instance) getting the answer to its own question. A bare value
//! ([`Runner::resume_with`]) answers a step that asks one question; one value for several
//! questions is given only when asked for explicitly ([`Runner::resume_with_all_alike`]).

use std::sync::Arc;

use crate::approval::answer::{AnswerError, Target};
use crate::core::state::State;
use crate::durable::{Checkpointer, PersistError, Resumed, ThreadStatus};
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, Run, RunError};

use super::Runner;
use super::ending::{asks_again, best_effort, lease_lost};
use super::runner::resume_value;
use super::start::open;

/// The value given for the question of one waiting item: what its node's (or map instance's)
/// `interrupt` returns when the step runs again.
#[derive(Debug, Clone)]
pub(crate) struct ResumeValue {
    /// The node that asked.
    pub(crate) node: String,
    /// The map worker instance that asked, if it is one (`None` also stands for every instance
    /// of a map worker whose question was stored without one).
    pub(crate) instance: Option<u32>,
    /// The answer.
    pub(crate) value: serde_json::Value,
}

impl ResumeValue {
    fn answering(p: &Pending, value: serde_json::Value) -> Self {
        ResumeValue { node: p.node.clone(), instance: p.instance, value }
    }
}

/// The value for node `node` (instance `instance`) among `values`, if its question has one.
pub(crate) fn resume_value_for<'v>(
    values: &'v [ResumeValue],
    node: &str,
    instance: Option<u32>,
) -> Option<&'v serde_json::Value> {
    values.iter().find(|v| v.node == node && (v.instance == instance || v.instance.is_none())).map(|v| &v.value)
}

/// The questions of a step: its items that wait in `cx.interrupt`.
fn questions(interrupts: &[Pending]) -> Vec<Pending> {
    interrupts.iter().filter(|p| p.kind == PendingKind::Interrupt).cloned().collect()
}

impl<S: State, D: Sync> Runner<'_, S, D> {
    /// Continues a thread that paused in `cx.interrupt(..)`: the paused
    /// node runs again from its start and `interrupt` returns `value`.
    ///
    /// A bare value answers a step that asks one question. When several nodes (or map
    /// instances, or subgraph children of several nodes) of the step wait for a value, it is
    /// refused with [`RunError::SeveralQuestions`] naming their ids, and nothing runs: answer
    /// each with [`Runner::resume_answering`], or, only when one value is meant for all of them
    /// and they ask the very same thing, use [`Runner::resume_with_all_alike`].
    pub async fn resume_with<V: serde::Serialize>(self, value: V) -> Result<Run<S>, RunError> {
        let value = resume_value(&value)?;
        self.resume_given(value, false).await
    }

    /// Like [`Runner::resume_with`], giving `value` to every question the step asks: for a
    /// step whose nodes or map instances ask the very same thing (the same payload), and one
    /// answer is meant for all. Refused with [`RunError::QuestionsDiffer`] when they ask
    /// different things; nothing runs then.
    pub async fn resume_with_all_alike<V: serde::Serialize>(self, value: V) -> Result<Run<S>, RunError> {
        let value = resume_value(&value)?;
        self.resume_given(value, true).await
    }

    /// Answers one question of the thread's step, named by its id ([`Pending::question_id`]
    /// of an item of `app.pending(thread)`), with `value`.
    ///
    /// The answer is recorded in the thread's audit log, as a person's answer from the inbox
    /// or `agentflow answer` is (by the runner's [`Runner::owner`], or this process if none is
    /// set). While other questions of the step wait for their answers nothing runs: the run
    /// comes back [`Outcome::Interrupted`] listing the questions still unanswered, and the
    /// thread stays interrupted, its answers kept. The answer that completes the step's set
    /// continues the thread at once, each node (and map instance) getting the answer to its
    /// own question. Refused ([`RunError::Answer`]) when the thread does not ask that question
    /// (it moved on) or it has an answer already.
    pub async fn resume_answering<V: serde::Serialize>(self, question_id: &str, value: V) -> Result<Run<S>, RunError> {
        let value = resume_value(&value)?;
        let thread = self.thread.clone().ok_or(RunError::ResumeNeedsThread)?;
        let store = self.setup.store.clone().ok_or(RunError::NoStore)?;
        // Checked before the answer is written: giving a value is answering, then resuming.
        self.resume_check().answering().run().await?;
        let by = if self.owner.trim().is_empty() { crate::durable::process_actor() } else { self.owner.clone() };
        let question = question_id.to_string();
        let recorded = crate::durable::blocking(&store, move |s| -> Result<(), AnswerError> {
            let (seq, _) = crate::approval::answer::waiting_all(s, &thread)?;
            let now = crate::durable::now_ms();
            crate::approval::answer::record(s, &thread, seq, Target::One(Some(&question)), value, &by, now).map(drop)
        });
        recorded.await??;
        let (checkpointer, start) =
            open(&self.setup, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await?;
        if checkpointer.opened_as == Some(ThreadStatus::Compensating) {
            let thread = checkpointer.thread.clone();
            let status = "it is `compensating`: its calls are being undone and its graph does not run again".into();
            return Err(RunError::NotWaiting { thread, status });
        }
        self.continue_answered(start, checkpointer, true).await
    }

    async fn resume_given(self, value: serde_json::Value, alike: bool) -> Result<Run<S>, RunError> {
        let (checkpointer, start) = {
            self.resume_check().answering().run().await?;
            open(&self.setup, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await?
        };
        self.resume_opened(checkpointer, start, value, alike).await
    }

    /// A subgraph child's resume with the value its parent was given for the child's question:
    /// the first of the child's questions without an answer. A child whose step asks one
    /// question continues as with `resume_with(value)`; one whose step asks several keeps the
    /// answer in its audit log (as a person's answer, by its parent thread) and goes on once
    /// each has its answer; until then the run comes back interrupted on the rest, which its
    /// parent asks next.
    pub(crate) async fn resume_child_with(self, value: serde_json::Value) -> Result<Run<S>, RunError> {
        let (checkpointer, start) = {
            self.resume_check().run().await?;
            open(&self.setup, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await?
        };
        let asks = questions(&start.interrupts);
        if asks.len() <= 1 || checkpointer.opened_as == Some(ThreadStatus::Compensating) {
            return self.resume_opened(checkpointer, start, value, false).await;
        }
        let (store, thread, seq) = (Arc::clone(checkpointer.store()), checkpointer.thread.clone(), checkpointer.seq);
        let by = format!("thread:{}", self.child_of.clone().unwrap_or_default());
        // This run holds the child's lease: the answer is written under it.
        let handed = move |s: &dyn agentflow_store::Store| {
            crate::approval::answer::record_handed_down(s, &thread, seq, &asks, value, &by, crate::durable::now_ms())
        };
        crate::durable::blocking(&store, handed).await??;
        self.continue_answered(start, checkpointer, true).await
    }

    async fn resume_opened(
        self,
        checkpointer: Checkpointer,
        start: Resumed<S>,
        value: serde_json::Value,
        alike: bool,
    ) -> Result<Run<S>, RunError> {
        let thread = checkpointer.thread.clone();
        // A thread undoing its calls never runs its graph again (`resume` continues the
        // compensation), even when the step it was cancelled in waits for a value.
        if checkpointer.opened_as == Some(ThreadStatus::Compensating) {
            let status = "it is `compensating`: its calls are being undone and its graph does not run again".into();
            return Err(RunError::NotWaiting { thread, status });
        }
        let asks = questions(&start.interrupts);
        if asks.is_empty() {
            return Err(RunError::NotWaiting { thread, status: "no node is waiting in `interrupt`".into() });
        }
        if asks.len() > 1 {
            let ids = asks.iter().map(Pending::question_id).collect();
            if !alike {
                return Err(RunError::SeveralQuestions { thread, questions: ids });
            }
            if asks.iter().any(|p| p.payload != asks[0].payload) {
                return Err(RunError::QuestionsDiffer { thread, questions: ids });
            }
        }
        let values = asks.iter().map(|p| ResumeValue::answering(p, value.clone())).collect();
        let (store, seq) = (Arc::clone(checkpointer.store()), checkpointer.seq);
        let result = Box::new(self).drive(start, Some(checkpointer), values).await;
        // An answer recorded for this checkpoint was not the one given; if the run asks again
        // here, that answer must not answer the new question either: it is used.
        if asks_again(&result) {
            let now = crate::durable::now_ms();
            let id = thread.clone();
            let superseded = move |s: &dyn agentflow_store::Store| -> Result<(), AnswerError> {
                let recorded = crate::approval::answer::recorded_all(s, &id, seq, &asks)?;
                if let Some(answer) = recorded.into_iter().flatten().next() {
                    crate::approval::answer::used_if_asked_again(s, &answer, now)?;
                }
                Ok(())
            };
            best_effort(&store, &thread, "could not mark a recorded answer used", superseded).await;
        }
        result
    }

    /// Continues a thread whose step asks questions with the answers recorded for them (the
    /// inbox, `agentflow answer`, [`Runner::resume_answering`]). Until every question has its
    /// answer nothing runs: [`RunError::ValueRequired`], or with `partial`, the run comes back
    /// interrupted listing what still waits.
    pub(super) async fn continue_answered(
        self,
        start: Resumed<S>,
        checkpointer: Checkpointer,
        partial: bool,
    ) -> Result<Run<S>, RunError> {
        let asks = questions(&start.interrupts);
        let (store, id, seq) = (Arc::clone(checkpointer.store()), checkpointer.thread.clone(), checkpointer.seq);
        let (thread, read) = (id.clone(), asks.clone());
        let answers =
            crate::durable::blocking(&store, move |s| crate::approval::answer::recorded_all(s, &thread, seq, &read))
                .await?
                .map_err(PersistError::from)?;
        if let Some(open) = answers.iter().position(Option::is_none) {
            // The run that paused here died between keeping what the step waits for and
            // recording the thread as `interrupted`: the pause is finished now, so the questions
            // can be answered (nobody answers a `running` thread).
            if checkpointer.opened_as == Some(ThreadStatus::Running) {
                return self.finish_pause(start, checkpointer).await;
            }
            if !partial {
                return Err(RunError::ValueRequired { thread: id, node: asks[open].node.clone() });
            }
            // Answered so far are kept; what waits is the rest.
            let answered: Vec<String> =
                asks.iter().zip(&answers).filter(|(_, a)| a.is_some()).map(|(p, _)| p.question_id()).collect();
            let mut pending = start.interrupts;
            pending.retain(|p| p.kind != PendingKind::Interrupt || !answered.contains(&p.question_id()));
            let outcome = Outcome::Interrupted { thread: Some(id), pending };
            let usage = checkpointer.budget.usage;
            return Ok(Run {
                outcome,
                state: start.state,
                steps: start.step,
                usage,
                usage_this_run: Default::default(),
            });
        }
        let answers: Vec<_> = answers.into_iter().flatten().collect();
        let values = asks.iter().zip(&answers).map(|(p, a)| ResumeValue::answering(p, a.value.clone())).collect();
        let result = Box::new(self).drive(start, Some(checkpointer), values).await;
        // One mark spends, or uses, every answer of the checkpoint.
        let Some(answer) = answers.into_iter().next() else { return result };
        let now = crate::durable::now_ms();
        if asks_again(&result) {
            // It asks again where it was answered (its subgraph's next question): the answers
            // are used, so neither a worker nor the next resume gives them again.
            let answer = answer.clone();
            let used = move |s: &dyn agentflow_store::Store| {
                crate::approval::answer::used_if_asked_again(s, &answer, now).map(drop)
            };
            best_effort(&store, &id, "could not mark the answer used", used).await;
        }
        if let Ok(run) = &result
            && matches!(run.outcome, Outcome::Failed { .. })
        {
            // Spent: a person may answer again (a value of the right shape).
            let spent = move |s: &dyn agentflow_store::Store| crate::approval::answer::spent(s, &answer, now);
            best_effort(&store, &id, "could not mark the answer spent", spent).await;
        }
        result
    }
}

impl<S: State, D: Sync> Runner<'_, S, D> {
    /// Records a thread found `running` with a step that waits for answers as `interrupted`
    /// (its run died before it could), and answers as that run would have.
    async fn finish_pause(self, start: Resumed<S>, mut cp: Checkpointer) -> Result<Run<S>, RunError> {
        // Woken on its own when an approval it waits for expires, as a pause is.
        cp.wake_at = crate::durable::wake::wake_time(&start.interrupts);
        cp.parked_on(&start.interrupts);
        let outcome = Outcome::Interrupted { thread: Some(cp.thread.clone()), pending: start.interrupts };
        let usage = cp.budget.usage;
        cp.finish(ThreadStatus::Interrupted, outcome.to_string(), usage)
            .await
            .map_err(|e| lease_lost(e.into(), Some(&cp)))?;
        Ok(Run { outcome, state: start.state, steps: start.step, usage, usage_this_run: Default::default() })
    }
}
