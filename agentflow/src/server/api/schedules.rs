//! Cron schedules over HTTP: `GET` and `POST /api/schedules`, `DELETE /api/schedules/{id}`,
//! through the library's schedules ([`App::schedule_with`](crate::App::schedule_with)) in the
//! caller's name.

use std::sync::Arc;

use agentflow_store::AuditEntry;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::body::Body;
use super::caller::Caller;
use super::path::Path;
use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::{Operation, Tenants};
use crate::durable::PersistError;
use crate::schedule::{SCHEDULE_REFUSED_KIND, ScheduleError, ScheduleRecord, refusal_stream};

/// Makes a cron schedule: runs of a hosted graph started at the times a five-field cron
/// expression names (UTC), each on a new thread `<id>-<YYYYMMDDTHHMMZ>` owned by the caller.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewSchedule {
    /// The schedule's id: 1 to 100 ASCII letters, digits, `.`, `_` or `-`, shared by all the
    /// graphs and tenants of the store. A schedule of the same id of the same graph is replaced
    /// (its last fire is kept).
    pub(crate) id: String,
    /// The hosted graph whose runs it starts, by name.
    pub(crate) graph: String,
    /// Five fields, `minute hour day-of-month month day-of-week`, in UTC (`*/15 * * * *`,
    /// `0 9 * * MON-FRI`), or `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`. Six or
    /// seven fields (seconds, years) are refused.
    pub(crate) cron: String,
    /// The graph's state each run starts from, as a JSON object of its fields.
    pub(crate) input: Value,
    /// The tenant its threads belong to (default: the caller's tenant when the caller acts for
    /// exactly one, else none).
    #[serde(default)]
    pub(crate) tenant: Option<String>,
}

/// A cron schedule.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ScheduleView {
    /// Its id.
    pub(crate) id: String,
    /// The graph whose runs it starts.
    pub(crate) graph: String,
    /// Its cron expression (five fields, UTC).
    pub(crate) cron: String,
    /// Who owns the threads it starts (who made it).
    pub(crate) owner: String,
    /// The tenant of its threads.
    pub(crate) tenant: Option<String>,
    /// The state each run starts from, personal and credential fields read `•••`; `null` for a
    /// graph this server does not host.
    pub(crate) input: Value,
    /// The URL told when each of its runs stops, if any, masked
    /// ([`mask_url`](crate::secret::mask_url): its credentials hidden).
    pub(crate) webhook: Option<String>,
    /// When it fires next (unix ms).
    pub(crate) next_at: u64,
    /// When it was made (unix ms).
    pub(crate) created_at: u64,
    /// When it last fired (unix ms), if ever.
    pub(crate) last_fired_at: Option<u64>,
    /// The thread its last fire started, if any.
    pub(crate) last_thread: Option<String>,
    /// Why the fire of its current due time (`next_at`) was refused, if it was: its owner may
    /// no longer start its runs (it fires once they may again). From the schedule's own audit
    /// stream, `schedule:<id>`.
    pub(crate) refused: Option<String>,
    /// Why the schedule's audit stream could not be read, when it could not (then `refused` is
    /// not known; the other schedules are listed as usual, and the server logs it). Left out
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) refused_unread: Option<String>,
}

/// A schedule removed.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Unscheduled {
    /// `true`: it is gone (the runs it started are left as they are).
    pub(crate) unscheduled: bool,
}

impl ScheduleView {
    /// `record` as shown, its input read by the hosted graph it belongs to.
    fn of(state: &ApiState, record: ScheduleRecord) -> Self {
        let input = state.graph(&record.graph).map_or(Value::Null, |g| g.schedule_input(&record.input));
        ScheduleView {
            id: record.id,
            graph: record.graph,
            cron: record.cron,
            owner: record.owner,
            tenant: record.tenant,
            input,
            webhook: record.webhook.as_deref().map(crate::secret::mask_url),
            next_at: record.next_at,
            created_at: record.created_at,
            last_fired_at: record.last_fired_at,
            last_thread: record.last_thread,
            refused: None,
            refused_unread: None,
        }
    }
}

/// Why the fire of `record`'s current due time was refused, if it was: the reason of the
/// latest `schedule.refused` entry of its audit stream for its `next_at`. `Err` with the error
/// (logged) when the stream cannot be read: that schedule's refusal is not known, the listing
/// goes on.
fn refused(store: &dyn agentflow_store::Store, record: &ScheduleRecord) -> Refusal {
    let entries = store.list_audit(&refusal_stream(&record.id)).map_err(|e| {
        tracing::warn!(schedule = %record.id, error = %e, "a cron schedule's refusals cannot be read; it is listed without them");
        e.to_string()
    })?;
    Ok(refusal_of(entries, record))
}

/// What [`refused`] found of a schedule's refusal.
type Refusal = Result<Option<String>, String>;

/// The reason of the latest `schedule.refused` entry of `entries` for `record`'s `next_at`.
fn refusal_of(entries: Vec<AuditEntry>, record: &ScheduleRecord) -> Option<String> {
    entries
        .into_iter()
        .rev()
        .find(|e| e.kind == SCHEDULE_REFUSED_KIND && e.detail["due"].as_u64() == Some(record.next_at))
        .and_then(|e| e.detail["reason"].as_str().map(str::to_string))
}

impl From<ScheduleError> for Problem {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::Access(e) => e.into(),
            ScheduleError::Cron(_)
            | ScheduleError::Id { .. }
            | ScheduleError::NulByte { .. }
            | ScheduleError::KeyNotAllowed
            | ScheduleError::OwnerRequired(_)
            | ScheduleError::Persist(
                PersistError::Value { .. } | PersistError::Encode { .. } | PersistError::Credential { .. },
            ) => Problem::unprocessable(e.to_string()),
            ScheduleError::Taken { .. } | ScheduleError::OtherGraph { .. } => Problem::conflict(e.to_string()),
            other => Problem::store(other),
        }
    }
}

/// `GET /api/schedules`: the schedules of the caller's tenants, by id.
pub(crate) async fn list(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
) -> Result<Json<Vec<ScheduleView>>, Problem> {
    caller.allow(Operation::List)?;
    let actor = caller.actor().clone();
    let store = Arc::clone(&state.store);
    let kept = blocking(move || -> Result<Vec<(Refusal, ScheduleRecord)>, Problem> {
        let listing = store.scan_schedules().map_err(ScheduleError::from)?;
        for e in &listing.skipped {
            tracing::warn!(error = %e, "a cron schedule cannot be read; it is left out of the listing");
        }
        let mut kept = listing.items;
        kept.retain(|s| actor.acts_for(s.tenant.as_deref()));
        Ok(kept.into_iter().map(|s| (refused(store.as_ref(), &s), s)).collect())
    })
    .await?;
    let views = kept.into_iter().map(|(refused, r)| match refused {
        Ok(refused) => ScheduleView { refused, ..ScheduleView::of(&state, r) },
        Err(unread) => ScheduleView { refused_unread: Some(unread), ..ScheduleView::of(&state, r) },
    });
    Ok(Json(views.collect()))
}

/// `POST /api/schedules`: makes (or replaces) a schedule of a hosted graph in the caller's name.
pub(crate) async fn create(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Body(body): Body<NewSchedule>,
) -> Result<(StatusCode, Json<ScheduleView>), Problem> {
    caller.allow(Operation::Start)?;
    let graph = state.graph(&body.graph).cloned().ok_or_else(|| {
        Problem::not_found(format!("no graph `{}` is hosted here; GET /api/graphs lists them", body.graph))
    })?;
    // A caller of one tenant schedules for it unless told otherwise, as it starts threads.
    let tenant = body.tenant.or_else(|| match &caller.actor().tenants {
        Tenants::Only(set) if set.len() == 1 => set.iter().next().cloned(),
        _ => None,
    });
    let access = caller.access().clone();
    let (id, cron, input) = (body.id, body.cron, body.input);
    let record = blocking(move || Ok(graph.schedule(&access, &id, &cron, input, tenant)?)).await?;
    Ok((StatusCode::CREATED, Json(ScheduleView::of(&state, record))))
}

/// `DELETE /api/schedules/{id}`: removes a schedule of the caller's tenants; 404 when there is
/// none (or one of another tenant).
pub(crate) async fn delete(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Unscheduled>, Problem> {
    caller.allow(Operation::Cancel)?;
    let actor = caller.actor().clone();
    let store = Arc::clone(&state.store);
    blocking(move || {
        let missing = || Problem::not_found(format!("no schedule `{id}`; GET /api/schedules lists them"));
        let kept = store.schedule(&id).map_err(ScheduleError::from)?.ok_or_else(missing)?;
        if !actor.acts_for(kept.tenant.as_deref()) {
            return Err(missing());
        }
        if !store.delete_schedule(&id).map_err(ScheduleError::from)? {
            return Err(missing());
        }
        Ok(Json(Unscheduled { unscheduled: true }))
    })
    .await
}
