//! A lease: which executor holds a thread, until when.

use serde::{Deserialize, Serialize};

/// Exclusive hold of a thread by one executor until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds the thread (an executor instance id).
    pub holder: String,
    /// Unix millis after which another holder may take the thread over.
    pub expires_at: u64,
}
