//! What a [`SealedStore`] seals of what admission keeps beside the run queue: the inputs of
//! follow-up runs (run inputs, under their thread's key), the input of each cron schedule
//! (under a key of the schedule's own, destroyed when the schedule is deleted) and the payloads
//! of webhook deliveries (under their thread's key).

use crate::error::StorageError;
use crate::queue::{QueueError, QueuedRun, ScheduleFire, Settle};
use crate::record::{ScheduleRecord, WebhookDelivery};
use crate::sealed::error::SealError;
use crate::sealed::records::kind;
use crate::sealed::sealed_store::SealedStore;
use crate::store::Store;

/// The name of schedule `id`'s data key in the key store: a control character first, so that no
/// thread id a server accepts names it.
fn schedule_key(id: &str) -> String {
    format!("\u{1}schedule:{id}")
}

impl<S: Store> SealedStore<S> {
    /// `schedule` with its input sealed under the schedule's key.
    pub(crate) fn seal_schedule(&self, mut schedule: ScheduleRecord) -> Result<ScheduleRecord, StorageError> {
        let key = schedule_key(&schedule.id);
        schedule.input = self.sealer(&key)?.bytes(kind::SCHEDULE, &schedule.input)?;
        Ok(schedule)
    }

    /// `schedule` with its input opened.
    pub(crate) fn open_schedule(&self, mut schedule: ScheduleRecord) -> Result<ScheduleRecord, SealError> {
        let key = schedule_key(&schedule.id);
        schedule.input = self.opener(&key).bytes(kind::SCHEDULE, std::mem::take(&mut schedule.input))?;
        Ok(schedule)
    }

    /// Removes schedule `id`, then destroys its key: a copy of the data no longer opens its input.
    pub(crate) fn delete_sealed_schedule(&self, id: &str) -> Result<bool, QueueError> {
        let deleted = self.inner.delete_schedule(id)?;
        self.ring.destroy(&schedule_key(id)).map_err(StorageError::from)?;
        Ok(deleted)
    }

    /// `fire` with its run's input and its audit entry sealed under the run's thread's key.
    pub(crate) fn seal_fire(&self, mut fire: ScheduleFire) -> Result<ScheduleFire, StorageError> {
        fire.entry = self.sealer(&fire.run.thread)?.audit(fire.entry)?;
        fire.run = self.seal_run(fire.run)?;
        Ok(fire)
    }

    /// `settle` with its webhook delivery's payload sealed under `thread`'s key.
    pub(crate) fn seal_settle(&self, thread: &str, settle: &Settle) -> Result<Settle, StorageError> {
        let mut settle = settle.clone();
        if let Some(delivery) = &mut settle.webhook {
            delivery.payload = self.sealer(thread)?.bytes(kind::WEBHOOK, &delivery.payload)?;
        }
        Ok(settle)
    }

    /// A delivery with its payload opened.
    pub(crate) fn open_delivery(&self, mut delivery: WebhookDelivery) -> Result<WebhookDelivery, SealError> {
        let thread = delivery.thread.clone();
        delivery.payload = self.opener(&thread).bytes(kind::WEBHOOK, std::mem::take(&mut delivery.payload))?;
        Ok(delivery)
    }

    /// Follow-up runs with their inputs opened.
    pub(crate) fn open_runs(&self, runs: Vec<QueuedRun>) -> Result<Vec<QueuedRun>, StorageError> {
        Ok(runs.into_iter().map(|r| self.open_run(r)).collect::<Result<_, _>>()?)
    }
}
