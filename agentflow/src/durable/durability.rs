//! [`Durability`]: when a run's checkpoints reach stable storage.

/// When a run's checkpoints reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each step is on disk before the next one starts (one durable commit per
    /// super-step; concurrent threads share commits). Within a step that runs
    /// several nodes or map instances, each one's write is on disk as soon as
    /// it finishes (writes that finish together share one commit), so a resume
    /// after a crash runs only the nodes and instances that had not finished.
    #[default]
    Sync,
    /// Each step is committed before the next starts but reaches the disk in
    /// the background; a crash loses at most the store's flush interval
    /// (200 ms for [`RedbStore`](crate::RedbStore) by default). The writes of
    /// a step's finished nodes and map instances are kept with the step's
    /// commit (or its failure or pause) only: a crash in the middle of a step
    /// runs all of its nodes and instances again.
    Async,
    /// Steps are committed without waiting for the disk; only the end of the
    /// run (completion, failure, pause) is made durable before the run
    /// returns. A crash may lose every step since the last end, though the
    /// store's background flush usually saves most of them. As with `Async`, a
    /// crash in the middle of a step runs all of its nodes and instances again.
    Exit,
}
