//! Durable timers: a node waits with [`Ctx::sleep`](crate::Ctx::sleep) /
//! [`Ctx::sleep_until`](crate::Ctx::sleep_until) without holding anything in
//! memory, and a [`Scheduler`] resumes the thread when it is due.
//!
//! A sleeping run ends as [`Outcome::Sleeping`](crate::Outcome::Sleeping); the thread's status is
//! `sleeping` and its wake time is the thread's timer in the store, indexed
//! by due time ([`Store::due_timers`](crate::Store::due_timers)). The timer is written in the same
//! transaction as the status and cleared by the thread's next commit, so a
//! thread that moved on never fires again.
//!
//! The scheduler is a small loop over that index: every due thread is
//! resumed (through its lease, so one executor runs it) and the sleeping
//! nodes run again from their start, their `sleep` returning at once.
//! Timers survive restarts: a scheduler started on a store with overdue
//! timers fires them at once.
//!
//! Approval timeouts use the same timers: a thread paused only for
//! approvals (and timers) gets a timer at the first approval's expiry. When
//! it fires, the paused node runs again, the gateway expires the approval,
//! and the call resolves as an observation with code `APPROVAL_EXPIRED`
//! ([`Code::ApprovalExpired`](crate::tool::Code::ApprovalExpired)): the
//! node routes on it (escalate, remind, auto-reject) or the model sees it.

pub use crate::app::scheduler::{Scheduler, SchedulerConfig, Woken, WokenStream};
pub use crate::durable::wake::now_ms;
