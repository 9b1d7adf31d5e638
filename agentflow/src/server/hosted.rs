//! One graph a server hosts, its Rust types erased: [`Hosted`], JSON in and out, implemented
//! by [`HostedApp`] for every `App<S, D>` and its dependencies. The server keeps one per graph,
//! by graph name, and runs a worker and a timer scheduler for each.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agentflow_store::IdempotencyKey;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::access::personal::{credential_names, mask_fields, personal_names};
use crate::access::{Access, AccessPolicy, Actor};
use crate::app::follow_up::QueuedFollowUp;
use crate::app::{App, Multitask, Submission, WorkerError};
use crate::approval::{ApprovalDesk, RoleAuthorizer};
use crate::core::state::State;
use crate::durable::{HistoryError, PersistError, fold_chain};
use crate::schedule::{OwnerLookup, ScheduleError, ScheduleRecord};
use crate::worker::Worker;

/// What a hosted graph's worker and scheduler are: a future that runs them until its token is
/// cancelled, then stops them.
pub(crate) type Running = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Why a hosted graph refused a new run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SubmitError {
    /// The input is not the graph's state.
    #[error(
        "the input is not a `{state}` (the state of graph `{graph}`): {reason}; send the state's fields as a JSON object"
    )]
    Input {
        /// The graph.
        graph: &'static str,
        /// The state's name.
        state: &'static str,
        /// What serde said.
        reason: String,
    },
    /// The run queue, the store or the access policy refused it.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A follow-up run's input is not an update of the graph's state.
    #[error(
        "the input of a follow-up run is an update of `{state}` (the state of graph `{graph}`): {reason}; send some \
         of the state's fields as a JSON object"
    )]
    Update {
        /// The graph.
        graph: &'static str,
        /// The state's name.
        state: &'static str,
        /// What serde said.
        reason: String,
    },
    /// A schedule was refused (its id, its cron expression, the access policy, the store).
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
}

/// A graph the server hosts, its state and dependency types erased: what the API needs of it.
pub(crate) trait Hosted: Send + Sync + 'static {
    /// The graph's name: the key runs are queued under and the API names it by.
    fn name(&self) -> &'static str;

    /// The graph's fingerprint.
    fn fingerprint(&self) -> &str;

    /// The graph's description ([`CompiledGraph::description`](crate::graph::CompiledGraph::description)).
    fn description(&self) -> Value;

    /// Queues a new run of thread `thread` from `input` (the graph's state as JSON) for
    /// `access`'s actor, checked by `access`'s policy, owned by and audited as that actor, for
    /// `tenant` if one is given, under idempotency key `key` if one is given: a key kept already
    /// is refused with [`WorkerError::KeyUsed`] (naming the thread its first submit started, and
    /// whether that was the same request), queueing nothing; telling `webhook`, if one is given,
    /// when the run first stops. Blocking.
    fn submit_keyed(
        &self,
        access: &Access,
        thread: &str,
        input: Value,
        tenant: Option<&str>,
        key: Option<IdempotencyKey>,
        webhook: Option<&str>,
    ) -> Result<(), SubmitError>;

    /// Queues a follow-up run of existing thread `thread` from `update` (an update of the
    /// graph's state as JSON) for `access`'s actor, checked by `access`'s policy, as `strategy`
    /// says about the thread's run in the queue ([`App::submit_follow_up`]); telling `webhook`,
    /// if one is given, when it first stops: where it stands and its identity in the queue.
    /// Blocking.
    fn submit_follow_up(
        &self,
        access: &Access,
        thread: &str,
        update: Value,
        strategy: Multitask,
        webhook: Option<&str>,
    ) -> Result<QueuedFollowUp, SubmitError>;

    /// The state of thread `thread` at checkpoint `seq`, folded with the graph's own types and
    /// reducers, as JSON; `None` when the checkpoint is not there. Unchecked and unmasked: the
    /// caller checks and masks. Blocking.
    fn state_json(&self, thread: &str, seq: u64) -> Result<Option<Value>, HistoryError>;

    /// The approval desk of this graph (it knows the graph's tools, so an edit is checked
    /// against the tool's own validation), with `authorizer` and the app's access policy.
    fn desk(&self, authorizer: RoleAuthorizer) -> Result<ApprovalDesk, HistoryError>;

    /// A worker running up to `concurrency` runs at once and a timer scheduler, both stopped
    /// when `stop` is cancelled (the worker lets running steps finish first). The scheduler
    /// checks each fire of a cron schedule for its owner as `owners` finds them now, under
    /// `policy` (the server's users and access policy).
    fn run(
        &self,
        stop: CancellationToken,
        concurrency: usize,
        policy: Arc<dyn AccessPolicy>,
        owners: OwnerLookup,
    ) -> Running;

    /// Keeps cron schedule `id` of this graph ([`App::schedule_with`]), starting runs from
    /// `input` (the graph's state as JSON) owned by `access`'s actor, for `tenant` if one is
    /// given, checked by `access`'s policy. Blocking.
    fn schedule(
        &self,
        access: &Access,
        id: &str,
        cron: &str,
        input: Value,
        tenant: Option<String>,
    ) -> Result<ScheduleRecord, SubmitError>;

    /// A schedule's stored `input` as JSON, its personal and credential fields masked (`•••`);
    /// `null` if it does not read as JSON.
    fn schedule_input(&self, input: &[u8]) -> Value;
}

/// The server's access policy, shared, as the policy of a hosted app's calls.
struct SharedPolicy(Arc<dyn AccessPolicy>);

impl AccessPolicy for SharedPolicy {
    fn permits(&self, actor: &Actor, operation: crate::access::Operation, thread: Option<&str>) -> Result<(), String> {
        self.0.permits(actor, operation, thread)
    }

    fn allows_all(&self) -> bool {
        self.0.allows_all()
    }
}

/// An `App<S, D>` with its dependencies, hosted.
pub(crate) struct HostedApp<S: State, D> {
    app: App<S, D>,
    deps: Arc<D>,
}

impl<S: State, D: Send + Sync + 'static> HostedApp<S, D> {
    /// `app`, run with `deps`.
    pub(crate) fn new(app: App<S, D>, deps: Arc<D>) -> Self {
        HostedApp { app, deps }
    }

    /// The app acting as `access`'s actor under `access`'s policy (the server's): what it does
    /// is checked for the caller, and what it queues is theirs.
    fn acting_for(&self, access: &Access) -> App<S, D> {
        self.app.clone().access(SharedPolicy(Arc::clone(access.policy()))).acting_as(access.actor())
    }

    /// `input` read as the graph's state (422 `SubmitError::Input` otherwise), and the app acting
    /// for `access` ([`HostedApp::acting_for`]): what a start and a schedule begin with.
    fn as_caller(&self, access: &Access, input: Value) -> Result<(S, App<S, D>), SubmitError> {
        let input: S = serde_json::from_value(input).map_err(|e| SubmitError::Input {
            graph: self.name(),
            state: S::NAME,
            reason: e.to_string(),
        })?;
        Ok((input, self.acting_for(access)))
    }
}

impl<S: State, D: Send + Sync + 'static> Hosted for HostedApp<S, D> {
    fn name(&self) -> &'static str {
        self.app.graph().name()
    }

    fn fingerprint(&self) -> &str {
        self.app.graph().fingerprint()
    }

    fn description(&self) -> Value {
        self.app.graph().description()
    }

    fn submit_keyed(
        &self,
        access: &Access,
        thread: &str,
        input: Value,
        tenant: Option<&str>,
        key: Option<IdempotencyKey>,
        webhook: Option<&str>,
    ) -> Result<(), SubmitError> {
        // Acting as the caller, under the server's policy: the start is checked for them, and
        // the thread is theirs, so the `run.submitted` audit entry names them.
        let (input, app) = self.as_caller(access, input)?;
        let actor = access.actor();
        let mut submission = Submission::new().owner(actor.id.clone());
        submission.tenant = tenant.map(str::to_string);
        submission.webhook = webhook.map(str::to_string);
        submission.idempotency = key;
        app.submit_with(thread, &input, submission)?;
        Ok(())
    }

    fn submit_follow_up(
        &self,
        access: &Access,
        thread: &str,
        update: Value,
        strategy: Multitask,
        webhook: Option<&str>,
    ) -> Result<QueuedFollowUp, SubmitError> {
        let update: S::Update = serde_json::from_value(update).map_err(|e| SubmitError::Update {
            graph: self.name(),
            state: S::NAME,
            reason: e.to_string(),
        })?;
        let actor = access.actor();
        let app = self.acting_for(access);
        Ok(app.queue_follow_up(thread, &update, strategy, &app.access_of(actor.clone()), webhook)?)
    }

    fn state_json(&self, thread: &str, seq: u64) -> Result<Option<Value>, HistoryError> {
        let store = self.app.backing_store().ok_or(HistoryError::NoStore)?;
        let Some(chain) = store.state_chain(thread, seq).map_err(PersistError::from)? else { return Ok(None) };
        let state: S = fold_chain(thread, &chain)?;
        let value =
            serde_json::to_value(&state).map_err(|source| PersistError::Encode { what: "the state", source })?;
        Ok(Some(value))
    }

    fn desk(&self, authorizer: RoleAuthorizer) -> Result<ApprovalDesk, HistoryError> {
        self.app.approvals(authorizer)
    }

    fn run(
        &self,
        stop: CancellationToken,
        concurrency: usize,
        policy: Arc<dyn AccessPolicy>,
        owners: OwnerLookup,
    ) -> Running {
        let (app, deps) = (self.app.clone(), Arc::clone(&self.deps));
        Box::pin(async move {
            let graph = app.graph().name();
            // Each fire checked again for the schedule's owner, as the API checks a start.
            let scheduler = app.clone().schedule_owners_under(policy, owners).scheduler(Arc::clone(&deps));
            match Worker::new(app, deps).concurrency(concurrency).run(stop).await {
                Ok(report) => tracing::debug!(graph, ?report, "the server's worker stopped"),
                Err(e) => {
                    tracing::error!(graph, error = %e, "the server's worker stopped: no run of this graph is claimed until the server starts again")
                }
            }
            scheduler.shutdown().await;
        })
    }

    fn schedule(
        &self,
        access: &Access,
        id: &str,
        cron: &str,
        input: Value,
        tenant: Option<String>,
    ) -> Result<ScheduleRecord, SubmitError> {
        // As for a start: checked for the caller under the server's policy, and theirs.
        let (input, app) = self.as_caller(access, input)?;
        let actor = access.actor();
        let mut runs = Submission::new().owner(actor.id.clone());
        runs.tenant = tenant;
        Ok(app.schedule_with(id, cron, &input, runs)?)
    }

    fn schedule_input(&self, input: &[u8]) -> Value {
        let Ok(mut value) = serde_json::from_slice::<Value>(input) else { return Value::Null };
        mask_fields(&mut value, &personal_names(S::FIELDS));
        mask_fields(&mut value, &credential_names(S::FIELDS));
        value
    }
}
