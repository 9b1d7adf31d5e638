//! `run resume|cancel|pause THREAD`: the queued-run controls, through the library's
//! [`RunControls`] (checked for the `--as` actor, audited under its name).

use std::sync::Arc;

use agentflow::{RunControls, Store, WorkerError};
use agentflow_store::QueueError;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::access::{Guard, denied, missing};
use crate::out;
use crate::{Failure, Outcome, code};

/// `run` arguments.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(subcommand)]
    pub control: Control,
}

/// What to ask of a thread's queued run.
#[derive(Subcommand, Debug, Clone)]
pub enum Control {
    /// Queue the thread to be resumed by a worker of its graph (after a pause, a cancel, a
    /// failure, an answered question).
    Resume {
        /// The thread id.
        thread: String,
    },
    /// Ask the thread's queued or running run to stop for good at its next step boundary.
    Cancel {
        /// The thread id.
        thread: String,
    },
    /// Ask the thread's queued or running run to pause at its next step boundary.
    Pause {
        /// The thread id.
        thread: String,
    },
}

impl Control {
    /// The thread and the verb said.
    fn parts(&self) -> (&str, &'static str) {
        match self {
            Control::Resume { thread } => (thread, "resume"),
            Control::Cancel { thread } => (thread, "cancel"),
            Control::Pause { thread } => (thread, "pause"),
        }
    }
}

/// A refused control as an exit code and message: not found, not queued, denied and refused
/// are 1, a store that failed 4.
pub fn failure(e: WorkerError) -> Failure {
    match e {
        WorkerError::UnknownThread { thread } => missing(&thread),
        WorkerError::Access(e) => denied(e),
        WorkerError::Queue(QueueError::Unsupported { .. }) => Failure::not_found(format!(
            "{e}; this store keeps no run queue, so its threads are resumed by the app that runs them"
        )),
        WorkerError::Queue(QueueError::AlreadyQueued { .. })
        | WorkerError::GraphUnknown { .. }
        | WorkerError::NotRunning { .. }
        | WorkerError::ValueRequired { .. } => Failure::not_found(e.to_string()),
        other => Failure::store(other),
    }
}

/// `run resume|cancel|pause`.
pub fn run(store: &Arc<dyn Store>, guard: &Guard, args: &RunArgs, as_json: bool) -> Outcome {
    let (thread, verb) = args.control.parts();
    let actor = guard.named(&format!("run {verb}"))?.id.clone();
    // The controls check the operation, and take a thread of another tenant for a missing one;
    // a run submitted for a new thread that no worker started yet has no thread record, and
    // is cancelled or paused by its queue row.
    let controls = RunControls::new(Arc::clone(store), guard.access().clone());
    let done = match &args.control {
        Control::Resume { .. } => controls.submit_resume(thread, None).map(|()| true),
        Control::Cancel { .. } => controls.cancel_run(thread),
        Control::Pause { .. } => controls.pause_run(thread),
    }
    .map_err(failure)?;
    if !done {
        return Err(Failure::new(
            code::NOT_FOUND,
            format!("thread `{thread}` has no queued or running run to {verb}; nothing was asked"),
        ));
    }
    if as_json {
        out::json(&json!({ "thread": thread, "asked": verb, "by": actor }))?;
    } else {
        match &args.control {
            Control::Resume { .. } => outln!("thread {thread} queued to be resumed by a worker (asked by {actor})")?,
            _ => outln!("asked thread {thread}'s run to {verb} at its next step boundary (asked by {actor})")?,
        }
    }
    Ok(())
}
