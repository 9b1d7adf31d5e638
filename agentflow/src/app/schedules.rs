//! The App's cron schedules: making, removing and listing them, and firing those due
//! ([`App::schedule`], [`App::fire_due_schedules`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use agentflow_store::{QueueError, ScheduleRecord, Store};

use crate::access::{AccessError, Actor, Operation};
use crate::app::App;
use crate::app::submission::Submission;
use crate::core::state::State;
use crate::durable::{Allowed, check_sealed, now_ms, state_document};
use crate::schedule::{Cron, FireCheck, ScheduleError, check_id, fire_of, fire_thread, refusal_stream, refused_entry};

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
        self.schedule_with(id, cron, input, Submission::new().owner(owner))
    }

    /// [`App::schedule`] with the options of its runs as a [`Submission`] names them: their
    /// owner, tenant (the app's actor must act for it) and webhook. A schedule takes no
    /// idempotency key ([`ScheduleError::KeyNotAllowed`]): each fire starts a run of its own.
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
    /// use agentflow::{RedbStore, Submission};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let app = counter::graph().app().store(Arc::new(RedbStore::in_memory()?));
    /// let runs = Submission::new().owner("ops").tenant("acme").webhook("https://hooks.example.com/done");
    /// let made = app.schedule_with("hourly", "@hourly", &Count::default(), runs)?;
    /// assert_eq!((made.owner.as_str(), made.tenant.as_deref()), ("ops", Some("acme")));
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule_with(
        &self,
        id: &str,
        cron: &str,
        input: &S,
        submission: Submission,
    ) -> Result<ScheduleRecord, ScheduleError> {
        let Submission { owner, tenant, webhook, idempotency } = submission;
        check_id(id)?;
        let cron = Cron::parse(cron)?;
        if idempotency.is_some() {
            return Err(ScheduleError::KeyNotAllowed);
        }
        for (what, value) in [("owner", owner.as_str()), ("tenant", tenant.as_deref().unwrap_or_default())] {
            if value.contains('\0') {
                return Err(ScheduleError::NulByte { what, value: value.to_string() });
            }
        }
        let store = self.schedule_store()?;
        self.check_schedule_start(tenant.as_deref())?;
        self.setup.check_owner(&owner)?;
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
        let mut record = ScheduleRecord::new(id, graph, cron.as_str(), input, &owner, next_at, now);
        record.tenant = tenant;
        record.webhook = webhook;
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
        let listing = store.scan_schedules()?;
        for e in &listing.skipped {
            tracing::warn!(error = %e, "a cron schedule cannot be read; it is left out of the listing");
        }
        let mut kept = listing.items;
        kept.retain(|s| s.graph == graph && actor.acts_for(s.tenant.as_deref()));
        Ok(kept)
    }

    /// Checks each fire of this app's cron schedules as a start by the schedule's owner as
    /// `lookup` finds them at that time (their roles and tenants now), under the app's access
    /// policy: a schedule whose owner is gone (`None`), no longer acts for its tenant or may no
    /// longer start threads does not fire (see [`App::fire_due_schedules`]). How a server
    /// checks its schedules against its users file.
    ///
    /// Without it, each fire is checked for the app's own actor, as making the schedule was:
    /// with the default policy and actor ([`AllowAll`](crate::access::AllowAll), every tenant)
    /// every fire passes. There is nothing more to check then: an app without a lookup has no
    /// source of who people are, so a schedule's owner is only the name it was made with, and
    /// the app's own code (its actor and policy) is the authority behind every fire, as it is
    /// behind every run it submits. Whenever schedules are made for people the app learns about
    /// elsewhere (a users file, a directory), set this lookup: a `Server`
    /// always sets it to its users file.
    #[must_use]
    pub fn schedule_owners(mut self, lookup: impl Fn(&str) -> Option<Actor> + Send + Sync + 'static) -> Self {
        self.setup.fire_check = FireCheck::owners(None, Arc::new(lookup));
        self
    }

    /// [`App::schedule_owners`] under `policy` rather than the app's own (a server's).
    #[cfg(feature = "server")]
    pub(crate) fn schedule_owners_under(
        mut self,
        policy: Arc<dyn crate::access::AccessPolicy>,
        lookup: crate::schedule::OwnerLookup,
    ) -> Self {
        self.setup.fire_check = FireCheck::owners(Some(policy), lookup);
        self
    }

    /// Fires this graph's schedules due at `now` (unix millis: `next_at <= now`), as a
    /// [`Scheduler`](crate::timer::Scheduler) does at each look; blocking. Each fire queues a
    /// run of a new thread `<id>-<YYYYMMDDTHHMMZ>` (the UTC minute of `now`; `-2`, `-3`, .. if
    /// a thread of that name exists) and moves the schedule to the first time it names after
    /// `now`, in one transaction claimed only if no other process fired it first: however many
    /// times a schedule fell due before `now`, it fires once. Answers the threads it started.
    ///
    /// Each run starts for the schedule's owner and tenant, checked again at the fire: as a start
    /// by the owner as [`App::schedule_owners`] finds them now, or else by the app's actor. A
    /// refused fire starts nothing and the schedule stays as it is, due: it is logged and a
    /// `schedule.refused` entry naming why goes to the schedule's own audit stream
    /// ([`refusal_stream`](crate::schedule::refusal_stream): `schedule:<id>`, never a thread
    /// another tenant may own; once per due time and process), and the schedule fires once its owner may
    /// start it again (or is removed). A schedule whose stored expression no longer reads, or
    /// whose row does not decode, is skipped (logged); the others fire.
    ///
    /// # Errors
    /// [`ScheduleError::NoStore`]; [`ScheduleError::Queue`] if the store fails (fires made
    /// before the failure stay made) or keeps no schedules ([`QueueError::Unsupported`]).
    pub fn fire_due_schedules(&self, now: u64) -> Result<Vec<String>, ScheduleError> {
        let store = self.schedule_store()?;
        let graph = self.setup.graph.name();
        let check = &self.setup.fire_check;
        let listing = store.scan_schedules()?;
        for e in listing.skipped.iter().map(ToString::to_string).filter(|e| check.first_skip(e)) {
            tracing::warn!(error = %e, "a cron schedule cannot be read; the others fire");
        }
        let (mut started, mut refused) = (Vec::new(), BTreeSet::new());
        for record in listing.items {
            if record.graph != graph || record.next_at > now {
                continue;
            }
            let due_thread = fire_thread(&record.id, record.next_at, 0);
            if let Some(reason) = check.refusal(&self.setup.access, &record, &due_thread) {
                refused.insert((record.id.clone(), record.next_at));
                if check.first_refusal(&record) {
                    tracing::warn!(schedule = %record.id, owner = %record.owner, reason = %reason, "a cron schedule's fire was refused");
                    let stream = refusal_stream(&record.id);
                    if let Err(e) = store.append_audit(&stream, refused_entry(&record, now, &reason)) {
                        tracing::warn!(schedule = %record.id, error = %e, "a refused cron schedule could not be audited");
                    }
                }
                continue;
            }
            if let Some(thread) = fire_one(store.as_ref(), &record, now)? {
                tracing::debug!(schedule = %record.id, thread = %thread, "fired a cron schedule");
                started.push(thread);
            }
        }
        check.forget_others(&refused);
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
