//! Graph versions, their committed locks and the migrations that move a waiting thread from one
//! version to the next.
//!
//! `#[graph(id = "support", version = 2, migrate(from = 1, nodes(review -> human_review)))]`
//! names a released graph. Each released version's shape is committed as a lock file,
//! `graphs/<id>/v<N>.lock` under the crate's root; `#[graph]` compares the graph with the locks
//! at compile time (nodes, routes, `writes`, tool lists), and the test it generates compares
//! what the macro cannot see (the state's field types, tool argument schemas and risk
//! classes). A thread stored on an older version resumes on the current one through the
//! declared migrations, applied in one audited commit (`graph.migrated`).

mod changes;
mod check;
mod declaration;
mod json_diff;
mod lock;
mod lock_error;
mod migration;
mod older_locks;

pub use check::{LOCK_ENV, LockMode, LockOutcome, LockReport, check_lock, check_lock_in};
pub use declaration::Release;
pub use lock::{GraphLock, LOCK_FORMAT, LockParts, Lockable};
pub use lock_error::LockError;
pub use migration::{ArgsMap, ArgsMigration, GraphMigration, ToolMigration};
