//! The server's JSON API and its OpenAPI document.
//!
//! | method and path | operation | body -> answer |
//! | --- | --- | --- |
//! | `GET /openapi.json` | none (no login) | the OpenAPI 3.1 document |
//! | `GET /api/graphs` | `list` | the hosted graphs: name, fingerprint, description |
//! | `GET /api/graphs/{graph}` | `list` | a graph's description (by name, or a stored one by fingerprint) |
//! | `GET /api/threads` | `list` | the threads of the caller's tenants |
//! | `POST /api/threads` | `start` | `{graph, input, thread?, tenant?, wait?, wait_ms?}` (header `Idempotency-Key`) -> 202 queued, or 200 once the run stopped |
//! | `GET /api/threads/{thread}` | `read_state` | the thread's record and queued run |
//! | `GET /api/threads/{thread}/state` | `read_state` | `{seq, state, next, pending}`, personal fields masked |
//! | `GET /api/threads/{thread}/history` | `read_history` | its checkpoints |
//! | `GET /api/threads/{thread}/pending` | `read_state` | what it waits on, with question ids |
//! | `GET /api/threads/{thread}/stream` | `read_state` | its event log as AG-UI server-sent events (`Last-Event-ID`) |
//! | `GET /api/approvals` | `list` | every approval and question waiting for a person |
//! | `POST /api/threads/{thread}/resume` | `resume` (+ `answer` with a value) | `{value?, question?, wait?, wait_ms?}`; a `value` needs its `question`'s id |
//! | `POST /api/threads/{thread}/approvals/{approval}/approve` | `decide` | `{conditions?}` |
//! | `POST /api/threads/{thread}/approvals/{approval}/reject` | `decide` | `{reason}` |
//! | `POST /api/threads/{thread}/approvals/{approval}/edit` | `decide` | `{args}` |
//! | `POST /api/threads/{thread}/cancel` | `cancel` | `{cancelled}` |
//! | `POST /api/threads/{thread}/pause` | `pause` | `{paused}` |
//! | `GET /api/schedules` | `list` | the cron schedules of the caller's tenants |
//! | `POST /api/schedules` | `start` | `{id, graph, cron, input, tenant?}` -> 201 the schedule, with its next fire |
//! | `DELETE /api/schedules/{id}` | `cancel` | `{unscheduled}` |
//!
//! The router and the document are made from one table ([`ROUTES`] lists it). Who calls is found
//! as [`caller`] says; wrong bearer tokens count per client address with the inbox's failed
//! logins, and past the limit a bearer request answers 429 `too_many_attempts` with
//! `Retry-After`, its token not checked. Every action goes through the library operation that
//! checks it for the caller and audits it in the caller's name (the run queue's submit and
//! controls, the approval desk). Errors are JSON, `{"error": {"code": "not_found", "message":
//! "what to do"}}`, with 400, 401, 403, 404, 405, 409, 413, 422, 429, 500 or 503.
//!
//! A thread of another tenant answers 404 exactly as a missing one. So that starting a thread
//! cannot tell either, thread ids being shared by all tenants, only a caller acting for every
//! tenant may name a new thread (`thread`); a caller of some tenants only is answered 422
//! `thread_id_not_allowed`, and without `thread` the server names it (the answer gives the id).
//! An answer (`value` of a resume) names its question (`question`, as `.../pending` lists it),
//! so a person answers the question they saw (422 `question_required` without it); resuming a
//! thread whose graph the server does not host, on a store file it holds, answers 409
//! `graph_not_hosted` (no process could run it).

mod bodies;
mod body;
pub mod caller;
mod controls;
mod decisions;
mod follow_ups;
mod graphs;
mod idempotency;
mod path;
mod problem;
mod reads;
mod router;
mod runs;
mod schedules;
mod spec;
mod state;
mod stream;
mod table;
mod threads;
mod waiting;

#[cfg(test)]
mod tests;

pub use caller::{CSRF_HEADER, PeerUser};
pub(crate) use router::api_router;
pub use spec::spec;
pub(crate) use state::ApiState;
pub use table::ROUTES;
