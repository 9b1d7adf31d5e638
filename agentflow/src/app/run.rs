//! Running the app's graph: in memory from an input, or with options through a [`Runner`].

use crate::app::App;
use crate::core::state::State;
#[cfg(doc)]
use crate::outcome::Outcome;
use crate::outcome::{Run, RunError};
use crate::run::Runner;

impl<S: State, D: Sync> App<S, D> {
    /// Runs the graph from `input` to an [`Outcome`] with default limits,
    /// in memory (no thread).
    ///
    /// Use [`App::runner`] to set a thread, a deadline, a cancellation
    /// token, breakpoints or an event sink.
    pub fn run<'g>(&self, input: S, deps: &'g D) -> impl Future<Output = Result<Run<S>, RunError>> + use<'g, S, D> {
        self.runner(deps).run(input)
    }

    /// A run with options. The runner holds its own handle to the plan,
    /// store and policy (they are shared), so it may outlive `self`.
    pub fn runner<'g>(&self, deps: &'g D) -> Runner<'g, S, D> {
        Runner::new(self.setup.clone(), deps)
    }
}
