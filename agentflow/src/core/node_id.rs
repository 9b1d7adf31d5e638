//! [`NodeId`]: which node of a graph, shared by the plan and the steps that route to it.

use std::fmt;

/// The index of a node in its graph, in declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(u32);

impl NodeId {
    /// The node with this declaration index.
    pub const fn new(index: u32) -> Self {
        NodeId(index)
    }
    /// The declaration index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}
