//! What `#[graph(id = .., version = .., locks = .., migrate(..))]` declares: the graph's id,
//! version, migrations, node shape and lock directory.

use super::migration::GraphMigration;

/// What `#[graph(id = .., version = .., migrate(..))]` declares.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Release {
    /// The graph's stable id (`id = ".."`, the module name when absent): names its lock
    /// directory, `graphs/<id>/`.
    pub id: &'static str,
    /// The graph's version (`version = N`, 1 when absent). Threads stored without one are
    /// version 1.
    pub version: u32,
    /// The declared migrations, one per `migrate(from = N, ..)`, in the order written.
    pub migrations: &'static [GraphMigration],
    /// The token-level shape the macro checked against the locks, as JSON: the `nodes` object
    /// of a lock (see [`LOCK_FORMAT`](super::LOCK_FORMAT)). Written into the lock as it is.
    pub nodes: &'static str,
    /// The lock directory (`locks = ".."`, `graphs` when absent), made absolute by `#[graph]`
    /// against the directory of the source file that declares the graph; the lock of version N
    /// is `<locks>/<id>/v<N>.lock`. Empty for a graph that is not released.
    pub locks: &'static str,
}

impl Release {
    /// The release of a graph built without `#[graph]`, or one that declares nothing:
    /// version 1 under its own name, no migrations, no token-level shape.
    pub const fn unversioned(name: &'static str) -> Self {
        Release { id: name, version: 1, migrations: &[], nodes: "{}", locks: "" }
    }

    /// Built by `#[graph]`.
    #[doc(hidden)]
    pub const fn new(
        id: &'static str,
        version: u32,
        migrations: &'static [GraphMigration],
        nodes: &'static str,
        locks: &'static str,
    ) -> Self {
        Release { id, version, migrations, nodes, locks }
    }
}
