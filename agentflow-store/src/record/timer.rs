//! A thread's durable timer: the record a store keeps of when a sleeping thread is due.

use serde::{Deserialize, Serialize};

use crate::codec::{Dec, DecodeResult, Enc};
use crate::record::payload::RECORD_VERSION;

/// A durable timer's wake time as `agentflow.timer_of` keeps it: unix millis, as a record.
pub(crate) struct WakeAt;

impl WakeAt {
    pub(crate) fn encode(at: u64) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.u64(at);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<u64> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let at = d.u64("wake_at")?;
        d.end()?;
        Ok(at)
    }
}

/// A thread's durable timer: the thread sleeps until `wake_at`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Timer {
    /// Unix millis at which the thread is due.
    pub wake_at: u64,
    /// The sleeping thread.
    pub thread: String,
}
