//! The operations on stored threads that an [`AccessPolicy`](super::AccessPolicy) decides.

use std::fmt;
use std::str::FromStr;

/// An operation on stored threads, as an [`AccessPolicy`](super::AccessPolicy) sees it.
///
/// New operations may be added; match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// List threads (each listing shows only the threads of the actor's tenants).
    List,
    /// Read a thread's record, state and what it waits for.
    ReadState,
    /// Read a thread's checkpoints, audit log and export.
    ReadHistory,
    /// Start a thread: a new run, a submitted one, an imported thread.
    Start,
    /// Write a manual update to a thread's state, or raise its limits.
    UpdateState,
    /// Branch a thread back to an earlier checkpoint.
    Fork,
    /// Resume a thread, or queue it to be resumed by a worker.
    Resume,
    /// Answer a question a thread waits on in `cx.interrupt`.
    Answer,
    /// Decide an approval: approve, edit, reject, cancel, settle.
    Decide,
    /// Ask a queued or running thread to stop for good.
    Cancel,
    /// Ask a queued or running thread to pause at its next step boundary.
    Pause,
    /// Drop a finished thread's older checkpoints (retention).
    Compact,
    /// See the fields a state marks as personal (`#[state(pii)]`) unmasked. Without it they
    /// read as `•••` on every surface, and every unmasked read is audited.
    SeePersonalData,
    /// Remove a thread's data (and its children's) for good, or place and lift a legal hold.
    Purge,
}

impl Operation {
    /// Every operation, in declaration order.
    pub const ALL: [Operation; 14] = [
        Operation::List,
        Operation::ReadState,
        Operation::ReadHistory,
        Operation::Start,
        Operation::UpdateState,
        Operation::Fork,
        Operation::Resume,
        Operation::Answer,
        Operation::Decide,
        Operation::Cancel,
        Operation::Pause,
        Operation::Compact,
        Operation::SeePersonalData,
        Operation::Purge,
    ];

    /// The snake_case name used in policy files, messages and audit entries.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::List => "list",
            Operation::ReadState => "read_state",
            Operation::ReadHistory => "read_history",
            Operation::Start => "start",
            Operation::UpdateState => "update_state",
            Operation::Fork => "fork",
            Operation::Resume => "resume",
            Operation::Answer => "answer",
            Operation::Decide => "decide",
            Operation::Cancel => "cancel",
            Operation::Pause => "pause",
            Operation::Compact => "compact",
            Operation::SeePersonalData => "see_personal_data",
            Operation::Purge => "purge",
        }
    }

    /// What the operation does, for messages: "fork threads".
    pub fn describe(self) -> &'static str {
        match self {
            Operation::List => "list threads",
            Operation::ReadState => "read a thread's state",
            Operation::ReadHistory => "read a thread's history",
            Operation::Start => "start threads",
            Operation::UpdateState => "update a thread's state",
            Operation::Fork => "fork threads",
            Operation::Resume => "resume threads",
            Operation::Answer => "answer a thread's questions",
            Operation::Decide => "decide approvals",
            Operation::Cancel => "cancel runs",
            Operation::Pause => "pause runs",
            Operation::Compact => "compact threads",
            Operation::SeePersonalData => "see personal data unmasked",
            Operation::Purge => "purge threads",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Operation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operation::ALL.into_iter().find(|op| op.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Operation::ALL.iter().map(|op| op.as_str()).collect();
            format!("`{s}` is not an operation; the operations are {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Operation;

    /// `ALL` lists every variant once: the match has no wildcard, so a new variant fails to
    /// compile here until it is given a place in `ALL`.
    #[test]
    fn all_lists_every_variant_once_in_order() {
        let index = |op: Operation| match op {
            Operation::List => 0,
            Operation::ReadState => 1,
            Operation::ReadHistory => 2,
            Operation::Start => 3,
            Operation::UpdateState => 4,
            Operation::Fork => 5,
            Operation::Resume => 6,
            Operation::Answer => 7,
            Operation::Decide => 8,
            Operation::Cancel => 9,
            Operation::Pause => 10,
            Operation::Compact => 11,
            Operation::SeePersonalData => 12,
            Operation::Purge => 13,
        };
        // The last variant closes the list: a variant added after it takes its place here.
        assert_eq!(index(Operation::Purge), Operation::ALL.len() - 1);
        for (i, op) in Operation::ALL.into_iter().enumerate() {
            assert_eq!(index(op), i, "{op} is out of place in Operation::ALL");
            assert_eq!(op.as_str().parse::<Operation>(), Ok(op));
        }
    }
}
