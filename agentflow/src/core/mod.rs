//! The vocabulary every layer above speaks, with no runtime, no store, no `App` and no `Ctx`:
//! the state and its reducers, a node's step and errors, messages, retry policies, budgets and
//! usage, value checks and encoding, node ids, people, the clock, and the key that sets a map
//! instance's effects apart.

pub(crate) mod budget;
pub(crate) mod clock;
pub(crate) mod encode;
pub(crate) mod error;
pub(crate) mod instance_key;
pub mod message;
pub(crate) mod node_id;
pub(crate) mod person;
pub(crate) mod process;
pub mod reducer;
pub(crate) mod retry;
pub(crate) mod state;
pub(crate) mod step;
pub(crate) mod usage;
pub(crate) mod value_check;
