//! What a crash matrix reports: the boundaries it found, each cut tried, and the violations.

use std::fmt;

pub use super::boundary::BoundaryKind;

/// A durable boundary of the uncut run: one write to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Boundary {
    /// Its name: the first item it writes (`step t@3`, `write t@2 worker[1]`,
    /// `effect t@4 pay charge started#1`, `approval <id> -> APPROVED`, ...). Stable from run to
    /// run: it says what is written, not when.
    pub key: String,
    /// The kind of its first item.
    pub kind: BoundaryKind,
    /// Every item it writes, by name.
    pub items: Vec<String>,
}

/// Which side of a write the process dies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Cut {
    /// Just before the write: the store holds everything before it, not it.
    Before,
    /// Just after it: the store holds it, and the run was never told.
    After,
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cut::Before => "before",
            Cut::After => "after",
        })
    }
}

/// How a run (the uncut one, or one resumed after a cut) ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Ending {
    /// The run ended (completed, failed, compensated, ...): the outcome's name and the final
    /// state as JSON.
    Finished {
        /// The outcome's name (`completed`, `failed`, `compensated`, ...).
        outcome: String,
        /// The final state.
        state: serde_json::Value,
    },
    /// The thread waits for a human who must settle what the cut left unknown (a call that
    /// started and left no result); `reason` is what the thread says.
    WaitsForHuman {
        /// Why it waits.
        reason: String,
    },
    /// Driving the run to its end failed (an error from the runtime, a question without a
    /// scripted answer).
    Error {
        /// What failed.
        error: String,
    },
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Finished { outcome, state } => write!(f, "{outcome} with state {state}"),
            Ending::WaitsForHuman { reason } => write!(f, "waits for a human: {reason}"),
            Ending::Error { error } => write!(f, "error: {error}"),
        }
    }
}

/// The check a violation broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Check {
    /// A non-idempotent effect or tool call ran more often than in the uncut run (the
    /// ledger of bodies run, by idempotency key).
    EffectRanTwice,
    /// A model was asked again for a node run (a node, or a map instance, on one checkpoint)
    /// whose write was committed before the cut: finished work was done again.
    ModelReplyConsumedTwice,
    /// A call cut off (started, no result) is neither journaled as ended nor listed as an
    /// unknown outcome for a human.
    CallCutOffUnlisted,
    /// The resumed run ended otherwise than the uncut one (another outcome or state), or
    /// failed to run to its end.
    EndingDiffers,
    /// A thread was left `running` after the resumed run returned.
    LeftRunning,
    /// A thread's event log is not what was committed: an id skipped or repeated, a step of the
    /// run loop without its one `step` event, or a thread that ended without saying so last.
    /// (Appended last.)
    EventLogBroken,
    /// A thread's move to a newer version of its graph was cut in half: its fingerprint and
    /// its `graph.migrated` audit entries disagree (moved without the entry, the entry without
    /// the move), or it says `graph.migrated` other than once by its end
    /// ([`UpgradeMatrix`](super::UpgradeMatrix)). (Appended last.)
    MigrationTorn,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Check::EffectRanTwice => "effect ran twice",
            Check::ModelReplyConsumedTwice => "model reply consumed twice",
            Check::CallCutOffUnlisted => "call cut off and not listed",
            Check::EndingDiffers => "ending differs",
            Check::LeftRunning => "thread left running",
            Check::EventLogBroken => "event log broken",
            Check::MigrationTorn => "graph migration torn",
        })
    }
}

/// One check a cut broke.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// The boundary cut ([`Boundary::key`]).
    pub boundary: String,
    /// Which side of it.
    pub cut: Cut,
    /// The check broken.
    pub check: Check,
    /// What was seen.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {} `{}`: {}", self.check, self.cut, self.boundary, self.detail)
    }
}

/// One cut tried.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Trial {
    /// The boundary cut.
    pub boundary: String,
    /// Which side of it.
    pub cut: Cut,
    /// Whether the run reached it (a run that takes another path may not).
    pub reached: bool,
    /// How the resumed run ended (`None` if the cut was not reached).
    pub ending: Option<Ending>,
}

/// What [`CrashMatrix::run`](super::CrashMatrix::run) found.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CrashReport {
    /// How the uncut run ended.
    pub reference: Ending,
    /// The durable boundaries of the uncut run, in the order they were written.
    pub boundaries: Vec<Boundary>,
    /// Every cut tried: each boundary before and after.
    pub trials: Vec<Trial>,
    /// The checks broken; empty when the graph survives every cut.
    pub violations: Vec<Violation>,
}

impl CrashReport {
    /// Whether no check was broken.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violations of one check.
    pub fn violations_of(&self, check: Check) -> impl Iterator<Item = &Violation> {
        self.violations.iter().filter(move |v| v.check == check)
    }

    /// How many cuts ended with the thread waiting for a human (a call cut off mid-way).
    pub fn waiting_for_a_human(&self) -> usize {
        self.trials.iter().filter(|t| matches!(t.ending, Some(Ending::WaitsForHuman { .. }))).count()
    }
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reached = self.trials.iter().filter(|t| t.reached).count();
        let uncut = match &self.reference {
            Ending::Finished { outcome, .. } => outcome.as_str(),
            Ending::WaitsForHuman { .. } => "waits for a human",
            Ending::Error { .. } => "error",
        };
        writeln!(
            f,
            "crash matrix: the uncut run ended {uncut}; {} boundaries, {} cuts tried ({} reached), {} waiting for a \
             human, {} violations",
            self.boundaries.len(),
            self.trials.len(),
            reached,
            self.waiting_for_a_human(),
            self.violations.len()
        )?;
        for v in &self.violations {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}
