//! The migrations `#[graph(migrate(from = N, ..))]` declares: where threads parked in a node,
//! waiting on a tool's approval or holding a tool's arguments go on the next version.

use serde_json::Value;

/// One `migrate(from = N, ..)`: how a thread stored at version `from` moves to `from + 1`.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GraphMigration {
    /// The version it migrates from; it leads to `from + 1`.
    pub from: u32,
    /// `nodes(old -> new, gone -> END)`: a thread at `old` continues at `new`; one at a node
    /// mapped to `END` drops it (a thread left with no node ends completed).
    pub nodes: &'static [(&'static str, &'static str)],
    /// `tools(old -> new, gone -> cancel)`: an approval pending for `old` asks for `new`; one
    /// mapped to cancel is cancelled, with an audit entry.
    pub tools: &'static [(&'static str, ToolMigration)],
    /// `args(tool = path::to::fn, other = cancel)`: an approval pending for `tool` (its name at
    /// `from + 1`) has its arguments rewritten by the function, or is cancelled.
    pub args: &'static [(&'static str, ArgsMigration)],
}

impl GraphMigration {
    /// Built by `#[graph]`.
    #[doc(hidden)]
    pub const fn new(
        from: u32,
        nodes: &'static [(&'static str, &'static str)],
        tools: &'static [(&'static str, ToolMigration)],
        args: &'static [(&'static str, ArgsMigration)],
    ) -> Self {
        GraphMigration { from, nodes, tools, args }
    }
}

/// What becomes of an approval pending for a tool the new version renamed or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolMigration {
    /// The approval asks for this tool instead.
    Rename(&'static str),
    /// The approval is cancelled, with an audit entry.
    Cancel,
}

/// Rewrites the arguments of a pending approval for a tool whose argument schema changed. An
/// `Err` cancels the migration of the thread (it stays on its old version) with the message.
pub type ArgsMap = fn(Value) -> Result<Value, String>;

/// What becomes of an approval pending for a tool whose arguments changed.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum ArgsMigration {
    /// The arguments go through the function.
    Map(ArgsMap),
    /// The approval is cancelled, with an audit entry.
    Cancel,
}

impl std::fmt::Debug for ArgsMigration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgsMigration::Map(_) => f.write_str("Map(..)"),
            ArgsMigration::Cancel => f.write_str("Cancel"),
        }
    }
}
