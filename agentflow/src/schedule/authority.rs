//! Whether a due schedule may still start its run: [`FireCheck`], the check each fire makes of
//! the authority behind the schedule, and what it has reported already.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use agentflow_store::{NewAuditEntry, ScheduleRecord};
use serde_json::json;

use super::fire::schedule_actor;
use crate::access::{Access, AccessPolicy, Actor};

/// The audit entry kind of a fire refused because the schedule's owner may no longer start its
/// runs.
pub const SCHEDULE_REFUSED_KIND: &str = "schedule.refused";

/// The prefix no thread id may take: the audit streams of schedules' refused fires
/// ([`refusal_stream`]) are named with it. Every path that creates a thread refuses an id that
/// starts with it ([`RunError::ReservedThreadId`](crate::RunError::ReservedThreadId),
/// [`WorkerError::ReservedThreadId`](crate::WorkerError::ReservedThreadId)), so no thread,
/// whoever chose its id, shares a schedule's stream.
pub const RESERVED_THREAD_PREFIX: &str = "schedule:";

/// Whether `thread` is an id no thread may take (it starts with [`RESERVED_THREAD_PREFIX`]).
pub fn is_reserved_thread_id(thread: &str) -> bool {
    thread.starts_with(RESERVED_THREAD_PREFIX)
}

/// The audit stream the refused fires of schedule `id` are written to: `schedule:<id>`, the
/// name its fires' `run.submitted` entries give as actor ([`schedule_actor`]). No thread has
/// that id ([`is_reserved_thread_id`]: refused wherever a thread is created, and no thread a
/// fire starts takes it, schedule ids holding no `:`), so no other tenant's thread shares the
/// stream: it is read with the schedule (`GET /api/schedules` shows the refusal of its current
/// due time) or with [`App::audit_log`](crate::App::audit_log).
pub fn refusal_stream(id: &str) -> String {
    schedule_actor(id)
}

/// Finds the person a schedule's owner names, as they are now (`None`: no such person any more).
pub(crate) type OwnerLookup = Arc<dyn Fn(&str) -> Option<Actor> + Send + Sync>;

/// How each fire of an app's schedules is checked, and what the app's scheduler has logged and
/// audited already (so a refused schedule, which stays due, is reported once per due time, and
/// a damaged row once).
#[derive(Clone, Default)]
pub(crate) struct FireCheck {
    /// The policy (`None`: the app's) and the lookup of owners: each fire is checked as a start
    /// by the schedule's owner as the lookup finds them now. `None`: checked for the app's own
    /// actor under the app's policy (as making the schedule was).
    owners: Option<(Option<Arc<dyn AccessPolicy>>, OwnerLookup)>,
    reported: Arc<Mutex<Reported>>,
}

#[derive(Default)]
struct Reported {
    /// The refusals audited: schedule id and the `next_at` it was refused at.
    refused: BTreeSet<(String, u64)>,
    /// The unreadable rows logged, by their error.
    skipped: BTreeSet<String>,
}

impl fmt::Debug for FireCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FireCheck").field("owners", &self.owners.is_some()).finish_non_exhaustive()
    }
}

impl FireCheck {
    /// Checks each fire for the schedule's owner as `lookup` finds them, under `policy` (`None`:
    /// the app's policy).
    pub(crate) fn owners(policy: Option<Arc<dyn AccessPolicy>>, lookup: OwnerLookup) -> Self {
        FireCheck { owners: Some((policy, lookup)), reported: Arc::default() }
    }

    /// Why a fire of `record` starting `thread` is refused, if it is: the owner is no longer
    /// known, no longer acts for the schedule's tenant, or the policy no longer lets them start
    /// threads. `app` is the app's access (used when no lookup is set).
    pub(crate) fn refusal(&self, app: &Access, record: &ScheduleRecord, thread: &str) -> Option<String> {
        let access = match &self.owners {
            None => app.clone(),
            Some((policy, lookup)) => match lookup(&record.owner) {
                Some(actor) => Access::shared(policy.clone().unwrap_or_else(|| Arc::clone(app.policy())), actor),
                None => {
                    return Some(format!(
                        "its owner `{}` is no longer a known user (remove the schedule, or make it again as someone \
                         who may start its runs)",
                        record.owner
                    ));
                }
            },
        };
        access.check_start(thread, record.tenant.as_deref()).err().map(|e| e.to_string())
    }

    /// Whether the refusal of `record` at its `next_at` is new (then noted);
    /// [`FireCheck::forget_others`] drops those no longer refused.
    pub(crate) fn first_refusal(&self, record: &ScheduleRecord) -> bool {
        let mut reported = self.reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        reported.refused.insert((record.id.clone(), record.next_at))
    }

    /// Forgets the refusals not in `kept` (a schedule fired, replaced or allowed again since).
    pub(crate) fn forget_others(&self, kept: &BTreeSet<(String, u64)>) {
        let mut reported = self.reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        reported.refused.retain(|r| kept.contains(r));
    }

    /// Whether unreadable-row error `error` is new (then noted).
    pub(crate) fn first_skip(&self, error: &str) -> bool {
        let mut reported = self.reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        reported.skipped.insert(error.to_string())
    }
}

/// The `schedule.refused` audit entry of a fire of `record` refused at `now` for `reason`.
pub(crate) fn refused_entry(record: &ScheduleRecord, now: u64, reason: &str) -> NewAuditEntry {
    let detail = json!({
        "schedule": record.id,
        "graph": record.graph,
        "owner": record.owner,
        "tenant": record.tenant,
        "cron": record.cron,
        "due": record.next_at,
        "reason": reason,
    });
    NewAuditEntry::new(now, schedule_actor(&record.id), SCHEDULE_REFUSED_KIND, detail)
}
