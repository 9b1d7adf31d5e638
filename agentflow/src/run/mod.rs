//! The executor: runs a compiled graph in super-steps and reports how each run ended. The
//! [`Runner`] (`runner`) is configured step by step, starts or resumes a run (`start`), and
//! drives it (`drive`) through the super-step loop (`exec`), whose nodes run in `node`, map
//! instances in `instances`; `answers` resumes with a person's answers, `ending` records how a
//! run ended, `events` and `step` are the loop's events and the merge of a step's writes.

mod answers;
mod child;
mod drive;
mod ending;
mod events;
pub(crate) mod exec;
mod identity;
pub(crate) mod instances;
pub(crate) mod node;
mod runner;
pub(crate) mod setup;
mod start;
mod step;
mod trace;

pub use runner::{DEFAULT_STOP_GRACE, DEFAULT_STREAM_BUFFER, Runner};
pub use setup::Migration;
pub(crate) use setup::Setup;
