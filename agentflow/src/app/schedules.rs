//! The App's cron schedules: making, removing and listing them, and firing those due
//! ([`App::schedule`], [`App::fire_due_schedules`]).

use std::sync::Arc;

use agentflow_store::{QueueError, ScheduleRecord, Store};

use crate::access::{AccessError, Operation};
use crate::app::App;
use crate::core::state::State;
use crate::durable::{Allowed, check_sealed, now_ms, state_document};
use crate::schedule::{Cron, ScheduleError, ScheduleOptions, check_id, fire_of, fire_thread};

/// How many thread names a fire tries (`<id>-<minute>`, then `-2`, `-3`, ..) before it leaves
/// the schedule due for the next look.
const FIRE_NAMES: u32 = 8;

impl<S: State, D> App<S, D> {
    fn schedule_store(&self) -> Result<&Arc<dyn Store>, ScheduleError> {
        self.setup.store.as_ref().ok_or(ScheduleError::NoStore)
    }

    /// Keeps cron schedule `id` in the store: from now on, at every time `cron` names (five
    /// fields, UTC: see [`Cron`]), a run of this graph on a new thread starts from `input`,
    /// owned by `owner` (a [`Scheduler`](crate::timer::Scheduler) of this graph fires it and
    /// queues the run; a [`Worker`](crate::Worker) runs it; see [`crate::schedule`]). Replaces
    /// a schedule of the same id of this graph (its last fire is kept). Blocking. Answers the
    /// schedule as kept, with the first time it fires.
    ///
    /// ```
    /// # use agentflow::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Count { #[reduce(add)] n: u32 }
    /// # #[graph(state = Count, start = bump)]
    /// # mod counter {
    /// #     use super::*;
    /// #     #[node(goto = [END])]
    /// #     async fn bump(_c: &Count) -> Step<Count> { goto!(END, Count::update().n(1)) }
    /// # }
    /// use std::sync::Arc;
    /// use agentflow::RedbStore;
    /// use agentflow::schedule::{CronError, ScheduleError};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let app = counter::graph().app().store(Arc::new(RedbStore::in_memory()?));
    /// // Every weekday at 07:30 UTC.
    /// let made = app.schedule("morning", "30 7 * * MON-FRI", &Count::default(), "ops")?;
    /// assert_eq!(made.next_at % 60_000, 0, "a whole minute");
    /// assert_eq!(app.schedules()?, vec![made]);
    /// assert!(matches!(
    ///     app.schedule("bad", "0 30 7 * * MON", &Count::default(), "ops"),
    ///     Err(ScheduleError::Cron(CronError::Invalid { .. }))
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ScheduleError::Id`], [`ScheduleError::Cron`] (not five valid fields, or naming no
    /// time), [`ScheduleError::OwnerRequired`] (no owner, for a graph that may need a human's
    /// approval), [`ScheduleError::Access`] ([`Operation::Start`] refused for the app's actor),
    /// [`ScheduleError::OtherGraph`], [`ScheduleError::Taken`] (an id kept for a tenant the
    /// actor does not act for), [`ScheduleError::Persist`] (an input that cannot be stored),
    /// [`ScheduleError::Queue`].
    pub fn schedule(&self, id: &str, cron: &str, input: &S, owner: &str) -> Result<ScheduleRecord, ScheduleError> {
        self.schedule_with(id, cron, input, owner, ScheduleOptions::default())
    }

    /// [`App::schedule`] with its runs' tenant and webhook: the app's actor must act for the
    /// tenant.
    pub fn schedule_with(
        &self,
        id: &str,
        cron: &str,
        input: &S,
        owner: &str,
        options: ScheduleOptions,
    ) -> Result<ScheduleRecord, ScheduleError> {
        check_id(id)?;
        let cron = Cron::parse(cron)?;
        for (what, value) in [("owner", owner), ("tenant", options.tenant.as_deref().unwrap_or_default())] {
            if value.contains('\0') {
                return Err(ScheduleError::NulByte { what, value: value.to_string() });
            }
        }
        let store = self.schedule_store()?;
        self.check_schedule_start(options.tenant.as_deref())?;
        self.setup.check_owner(owner)?;
        check_sealed::<S>(store.as_ref())?;
        let input = state_document(input, "the input state", Allowed::of::<S>())?;
        let now = now_ms();
        let next_at = cron.next_after(now)?;
        let graph = self.setup.graph.name();
        let kept = store.schedule(id)?;
        if let Some(kept) = &kept {
            // Ids are shared by every tenant: one of another tenant's is taken, and no more is told.
            if !self.actor().acts_for(kept.tenant.as_deref()) {
                return Err(ScheduleError::Taken { id: id.to_string() });
            }
            if kept.graph != graph {
                return Err(ScheduleError::OtherGraph { id: id.to_string(), graph: kept.graph.clone() });
            }
        }
        let mut record = ScheduleRecord::new(id, graph, cron.as_str(), input, owner, next_at, now);
        record.tenant = options.tenant;
        record.webhook = options.webhook;
        if let Some(kept) = kept {
            record.last_fired_at = kept.last_fired_at;
            record.last_thread = kept.last_thread;
        }
        store.put_schedule(record.clone())?;
        Ok(record)
    }

    /// Removes schedule `id` of this graph; blocking. `false` if there is none (or none the
    /// app's actor sees: of a tenant it does not act for). The runs it started are left as they
    /// are.
    ///
    /// # Errors
    /// [`ScheduleError::Access`] ([`Operation::Cancel`] refused), [`ScheduleError::OtherGraph`],
    /// [`ScheduleError::Queue`].
    pub fn unschedule(&self, id: &str) -> Result<bool, ScheduleError> {
        let store = self.schedule_store()?;
        self.setup.access.allow(Operation::Cancel, None)?;
        let Some(kept) = store.schedule(id)? else { return Ok(false) };
        if !self.actor().acts_for(kept.tenant.as_deref()) {
            return Ok(false);
        }
        if kept.graph != self.setup.graph.name() {
            return Err(ScheduleError::OtherGraph { id: id.to_string(), graph: kept.graph });
        }
        Ok(store.delete_schedule(id)?)
    }

    /// This graph's schedules, by id, those of the tenants the app's actor acts for; blocking.
    ///
    /// # Errors
    /// [`ScheduleError::Access`] ([`Operation::List`] refused), [`ScheduleError::Queue`].
    pub fn schedules(&self) -> Result<Vec<ScheduleRecord>, ScheduleError> {
        let store = self.schedule_store()?;
        self.setup.access.allow(Operation::List, None)?;
        let actor = self.actor();
        let graph = self.setup.graph.name();
        let mut kept = store.list_schedules()?;
        kept.retain(|s| s.graph == graph && actor.acts_for(s.tenant.as_deref()));
        Ok(kept)
    }

    /// Fires this graph's schedules due at `now` (unix millis: `next_at <= now`), as a
    /// [`Scheduler`](crate::timer::Scheduler) does at each look; blocking. Each fire queues a
    /// run of a new thread `<id>-<YYYYMMDDTHHMMZ>` (the UTC minute of `now`; `-2`, `-3`, .. if
    /// a thread of that name exists) and moves the schedule to the first time it names after
    /// `now`, in one transaction claimed only if no other process fired it first: however many
    /// times a schedule fell due before `now`, it fires once. Answers the threads it started.
    ///
    /// The runs start as the schedules were made (their owner and tenant, checked then); the
    /// app's actor is not checked. A schedule whose stored expression no longer reads is
    /// skipped (logged).
    ///
    /// # Errors
    /// [`ScheduleError::NoStore`]; [`ScheduleError::Queue`] if the store fails (fires made
    /// before the failure stay made) or keeps no schedules ([`QueueError::Unsupported`]).
    pub fn fire_due_schedules(&self, now: u64) -> Result<Vec<String>, ScheduleError> {
        let store = self.schedule_store()?;
        let graph = self.setup.graph.name();
        let mut started = Vec::new();
        for record in store.list_schedules()? {
            if record.graph != graph || record.next_at > now {
                continue;
            }
            if let Some(thread) = fire_one(store.as_ref(), &record, now)? {
                tracing::debug!(schedule = %record.id, thread = %thread, "fired a cron schedule");
                started.push(thread);
            }
        }
        Ok(started)
    }

    /// `Ok` if the app's actor may start threads of `tenant`.
    fn check_schedule_start(&self, tenant: Option<&str>) -> Result<(), AccessError> {
        let actor = self.actor();
        if !actor.acts_for(tenant) {
            return Err(AccessError::Denied {
                actor: actor.id.clone(),
                operation: Operation::Start,
                thread: None,
                reason: match tenant {
                    Some(t) => format!("it does not act for tenant `{t}`, which the schedule's threads would have"),
                    None => "it acts for named tenants only, and the schedule's threads would have none".to_string(),
                },
            });
        }
        self.setup.access.allow(Operation::Start, None)
    }
}

/// Fires due schedule `record` at `now`: the thread it started, or `None` if another process
/// fired it first, or it could not be fired (logged).
fn fire_one(store: &dyn Store, record: &ScheduleRecord, now: u64) -> Result<Option<String>, ScheduleError> {
    for attempt in 0..FIRE_NAMES {
        let thread = fire_thread(&record.id, now, attempt);
        if store.thread(&thread)?.is_some() {
            continue;
        }
        let fire = match fire_of(record, now, &thread) {
            Ok(fire) => fire,
            Err(e) => {
                tracing::warn!(schedule = %record.id, error = %e, "a cron schedule cannot fire; replace or remove it");
                return Ok(None);
            }
        };
        match store.fire_schedule(fire) {
            Ok(true) => return Ok(Some(thread)),
            Ok(false) => return Ok(None),
            // A run of that thread is queued but not started: the next name.
            Err(QueueError::AlreadyQueued { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tracing::warn!(schedule = %record.id, "a cron schedule found no free thread name to fire; it stays due");
    Ok(None)
}
