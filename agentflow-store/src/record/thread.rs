//! A thread's record and where its run stands ([`ThreadStatus`]).

use serde::{Deserialize, Serialize};

use crate::codec::{Dec, DecodeResult, Enc};
use crate::record::lease::Lease;
use crate::record::payload::RECORD_VERSION;

/// Where a thread's run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ThreadStatus {
    /// An executor is running (or was running when it crashed).
    Running,
    /// Paused for a human or a breakpoint; can be resumed.
    Interrupted,
    /// Reached `END`.
    Completed,
    /// Stopped by a fatal error.
    Failed,
    /// Cancelled from outside.
    Cancelled,
    /// Stopped by a budget (steps, calls, tokens, deadline).
    BudgetExhausted,
    /// Undoing the completed calls of a run that stopped (saga compensation); a resume continues
    /// the compensation, never the graph. Also the status of a compensation that failed and waits
    /// for a human.
    Compensating,
    /// Every completed call that names a compensation was undone.
    Compensated,
    /// Waiting on a durable timer (`cx.sleep`); its wake time is the thread's timer
    /// ([`Store::thread_timer`](crate::Store::thread_timer)). Can be resumed.
    /// (Appended last: the tags of the other statuses are stored and do not change.)
    Sleeping,
    /// Stopped at a step boundary by a pause request from any process (`App::pause_run`):
    /// nothing was undone and no timer wakes it; a resume continues with the next step.
    /// (Appended last, like `Sleeping`.)
    Paused,
    /// Its data was removed by [`Store::purge_thread`](crate::Store::purge_thread): the record
    /// stays as a tombstone (who owned it, when it ran) and its audit log keeps who did what,
    /// without details. Finished and not resumable. (Appended last, like `Sleeping`.)
    Purged,
}

impl ThreadStatus {
    /// Every status, in tag order.
    pub const ALL: [ThreadStatus; 11] = [
        ThreadStatus::Running,
        ThreadStatus::Interrupted,
        ThreadStatus::Completed,
        ThreadStatus::Failed,
        ThreadStatus::Cancelled,
        ThreadStatus::BudgetExhausted,
        ThreadStatus::Compensating,
        ThreadStatus::Compensated,
        ThreadStatus::Sleeping,
        ThreadStatus::Paused,
        ThreadStatus::Purged,
    ];

    /// Whether the run has stopped, which makes the thread eligible for compaction.
    /// `Running`, `Interrupted`, `Compensating`, `Sleeping` and `Paused` threads may still
    /// continue; of the finished ones, a resume may still run `Failed`, `Cancelled` and
    /// `BudgetExhausted` threads (see [`ThreadStatus::is_resumable`]).
    pub fn is_finished(self) -> bool {
        !matches!(
            self,
            ThreadStatus::Running
                | ThreadStatus::Interrupted
                | ThreadStatus::Compensating
                | ThreadStatus::Sleeping
                | ThreadStatus::Paused
        )
    }

    /// Whether a resume may still run the thread: every status but `Completed`,
    /// `Compensated` and `Purged`. A `Failed`, `Cancelled` or `BudgetExhausted` thread is finished (it may
    /// be compacted) and resumable at once, so [`Store::compact`](crate::Store::compact) keeps
    /// its whole effect journal.
    pub fn is_resumable(self) -> bool {
        !matches!(self, ThreadStatus::Completed | ThreadStatus::Compensated | ThreadStatus::Purged)
    }

    /// The snake_case name used in messages and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Running => "running",
            ThreadStatus::Interrupted => "interrupted",
            ThreadStatus::Completed => "completed",
            ThreadStatus::Failed => "failed",
            ThreadStatus::Cancelled => "cancelled",
            ThreadStatus::BudgetExhausted => "budget_exhausted",
            ThreadStatus::Compensating => "compensating",
            ThreadStatus::Compensated => "compensated",
            ThreadStatus::Sleeping => "sleeping",
            ThreadStatus::Paused => "paused",
            ThreadStatus::Purged => "purged",
        }
    }

    pub(super) fn tag(self) -> u8 {
        self as u8
    }

    fn from_tag(tag: u8) -> DecodeResult<Self> {
        Self::ALL.get(usize::from(tag)).copied().ok_or_else(|| format!("unknown thread status tag {tag}"))
    }
}

impl std::fmt::Display for ThreadStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One run of a graph, resumable across processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// Thread id, unique in the store.
    pub id: String,
    /// Who started the thread; knowing a thread id grants nothing by itself.
    pub owner: String,
    /// Structural fingerprint of the graph that runs the thread; resume compares it.
    pub graph_fingerprint: String,
    /// Version of the state schema the checkpoints were written with.
    pub schema_version: u32,
    /// Where the run stands.
    pub status: ThreadStatus,
    /// Free text about the status (error message, interrupt reason, exhausted budget).
    pub detail: String,
    /// Unix millis when the thread was created.
    pub created_at: u64,
    /// Unix millis of the last update.
    pub updated_at: u64,
    /// The current lease. Filled in on read; ignored on write (leases change only through the
    /// lease methods).
    pub lease: Option<Lease>,
    /// The thread whose run started this one as a subgraph child, `None` for a thread of its
    /// own. What makes a thread a child is this field, never the shape of its id: export,
    /// fork, answers and the run queue follow it from parent to child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The tenant the thread belongs to, `None` for a thread of no tenant. Fixed when the
    /// thread is created: a store keeps the tenant of the record it holds whatever a later
    /// write says, a subgraph child and a fork take their parent's, and actors see and act
    /// on the threads of the tenants they act for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The W3C `traceparent` of the thread's root span (`00-{trace id}-{span id}-{flags}`),
    /// which puts every run of the thread, in any process, in one OpenTelemetry trace. `None`
    /// for a thread created without OpenTelemetry (or before records held it) and for a
    /// subgraph child. The first trace stored wins: a store sets it only on a record that has
    /// none, a write without one never clears it, and once set it is fixed. A store keeps it
    /// as given (the runtime writes only valid ones); a purge clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl ThreadRecord {
    /// A new `Running` thread with no lease, created and updated at `now`.
    pub fn new(
        id: impl Into<String>,
        owner: impl Into<String>,
        graph_fingerprint: impl Into<String>,
        schema_version: u32,
        now: u64,
    ) -> Self {
        ThreadRecord {
            id: id.into(),
            owner: owner.into(),
            graph_fingerprint: graph_fingerprint.into(),
            schema_version,
            status: ThreadStatus::Running,
            detail: String::new(),
            created_at: now,
            updated_at: now,
            lease: None,
            parent: None,
            tenant: None,
            trace: None,
        }
    }

    /// The same record belonging to `tenant`.
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The same record carrying the W3C `traceparent` of the thread's root span (see
    /// [`trace`](Self::trace)).
    #[must_use]
    pub fn with_trace(mut self, traceparent: impl Into<String>) -> Self {
        self.trace = Some(traceparent.into());
        self
    }

    /// The same record as a subgraph child of thread `parent`.
    pub fn child_of(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Why this record's [`parent`](Self::parent) cannot be stored, if it cannot: a child's id
    /// extends its parent's (`{parent}/` and at least one more character), so every thread's
    /// chain of parents is finite and every reader walks it the same way.
    pub(crate) fn parent_problem(&self) -> Option<String> {
        let parent = self.parent.as_deref()?;
        let extends =
            self.id.strip_prefix(parent).and_then(|rest| rest.strip_prefix('/')).is_some_and(|l| !l.is_empty());
        (parent.is_empty() || !extends).then(|| {
            format!(
                "its parent `{parent}` is not a prefix of its id: a subgraph child's id is its parent's id, `/` and \
                 its own level"
            )
        })
    }

    /// The parent that a thread record written before records named their parent is given:
    /// the id up to its last `/` when the part after it has the shape of a subgraph child's
    /// level, `{node}[.{instance}].{seq}.{index}.{subgraph}` (how children were told apart
    /// then). Only for data of that time (an older store file, schema or export); a record
    /// written now says what it is. A child of that time whose node or graph name was no Rust
    /// identifier (a hand-built graph's) gets no parent: a resume of its parent refuses to take
    /// it for the child.
    pub fn legacy_parent(id: &str) -> Option<&str> {
        let (parent, level) = id.rsplit_once('/')?;
        (!parent.is_empty() && is_child_level(level)).then_some(parent)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        self.encode_kept(self.tenant.as_deref(), self.trace.as_deref())
    }

    /// The record encoded with `tenant` and `trace` in place of its own: a store writing a
    /// thread it holds already keeps the tenant the thread was created with and the first
    /// trace stored.
    pub(crate) fn encode_kept(&self, tenant: Option<&str>, trace: Option<&str>) -> Vec<u8> {
        let mut e = self.encode_fields();
        e.opt_str(tenant).opt_str(trace);
        e.finish()
    }

    /// The record as store format 7 and older wrote it, without the trace context.
    #[cfg(test)]
    pub(crate) fn encode_format_7(&self) -> Vec<u8> {
        let mut e = self.encode_fields();
        e.opt_str(self.tenant.as_deref());
        e.finish()
    }

    /// The record as store format 5 and older wrote it, without the tenant.
    pub(crate) fn encode_format_5(&self) -> Vec<u8> {
        self.encode_fields().finish()
    }

    fn encode_fields(&self) -> Enc {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.id)
            .str(&self.owner)
            .str(&self.graph_fingerprint)
            .u32(self.schema_version)
            .u8(self.status.tag())
            .str(&self.detail)
            .u64(self.created_at)
            .u64(self.updated_at)
            .opt_str(self.parent.as_deref());
        e
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let record = ThreadRecord {
            id: d.str("id")?,
            owner: d.str("owner")?,
            graph_fingerprint: d.str("graph_fingerprint")?,
            schema_version: d.u32("schema_version")?,
            status: ThreadStatus::from_tag(d.u8("status")?)?,
            detail: d.str("detail")?,
            created_at: d.u64("created_at")?,
            updated_at: d.u64("updated_at")?,
            lease: None,
            parent: None,
            tenant: None,
            trace: None,
        };
        // A record of store format 3 ends here, without its parent: it gets the one its id's
        // shape gave it then.
        let parent =
            if d.at_end() { Self::legacy_parent(&record.id).map(str::to_string) } else { d.opt_str("parent")? };
        // A record of store format 5 or older ends here, without its tenant: it has none.
        let tenant = if d.at_end() { None } else { d.opt_str("tenant")? };
        // A record of store format 7 or older ends here, without its trace context: it has none.
        let trace = if d.at_end() { None } else { d.opt_str("trace")? };
        d.end()?;
        Ok(ThreadRecord { parent, tenant, trace, ..record })
    }
}

/// One level of a subgraph child's id as [`Ctx::subgraph`] named them:
/// `{node}[.{instance}].{seq}.{index}.{subgraph}`.
///
/// [`Ctx::subgraph`]: https://docs.rs/agentflow/latest/agentflow/struct.Ctx.html#method.subgraph
fn is_child_level(level: &str) -> bool {
    // Node and graph names are Rust identifiers (`r#type` included); `.` and `/` never occur in one.
    let ident = |s: &str| !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit());
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = level.split('.').collect();
    match parts.as_slice() {
        [node, seq, index, name] => ident(node) && number(seq) && number(index) && ident(name),
        [node, instance, seq, index, name] => {
            ident(node) && number(instance) && number(seq) && number(index) && ident(name)
        }
        _ => false,
    }
}
