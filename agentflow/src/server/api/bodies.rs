//! The JSON bodies of the API, requests and answers; their JSON schemas are the OpenAPI
//! document's `components/schemas`.

use agentflow_store::{ApprovalRecord, CheckpointSummary, QueuedRun, ThreadRecord};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::app::Multitask;
use crate::interrupt::{Pending, PendingKind};

/// Starts a thread: a run of a hosted graph from an input, queued for the server's workers.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRun {
    /// The hosted graph to run, by name (as `GET /api/graphs` lists them).
    pub(crate) graph: String,
    /// The graph's state to start from, as a JSON object of its fields.
    pub(crate) input: Value,
    /// The new thread's id (default: a new random id, which the answer gives). Thread ids are
    /// shared by all tenants of a store, so only a caller acting for every tenant may choose one
    /// (give ids that reveal nothing); for a caller of some tenants only the server names the
    /// thread, and a `thread` is refused (422 `thread_id_not_allowed`).
    #[serde(default)]
    pub(crate) thread: Option<String>,
    /// The tenant the thread belongs to, fixed from then on (default: the caller's tenant when
    /// the caller acts for exactly one, else none).
    #[serde(default)]
    pub(crate) tenant: Option<String>,
    /// Answer once the run parks (waits for a person or its timer) or ends, or `wait_ms` passed,
    /// instead of at once.
    #[serde(default)]
    pub(crate) wait: bool,
    /// How long `wait` waits, in milliseconds (default 30000, at most 300000).
    #[serde(default)]
    pub(crate) wait_ms: Option<u64>,
    /// With `thread` naming a thread that exists: a follow-up run of it, `input` then being an
    /// update of its state (some of its fields, through their reducers), run from the graph's
    /// start node. What it does about a run the thread has in the queue (running, or waiting for
    /// a person or its timer): `enqueue` (the default) runs it after that run, `reject` refuses
    /// it (409), `interrupt` cancels that run and runs it next, `rollback` does too, on the state
    /// the cancelled run started from. Without a run in the queue, it is queued at once.
    #[serde(default)]
    pub(crate) multitask_strategy: Option<Multitask>,
    /// A URL told when the run first stops (ends, or waits for a person or its timer): a signed
    /// `POST` of the thread's status and state. Only URLs under the prefixes the server's
    /// operator allows are taken (422 `webhook_not_allowed` names them).
    #[serde(default)]
    pub(crate) webhook: Option<String>,
}

/// Resumes a thread through the run queue, answering the question it waits on first when a
/// value is given.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeRun {
    /// The answer to the question the thread waits on (`cx.interrupt`); recorded in the caller's
    /// name, and given with `question`. `null` or absent: no answer, the thread is queued to
    /// resume as it is.
    #[serde(default)]
    pub(crate) value: Option<Value>,
    /// The id of the question answered (`question` of `GET /api/threads/{thread}/pending`):
    /// required with a `value` (422 `question_required` without it), so that an answer goes to
    /// the question the person saw. The answer is refused (409) if the thread asks another
    /// question by then.
    #[serde(default)]
    pub(crate) question: Option<String>,
    /// Answer once the run parks or ends, or `wait_ms` passed, instead of at once.
    #[serde(default)]
    pub(crate) wait: bool,
    /// How long `wait` waits, in milliseconds (default 30000, at most 300000).
    #[serde(default)]
    pub(crate) wait_ms: Option<u64>,
}

/// Approves a call as requested.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Approve {
    /// Conditions attached to the approval (any JSON), recorded and handed to the model with
    /// the tool's result.
    #[serde(default)]
    pub(crate) conditions: Option<Value>,
}

/// Rejects a call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reject {
    /// Why: handed to the model (or ends the run, as the graph's `on_reject` says). Not empty.
    pub(crate) reason: String,
}

/// Approves a call with other arguments, checked against the tool's schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Edit {
    /// The arguments the tool runs with instead.
    pub(crate) args: Value,
}

/// A graph the server hosts.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct GraphView {
    /// Its name: what `POST /api/threads` names it by.
    pub(crate) name: String,
    /// The fingerprint of its wiring, as threads record it.
    pub(crate) fingerprint: String,
    /// Its description: nodes, state fields, tools and their JSON schemas, a mermaid drawing.
    pub(crate) description: Value,
}

/// A thread, as its record says.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ThreadView {
    /// The thread's id.
    pub(crate) id: String,
    /// The name of its graph, when the store describes it.
    pub(crate) graph: Option<String>,
    /// The fingerprint of its graph.
    pub(crate) fingerprint: String,
    /// Who it belongs to (who started it).
    pub(crate) owner: String,
    /// `running`, `interrupted` (waits for a person), `sleeping` (waits for its timer), `paused`,
    /// `completed`, `failed`, `cancelled`, `budget_exhausted`, `compensating`, `compensated`,
    /// `purged`.
    pub(crate) status: String,
    /// What its status says more, if anything (a failure's reason).
    pub(crate) detail: String,
    /// Its tenant, if any.
    pub(crate) tenant: Option<String>,
    /// The thread that ran it as a subgraph, if any.
    pub(crate) parent: Option<String>,
    /// When it was created (unix milliseconds).
    pub(crate) created_at: u64,
    /// When it last changed (unix milliseconds).
    pub(crate) updated_at: u64,
    /// Its run in the run queue, while it has one.
    pub(crate) run: Option<QueuedView>,
    /// Its follow-up runs (`GET /api/threads/{thread}` only): how many wait behind its run, and
    /// the last one that could not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) follow_ups: Option<FollowUpsView>,
}

/// A thread's follow-up runs.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct FollowUpsView {
    /// How many wait behind the thread's run.
    pub(crate) waiting: usize,
    /// The last follow-up that left the queue without running (its `run.follow_up_failed` audit
    /// entry), if one did.
    pub(crate) last_failed: Option<FailedFollowUpView>,
}

/// A follow-up run that could not run.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct FailedFollowUpView {
    /// When the worker that claimed it gave it up (unix milliseconds).
    pub(crate) at: u64,
    /// Why.
    pub(crate) reason: String,
}

/// A thread's run in the run queue.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct QueuedView {
    /// What it waits for before a worker claims it: `ready` (nothing: queued or running),
    /// `approval`, `timer`, `answer`, `held` (behind a thread that waits outside the queue, with
    /// follow-up runs behind it: until a resume or the thread's run ends).
    pub(crate) wait: String,
    /// A stop asked for and not yet acted on: `cancel` or `pause`.
    pub(crate) control: Option<String>,
    /// The worker that claimed it last.
    pub(crate) worker: Option<String>,
    /// When that worker last reported it alive (unix milliseconds).
    pub(crate) heartbeat_at: Option<u64>,
}

/// What a thread waits for: one item of a paused step.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct PendingView {
    /// The node that paused.
    pub(crate) node: String,
    /// The map instance of the node that paused, if it runs as several.
    pub(crate) instance: Option<u32>,
    /// `interrupt` (a question: resume with a value), `approval`, `before` or `after` (a
    /// breakpoint), `sleep`, ...
    pub(crate) kind: String,
    /// What the node handed to the person.
    pub(crate) payload: Value,
    /// For a question: its id, what `POST /api/threads/{thread}/resume` names in `question`.
    pub(crate) question: Option<String>,
}

/// The state of a thread at its latest checkpoint.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StateView {
    /// The thread.
    pub(crate) thread: String,
    /// The latest checkpoint, if the thread has one yet.
    pub(crate) seq: Option<u64>,
    /// The state, as JSON. Fields the graph marks personal read `•••` unless the caller may see
    /// personal data (that read is audited); fields marked credential always do.
    pub(crate) state: Value,
    /// The nodes that run next.
    pub(crate) next: Vec<String>,
    /// What could not be shown exactly (a custom reducer of a graph this server does not host).
    pub(crate) warnings: Vec<String>,
    /// What the thread waits for.
    pub(crate) pending: Vec<PendingView>,
}

/// One checkpoint of a thread's history.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct HistoryEntry {
    /// Its sequence number.
    pub(crate) seq: u64,
    /// The checkpoint it follows (a fork's is older than the one before it).
    pub(crate) parent: Option<u64>,
    /// The super-step.
    pub(crate) step: u64,
    /// What wrote it: `input`, `loop` (a step), `update_state`, `fork`.
    pub(crate) source: String,
    /// The nodes that ran in the step.
    pub(crate) nodes: Vec<String>,
    /// The nodes that run next.
    pub(crate) next: Vec<String>,
    /// When it was written (unix milliseconds).
    pub(crate) at_ms: u64,
}

/// An approval record.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ApprovalView {
    /// Its id: what the decision routes name.
    pub(crate) id: String,
    /// The thread that asked.
    pub(crate) thread: String,
    /// The node that made the call.
    pub(crate) node: String,
    /// The tool.
    pub(crate) tool: String,
    /// The arguments, as canonical JSON text.
    pub(crate) args: String,
    /// The arguments, as JSON.
    pub(crate) arguments: Value,
    /// The risk class of the tool.
    pub(crate) risk: String,
    /// Who asked (the thread's owner).
    pub(crate) requester: String,
    /// Why a person must decide.
    pub(crate) reason: String,
    /// `PENDING`, `APPROVED`, `REJECTED`, `EXPIRED`, `CANCELLED`, `EXECUTING`, `SUCCEEDED`,
    /// `FAILED`, `OUTCOME_UNKNOWN`.
    pub(crate) status: String,
    /// Whether it waits for a person (`PENDING` or `OUTCOME_UNKNOWN`).
    pub(crate) waiting: bool,
    /// When it was asked for (unix milliseconds).
    pub(crate) created_at: u64,
    /// When it can no longer be used (unix milliseconds).
    pub(crate) expires_at: u64,
    /// Who decided, once decided.
    pub(crate) decided_by: Option<String>,
    /// The decider's note (a rejection's reason, an edit's change).
    pub(crate) decision_note: Option<String>,
    /// Conditions attached to an approval.
    pub(crate) conditions: Option<Value>,
    /// When it last changed (unix milliseconds).
    pub(crate) updated_at: u64,
}

/// A question or breakpoint a thread waits on, in the list of everything waiting for a person.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct InterruptView {
    /// The thread to answer.
    pub(crate) thread: String,
    /// The checkpoint it waits at.
    pub(crate) seq: Option<u64>,
    /// Since when (unix milliseconds).
    pub(crate) since: u64,
    /// What it waits on.
    #[serde(flatten)]
    pub(crate) pending: PendingView,
}

/// Everything waiting for a person, of the caller's tenants.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Waiting {
    /// Approvals to decide and unknown outcomes to settle.
    pub(crate) approvals: Vec<ApprovalView>,
    /// Questions to answer and breakpoints to resume.
    pub(crate) interrupts: Vec<InterruptView>,
}

/// What one thread waits on.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ThreadWaits {
    /// The thread.
    pub(crate) thread: String,
    /// Its status.
    pub(crate) status: String,
    /// The checkpoint it waits at.
    pub(crate) seq: Option<u64>,
    /// The questions, breakpoints, approvals and timers its step waits on.
    pub(crate) pending: Vec<PendingView>,
    /// Its approvals that wait for a person.
    pub(crate) approvals: Vec<ApprovalView>,
}

/// A run: queued (202), or where it stands after waiting (200 once it parks or ends).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunView {
    /// The thread.
    pub(crate) thread: String,
    /// `queued` or `running` while its run is in the queue's hands (`behind` for a follow-up run
    /// waiting behind the thread's run); `not_started` when the run
    /// left the queue without creating the thread (it could not be run: `detail` says where to
    /// look); else the thread's status (`interrupted`, `sleeping`, `completed`, `failed`, ...).
    pub(crate) status: String,
    /// Whether the run stopped: it parked (waits for a person or its timer) or ended.
    pub(crate) stopped: bool,
    /// What the thread's status says more (a failure's reason).
    pub(crate) detail: Option<String>,
    /// The state at the latest checkpoint, once the run stopped (masked as `StateView`'s).
    pub(crate) state: Option<Value>,
    /// What the thread waits for, once the run stopped.
    pub(crate) pending: Vec<PendingView>,
    /// The thread's approvals waiting for a person, once the run stopped.
    pub(crate) approvals: Vec<ApprovalView>,
    /// For a follow-up run queued behind the thread's run (status `behind`): how many other
    /// follow-ups run before it.
    pub(crate) ahead: Option<usize>,
}

/// The answer to a cancel request.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Cancelled {
    /// Whether a queued or running run was asked to stop (`false`: the thread had none).
    pub(crate) cancelled: bool,
}

/// The answer to a pause request.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Paused {
    /// Whether a queued or running run was asked to pause (`false`: the thread had none).
    pub(crate) paused: bool,
}

/// A refusal or failure.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    pub(crate) error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ErrorDetail {
    /// A stable snake_case code: `bad_request` (400), `unauthorized` (401), `forbidden` and
    /// `csrf` (403: a session's request without its CSRF token), `not_found` (404),
    /// `method_not_allowed` (405), `conflict`, `graph_not_hosted` (409: a resume of a thread
    /// whose graph the server does not host) and `follow_up_refused` (409: a follow-up run with
    /// strategy `reject` while its thread has a run) and `thread_purged` (409: a follow-up run of
    /// a purged thread), `payload_too_large` (413), `unprocessable`,
    /// `thread_id_not_allowed` (a caller of some tenants naming a new thread),
    /// `question_required` (an answer without its question's id), `idempotency_key_reused`
    /// (a start's `Idempotency-Key` sent with another request), `idempotency_key_not_supported`
    /// (a follow-up run sent with one) and `webhook_not_allowed` (a webhook URL outside the
    /// operator's prefixes) (422), `too_many_attempts` and
    /// `too_many_streams` (429), `internal` (500), `store_unavailable` (503).
    pub(crate) code: String,
    /// What went wrong and what to do.
    pub(crate) message: String,
}

/// The name a pending item's kind has in JSON (`interrupt`, `approval`, ..).
pub(crate) fn kind_name(kind: PendingKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{kind:?}").to_lowercase())
}

impl From<&Pending> for PendingView {
    fn from(p: &Pending) -> Self {
        PendingView {
            node: p.node.clone(),
            instance: p.instance,
            kind: kind_name(p.kind),
            payload: p.payload.clone(),
            question: (p.kind == PendingKind::Interrupt).then(|| p.question_id()),
        }
    }
}

impl From<&ApprovalRecord> for ApprovalView {
    fn from(a: &ApprovalRecord) -> Self {
        ApprovalView {
            id: a.id.clone(),
            thread: a.thread.clone(),
            node: a.node.clone(),
            tool: a.tool.clone(),
            arguments: serde_json::from_str(&a.args).unwrap_or_else(|_| Value::String(a.args.clone())),
            args: a.args.clone(),
            risk: a.risk.clone(),
            requester: a.requester.clone(),
            reason: a.reason.clone(),
            status: a.status.as_str().to_string(),
            waiting: a.status.is_waiting(),
            created_at: a.created_at,
            expires_at: a.expires_at,
            decided_by: a.decided_by.clone(),
            decision_note: a.decision_note.clone(),
            conditions: a.conditions.clone(),
            updated_at: a.updated_at,
        }
    }
}

impl From<&CheckpointSummary> for HistoryEntry {
    fn from(c: &CheckpointSummary) -> Self {
        HistoryEntry {
            seq: c.seq,
            parent: c.parent,
            step: c.metadata.step,
            source: serde_json::to_value(c.metadata.source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| format!("{:?}", c.metadata.source).to_lowercase()),
            nodes: c.metadata.nodes.clone(),
            next: c.cursor.clone(),
            at_ms: c.created_at,
        }
    }
}

impl From<&QueuedRun> for QueuedView {
    fn from(r: &QueuedRun) -> Self {
        QueuedView {
            wait: r.wait.as_str().to_lowercase(),
            control: r.control.map(|c| c.as_str().to_lowercase()),
            worker: r.holder.clone(),
            heartbeat_at: r.heartbeat_at,
        }
    }
}

impl ThreadView {
    /// The view of `t`, whose graph is named `graph`, with its queued run if any.
    pub(crate) fn new(t: &ThreadRecord, graph: Option<String>, run: Option<&QueuedRun>) -> Self {
        ThreadView {
            id: t.id.clone(),
            graph,
            fingerprint: t.graph_fingerprint.clone(),
            owner: t.owner.clone(),
            status: t.status.as_str().to_string(),
            detail: t.detail.clone(),
            tenant: t.tenant.clone(),
            parent: t.parent.clone(),
            created_at: t.created_at,
            updated_at: t.updated_at,
            run: run.map(QueuedView::from),
            follow_ups: None,
        }
    }
}
