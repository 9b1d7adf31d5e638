//! The API's one route table: what the router registers and what the OpenAPI document
//! describes, each route with its method, path, operation ([`Operation`], checked for the
//! caller), body, answers and errors.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use super::bodies::{
    ApprovalView, Approve, Cancelled, Edit, GraphView, HistoryEntry, Paused, Reject, ResumeRun, RunView, StartRun,
    StateView, ThreadView, ThreadWaits, Waiting,
};
use super::schedules::{NewSchedule, ScheduleView, Unscheduled};
use crate::access::Operation;

/// An HTTP method the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Verb {
    /// `GET` (and `HEAD`): reads.
    Get,
    /// `POST`: actions.
    Post,
    /// `DELETE`: removals.
    Delete,
}

impl Verb {
    /// The method's name.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Delete => "DELETE",
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
    Stream,
    ListSchedules,
    CreateSchedule,
    DeleteSchedule,
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
    /// Its body's media type.
    pub(crate) media: Media,
}

/// The media type of an answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Media {
    /// `application/json`.
    Json,
    /// `text/event-stream`: server-sent events, each `data:` line a JSON document.
    EventStream,
}

impl Media {
    /// Its name.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Media::Json => "application/json",
            Media::EventStream => "text/event-stream",
        }
    }
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
    /// Its header and query parameters (its path's are read from the path).
    pub(crate) params: &'static [Param],
}

/// Where a parameter comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A request header.
    Header,
    /// The query string.
    Query,
}

/// A header or query parameter of a route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Param {
    /// Its name.
    pub(crate) name: &'static str,
    /// Where it comes.
    pub(crate) place: Place,
    /// What it does.
    pub(crate) description: &'static str,
    /// Its JSON schema type (`string`, `boolean`).
    pub(crate) kind: &'static str,
}

/// Any JSON.
fn any_json(_: &mut SchemaGenerator) -> Schema {
    Schema::from(true)
}

/// A list of `T`.
fn list<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<Vec<T>>()
}

/// The `Idempotency-Key` header of a start.
const IDEMPOTENCY_KEY: Param = Param {
    name: "Idempotency-Key",
    place: Place::Header,
    description: "1 to 200 printable ASCII characters: a start sent again with the same key (by the same caller, \
                  within 24 hours) starts nothing and answers as the first did, naming its thread; the same key \
                  with another body answers 422 `idempotency_key_reused`.",
    kind: "string",
};

/// An AG-UI event: a JSON object with its `type`.
fn ag_ui_event(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "An AG-UI event (https://docs.ag-ui.com): `RUN_STARTED`, `STEP_STARTED`, \
            `TEXT_MESSAGE_START`, `TEXT_MESSAGE_CONTENT`, `TEXT_MESSAGE_END`, `TOOL_CALL_START`, \
            `TOOL_CALL_ARGS`, `TOOL_CALL_END`, `TOOL_CALL_RESULT`, `STATE_DELTA`, `STEP_FINISHED`, \
            `STATE_SNAPSHOT`, `RUN_FINISHED`, `RUN_ERROR` or `CUSTOM` (`agentflow.interrupt`, `agentflow.gap`).",
        "required": ["type"],
        "properties": { "type": { "type": "string" }, "timestamp": { "type": "integer" } },
    })
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
        replies: &[Reply {
            status: 200,
            description: "The OpenAPI 3.1 document of the API.",
            body: any_json,
            media: Media::Json,
        }],
        errors: &[],
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "The hosted graphs, by name.",
            body: list::<GraphView>,
            media: Media::Json,
        }],
        errors: LIST_ERRORS,
        params: &[],
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
        replies: &[Reply { status: 200, description: "The graph's description.", body: any_json, media: Media::Json }],
        errors: READ_ERRORS,
        params: &[],
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
        replies: &[Reply { status: 200, description: "The threads.", body: list::<ThreadView>, media: Media::Json }],
        errors: LIST_ERRORS,
        params: &[],
    },
    Route {
        verb: Verb::Post,
        path: "/api/threads",
        endpoint: Endpoint::StartRun,
        operation: Some(Operation::Start),
        id: "startThread",
        summary: "Start a thread, or a follow-up run of one",
        description: "Queues a run of a hosted graph from an input for the server's workers, owned by and \
                      audited as the caller (`run.submitted`). With `wait`, answers once the run parks or ends \
                      (200) or `wait_ms` passed (202); waiting needs `read_state` too. Only a caller acting for \
                      every tenant names a new thread (`thread`); for others the server names it (422 \
                      `thread_id_not_allowed`). Naming a thread that exists (of the caller's tenants) queues a \
                      follow-up run of it: `input` is an update of its state and `multitask_strategy` says what \
                      happens to the run it has in the queue (`enqueue`, the default: after it, answered \
                      `behind` with `ahead`; `reject`: 409 `follow_up_refused`; `interrupt`: cancel it; \
                      `rollback`: cancel it and start over from where it started); a follow-up needs `resume` \
                      and `update_state` too (`cancel` to interrupt, `fork` to roll back). A `webhook` URL is \
                      told when the run first stops, if the server's operator allows it (422 \
                      `webhook_not_allowed`). Needs `start`.",
        request: Some(Request { body: schema::<StartRun>, required: true }),
        replies: &[
            Reply {
                status: 200,
                description: "With `wait`: the run stopped (it waits for a person or its timer, or ended).",
                body: schema::<RunView>,
                media: Media::Json,
            },
            Reply {
                status: 202,
                description: "Queued (a follow-up: `queued`, or `behind` the thread's run; with `wait`, still in \
                              the queue's hands when `wait_ms` passed).",
                body: schema::<RunView>,
                media: Media::Json,
            },
        ],
        errors: ACT_ERRORS,
        params: &[IDEMPOTENCY_KEY],
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads/{thread}",
        endpoint: Endpoint::GetThread,
        operation: Some(Operation::ReadState),
        id: "getThread",
        summary: "A thread",
        description: "Its record, its run in the queue and its follow-up runs. Needs `read_state`.",
        request: None,
        replies: &[Reply { status: 200, description: "The thread.", body: schema::<ThreadView>, media: Media::Json }],
        errors: READ_ERRORS,
        params: &[],
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
        replies: &[Reply { status: 200, description: "The state.", body: schema::<StateView>, media: Media::Json }],
        errors: READ_ERRORS,
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "The checkpoints.",
            body: list::<HistoryEntry>,
            media: Media::Json,
        }],
        errors: READ_ERRORS,
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "What it waits on.",
            body: schema::<ThreadWaits>,
            media: Media::Json,
        }],
        errors: READ_ERRORS,
        params: &[],
    },
    Route {
        verb: Verb::Get,
        path: "/api/threads/{thread}/stream",
        endpoint: Endpoint::Stream,
        operation: Some(Operation::ReadState),
        id: "streamThread",
        summary: "A thread's runs as server-sent events",
        description: "The thread's event log (written in each step's commit) as AG-UI events, one JSON document a \
                      `data:` line, each with the id `SEQ-IDX-K`; from `Last-Event-ID` (or `after`) on, then \
                      each new commit's as it is made, until the client goes away (`follow=false`: until the \
                      reader caught up). A position older than the log keeps gets a `CUSTOM` \
                      `agentflow.gap` event first. Personal fields read `•••` unless the caller has \
                      `see_personal_data`. A model's tokens are not streamed: each message comes whole once its \
                      step is committed. A session cookie needs no CSRF token here (a GET). 429 \
                      `too_many_streams` past the streams one user may hold open. Needs `read_state`.",
        request: None,
        replies: &[Reply {
            status: 200,
            description: "The events (a keep-alive comment every 15 s while none comes).",
            body: ag_ui_event,
            media: Media::EventStream,
        }],
        errors: READ_ERRORS,
        params: &[
            Param {
                name: "Last-Event-ID",
                place: Place::Header,
                description: "The id of the last event received (`SEQ-IDX-K`, or a log entry's `SEQ-IDX`): the \
                              stream goes on after it. An `EventSource` sends it by itself when it reconnects.",
                kind: "string",
            },
            Param {
                name: "after",
                place: Place::Query,
                description: "As `Last-Event-ID`, for a client that cannot send headers (the header wins).",
                kind: "string",
            },
            Param {
                name: "follow",
                place: Place::Query,
                description: "`false`: end the stream once the events the log holds are sent (default `true`).",
                kind: "boolean",
            },
        ],
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
        replies: &[Reply { status: 200, description: "What waits.", body: schema::<Waiting>, media: Media::Json }],
        errors: LIST_ERRORS,
        params: &[],
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
            Reply {
                status: 200,
                description: "With `wait`: the run stopped.",
                body: schema::<RunView>,
                media: Media::Json,
            },
            Reply {
                status: 202,
                description: "Queued (or still running when `wait_ms` passed).",
                body: schema::<RunView>,
                media: Media::Json,
            },
        ],
        errors: ACT_ERRORS,
        params: &[],
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
            media: Media::Json,
        }],
        errors: ACT_ERRORS,
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "The approval as decided.",
            body: schema::<ApprovalView>,
            media: Media::Json,
        }],
        errors: ACT_ERRORS,
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "The approval as decided.",
            body: schema::<ApprovalView>,
            media: Media::Json,
        }],
        errors: ACT_ERRORS,
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "Whether a run was asked to stop.",
            body: schema::<Cancelled>,
            media: Media::Json,
        }],
        errors: &[401, 403, 404, 409, 503],
        params: &[],
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
        replies: &[Reply {
            status: 200,
            description: "Whether a run was asked to pause.",
            body: schema::<Paused>,
            media: Media::Json,
        }],
        errors: &[401, 403, 404, 409, 503],
        params: &[],
    },
    Route {
        verb: Verb::Get,
        path: "/api/schedules",
        endpoint: Endpoint::ListSchedules,
        operation: Some(Operation::List),
        id: "listSchedules",
        summary: "The cron schedules of the caller's tenants",
        description: "Every schedule of the store the caller sees (of its tenants), by id, with when each fires \
                      next and what its last fire started. Needs `list`.",
        request: None,
        replies: &[Reply {
            status: 200,
            description: "The schedules.",
            body: list::<ScheduleView>,
            media: Media::Json,
        }],
        errors: LIST_ERRORS,
        params: &[],
    },
    Route {
        verb: Verb::Post,
        path: "/api/schedules",
        endpoint: Endpoint::CreateSchedule,
        operation: Some(Operation::Start),
        id: "createSchedule",
        summary: "Make a cron schedule",
        description: "Keeps a schedule of a hosted graph: at every time its five-field cron expression names \
                      (UTC), a run of a new thread `<id>-<YYYYMMDDTHHMMZ>` from `input` is queued for the \
                      workers, owned by the caller; one run per fire across every server of the store, and one for \
                      all the fires missed while none ran. A schedule of the same id and graph is replaced (409 \
                      for another graph's, or an id another tenant's schedule holds). 422 for an expression that \
                      is not five valid fields. Needs `start`.",
        request: Some(Request { body: schema::<NewSchedule>, required: true }),
        replies: &[Reply {
            status: 201,
            description: "The schedule as kept, with its first fire.",
            body: schema::<ScheduleView>,
            media: Media::Json,
        }],
        errors: ACT_ERRORS,
        params: &[],
    },
    Route {
        verb: Verb::Delete,
        path: "/api/schedules/{id}",
        endpoint: Endpoint::DeleteSchedule,
        operation: Some(Operation::Cancel),
        id: "deleteSchedule",
        summary: "Remove a cron schedule",
        description: "It fires no more; the runs it started are left as they are. 404 for none, or one of a tenant \
                      the caller does not act for. Needs `cancel`.",
        request: None,
        replies: &[Reply { status: 200, description: "It is gone.", body: schema::<Unscheduled>, media: Media::Json }],
        errors: &[401, 403, 404, 503],
        params: &[],
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
