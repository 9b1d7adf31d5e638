//! Pausing the run for a human: a node's question (`interrupt`), and the
//! pauses for an approval or for a decision on an unknown outcome.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Ctx;
use crate::core::error::NodeError;
use crate::interrupt::{Pending, PendingKind};

impl<D> Ctx<'_, D> {
    /// Pauses the run for a human, handing them `payload`; returns the value
    /// they resume with.
    ///
    /// The first time, this returns an error that ends the run as
    /// `Outcome::Interrupted` (propagate it with `?`). The state is persisted
    /// and the thread waits. `runner.resume_with(value)` runs this node again
    /// from its start, and this call then returns `value`, decoded as `R`.
    /// The value answers this step's question only: if the node runs again in a
    /// later step (a loop), it asks anew. If the node's step instead pauses for
    /// something else after this returned (a tool call's approval, a
    /// [`sleep`](Ctx::sleep), its subgraph's question), the value is kept with
    /// the paused step: the node's re-run gets it back here without asking
    /// again, and a value given to the next `resume_with` goes to whatever
    /// paused the step. After an [`App::update_state`](crate::App::update_state)
    /// of the paused thread, the node asks anew (a person changed what it asked
    /// about), and the next value answers that. The answer is kept for the node,
    /// not for the payload: a re-run whose question differs for another reason
    /// (a clock, a read outside the journal, new node code) gets it back too. A
    /// step that ends failed, or out of budget, keeps no new answer (one kept
    /// before stays): the thread still waits for the value, and the next answer to
    /// the node's question is given to it. What the thread is recorded as waiting for
    /// follows that step: a node that finished in it no longer waits; one whose
    /// subgraph moved on to another question waits at that question; one whose
    /// subgraph took the value and then failed waits for nothing recorded (its
    /// re-run finds out what the child waits for now, and a child whose own step
    /// failed while it waited still gets the next value); one whose subgraph
    /// refused the value for its shape (the child failed where it asked, and
    /// still waits there) waits as it did, and the next value goes down to the
    /// child again. A value of the wrong shape, here or in such a child, fails
    /// the run with [`ErrorClass::NeedsInput`](crate::ErrorClass::NeedsInput) and
    /// starts no saga compensation.
    ///
    /// Only a `#[node(interrupt)]` may call it, once per run of the node.
    ///
    /// When several nodes (or map instances) of one step ask, each question has its own id
    /// ([`Pending::question_id`](crate::Pending::question_id)) and its own answer
    /// ([`Runner::resume_answering`](crate::Runner::resume_answering), or a person's answer to
    /// that question from the inbox or `agentflow answer --question`); the step runs again once
    /// every question has its answer. A bare `resume_with(value)` is refused then
    /// ([`RunError::SeveralQuestions`](crate::RunError::SeveralQuestions)), and one value for
    /// every question is given only with
    /// [`Runner::resume_with_all_alike`](crate::Runner::resume_with_all_alike).
    ///
    /// A review that pauses for a person, then sends through [`Ctx::effect`]
    /// (journaled: a resumed node gets the journaled receipt back):
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use agentflow::prelude::*;
    /// use agentflow::RedbStore;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Mail { draft: String, sent: Option<String> }
    /// #[derive(Default)]
    /// struct Outbox { sends: AtomicU32 }
    ///
    /// #[graph(state = Mail, deps = Outbox, start = review)]
    /// mod mail {
    ///     use super::*;
    ///     #[node(goto = [END], interrupt)]
    ///     async fn review(m: &Mail, cx: &Ctx<Outbox>) -> Result<Step<Mail>, NodeError> {
    ///         let text: String = cx.interrupt(&m.draft)?; // pauses the first time
    ///         let receipt = cx
    ///             .effect("send", |key| async move {
    ///                 cx.deps().sends.fetch_add(1, Ordering::SeqCst);
    ///                 Ok(format!("sent with key {key}"))
    ///             })
    ///             .await?;
    ///         Ok(goto!(END, Mail::update().sent(Some(format!("{text}: {receipt}")))))
    ///     }
    /// }
    /// # fn main() -> Result<(), agentflow::Error> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = mail::graph().app().store(Arc::new(RedbStore::in_memory()?));
    /// let outbox = Outbox::default();
    /// let input = Mail { draft: "Hello".into(), sent: None };
    /// let run = app.runner(&outbox).thread("m-1").run(input).await?;
    /// assert!(matches!(run.outcome, Outcome::Interrupted { .. }));
    /// assert_eq!(app.pending("m-1")?[0].payload, "Hello");
    ///
    /// let run = app.runner(&outbox).thread("m-1").resume_with("Hello, edited").await?;
    /// assert_eq!(run.outcome, Outcome::Completed);
    /// assert!(run.state.sent.unwrap().starts_with("Hello, edited: sent with key"));
    /// assert_eq!(outbox.sends.load(Ordering::SeqCst), 1);
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub fn interrupt<P: Serialize, R: DeserializeOwned>(&self, payload: P) -> Result<R, NodeError> {
        if !self.may_interrupt {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` but is not marked `#[node(interrupt)]`",
                self.node
            )));
        }
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::replace(&mut signal.interrupt_called, true) {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` twice in one run; ask in two nodes instead",
                self.node
            )));
        }
        let payload =
            crate::core::encode::to_value(&payload, "payload", crate::durable::MAX_JSON_DEPTH).map_err(|e| {
                NodeError::fatal(format!("the interrupt payload of node `{}` cannot be stored: {e}", self.node))
            })?;
        match self.kept_answer {
            // Answered before the step paused for something else: the same answer, and the
            // resume value stays for whatever paused the step (the node's subgraph, say). An
            // answer kept before a manual update of the state, or one the node no longer reads
            // (its type changed), is asked for anew.
            Some(kept) => {
                if !kept.stale
                    && let Ok(decoded) = serde_json::from_value(kept.value.clone())
                {
                    signal.answered = Some(kept.value.clone());
                    return Ok(decoded);
                }
            }
            None => {
                if let Some(value) = self.resume.filter(|_| !std::mem::replace(&mut signal.resume_taken, true)) {
                    // Not a failure for good: a person answers again (nothing is compensated).
                    let decoded = serde_json::from_value(value.clone()).map_err(|e| {
                        signal.refused_resume = true;
                        // Not the serde message as it is: it quotes the value, and the text
                        // becomes the thread's status line.
                        NodeError::needs_input(format!(
                            "the resume value for node `{}` does not have the shape it expects ({}); \
                             resume again with a value of the right shape",
                            self.node,
                            crate::secret::describe_decode_error(&e)
                        ))
                    })?;
                    signal.answered = Some(value.clone());
                    return Ok(decoded);
                }
            }
        }
        signal.pause = Some(Pending {
            node: self.node.to_string(),
            instance: self.instance(),
            kind: PendingKind::Interrupt,
            payload,
        });
        Err(NodeError::needs_input(format!("node `{}` is waiting for a human", self.node)))
    }

    /// Records a pause for a human's decision on an approval.
    pub(crate) fn pause_for_approval(&self, payload: serde_json::Value) -> NodeError {
        self.pause(PendingKind::Approval, payload)
    }

    pub(super) fn pause(&self, kind: PendingKind, payload: serde_json::Value) -> NodeError {
        // An approval's wait has its own span (`await_approval`).
        if kind != PendingKind::Approval {
            let name = match kind {
                PendingKind::Interrupt => "interrupt",
                PendingKind::OutcomeUnknown => "outcome_unknown",
                PendingKind::Sleep => "sleep",
                _ => "other",
            };
            crate::telemetry::spans::interrupt(name).in_scope(|| ());
        }
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.pause = Some(Pending { node: self.node.to_string(), instance: self.instance(), kind, payload });
        let what = if kind == PendingKind::OutcomeUnknown { "a decision on an unknown outcome" } else { "an approval" };
        NodeError::needs_input(format!("node `{}` is waiting for {what}", self.node))
    }
}
