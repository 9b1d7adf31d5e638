//! The crash matrix against real processes: a child process runs the graph on a real store (a
//! redb file, PostgreSQL) and is killed with SIGKILL at a boundary; this process resumes the
//! thread from that store and makes the matrix's checks. Each result is compared with the
//! in-memory matrix's at the same cut: they must agree, or the snapshot model is wrong.
//!
//! The child is the test itself, run again: the test binary is started with the test's name
//! and an environment variable naming the cut, and [`CrashMatrix::kill_sample`] in the child
//! runs to the cut and kills its own process there.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentflow_store::Store;

use super::crash_store::{Acked, Aim, CrashStore, OnCut};
use super::error::CrashMatrixError;
use super::matrix::{CrashMatrix, on_runtime};
use super::recorder::{NodeRun, Recorder, Tally};
use super::report::{Check, Cut, Ending, Violation};
use super::{checks, driver};
use crate::State;

/// The variable that makes a test process a kill sample's child: `name␟cut␟boundary`.
const CHILD: &str = "AGENTFLOW_CRASH_KILL";
/// Where the child hands over what ran before its death.
const HAND_OVER: &str = "AGENTFLOW_CRASH_KILL_FILE";
/// The exit code of a child whose run never reached its cut.
const NOT_REACHED: i32 = 3;
/// The exit code of a child that failed before its cut.
const CHILD_FAILED: i32 = 4;

/// One cut made by killing a process.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KillTrial {
    /// The boundary cut.
    pub boundary: String,
    /// Which side of it.
    pub cut: Cut,
    /// Whether the child reached it.
    pub reached: bool,
    /// How the resumed run ended.
    pub ending: Option<Ending>,
    /// The checks it broke.
    pub violations: Vec<Violation>,
    /// Whether it ended as the in-memory matrix's trial of the same cut did, breaking the same
    /// checks.
    pub agrees: bool,
}

/// What [`CrashMatrix::kill_sample`] found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KillReport {
    /// Each cut tried.
    pub trials: Vec<KillTrial>,
}

impl KillReport {
    /// The trials that broke a check or disagree with the in-memory matrix.
    pub fn failures(&self) -> impl Iterator<Item = &KillTrial> {
        self.trials.iter().filter(|t| !t.agrees || !t.violations.is_empty())
    }
}

impl std::fmt::Display for KillReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reached = self.trials.iter().filter(|t| t.reached).count();
        let agree = self.trials.iter().filter(|t| t.agrees).count();
        writeln!(
            f,
            "kill sample: {} processes killed ({} reached their cut), {} agree with the in-memory matrix",
            self.trials.len(),
            reached,
            agree
        )?;
        for t in self.failures() {
            writeln!(f, "  {} `{}`: ended {:?}", t.cut, t.boundary, t.ending)?;
            for v in &t.violations {
                writeln!(f, "    {v}")?;
            }
        }
        Ok(())
    }
}

/// What a child hands over just before it dies.
#[derive(serde::Serialize, serde::Deserialize)]
struct HandOver {
    acked: Acked,
    calls: Vec<(NodeRun, u32)>,
    bodies: Vec<(String, (u32, bool))>,
}

impl HandOver {
    fn tally(self) -> (Acked, Tally) {
        let tally = Tally { calls: self.calls.into_iter().collect(), bodies: self.bodies.into_iter().collect() };
        (self.acked, tally)
    }
}

fn cut_name(cut: Cut) -> &'static str {
    match cut {
        Cut::Before => "before",
        Cut::After => "after",
    }
}

/// The cuts a sample of at most `max` takes: spread evenly over the boundaries, both sides.
fn sample(boundaries: &[String], max: usize) -> Vec<(String, Cut)> {
    let cuts: Vec<(String, Cut)> =
        boundaries.iter().flat_map(|b| [(b.clone(), Cut::Before), (b.clone(), Cut::After)]).collect();
    if cuts.is_empty() || max == 0 {
        return Vec::new();
    }
    let step = cuts.len().div_ceil(max).max(1);
    cuts.into_iter().step_by(step).take(max).collect()
}

impl<S: State, D: Sync> CrashMatrix<'_, S, D> {
    /// Checks the in-memory matrix against real processes: for at most `max` cuts, spread
    /// over the run's boundaries, a child process runs the graph on the store `open(name)`
    /// opens and is killed with SIGKILL at the cut; this process then opens the same store
    /// again, resumes the thread to its end and makes the matrix's checks. The same cut is made
    /// in memory too, and the trial [agrees](KillTrial::agrees) when both end alike and break
    /// the same checks.
    ///
    /// `name` is unique to the trial and the same in the child and here, and usable as a file
    /// name and as a PostgreSQL schema name (`kill_<pid>_<i>`): open a redb file or a schema
    /// of that name, so each trial starts on an empty store.
    ///
    /// The child is this test run again: `test` is the test function's exact name (as
    /// `cargo test` filters by it), and the function must build the same matrix and call
    /// `kill_sample` first, before anything the child should not do. In the child, this call
    /// never returns.
    pub fn kill_sample(
        self,
        test: &str,
        max: usize,
        open: impl Fn(&str) -> Result<Arc<dyn Store>, String>,
    ) -> Result<KillReport, CrashMatrixError> {
        let input = self.input.clone().ok_or(CrashMatrixError::NoInput)?;
        if let Ok(child) = std::env::var(CHILD) {
            self.child(&child, &input, open);
        }
        let uncut = self.uncut(&input)?;
        // Unique to this sample: tests of one binary run at once, each with its own files.
        static SAMPLES: AtomicUsize = AtomicUsize::new(0);
        let run = format!("kill_{}_{}", std::process::id(), SAMPLES.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(format!("agentflow-{run}"));
        std::fs::create_dir_all(&dir).map_err(|e| CrashMatrixError::Kill(format!("{}: {e}", dir.display())))?;
        let plan = self.plan();
        let keys: Vec<String> = uncut.boundaries.iter().map(|b| b.key.clone()).collect();
        let mut trials = Vec::new();
        for (i, (boundary, cut)) in sample(&keys, max).into_iter().enumerate() {
            // The same cut in memory, to compare with.
            let (expected, expected_violations) = self.trial(&input, &uncut, &boundary, cut)?;
            let mut expected_checks: Vec<Check> = expected_violations.iter().map(|v| v.check).collect();
            expected_checks.sort();
            let name = format!("{run}_{i}");
            let file = dir.join(format!("{name}.json"));
            let reached = run_child(test, &name, cut, &boundary, &file)?;
            if !reached {
                let agrees = !expected.reached;
                trials.push(KillTrial { boundary, cut, reached, ending: None, violations: Vec::new(), agrees });
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|e| CrashMatrixError::Kill(format!("the child left no hand-over ({e})")))?;
            let hand_over: HandOver =
                serde_json::from_str(&text).map_err(|e| CrashMatrixError::Kill(format!("hand-over: {e}")))?;
            let (acked, before) = hand_over.tally();
            let store = open(&name).map_err(CrashMatrixError::Store)?;
            let started = store.thread(&self.thread).map_err(|e| CrashMatrixError::Store(e.to_string()))?.is_some();
            let resumed = Arc::new(CrashStore::new(Arc::clone(&store), Aim::Forward));
            let recorder = Arc::new(Recorder::replaying(uncut.script.clone()));
            let app = self.app_on(resumed.clone(), &recorder);
            let work = driver::drive(&app, self.deps, &input, &plan, !started);
            let ending = on_runtime(&resumed, work)?
                .unwrap_or_else(|| Ending::Error { error: "the resumed run was cut".into() });
            let after = recorder.take_tally();
            let at = checks::At { boundary: &boundary, cut };
            let mut violations = checks::ran(&at, &uncut.tally, &before, &after, &acked);
            violations.extend(checks::ending(&at, &uncut.ending, &ending));
            violations.extend(checks::stored(&at, &*store));
            let mut found: Vec<Check> = violations.iter().map(|v| v.check).collect();
            found.sort();
            let agrees = expected.ending.as_ref() == Some(&ending) && found == expected_checks;
            trials.push(KillTrial { boundary, cut, reached, ending: Some(ending), violations, agrees });
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(KillReport { trials })
    }

    /// The child's side: run to the cut on the real store, hand over what ran, die there.
    fn child(&self, spec: &str, input: &S, open: impl Fn(&str) -> Result<Arc<dyn Store>, String>) -> ! {
        let fail = |why: String| -> ! {
            eprintln!("kill sample child: {why}");
            std::process::exit(CHILD_FAILED)
        };
        let mut parts = spec.splitn(3, '\u{1f}');
        let (Some(name), Some(cut), Some(boundary)) = (parts.next(), parts.next(), parts.next()) else {
            fail(format!("malformed {CHILD}: {spec:?}"))
        };
        let cut = if cut == "before" { Cut::Before } else { Cut::After };
        let Ok(file) = std::env::var(HAND_OVER) else { fail(format!("{HAND_OVER} is not set")) };
        // The replies the models give, recorded by an uncut run of this process's own.
        let uncut = self.uncut(input).unwrap_or_else(|e| fail(e.to_string()));
        let store = open(name).unwrap_or_else(|e| fail(e));
        let recorder = Arc::new(Recorder::replaying(uncut.script));
        let watch = Arc::clone(&recorder);
        let hand_over = move |acked: &Acked| {
            let tally = watch.take_tally();
            let hand = HandOver {
                acked: acked.clone(),
                calls: tally.calls.into_iter().collect(),
                bodies: tally.bodies.into_iter().collect(),
            };
            let text = serde_json::to_string(&hand).unwrap_or_default();
            if let Err(e) = std::fs::write(&file, text) {
                eprintln!("kill sample child: cannot hand over what ran to {file}: {e}");
                std::process::exit(CHILD_FAILED);
            }
        };
        let store =
            Arc::new(CrashStore::with(store, Aim::At(boundary.to_string(), cut), OnCut::Kill(Box::new(hand_over))));
        let app = self.app_on(store.clone(), &recorder);
        let plan = self.plan();
        let work = driver::drive(&app, self.deps, input, &plan, true);
        let _ = on_runtime(&store, work);
        std::process::exit(NOT_REACHED)
    }
}

/// Starts this test binary as the child of trial `name` and waits for it: `true` if it was
/// killed at its cut, `false` if it never reached it.
fn run_child(test: &str, name: &str, cut: Cut, boundary: &str, file: &Path) -> Result<bool, CrashMatrixError> {
    let exe = std::env::current_exe().map_err(|e| CrashMatrixError::Kill(format!("no test binary: {e}")))?;
    let status = Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{name}\u{1f}{}\u{1f}{boundary}", cut_name(cut)))
        .env(HAND_OVER, PathBuf::from(file))
        .status()
        .map_err(|e| CrashMatrixError::Kill(format!("cannot start the child: {e}")))?;
    #[cfg(unix)]
    let signal = {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    };
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    match (signal, status.code()) {
        (Some(9), _) => Ok(true),
        (_, Some(NOT_REACHED)) => Ok(false),
        (signal, code) => Err(CrashMatrixError::Kill(format!(
            "the child of `{boundary}` ({}) ended with {code:?} / signal {signal:?}; was `{test}` the test's exact \
             name, and does it call `kill_sample`?",
            cut_name(cut)
        ))),
    }
}
