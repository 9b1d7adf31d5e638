//! What a crash test watches inside the runs: the model calls (recorded in the uncut run,
//! replayed by place in the cut ones) and the ledger of journaled calls whose bodies ran.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::model::{ChatReply, ModelError};
use crate::probe::{CallSite, Probe};

/// A model call's place without its attempt and call number: the write that records it.
pub(crate) type NodeRun = (String, u64, String, Option<u32>);

fn node_run(site: &CallSite) -> NodeRun {
    (site.thread.clone(), site.seq, site.node.clone(), site.instance)
}

/// The replies the uncut run got, by place, in order.
pub(crate) type Script = BTreeMap<CallSite, Vec<Result<ChatReply, ModelError>>>;

#[derive(Default)]
struct Seen {
    /// Model calls per node run, this phase.
    calls: BTreeMap<NodeRun, u32>,
    /// Calls at each exact place, this phase (which recorded reply comes next).
    at: BTreeMap<CallSite, usize>,
    /// Bodies run per idempotency key, with whether a re-run is allowed.
    bodies: BTreeMap<String, (u32, bool)>,
}

/// Records (the uncut run) or replays (a cut run and its resume) model replies, and counts
/// what ran. See the module docs.
pub(crate) struct Recorder {
    script: Option<Script>,
    recorded: Mutex<Script>,
    seen: Mutex<Seen>,
}

/// What one phase of a run made: model calls per node run, bodies run per key.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) calls: BTreeMap<NodeRun, u32>,
    pub(crate) bodies: BTreeMap<String, (u32, bool)>,
}

impl Recorder {
    /// A recorder for the uncut run: it asks the models and records their replies.
    pub(crate) fn recording() -> Self {
        Recorder { script: None, recorded: Mutex::default(), seen: Mutex::default() }
    }

    /// A recorder that serves `script` by place and never asks a model.
    pub(crate) fn replaying(script: Script) -> Self {
        Recorder { script: Some(script), recorded: Mutex::default(), seen: Mutex::default() }
    }

    /// The replies recorded, by place.
    pub(crate) fn script(&self) -> Script {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// What ran so far; starts a new phase (the counts of the next start at zero).
    pub(crate) fn take_tally(&self) -> Tally {
        let seen = std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner));
        Tally { calls: seen.calls, bodies: seen.bodies }
    }
}

impl Probe for Recorder {
    fn model_call(&self, site: &CallSite) -> Option<Result<ChatReply, ModelError>> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        *seen.calls.entry(node_run(site)).or_insert(0) += 1;
        let script = self.script.as_ref()?;
        let at = seen.at.entry(site.clone()).or_insert(0);
        let reply = match script.get(site) {
            // A node run again in this phase (after its `interrupt` was answered) gets the
            // replies the uncut run got there in turn; past them, the last again.
            Some(replies) => replies.get(*at).or(replies.last()).cloned(),
            None => None,
        };
        *at += 1;
        Some(reply.unwrap_or_else(|| {
            Err(ModelError::Config(format!(
                "crash test: node `{}` asked a model at a place the uncut run never did (checkpoint {}, \
                 attempt {}, call {}); the graph does not run the same way twice",
                site.node, site.seq, site.attempt, site.call
            )))
        }))
    }

    fn model_reply(&self, site: &CallSite, reply: &Result<ChatReply, ModelError>) {
        if self.script.is_none() {
            let mut recorded = self.recorded.lock().unwrap_or_else(PoisonError::into_inner);
            recorded.entry(site.clone()).or_default().push(reply.clone());
        }
    }

    fn body_runs(&self, idempotency_key: &str, rerunnable: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = seen.bodies.entry(idempotency_key.to_string()).or_insert((0, rerunnable));
        entry.0 += 1;
    }
}
