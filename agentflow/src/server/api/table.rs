//! The API's one route table: what the router registers and what the OpenAPI document
//! describes, each route with its method, path, operation ([`Operation`], checked for the
//! caller), body, answers and errors.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use super::bodies::{
    ApprovalView, Approve, Cancelled, Edit, GraphView, HistoryEntry, Paused, Reject, ResumeRun, RunView, StartRun,
    StateView, ThreadView, ThreadWaits, Waiting,
};
use crate::access::Operation;

/// An HTTP method the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Verb {
    /// `GET` (and `HEAD`): reads.
    Get,
    /// `POST`: actions.
    Post,
}

impl Verb {
    /// The method's name.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
        }
    }
}

/// The handler a route runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    OpenApi,
    ListGraphs,
    GetGraph,
    ListThreads,
    StartRun,
    GetThread,
    GetState,
    GetHistory,
    GetPending,
    ListApprovals,
    Resume,
    Approve,
    Reject,
    Edit,
    Cancel,
    Pause,
}

/// A function adding a type's JSON schema to the document's components, giving its `$ref`.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The `$ref` of `T`'s schema, added to the generator's components.
fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// A successful answer of a route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reply {
    /// The status.
    pub(crate) status: u16,
    /// When it is given.
    pub(crate) description: &'static str,
    /// Its body's schema.
    pub(crate) body: SchemaFn,
}

/// A route's request body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    /// Its schema.
    pub(crate) body: SchemaFn,
    /// Whether it must be sent (else an empty body is the defaults).
    pub(crate) required: bool,
}

/// One route of the API.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route {
    /// Its method.
    pub(crate) verb: Verb,
    /// Its path, with `{parameters}` (axum's syntax and OpenAPI's alike).
    pub(crate) path: &'static str,
    /// What runs.
    pub(crate) endpoint: Endpoint,
    /// The operation checked for the caller; `None`: no login (the OpenAPI document).
    pub(crate) operation: Option<Operation>,
    /// The OpenAPI `operationId`.
    pub(crate) id: &'static str,
    /// One line.
    pub(crate) summary: &'static str,
    /// More, with the operations it needs besides its own.
    pub(crate) description: &'static str,
    /// Its request body, if it takes one.
    pub(crate) request: Option<Request>,
    /// Its successful answers.
    pub(crate) replies: &'static [Reply],
    /// The error statuses it may answer with (`{"error": ...}` bodies), besides those the
    /// document adds by the route's kind ([`errors`](super::spec::errors): 400 for a bad address,
    /// 401 and 429 for a caller, 404, 405 and 500 everywhere).
    pub(crate) errors: &'static [u16],
}

/// Any JSON.
fn any_json(_: &mut SchemaGenerator) -> Schema {
    Schema::from(true)
}

/// A list of `T`.
fn list<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<Vec<T>>()
}

const READ_ERRORS: &[u16] = &[401, 403, 404, 503];
const LIST_ERRORS: &[u16] = &[401, 403, 503];
const ACT_ERRORS: &[u16] = &[400, 401, 403, 404, 409, 413, 422, 503];

/// Every route of the API, in the order the OpenAPI document lists them.
pub(crate) const TABLE: &[Route] = &[
    Route {
        verb: Verb::Get,
        path: "/openapi.json",
        endpoint: Endpoint::OpenApi,
        operation: None,
        id: "getOpenApi",
        summary: "This OpenAPI document",
        description: "Needs no login.",
        request: None,
        replies: &[Reply { status: 200, description: "The OpenAPI 3.1 document of the API.", body: any_json }],
        errors: &[],
    },
    Route {
        verb: Verb::Get,
        path: "/api/graphs",
        endpoint: Endpoint::ListGraphs,
        operation: Some(Operation::List),
        id: "listGraphs",
        summary: "The graphs this server hosts",
        description: "Each with its name (what a new thread names), fingerprint and description. Needs `list`.",
        request: None,
        replies: &[Reply { status: 200, description: "The hosted graphs, by name.", body: list::<GraphView> }],
        errors: LIST_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/graphs/{graph}",
        endpoint: Endpoint::GetGraph,
        operation: Some(Operation::List),
        id: "getGraph",
        summary: "A graph's description",
        description: "A hosted graph by name, or the description the store keeps under a fingerprint (a graph a \
                      thread ran with). Needs `list`.",
        request: None,
        replies: &[Reply { status: 200, description: "The graph's description.", body: any_json }],
        errors: READ_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads",
        endpoint: Endpoint::ListThreads,
        operation: Some(Operation::List),
        id: "listThreads",
        summary: "The threads of the caller's tenants",
        description: "The most recently changed first. Needs `list`.",
        request: None,
        replies: &[Reply { status: 200, description: "The threads.", body: list::<ThreadView> }],
        errors: LIST_ERRORS,
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads",
        endpoint: Endpoint::StartRun,
        operation: Some(Operation::Start),
        id: "startThread",
        summary: "Start a thread",
        description: "Queues a run of a hosted graph from an input for the server's workers, owned by and \
                      audited as the caller (`run.submitted`). With `wait`, answers once the run parks or ends \
                      (200) or `wait_ms` passed (202); waiting needs `read_state` too. Only a caller acting for \
                      every tenant names the thread (`thread`); for others the server names it (422 \
                      `thread_id_not_allowed`). Needs `start`.",
        request: Some(Request { body: schema::<StartRun>, required: true }),
        replies: &[
            Reply {
                status: 200,
                description: "With `wait`: the run stopped (it waits for a person or its timer, or ended).",
                body: schema::<RunView>,
            },
            Reply {
                status: 202,
                description: "Queued (or, with `wait`, still in the queue's hands when `wait_ms` passed).",
                body: schema::<RunView>,
            },
        ],
        errors: ACT_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads/{thread}",
        endpoint: Endpoint::GetThread,
        operation: Some(Operation::ReadState),
        id: "getThread",
        summary: "A thread",
        description: "Its record and its run in the queue. Needs `read_state`.",
        request: None,
        replies: &[Reply { status: 200, description: "The thread.", body: schema::<ThreadView> }],
        errors: READ_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads/{thread}/state",
        endpoint: Endpoint::GetState,
        operation: Some(Operation::ReadState),
        id: "getThreadState",
        summary: "A thread's state",
        description: "At its latest checkpoint, with what it waits for. Personal fields read `•••` unless the \
                      caller has `see_personal_data` (that read is audited). Needs `read_state`.",
        request: None,
        replies: &[Reply { status: 200, description: "The state.", body: schema::<StateView> }],
        errors: READ_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads/{thread}/history",
        endpoint: Endpoint::GetHistory,
        operation: Some(Operation::ReadHistory),
        id: "getThreadHistory",
        summary: "A thread's checkpoints",
        description: "Oldest first. Needs `read_history`.",
        request: None,
        replies: &[Reply { status: 200, description: "The checkpoints.", body: list::<HistoryEntry> }],
        errors: READ_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads/{thread}/pending",
        endpoint: Endpoint::GetPending,
        operation: Some(Operation::ReadState),
        id: "getThreadPending",
        summary: "What a thread waits on",
        description: "Its questions (with the ids a resume names), breakpoints, approvals and timers. Needs \
                      `read_state`.",
        request: None,
        replies: &[Reply { status: 200, description: "What it waits on.", body: schema::<ThreadWaits> }],
        errors: READ_ERRORS,
    },
    Route {
        verb: Verb::Get,
        path: "/api/approvals",
        endpoint: Endpoint::ListApprovals,
        operation: Some(Operation::List),
        id: "listWaiting",
        summary: "Everything waiting for a person",
        description: "The approvals and questions of the caller's tenants' threads, as `agentflow pending` \
                      lists them. Needs `list`.",
        request: None,
        replies: &[Reply { status: 200, description: "What waits.", body: schema::<Waiting> }],
        errors: LIST_ERRORS,
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads/{thread}/resume",
        endpoint: Endpoint::Resume,
        operation: Some(Operation::Resume),
        id: "resumeThread",
        summary: "Resume a thread",
        description: "Answers the question `question` (its id, as `GET /api/threads/{thread}/pending` lists \
                      it; required with a value: 422 `question_required`) with `value` in the caller's name \
                      (needs `answer` too), then queues the thread for the server's workers, audited as the \
                      caller (`run.resume_requested`). A thread whose graph this server does not host, on a \
                      store file it holds, answers 409 `graph_not_hosted`. With `wait`, as for starting. Needs \
                      `resume`.",
        request: Some(Request { body: schema::<ResumeRun>, required: false }),
        replies: &[
            Reply { status: 200, description: "With `wait`: the run stopped.", body: schema::<RunView> },
            Reply {
                status: 202,
                description: "Queued (or still running when `wait_ms` passed).",
                body: schema::<RunView>,
            },
        ],
        errors: ACT_ERRORS,
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads/{thread}/approvals/{approval}/approve",
        endpoint: Endpoint::Approve,
        operation: Some(Operation::Decide),
        id: "approveCall",
        summary: "Approve a call",
        description: "In the caller's name, if the server's authorizer lets them decide its risk class (nobody \
                      approves their own request). A run a worker parked for it goes on by itself. Needs \
                      `decide`.",
        request: Some(Request { body: schema::<Approve>, required: false }),
        replies: &[Reply {
            status: 200,
            description: "The approval as decided (still `PENDING` while it needs more sign-offs).",
            body: schema::<ApprovalView>,
        }],
        errors: ACT_ERRORS,
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads/{thread}/approvals/{approval}/reject",
        endpoint: Endpoint::Reject,
        operation: Some(Operation::Decide),
        id: "rejectCall",
        summary: "Reject a call",
        description: "In the caller's name, with a reason handed to the model. Needs `decide`.",
        request: Some(Request { body: schema::<Reject>, required: true }),
        replies: &[Reply { status: 200, description: "The approval as decided.", body: schema::<ApprovalView> }],
        errors: ACT_ERRORS,
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads/{thread}/approvals/{approval}/edit",
        endpoint: Endpoint::Edit,
        operation: Some(Operation::Decide),
        id: "editCall",
        summary: "Approve a call with other arguments",
        description: "In the caller's name; the arguments are checked against the tool's schema first. Needs \
                      `decide`.",
        request: Some(Request { body: schema::<Edit>, required: true }),
        replies: &[Reply { status: 200, description: "The approval as decided.", body: schema::<ApprovalView> }],
        errors: ACT_ERRORS,
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads/{thread}/cancel",
        endpoint: Endpoint::Cancel,
        operation: Some(Operation::Cancel),
        id: "cancelThread",
        summary: "Cancel a thread's run",
        description: "Stops its queued or running run for good at its next step boundary, audited as the \
                      caller (`run.cancel_requested`). Needs `cancel`.",
        request: None,
        replies: &[Reply { status: 200, description: "Whether a run was asked to stop.", body: schema::<Cancelled> }],
        errors: &[401, 403, 404, 409, 503],
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads/{thread}/pause",
        endpoint: Endpoint::Pause,
        operation: Some(Operation::Pause),
        id: "pauseThread",
        summary: "Pause a thread's run",
        description: "Pauses its queued or running run at its next step boundary, audited as the caller \
                      (`run.pause_requested`); resume it to go on. A thread waiting for a person or its timer \
                      is not running: 409. Needs `pause`.",
        request: None,
        replies: &[Reply { status: 200, description: "Whether a run was asked to pause.", body: schema::<Paused> }],
        errors: &[401, 403, 404, 409, 503],
    },
];

/// How many routes the table has.
const COUNT: usize = TABLE.len();

/// Each route's method and path, in the table's order.
const fn pairs() -> [(&'static str, &'static str); COUNT] {
    let mut out = [("", ""); COUNT];
    let mut i = 0;
    while i < COUNT {
        out[i] = (TABLE[i].verb.as_str(), TABLE[i].path);
        i += 1;
    }
    out
}

/// Every route of the API as (method, path), paths in axum's syntax (`{thread}`): the routes the
/// server's router registers and [`spec`](super::spec) describes, in the same order.
pub const ROUTES: &[(&str, &str)] = &pairs();

/// The path parameters of `path` (`{thread}` -> `thread`).
pub(crate) fn parameters(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect()
}

/// An example value of path parameter `name`, for documents and tests.
pub(crate) fn example(name: &str) -> Value {
    Value::String(match name {
        "graph" => "refunds".to_string(),
        "approval" => "apr-1".to_string(),
        _ => "t-1".to_string(),
    })
}
