//! Pauses for a human: what a paused thread waits for.

use serde::{Deserialize, Serialize};

/// What a paused thread is waiting for.
///
/// Pauses for a human: `cx.interrupt(payload)` in a `#[node(interrupt)]`, and
/// static breakpoints before or after named nodes.
///
/// A paused run ends as [`Outcome::Interrupted`](crate::Outcome) with the
/// state persisted; nothing is held in memory while it waits. Resuming runs
/// the interrupted node again from its start, and this time `interrupt`
/// returns the value the human gave (in that step only: a later step asks
/// anew); if the step then pauses for something else (an approval, a timer, a
/// subgraph's question), that value is kept and the node's re-runs in the step
/// get it back without asking again (unless the paused state was updated by
/// hand). Effects before the `interrupt` call must go through
/// [`Ctx::effect`](crate::Ctx::effect) so they do not run twice.
///
/// Besides interrupts and breakpoints, a thread pauses for a human when a
/// tool call needs an approval ([`PendingKind::Approval`]) and when a call or
/// effect that is not idempotent was cut off mid-call, so whether it acted is
/// unknown ([`PendingKind::OutcomeUnknown`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Pending {
    /// The node that paused (or the breakpoint's node).
    pub node: String,
    /// The map worker instance of `node` that paused (its index in the `Send` fan-out, as
    /// [`Ctx::instance`](crate::Ctx::instance) gives it), `None` for a node run of its own and
    /// for breakpoints. Each waiting item asks its own question ([`Pending::question_id`]) and
    /// gets its own answer (`resume_answering`); one value for several items is given only
    /// when asked for (`resume_with_all_alike`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<u32>,
    /// Why it paused.
    pub kind: PendingKind,
    /// What the node handed to the human (`null` for breakpoints).
    pub payload: serde_json::Value,
}

impl Pending {
    /// What names the question: a hash of the node (and map instance) that asks and of what it
    /// asks. [`Runner::resume_answering`](crate::Runner::resume_answering) and
    /// [`ApprovalDesk::answer_question`](crate::approval::ApprovalDesk::answer_question) answer
    /// the question with this id alone, when a step asks several. An answer given with
    /// [`ApprovalDesk::answer_question`](crate::approval::ApprovalDesk::answer_question) for this id is
    /// refused if the thread asks another question by then (a subgraph's next one at the same
    /// checkpoint), so an answer typed for one question never lands on another.
    pub fn question_id(&self) -> String {
        crate::tool::args_hash(
            &serde_json::json!({ "node": self.node, "instance": self.instance, "asks": self.payload }),
        )
    }
}

/// The audit kind of a recorded answer.
pub const ANSWER_KIND: &str = "interrupt.answered";

/// The audit kind written when a plain resume that continued with a recorded answer ended
/// `failed` (a value of the wrong shape, for instance): the answer is spent, and a person may
/// answer the checkpoint again.
pub const ANSWER_FAILED_KIND: &str = "interrupt.answer_failed";

/// The audit kind written when a plain resume that continued with a recorded answer stopped to
/// ask again at the same checkpoint (a subgraph's next question, or the node's own question after
/// its subgraph took the answer): the answer is used, and the new question takes a new answer.
pub const ANSWER_USED_KIND: &str = "interrupt.answer_used";

/// Why a thread paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PendingKind {
    /// The node called `cx.interrupt(..)`: resume with a value.
    Interrupt,
    /// A breakpoint before the node: resume without a value.
    Before,
    /// A breakpoint after the node: resume without a value.
    After,
    /// A tool call waits for a human's decision on its approval record;
    /// decide it, then resume without a value.
    Approval,
    /// A call or effect started earlier and left no result (the process
    /// died, or the run was dropped, mid-call): whether it acted is unknown
    /// and it is not idempotent, so it is not run again on its own. The
    /// payload's `approval` names the record to settle with
    /// [`ApprovalDesk::settle`](crate::approval::ApprovalDesk::settle)
    /// (it succeeded, with a result; it failed; run it again), then resume
    /// without a value.
    OutcomeUnknown,
    /// The node called [`Ctx::sleep`](crate::Ctx::sleep) or
    /// [`Ctx::sleep_until`](crate::Ctx::sleep_until): it waits on a durable
    /// timer until the unix millis in the payload's `until`. Resume without a
    /// value at or after that time (a [`Scheduler`](crate::timer::Scheduler)
    /// does it); a resume before it runs nothing and reports the same
    /// [`Outcome::Sleeping`](crate::Outcome::Sleeping).
    Sleep,
}

/// What a node attempt signals to the executor besides its result.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Journaled effects of this attempt in flight: the node's timeout waits
    /// for them to finish. `None` for an attempt without a time limit, which nothing waits on.
    pub(crate) shield: Option<crate::in_flight::Shield>,
    /// `interrupt` was called in this attempt.
    pub(crate) interrupt_called: bool,
    /// The attempt paused for a human.
    pub(crate) pause: Option<Pending>,
    /// The attempt ran out of a run budget.
    pub(crate) exhausted: Option<crate::core::budget::Budget>,
    /// Tools called from the node's own code so far (for their call ids).
    pub(crate) direct_calls: u32,
    /// The call ids the gateway saw in this attempt; a second call under one
    /// of them is refused.
    pub(crate) call_ids: std::collections::HashSet<String>,
    /// The keys `effect` / `idempotent_effect` used in this attempt; a second
    /// call under one of them is refused.
    pub(crate) effect_keys: std::collections::HashSet<String>,
    /// `sleep` / `sleep_until` calls so far in this attempt (each has its own timer).
    pub(crate) sleeps: u32,
    /// `subgraph` calls so far in this attempt (each has its own child thread).
    pub(crate) subgraph_calls: u32,
    /// The resume value was given to a waiting child or to `interrupt`: a node
    /// run gets it once.
    pub(crate) resume_taken: bool,
    /// A child subgraph was resumed with the resume value: it took it durably, in its own
    /// thread, whatever becomes of this attempt.
    pub(crate) child_took_resume: bool,
    /// The journaled call that just ended ran, but its result cannot be journaled: its *started*
    /// marker is not closed as "ended with an error" (which would let it run again); the marker
    /// put in its result's place, if it could be written, says it ran.
    pub(crate) ran_unrecorded: bool,
    /// The journaled call that just ended returned an error, and its *started* marker was closed
    /// as "ended with an error": the call is known to have failed (not cut off).
    pub(crate) ended_with_error: bool,
    /// The journaled call that just ended was sent and no answer came back
    /// ([`ToolError::OutcomeUnknown`](crate::tool::ToolError::OutcomeUnknown)): its *started*
    /// marker stays open and a human settles it, as for a call cut off by a crash.
    pub(crate) outcome_unknown: bool,
    /// `Ctx::chat` calls so far in this attempt (a crash test names each by its place).
    pub(crate) model_calls: u32,
    /// The resume value was refused in this attempt: it did not decode as the type
    /// `interrupt` asked for (here, or in the subgraph child it was handed to, which still waits
    /// for a value where it asked). The attempt's failure is one a person fixes by answering
    /// again, not a failure for good.
    pub(crate) refused_resume: bool,
    /// The value `interrupt` returned in this attempt. If the attempt then
    /// pauses for something else (its subgraph's question, an approval, a
    /// timer), it is kept with the pause: the node's re-run gets it back.
    pub(crate) answered: Option<serde_json::Value>,
}

/// The value a node's own `interrupt` returned in a step that then paused for
/// something else: the re-run of that node in the same step gets the same value
/// back, instead of asking again or taking the resume value meant for what
/// paused it. Kept with the paused checkpoint: a later step asks anew, and so
/// does the re-run after [`App::update_state`](crate::App::update_state) (the
/// question was about a state a person has since changed) or when the answer no
/// longer decodes as the node expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeptAnswer {
    /// The node that asked.
    pub(crate) node: String,
    /// The map worker instance that asked, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) instance: Option<u32>,
    /// What its `interrupt` returned.
    pub(crate) value: serde_json::Value,
    /// Kept at another checkpoint (carried over by a manual update): not given
    /// back; the node asks anew.
    #[serde(skip)]
    pub(crate) stale: bool,
}

/// The kept answers as stored, with the checkpoint they were kept at: a copy of
/// them carried to a new checkpoint by a manual update is not used there.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KeptAnswers<A> {
    pub(crate) seq: u64,
    pub(crate) answers: A,
}
