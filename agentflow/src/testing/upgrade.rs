//! [`UpgradeMatrix`]: a thread parked by one version of a graph, resumed by the next, with the
//! process killed before and after every write of that resume, the move to the new version
//! (its one `graph.migrated` commit) among them.

use std::sync::Arc;

use agentflow_store::{RedbStore, Store, ThreadDump};

use super::checks;
use super::crash_store::{self, Aim, CrashStore};
use super::driver::{self, Answers};
use super::error::CrashMatrixError;
use super::matrix::{StoreFactory, on_runtime};
use super::report::{Check, CrashReport, Cut, Ending, Trial, Violation};
use crate::{App, Outcome, State};

use crate::persist::MIGRATED_KIND as MIGRATED;

/// A crash test of a graph's upgrade: a thread is run on the old version until it parks (a
/// question for a person, a timer, an approval), then resumed to its end on the new version,
/// uncut; then that resume is run again from the parked thread with the process killed just
/// before and just after each of its writes, and resumed again on the new version.
///
/// At each cut, besides the crash matrix's checks of the ending and of what is left running
/// ([`Check::EndingDiffers`], [`Check::LeftRunning`]), the thread is wholly on one version:
/// on the old one (its old fingerprint, no `graph.migrated` entry: resumable again) or on the
/// new one (the new fingerprint and exactly one `graph.migrated`); and it ends with exactly one
/// ([`Check::MigrationTorn`]).
///
/// ```
/// use agentflow::prelude::*;
/// use agentflow::testing::{Answers, CrashMatrixError, UpgradeMatrix};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// struct Doc { answer: String }
///
/// #[graph(state = Doc, start = ask, id = "doc")]
/// mod v1 {
///     use super::*;
///     #[node(goto = [END], interrupt)]
///     async fn ask(_d: &Doc, cx: &Ctx<'_, ()>) -> Result<Step<Doc>, NodeError> {
///         let answer: String = cx.interrupt("ok?")?;
///         Ok(goto!(END, Doc::update().answer(answer)))
///     }
/// }
///
/// #[graph(state = Doc, start = confirm, id = "doc", version = 2, migrate(from = 1, nodes(ask -> confirm)))]
/// mod v2 {
///     use super::*;
///     #[node(goto = [END], interrupt)]
///     async fn confirm(_d: &Doc, cx: &Ctx<'_, ()>) -> Result<Step<Doc>, NodeError> {
///         let answer: String = cx.interrupt("ok?")?;
///         Ok(goto!(END, Doc::update().answer(answer)))
///     }
/// }
///
/// fn main() -> Result<(), CrashMatrixError> {
///     let answers = Answers::new().interrupt("confirm", "yes");
///     let report = UpgradeMatrix::new(v1::graph().app(), &(), v2::graph().app(), &())
///         .input(Doc::default())
///         .answers(answers)
///         .run()?;
///     assert!(report.is_clean(), "{report}");
///     Ok(())
/// }
/// ```
#[must_use = "an upgrade matrix does nothing until `.run()`"]
pub struct UpgradeMatrix<'d, S: State, D, T: State, E> {
    old: App<S, D>,
    old_deps: &'d D,
    new: App<T, E>,
    new_deps: &'d E,
    input: Option<S>,
    answers: Answers,
    store: StoreFactory,
    thread: String,
    owner: String,
}

impl<'d, S: State, D: Sync, T: State, E: Sync> UpgradeMatrix<'d, S, D, T, E> {
    /// A matrix that parks a thread on `old` (with `old_deps`) and resumes it on `new` (with
    /// `new_deps`); each app's policy and migrations are kept, its store replaced.
    pub fn new(old: App<S, D>, old_deps: &'d D, new: App<T, E>, new_deps: &'d E) -> Self {
        let store: StoreFactory =
            Arc::new(|| RedbStore::in_memory().map(|s| Arc::new(s) as Arc<dyn Store>).map_err(|e| e.to_string()));
        UpgradeMatrix {
            old,
            old_deps,
            new,
            new_deps,
            input: None,
            answers: Answers::new(),
            store,
            thread: "upgrade-matrix".to_string(),
            owner: "agent:crash-matrix".to_string(),
        }
    }

    /// The old version's input.
    pub fn input(mut self, input: S) -> Self {
        self.input = Some(input);
        self
    }

    /// The scripted people who answer the thread on the new version.
    pub fn answers(mut self, answers: Answers) -> Self {
        self.answers = answers;
        self
    }

    /// The empty store each run starts on (an in-memory [`RedbStore`] by default).
    pub fn store(mut self, factory: impl Fn() -> Result<Arc<dyn Store>, String> + Send + Sync + 'static) -> Self {
        self.store = Arc::new(factory);
        self
    }

    /// The thread id (`upgrade-matrix` by default).
    pub fn thread(mut self, id: impl Into<String>) -> Self {
        self.thread = id.into();
        self
    }

    /// Who the run acts for (`agent:crash-matrix` by default).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    fn plan(&self) -> driver::Plan<'_> {
        driver::Plan { thread: &self.thread, owner: &self.owner, tenant: None, limits: None, answers: &self.answers }
    }

    fn fresh_store(&self) -> Result<Arc<dyn Store>, CrashMatrixError> {
        (self.store)().map_err(CrashMatrixError::Store)
    }

    /// A fresh store holding the parked thread, and the old graph's description (which a dump
    /// of the thread does not carry: the store keeps it under the graph's fingerprint).
    fn parked_store(&self, parked: &[ThreadDump]) -> Result<Arc<dyn Store>, CrashMatrixError> {
        let inner = self.fresh_store()?;
        inner.restore_threads(parked.to_vec()).map_err(|e| CrashMatrixError::Snapshot(e.to_string()))?;
        let old = self.old.graph();
        inner
            .put_graph_description(old.fingerprint(), &old.description().to_string())
            .map_err(|e| CrashMatrixError::Snapshot(e.to_string()))?;
        Ok(inner)
    }

    /// Runs the matrix. Blocks until done; call it outside any tokio runtime.
    pub fn run(self) -> Result<CrashReport, CrashMatrixError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(CrashMatrixError::InsideRuntime);
        }
        let parked = self.park()?;
        let (old, new) = (self.old.graph().fingerprint().to_string(), self.new.graph().fingerprint().to_string());
        let fingerprints = Fingerprints { old: &old, new: &new, thread: &self.thread };
        // The uncut resume on the new version.
        let inner = self.parked_store(&parked)?;
        let store = Arc::new(CrashStore::new(Arc::clone(&inner), Aim::Record));
        let app = self.new.clone().store(store.clone());
        let plan = self.plan();
        let reference = on_runtime(&store, driver::drive_stored(&app, self.new_deps, &plan))?
            .ok_or_else(|| CrashMatrixError::Snapshot("the uncut run was cut".into()))?;
        if !matches!(reference, Ending::Finished { .. }) {
            return Err(CrashMatrixError::Reference(reference));
        }
        let at = checks::At { boundary: "(uncut run)", cut: Cut::After };
        let mut violations = checks::stored(&at, &*inner);
        violations.extend(fingerprints.ended(&at, &*inner));
        let boundaries = store.boundaries();
        let mut report = CrashReport { reference, boundaries: boundaries.clone(), trials: Vec::new(), violations };
        for boundary in &boundaries {
            for cut in [Cut::Before, Cut::After] {
                let (trial, violations) = self.trial(&parked, &report.reference, &fingerprints, &boundary.key, cut)?;
                report.trials.push(trial);
                report.violations.extend(violations);
            }
        }
        Ok(report)
    }

    /// The thread run on the old version until it parks, as the store then holds it.
    fn park(&self) -> Result<Vec<ThreadDump>, CrashMatrixError> {
        let input = self.input.clone().ok_or(CrashMatrixError::NoInput)?;
        let inner = self.fresh_store()?;
        let store = Arc::new(CrashStore::new(Arc::clone(&inner), Aim::Forward));
        let app = self.old.clone().store(store.clone());
        let (thread, owner) = (self.thread.clone(), self.owner.clone());
        let run = app.runner(self.old_deps).thread(thread).owner(owner).run(input);
        let outcome = on_runtime(&store, run)?.ok_or_else(|| CrashMatrixError::Snapshot("parking was cut".into()))?;
        match outcome.map(|r| r.outcome) {
            Ok(Outcome::Interrupted { .. } | Outcome::Sleeping { .. }) => {}
            Ok(other) => {
                let error = format!("the old version did not park the thread: it ended {other:?}");
                return Err(CrashMatrixError::Reference(Ending::Error { error }));
            }
            Err(e) => return Err(CrashMatrixError::Reference(Ending::Error { error: e.to_string() })),
        }
        crash_store::snapshot(&*inner).map_err(CrashMatrixError::Snapshot)
    }

    /// One cut of the resume on the new version: run to it, check the version the thread is on,
    /// carry the snapshot over, resume to the end, check.
    fn trial(
        &self,
        parked: &[ThreadDump],
        reference: &Ending,
        fingerprints: &Fingerprints<'_>,
        boundary: &str,
        cut: Cut,
    ) -> Result<(Trial, Vec<Violation>), CrashMatrixError> {
        let store = Arc::new(CrashStore::new(self.parked_store(parked)?, Aim::At(boundary.to_string(), cut)));
        let plan = self.plan();
        on_runtime(&store, driver::drive_stored(&self.new.clone().store(store.clone()), self.new_deps, &plan))?;
        let Some(snapshot) = store.take_snapshot() else {
            return Ok((Trial { boundary: boundary.to_string(), cut, reached: false, ending: None }, Vec::new()));
        };
        let inner = self.parked_store(&snapshot.map_err(CrashMatrixError::Snapshot)?)?;
        let at = checks::At { boundary, cut };
        let mut violations: Vec<Violation> = fingerprints.whole(&at, &*inner).into_iter().collect();
        let resumed = Arc::new(CrashStore::new(Arc::clone(&inner), Aim::Forward));
        let app = self.new.clone().store(resumed.clone());
        let ending = on_runtime(&resumed, driver::drive_stored(&app, self.new_deps, &plan))?
            .unwrap_or_else(|| Ending::Error { error: "the resumed run was cut".into() });
        violations.extend(checks::ending(&at, reference, &ending));
        violations.extend(checks::stored(&at, &*inner));
        violations.extend(fingerprints.ended(&at, &*inner));
        Ok((Trial { boundary: boundary.to_string(), cut, reached: true, ending: Some(ending) }, violations))
    }
}

/// The two versions' fingerprints, to tell which one a stored thread is on.
struct Fingerprints<'a> {
    old: &'a str,
    new: &'a str,
    thread: &'a str,
}

impl Fingerprints<'_> {
    /// The stored thread's fingerprint and its `graph.migrated` entries.
    fn read(&self, store: &dyn Store) -> Result<(String, usize), String> {
        let record = store.thread(self.thread).map_err(|e| e.to_string())?;
        let record = record.ok_or_else(|| format!("thread `{}` is not in the store", self.thread))?;
        let audit = store.list_audit(self.thread).map_err(|e| e.to_string())?;
        Ok((record.graph_fingerprint, audit.iter().filter(|e| e.kind == MIGRATED).count()))
    }

    /// The thread is wholly on the old version or wholly on the new one.
    fn whole(&self, at: &checks::At<'_>, store: &dyn Store) -> Option<Violation> {
        let detail = match self.read(store) {
            Err(e) => e,
            Ok((fp, 0)) if fp == self.old => return None,
            Ok((fp, 1)) if fp == self.new => return None,
            Ok((fp, n)) => format!(
                "the thread is stored under fingerprint {fp} (old {}, new {}) with {n} `{MIGRATED}` entries",
                self.old, self.new
            ),
        };
        Some(at.violation(Check::MigrationTorn, detail))
    }

    /// The thread ended on the new version, moved there once.
    fn ended(&self, at: &checks::At<'_>, store: &dyn Store) -> Option<Violation> {
        let detail = match self.read(store) {
            Err(e) => e,
            Ok((fp, 1)) if fp == self.new => return None,
            Ok((fp, n)) => format!(
                "the thread ended under fingerprint {fp} (new {}) with {n} `{MIGRATED}` entries, not one",
                self.new
            ),
        };
        Some(at.violation(Check::MigrationTorn, detail))
    }
}
