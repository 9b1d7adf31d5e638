//! Starting and resuming runs: `POST /api/threads` and `POST /api/threads/{thread}/resume`.
//!
//! Every run goes through the run queue, where the server's workers claim it. In the background
//! (the default) the answer is 202 at once; with `wait` the request waits until the run stops
//! (it parks, waiting for a person or its timer, or it ends: 200) or `wait_ms` passes (202, with
//! where it stands then). Waiting reads the thread's state, so it needs `read_state` besides the
//! route's operation.

use std::sync::Arc;
use std::time::Duration;

use agentflow_store::{QueuedRun, RunWait, ThreadRecord};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use super::bodies::{ResumeRun, RunView, StartRun};
use super::body::{Body, MaybeBody};
use super::caller::Caller;
use super::follow_ups::{FollowUp, allowed_webhook, follow_up, is_there, wait_for_turn};
use super::idempotency;
use super::path::Path;
use super::problem::{Problem, blocking};
use super::reads::{approvals_waiting, queued_run, state_view};
use super::state::ApiState;
use crate::access::{Operation, Tenants};
use crate::app::follow_up::is_follow_up;
use crate::app::{RunControls, WorkerError};
use crate::approval::ApprovalDesk;
use crate::durable::now_ms;
use crate::durable::restart::{FOLLOW_UP_FAILED, FOLLOW_UP_FAILED_STATUS, restarted_at};
use crate::server::hosted::SubmitError;
use crate::server::inspect::description::Names;

/// How long `wait` waits unless `wait_ms` says otherwise: 30 s.
pub(crate) const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest `wait_ms` honoured: 300 s.
pub(crate) const MAX_WAIT_MS: u64 = 300_000;
/// The longest pause between two looks at the run queue while waiting.
const MOST_BETWEEN_LOOKS: Duration = Duration::from_millis(200);

/// An answer with a status and a run.
type Answer = (StatusCode, Json<RunView>);

/// `POST /api/threads`: queues a new thread's run; a start sent again under its
/// `Idempotency-Key` answers as the first did ([`idempotency`](super::idempotency)).
pub(crate) async fn start(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Body(mut body): Body<StartRun>,
) -> Result<Answer, Problem> {
    caller.allow(Operation::Start)?;
    let key = idempotency::key_of(&headers, &caller, &body)?;
    // Waiting for the run, and a webhook, both hand its end state to the caller.
    if body.wait || body.webhook.is_some() {
        caller.allow(Operation::ReadState)?;
    }
    let graph = state.graph(&body.graph).cloned().ok_or_else(|| {
        Problem::not_found(format!("no graph `{}` is hosted here; GET /api/graphs lists them", body.graph))
    })?;
    let webhook = allowed_webhook(&state, body.webhook.take())?;
    // A thread there for the caller takes a follow-up run.
    if let Some(named) = body.thread.take() {
        if is_there(&state, caller.access(), &named).await? {
            let strategy = body.multitask_strategy.unwrap_or_default();
            let ask = FollowUp { thread: named, input: body.input, strategy, webhook, key, tenant: body.tenant };
            let (view, mine) = follow_up(&state, caller.access(), graph, ask).await?;
            if !body.wait {
                return Ok((StatusCode::ACCEPTED, Json(view)));
            }
            // Behind the thread's run: its own run is waited for once it is the thread's.
            let wait = Duration::from_millis(body.wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
            let deadline = Instant::now() + wait;
            let thread = view.thread.clone();
            if let Some(view) = wait_for_turn(&state, view, mine.as_deref(), deadline).await? {
                return Ok((StatusCode::ACCEPTED, Json(view)));
            }
            let left = u64::try_from(deadline.saturating_duration_since(Instant::now()).as_millis()).unwrap_or(0);
            return outcome(&state, &caller, thread, Some(left), mine.as_deref()).await;
        }
        body.thread = Some(named);
    }
    // Thread ids are one namespace for every tenant: a caller of some tenants choosing one could
    // tell from a refusal that another tenant's thread has it.
    if body.thread.is_some() && matches!(caller.actor().tenants, Tenants::Only(_)) {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "thread_id_not_allowed",
            "you act for some tenants only, so the server names your new thread (the answer gives its id): thread \
             ids are shared by all tenants, and one you chose could be taken by another tenant's thread. Leave \
             `thread` out",
        ));
    }
    let thread = match body.thread {
        Some(t) if t.trim().is_empty() || t.trim() != t || t.chars().any(char::is_control) => {
            return Err(Problem::unprocessable(format!(
                "the thread id {t:?} is empty, has spaces around it or holds control characters; choose another"
            )));
        }
        // The audit streams of schedules' refused fires (`schedule::refusal_stream`).
        Some(t) if crate::schedule::is_reserved_thread_id(&t) => {
            return Err(Problem::unprocessable(format!(
                "the thread id {t:?} starts with `schedule:`, which names the audit streams of cron schedules; \
                 choose another"
            )));
        }
        Some(t) => t,
        None => new_thread_id(graph.name())?,
    };
    // A caller of one tenant starts its threads for it unless told otherwise.
    let tenant = body.tenant.or_else(|| match &caller.actor().tenants {
        Tenants::Only(set) if set.len() == 1 => set.iter().next().cloned(),
        _ => None,
    });
    let (access, input) = (caller.access().clone(), body.input);
    let thread = blocking(move || {
        match graph.submit_keyed(&access, &thread, input, tenant.as_deref(), key, webhook.as_deref()) {
            Ok(()) => Ok(thread),
            // Sent again: the first start's thread is the answer.
            Err(SubmitError::Worker(WorkerError::KeyUsed { thread, same_request: true, .. })) => Ok(thread),
            // The key with another request: 422 `idempotency_key_reused`.
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    if !body.wait {
        return Ok((StatusCode::ACCEPTED, Json(RunView::queued(thread))));
    }
    outcome(&state, &caller, thread, body.wait_ms, None).await
}

/// `POST /api/threads/{thread}/resume`: answers the question the thread waits on (when a value
/// is given) and queues the thread to go on.
pub(crate) async fn resume(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    Path(thread): Path<String>,
    MaybeBody(body): MaybeBody<ResumeRun>,
) -> Result<Answer, Problem> {
    let record = caller.thread(&state, Operation::Resume, &thread).await?;
    if !record.status.is_resumable() {
        return Err(Problem::conflict(format!(
            "thread `{thread}` is {}: there is nothing to resume; start a new thread instead",
            record.status.as_str()
        )));
    }
    if body.wait {
        caller.access().check(Operation::ReadState, &record)?;
    }
    let value = body.value.filter(|v| !v.is_null());
    if value.is_some() {
        caller.access().check(Operation::Answer, &record)?;
        state.may_answer(caller.actor()).map_err(|m| Problem::new(StatusCode::FORBIDDEN, "forbidden", m))?;
    }
    // A person sees what they answer: the question's id names it, and the answer is refused if
    // the thread asks another by then.
    let question = match (&value, body.question) {
        (Some(_), None) => {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "question_required",
                format!(
                    "an answer (`value`) names the question it answers: send its id in `question`, as \
                     GET /api/threads/{thread}/pending lists it; nothing was recorded"
                ),
            ));
        }
        (_, question) => question,
    };
    let answering = value.is_some();
    let (shared, access, id, held) = (Arc::clone(&state), caller.access().clone(), thread.clone(), record.clone());
    let queued = blocking(move || {
        let store = Arc::clone(&shared.store);
        hosts_graph_of(&shared, &held)?;
        if let (Some(value), Some(question)) = (value, &question) {
            let actor = access.actor().clone();
            let desk = ApprovalDesk::for_store(Arc::clone(&store), shared.authorizer.clone())
                .access_shared(Arc::clone(&shared.access))
                .reading_as(actor.clone());
            let (seq, _) = desk.waiting_questions(&id)?;
            desk.answer_question(&id, seq, question, value, &actor)?;
            // Recording the last answer of the step woke the run a worker parked for it; one
            // still parked waits for the step's other answers. A run held behind the thread
            // (follow-ups wait behind it) is woken by the resume below.
            if let Some(run) = queued_run(&shared, &id)?.filter(|r| r.wait != RunWait::Held) {
                return Ok(run.wait == RunWait::Ready);
            }
        }
        match RunControls::new(store, access).submit_resume(&id, None) {
            Ok(()) => Ok(true),
            // Answered, and the step asks more: the thread waits for those answers.
            Err(WorkerError::ValueRequired { .. }) if answering => Ok(false),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    if !body.wait {
        let mut view = RunView::queued(thread);
        if !queued {
            view.status = record.status.as_str().to_string();
            view.stopped = true;
        }
        return Ok((StatusCode::ACCEPTED, Json(view)));
    }
    outcome(&state, &caller, thread, body.wait_ms, None).await
}

/// `Ok` unless a run of thread `record` would wait in the queue for good: the store is a file
/// this server holds (no other process can open it, so none runs a worker on it) and the server
/// hosts no graph of the thread's name (409 `graph_not_hosted`). A thread whose graph's name is
/// not stored is refused by the resume itself.
fn hosts_graph_of(state: &ApiState, record: &ThreadRecord) -> Result<(), Problem> {
    if state.store.file_path().is_none() || state.graph_of(&record.graph_fingerprint).is_some() {
        return Ok(());
    }
    match Names::default().of(state.store.as_ref(), record) {
        Some(name) if state.graph(&name).is_none() => Err(Problem::new(
            StatusCode::CONFLICT,
            "graph_not_hosted",
            format!(
                "thread `{}` runs graph `{name}`, which this server does not host; while the server holds the store \
                 file no other process can run it, so its run would wait in the queue for good: host graph \
                 `{name}` in this server (`Server::app`) and start it again; nothing was recorded or queued",
                record.id
            ),
        )),
        _ => Ok(()),
    }
}

/// A new thread id for graph `graph`: its name and 16 random hex digits.
fn new_thread_id(graph: &str) -> Result<String, Problem> {
    let random = crate::server::auth::random_token().map_err(|e| {
        Problem::unavailable(format!(
            "no random thread id can be made ({e}); try again (a caller acting for every tenant may name the thread)"
        ))
    })?;
    Ok(format!("{graph}-{}", &random[..16]))
}

impl RunView {
    /// A run just queued.
    pub(crate) fn queued(thread: String) -> Self {
        RunView {
            thread,
            status: "queued".to_string(),
            stopped: false,
            detail: None,
            state: None,
            pending: Vec::new(),
            approvals: Vec::new(),
            ahead: None,
        }
    }

    /// A run still in the queue's hands: claimed by a worker whose lease holds (`running`), or
    /// waiting for one (`queued`).
    fn moving(run: &QueuedRun) -> Self {
        let mut view = RunView::queued(run.thread.clone());
        if run.lease.as_ref().is_some_and(|l| l.expires_at > now_ms()) {
            view.status = "running".to_string();
        }
        view
    }
}

/// What a look at a thread's queued run tells a wait for its run.
#[derive(Debug)]
enum Look {
    /// The run waited for is in the queue, ready (claimed or not).
    Moving(Box<QueuedRun>),
    /// It stopped: it left the queue, or it is parked (for a person, its timer, held).
    Stopped,
    /// The thread's run is another than the follow-up marked as waited for (the next one,
    /// parked or not): the one waited for ended.
    NextStarted,
}

/// What `run`, the thread's queued run if any, tells a wait for the run marked `mark` (`None`:
/// the thread's run, whichever it is). The mark is looked at first: a next follow-up that
/// parked is not the run waited for stopping.
fn look(run: Option<QueuedRun>, mark: Option<&str>) -> Look {
    match run {
        None => Look::Stopped,
        Some(run) if mark.is_some_and(|mark| !is_follow_up(&run, mark)) => Look::NextStarted,
        Some(run) if run.wait != RunWait::Ready => Look::Stopped,
        Some(run) => Look::Moving(Box::new(run)),
    }
}

/// Waits until thread `thread`'s run stops (it leaves the queue, or parks waiting for a person or
/// its timer) or `wait_ms` passes: 200 with the thread's status, state and waits, or 202 with
/// where the run stands. With `mark`, the run waited for is the follow-up so marked
/// ([`QueuedFollowUp::mark`](crate::app::follow_up::QueuedFollowUp)): once the thread's run is
/// another (the next follow-up), that one stopped, and the next is not waited for.
async fn outcome(
    state: &Arc<ApiState>,
    caller: &Caller,
    thread: String,
    wait_ms: Option<u64>,
    mark: Option<&str>,
) -> Result<Answer, Problem> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
    let mut pause = Duration::from_millis(5);
    let mut next_started = false;
    // The run waited for left the queue (it is not parked in it).
    let mut left;
    loop {
        let (shared, id) = (Arc::clone(state), thread.clone());
        let run = blocking(move || queued_run(&shared, &id)).await?;
        left = run.as_ref().is_none_or(|r| mark.is_some_and(|m| !is_follow_up(r, m)));
        let run = match look(run, mark) {
            Look::Moving(run) => run,
            Look::Stopped => break,
            Look::NextStarted => {
                next_started = true;
                break;
            }
        };
        let now = Instant::now();
        if now >= deadline {
            return Ok((StatusCode::ACCEPTED, Json(RunView::moving(&run))));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(MOST_BETWEEN_LOOKS);
    }
    let (shared, access) = (Arc::clone(state), caller.access().clone());
    let mark = mark.map(str::to_string);
    blocking(move || {
        let Some(record) = access.lookup::<Problem>(shared.store.as_ref(), Operation::ReadState, &thread)? else {
            // The run left the queue without creating its thread (it could not be run).
            let mut view = RunView::queued(thread);
            view.status = "not_started".to_string();
            view.stopped = true;
            view.detail = Some("the run left the queue before it created the thread; the server's log says why".into());
            return Ok((StatusCode::OK, Json(view)));
        };
        if let Some(mark) = mark.filter(|_| left) {
            let checkpoints = shared.store.list_checkpoints(&thread).map_err(Problem::store)?;
            if restarted_at(&checkpoints, &mark).is_none() {
                // The follow-up left the queue without running: what the thread holds is an
                // earlier run's end, not this one's. Its own failure entry (by its submission
                // time) says why; without one, it was cancelled before it ran.
                let audit = shared.store.list_audit(&thread).map_err(Problem::store)?;
                let submitted = mark.split_once('-').and_then(|(at, _)| at.parse::<u64>().ok());
                let failed = audit
                    .iter()
                    .rfind(|e| e.kind == FOLLOW_UP_FAILED && e.detail["submitted_at"].as_u64() == submitted)
                    .map(|e| e.detail["reason"].as_str().unwrap_or_default().to_string());
                let mut view = RunView::queued(thread);
                view.stopped = true;
                (view.status, view.detail) = match failed {
                    Some(reason) => (
                        FOLLOW_UP_FAILED_STATUS.to_string(),
                        Some(format!(
                            "the follow-up left the queue without running; the thread is as it was: {reason}"
                        )),
                    ),
                    None => (
                        "cancelled".to_string(),
                        Some("the follow-up was cancelled before it ran; the thread is as it was".to_string()),
                    ),
                };
                return Ok((StatusCode::OK, Json(view)));
            }
        }
        let read = state_view(&shared, &access, &record)?;
        let detail = if next_started {
            Some(
                "the run ended and the thread's next run (another follow-up) is under way: the status and state are \
                 the thread's now; GET the thread to follow it"
                    .to_string(),
            )
        } else {
            Some(record.detail.clone()).filter(|d| !d.is_empty())
        };
        let view = RunView {
            status: record.status.as_str().to_string(),
            stopped: true,
            detail,
            state: Some(read.state),
            pending: read.pending,
            approvals: approvals_waiting(&shared, &record.id)?,
            ahead: None,
            thread,
        };
        Ok((StatusCode::OK, Json(view)))
    })
    .await
}

#[cfg(test)]
mod tests {
    use agentflow_store::{NewRun, RedbStore, RunWait, Store};

    use super::{Look, look};
    use crate::durable::restart::follow_up_mark;

    #[test]
    fn a_wait_for_a_follow_up_tells_the_next_run_parked_from_its_own() {
        let store = RedbStore::in_memory().unwrap();
        store.enqueue_run(NewRun::new("t", "g", Some(b"{}".to_vec()), "ada", 7).as_follow_up(None)).unwrap();
        let mut run = store.scan_runs().unwrap().items.remove(0);
        let mine = follow_up_mark(run.enqueued_at, run.input.as_deref().unwrap_or_default());
        assert!(matches!(look(Some(run.clone()), Some(&mine)), Look::Moving(_)));
        assert!(matches!(look(Some(run.clone()), None), Look::Moving(_)));
        assert!(matches!(look(None, Some(&mine)), Look::Stopped));
        // Another follow-up is the thread's run (the one waited for ended): parked or not, it
        // is not the one waited for stopping.
        let other = follow_up_mark(run.enqueued_at + 1, b"{}");
        assert!(matches!(look(Some(run.clone()), Some(&other)), Look::NextStarted));
        run.wait = RunWait::Approval;
        assert!(matches!(look(Some(run.clone()), Some(&other)), Look::NextStarted));
        // Its own run parked: stopped.
        assert!(matches!(look(Some(run.clone()), Some(&mine)), Look::Stopped));
        assert!(matches!(look(Some(run), None), Look::Stopped));
    }
}
