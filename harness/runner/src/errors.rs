//! How a kedge command ends, typed. A command that runs to its end concludes with a `Status`
//! (0 ok, 1 failures, 4 GPU checks skipped, 6 out of time); one that cannot ends with an `Error`, and every
//! error knows its exit status (`Error::exit_code`), as cargo-nextest's `ExpectedError` does.
//! The statuses are the README's table; scripts and CI rely on them.

use crate::exit;
pub(crate) use crate::exit::Status;
use crate::external::ExternalError;
use crate::gate::GateError;
use crate::provenance::ProvenanceError;
pub use crate::results::OutputError;
use crate::results::ResultsError;
use crate::run::EngineError;
pub use crate::run::NoGpu;
use crate::sanitizer::SanitizerError;
use crate::select::SelectError;
use std::path::PathBuf;
use thiserror::Error;

/// Every error a kedge command can end with. Each family is its own enum, with its source.
#[derive(Debug, Error)]
pub enum Error {
    /// Flags and case lines that do not select cases (exit 2).
    #[error(transparent)]
    Select(#[from] SelectError),
    /// A plugin or source kernel that cannot be added (exit 2).
    #[error(transparent)]
    External(#[from] ExternalError),
    /// A file given as input that cannot be read or is not what it should be (exit 2).
    #[error(transparent)]
    Input(#[from] InputError),
    /// Where kedge writes: in use, would be overwritten, not writable (exit 2 or 5).
    #[error(transparent)]
    Output(#[from] OutputError),
    /// No GPU where one is needed (exit 3).
    #[error(transparent)]
    NoGpu(#[from] NoGpu),
    /// The worker pool could not run the cases (exit 5, or 3 when the device is missing).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// compute-sanitizer: missing (exit 5) or bad options (exit 2).
    #[error(transparent)]
    Sanitizer(#[from] SanitizerError),
    /// A workflow was given something it cannot work on.
    #[error(transparent)]
    Workflow(#[from] WorkflowError),
    /// Results or a baseline of another run than they are compared with (exit 2).
    #[error(transparent)]
    Provenance(#[from] ProvenanceError),
}

impl Error {
    /// The process exit status this error ends a command with (2 bad input, 3 no GPU, 5 the
    /// environment, 1 a case that did not reproduce; the README's table).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Select(_) | Error::Input(_) | Error::Provenance(_) => exit::BAD_INPUT,
            Error::External(e) => e.exit_code(),
            Error::Output(e) => e.exit_code(),
            Error::NoGpu(_) => exit::NO_GPU,
            Error::Engine(e) => e.exit_code(),
            Error::Sanitizer(e) => e.exit_code(),
            Error::Workflow(e) => e.exit_code(),
        }
    }
}

impl From<kedge_core::CaseError> for Error {
    fn from(e: kedge_core::CaseError) -> Self {
        Error::Select(SelectError::Case(e))
    }
}

impl From<ResultsError> for Error {
    fn from(e: ResultsError) -> Self {
        Error::Input(InputError::Results(e))
    }
}

impl From<GateError> for Error {
    fn from(e: GateError) -> Self {
        Error::Input(InputError::Baseline(e))
    }
}

/// An input file that cannot be used.
#[derive(Debug, Error)]
pub enum InputError {
    /// A file that could not be read (missing, unreadable); an argument that is not JSON is
    /// taken for a file name and ends here too.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file as given.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A results file (`results.jsonl`) that cannot be read as one.
    #[error(transparent)]
    Results(ResultsError),
    /// A baseline of known failures that cannot be read as one.
    #[error(transparent)]
    Baseline(GateError),
    /// `minimize` and `repro` take a case line, a verdict line, or a file holding either.
    #[error("{input}: not a case or verdict line: {msg}")]
    NotACase {
        /// The file the line came from, or "the argument".
        input: String,
        /// Why it is not a case (the JSON or validation error).
        msg: String,
    },
    /// A directory (or another non-file) where a file is expected.
    #[error("{path} is {what}, not a file")]
    NotAFile {
        /// The path as given.
        path: PathBuf,
        /// What it is instead, with its article ("a directory").
        what: &'static str,
    },
    /// A case file with nothing but blank lines and `#` comments.
    #[error("{path}: no case line in it (only blank lines and # comments)")]
    NoCaseLine {
        /// The file.
        path: PathBuf,
    },
    /// A file given to `compare-runs` that does not parse as a `SweepSummary`.
    #[error("{path}: not a sweep-summary.json: {msg}")]
    NotASummary {
        /// The file.
        path: PathBuf,
        /// The JSON error.
        msg: String,
    },
    /// Results a baseline cannot be made from.
    #[error("no baseline written from {}: {why}; finish the sweep (--resume) and write the baseline from its complete results", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotForBaseline {
        /// The results files the baseline was to be written from.
        paths: Vec<PathBuf>,
        /// What the gate rejects in them (files cut off mid-write, no results).
        why: String,
    },
}

/// A workflow that cannot do what was asked with what it was given.
#[derive(Debug, Error)]
pub enum WorkflowError {
    /// `minimize` on a case that passes.
    #[error("minimize needs a failing case: this one passes ({outcome})")]
    NotFailing {
        /// What running it gave: `verdict (detector)`, or `plan fits (cpu)` on the CPU side.
        outcome: String,
    },
    /// The result given says one thing; running the case again says another.
    #[error(
        "the case did not reproduce: the result given says {given}, running it again gave {got}"
    )]
    DidNotReproduce {
        /// The outcome the given result states, as `verdict (detector)`.
        given: String,
        /// The outcome of running the case again, in the same form.
        got: String,
    },
}

impl WorkflowError {
    fn exit_code(&self) -> i32 {
        match self {
            WorkflowError::NotFailing { .. } => exit::BAD_INPUT,
            // It still fails, differently: a failure to look at.
            WorkflowError::DidNotReproduce { .. } => exit::FAILURES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_the_readme_table() {
        assert_eq!(Status::Ok.exit_code(), 0);
        assert_eq!(Status::Failures.exit_code(), 1);
        assert_eq!(Status::GpuSkipped.exit_code(), 4);
        assert_eq!(Status::failed_if(true), Status::Failures);
        let e: Error = OutputError::ResultsExist {
            path: "r.jsonl".into(),
        }
        .into();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("--resume") && e.to_string().contains("--force"));
        let e: Error = OutputError::Locked {
            dir: "o".into(),
            holder: "pid 7".into(),
        }
        .into();
        assert_eq!(e.exit_code(), 5);
        let e: Error = NoGpu {
            command: "run",
            why: "no CUDA driver".into(),
            hint: Some("`kedge plan` checks launches without one"),
        }
        .into();
        assert_eq!(e.exit_code(), 3);
        assert_eq!(
            e.to_string(),
            "kedge run needs a GPU: no CUDA driver; `kedge plan` checks launches without one"
        );
        let e: Error = WorkflowError::NotFailing {
            outcome: "pass".into(),
        }
        .into();
        assert_eq!(e.exit_code(), 2);
        assert!(e
            .to_string()
            .starts_with("minimize needs a failing case: this one passes"));
    }
}
