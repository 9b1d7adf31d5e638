//! [`CrashMatrix`]: the uncut run, then each boundary cut before and after (see the
//! [module docs](super)).

use std::sync::Arc;

use agentflow_store::{RedbStore, Store};

use super::checks;
use super::crash_store::{Aim, CrashStore};
use super::driver::{self, Answers};
use super::error::CrashMatrixError;
use super::event_log_check;
use super::recorder::{self, Recorder};
use super::report::{Boundary, CrashReport, Cut, Ending, Trial, Violation};
use crate::{App, Limits, State};

/// Makes the empty store each run of the matrix starts on.
pub type StoreFactory = Arc<dyn Fn() -> Result<Arc<dyn Store>, String> + Send + Sync>;

/// A crash test over every durable boundary of one run of a graph: see the
/// [module docs](crate::testing).
#[must_use = "a crash matrix does nothing until `.run()`"]
pub struct CrashMatrix<'d, S: State, D> {
    app: App<S, D>,
    pub(super) deps: &'d D,
    pub(super) input: Option<S>,
    answers: Answers,
    store: StoreFactory,
    pub(super) thread: String,
    owner: String,
    tenant: Option<String>,
    limits: Option<Limits>,
    only: Option<String>,
    failure_expected: bool,
}

impl<'d, S: State, D: Sync> CrashMatrix<'d, S, D> {
    /// A matrix for `app` (its policy, approval TTL and migrations are kept; its store is
    /// replaced by the matrix's) with `deps`.
    pub fn new(app: App<S, D>, deps: &'d D) -> Self {
        let store: StoreFactory =
            Arc::new(|| RedbStore::in_memory().map(|s| Arc::new(s) as Arc<dyn Store>).map_err(|e| e.to_string()));
        CrashMatrix {
            app,
            deps,
            input: None,
            answers: Answers::new(),
            store,
            thread: "crash-matrix".to_string(),
            owner: "agent:crash-matrix".to_string(),
            tenant: None,
            limits: None,
            only: None,
            failure_expected: false,
        }
    }

    /// The graph's input.
    pub fn input(mut self, input: S) -> Self {
        self.input = Some(input);
        self
    }

    /// The scripted people: answers to questions, decisions on approvals.
    pub fn answers(mut self, answers: Answers) -> Self {
        self.answers = answers;
        self
    }

    /// The empty store each run starts on (an in-memory [`RedbStore`] by default): for a
    /// store of your own, or a redb file on a RAM disk.
    pub fn store(mut self, factory: impl Fn() -> Result<Arc<dyn Store>, String> + Send + Sync + 'static) -> Self {
        self.store = Arc::new(factory);
        self
    }

    /// The thread id the runs use (`crash-matrix` by default).
    pub fn thread(mut self, id: impl Into<String>) -> Self {
        self.thread = id.into();
        self
    }

    /// Cuts only the boundary named `key` ([`Boundary::key`], as a report prints it): to run
    /// one failing cut again while fixing it.
    pub fn only(mut self, key: impl Into<String>) -> Self {
        self.only = Some(key.into());
        self
    }

    /// Who the run acts for (`agent:crash-matrix` by default): the requester of its approvals.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// The tenant the run's thread belongs to (none by default; see [`Runner::tenant`](crate::Runner::tenant)).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Accepts an uncut run that ends `failed`. By default such a run is refused
    /// ([`CrashMatrixError::Reference`]): every cut run would fail alike and the report would
    /// be clean, though nothing was shown. Call this when the failure is the scenario (a
    /// compensation, say, starts from one).
    pub fn failure_expected(mut self) -> Self {
        self.failure_expected = true;
        self
    }

    /// The run's limits (model calls, tool calls, tokens, ...), as `Runner::limits` sets them.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    pub(super) fn plan(&self) -> driver::Plan<'_> {
        driver::Plan {
            thread: &self.thread,
            owner: &self.owner,
            tenant: self.tenant.as_deref(),
            limits: self.limits,
            answers: &self.answers,
        }
    }

    pub(super) fn app_on(&self, store: Arc<dyn Store>, recorder: &Arc<Recorder>) -> App<S, D> {
        // The event log is on for every run the matrix makes: each cut tries it too.
        let mut app = self.app.clone().store(store).event_log(true);
        Arc::make_mut(&mut app.setup.gateway).probe = Some(Arc::clone(recorder) as Arc<dyn crate::probe::Probe>);
        app
    }

    fn fresh_store(&self) -> Result<Arc<dyn Store>, CrashMatrixError> {
        (self.store)().map_err(CrashMatrixError::Store)
    }

    /// Runs the matrix: the uncut run, then every boundary cut before and after. Blocks until
    /// done; call it outside any tokio runtime (from a plain `#[test] fn`).
    pub fn run(self) -> Result<CrashReport, CrashMatrixError> {
        let input = self.input.clone().ok_or(CrashMatrixError::NoInput)?;
        let uncut = self.uncut(&input)?;
        let mut report = CrashReport {
            reference: uncut.ending.clone(),
            boundaries: uncut.boundaries.clone(),
            trials: Vec::new(),
            violations: uncut.violations.clone(),
        };
        for boundary in &uncut.boundaries {
            if self.only.as_ref().is_some_and(|only| only != &boundary.key) {
                continue;
            }
            for cut in [Cut::Before, Cut::After] {
                let (trial, violations) = self.trial(&input, &uncut, &boundary.key, cut)?;
                report.trials.push(trial);
                report.violations.extend(violations);
            }
        }
        Ok(report)
    }

    /// The uncut run, recorded.
    pub(super) fn uncut(&self, input: &S) -> Result<Uncut, CrashMatrixError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(CrashMatrixError::InsideRuntime);
        }
        let inner = self.fresh_store()?;
        let store = Arc::new(CrashStore::new(Arc::clone(&inner), Aim::Record));
        let recorder = Arc::new(Recorder::recording());
        let app = self.app_on(store.clone(), &recorder);
        let plan = self.plan();
        let ending = on_runtime(&store, driver::drive(&app, self.deps, input, &plan, true))?
            .ok_or_else(|| CrashMatrixError::Snapshot("the uncut run was cut".into()))?;
        match &ending {
            Ending::Finished { outcome, .. } if outcome == "failed" && !self.failure_expected => {
                return Err(CrashMatrixError::Reference(ending));
            }
            Ending::Finished { .. } => {}
            _ => return Err(CrashMatrixError::Reference(ending)),
        }
        let at = checks::At { boundary: "(uncut run)", cut: Cut::After };
        Ok(Uncut {
            violations: [checks::stored(&at, &*inner), event_log_check::event_logs(&at, &*inner)].concat(),
            ending,
            boundaries: store.boundaries(),
            tally: recorder.take_tally(),
            script: recorder.script(),
        })
    }

    /// One cut: run to it, carry the snapshot over, resume to the end, check.
    pub(super) fn trial(
        &self,
        input: &S,
        uncut: &Uncut,
        boundary: &str,
        cut: Cut,
    ) -> Result<(Trial, Vec<Violation>), CrashMatrixError> {
        let store = Arc::new(CrashStore::new(self.fresh_store()?, Aim::At(boundary.to_string(), cut)));
        let recorder = Arc::new(Recorder::replaying(uncut.script.clone()));
        let app = self.app_on(store.clone(), &recorder);
        let plan = self.plan();
        on_runtime(&store, driver::drive(&app, self.deps, input, &plan, true))?;
        let Some(snapshot) = store.take_snapshot() else {
            let trial = Trial { boundary: boundary.to_string(), cut, reached: false, ending: None };
            return Ok((trial, Vec::new()));
        };
        let dumps = snapshot.map_err(CrashMatrixError::Snapshot)?;
        let before = recorder.take_tally();
        let acked = store.acked();
        let started = dumps.iter().any(|d| d.thread.id == self.thread);
        let inner = self.fresh_store()?;
        inner.restore_threads(dumps).map_err(|e| CrashMatrixError::Snapshot(e.to_string()))?;
        let resumed = Arc::new(CrashStore::new(Arc::clone(&inner), Aim::Forward));
        let app = self.app_on(resumed.clone(), &recorder);
        let ending = on_runtime(&resumed, driver::drive(&app, self.deps, input, &plan, !started))?
            .unwrap_or_else(|| Ending::Error { error: "the resumed run was cut".into() });
        let after = recorder.take_tally();
        let at = checks::At { boundary, cut };
        let mut violations = checks::ran(&at, &uncut.tally, &before, &after, &acked);
        violations.extend(checks::ending(&at, &uncut.ending, &ending));
        violations.extend(checks::stored(&at, &*inner));
        violations.extend(event_log_check::event_logs(&at, &*inner));
        Ok((Trial { boundary: boundary.to_string(), cut, reached: true, ending: Some(ending) }, violations))
    }
}

/// The uncut run, as the trials compare with it.
pub(super) struct Uncut {
    pub(super) ending: Ending,
    pub(super) boundaries: Vec<Boundary>,
    pub(super) tally: recorder::Tally,
    pub(super) script: recorder::Script,
    pub(super) violations: Vec<Violation>,
}

/// Runs `work` on a runtime of its own until it ends (`Some`) or `store` dies (`None`), then
/// shuts the runtime down without waiting for what is still running: the process died.
pub(super) fn on_runtime<T>(store: &CrashStore, work: impl Future<Output = T>) -> Result<Option<T>, CrashMatrixError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CrashMatrixError::Runtime(e.to_string()))?;
    let died = Arc::clone(&store.died);
    // One thread, store calls inline: the run reaches the store in the same order every time.
    crate::durable::run_store_calls_inline(true);
    let out = runtime.block_on(async {
        tokio::select! {
            biased;
            () = died.notified() => None,
            out = work => Some(out),
        }
    });
    crate::durable::run_store_calls_inline(false);
    runtime.shutdown_background();
    Ok(out)
}
