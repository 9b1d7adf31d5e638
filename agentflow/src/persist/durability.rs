//! [`Durability`]: when a run's checkpoints reach stable storage.

/// When a run's checkpoints reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each step is on disk before the next one starts (one durable commit per
    /// super-step; concurrent threads share commits).
    #[default]
    Sync,
    /// Each step is committed before the next starts but reaches the disk in
    /// the background; a crash loses at most the store's flush interval
    /// (200 ms for [`RedbStore`](crate::RedbStore) by default).
    Async,
    /// Steps are committed without waiting for the disk; only the end of the
    /// run (completion, failure, pause) is made durable before the run
    /// returns. A crash may lose every step since the last end, though the
    /// store's background flush usually saves most of them.
    Exit,
}
