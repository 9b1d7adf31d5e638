//! [`Multitask`]: what a follow-up run of a thread does about the run the thread has in the
//! queue.

#[cfg(doc)]
use crate::app::App;
#[cfg(doc)]
use crate::app::WorkerError;

/// What a follow-up run does about the run its thread has in the queue (running, or waiting for
/// a person or its timer): the `multitask_strategy` of the server's `POST /api/threads`. A thread
/// with no run in the queue takes the follow-up at once, whatever the strategy (but `reject`
/// also refuses a thread that runs or waits outside the queue, and `enqueue` waits behind a
/// thread that waits outside it until its run ended).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Multitask {
    /// Refuse the follow-up ([`WorkerError::FollowUpRefused`]; HTTP 409).
    Reject,
    /// Queue it after the run, and after the thread's other follow-ups.
    #[default]
    Enqueue,
    /// Cancel the run (the cancel reaches a running node, as [`App::cancel_run`]'s does; the run
    /// ends `cancelled`) and run the follow-up next: after the `interrupt` and `rollback`
    /// follow-ups submitted before it, in the order they came, and before the `enqueue` ones.
    Interrupt,
    /// As `Interrupt`, and the follow-up's input applies to the state the run it replaces
    /// started from: the thread goes back to that checkpoint first (a new checkpoint: the
    /// replaced run stays in the history, and a `thread.rolled_back` audit entry names both).
    /// The run replaced is decided when a worker claims the follow-up: the earliest run started
    /// since it was submitted, so a newer rollback that runs after an older one replaces the
    /// older one's run too.
    Rollback,
}

impl Multitask {
    /// Every strategy, in declaration order.
    pub const ALL: [Multitask; 4] = [Multitask::Reject, Multitask::Enqueue, Multitask::Interrupt, Multitask::Rollback];

    /// The name the server's API uses: `reject`, `enqueue`, `interrupt`, `rollback`.
    pub fn as_str(self) -> &'static str {
        match self {
            Multitask::Reject => "reject",
            Multitask::Enqueue => "enqueue",
            Multitask::Interrupt => "interrupt",
            Multitask::Rollback => "rollback",
        }
    }

    /// The strategy named `name` (as [`Multitask::as_str`] spells it), if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Multitask::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Whether the strategy cancels the thread's run in the queue.
    pub(crate) fn cancels(self) -> bool {
        matches!(self, Multitask::Interrupt | Multitask::Rollback)
    }
}

impl std::fmt::Display for Multitask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
