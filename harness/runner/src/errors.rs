//! How a kedge command ends, typed. A command that runs to its end concludes with a `Status`
//! (0 ok, 1 failures, 4 GPU checks skipped, 6 out of time); one that cannot ends with an `Error`, and every
//! error knows its exit status (`Error::exit_code`), as cargo-nextest's `ExpectedError` does.
//! The statuses are the README's table; scripts and CI rely on them.

use crate::external::ExternalError;
use crate::gate::GateError;
use crate::provenance::ProvenanceError;
use crate::results::ResultsError;
use crate::run::EngineError;
use crate::sanitizer::SanitizerError;
use crate::select::SelectError;
use std::path::PathBuf;
use thiserror::Error;

/// The exit statuses, by name.
pub mod exit {
    /// Everything ran; no failures (`gate`: every failure is a known one).
    pub const OK: i32 = 0;
    /// Failures found (`plan`: a launch breaks the profile; `gate`: new failures, fixed known
    /// ones, no results, or a cut-off results file).
    pub const FAILURES: i32 = 1;
    /// Bad input: a malformed case line, an unknown op/impl/param/dtype, an empty selection,
    /// unreadable input files, bad flags.
    pub const BAD_INPUT: i32 = 2;
    /// A GPU was needed (`run`, `minimize`/`fuzz` without `--cpu`, `limits` without
    /// `--profile`) and no driver or device was found.
    pub const NO_GPU: i32 = 3;
    /// `sweep` or `selftest` without a GPU: the CPU-side checks ran, the GPU checks were
    /// skipped.
    pub const GPU_SKIPPED: i32 = 4;
    /// The environment failed kedge: results not writable, the output directory in use by
    /// another kedge, a worker that could not start, every GPU of a sweep lost,
    /// compute-sanitizer missing.
    pub const ENVIRONMENT: i32 = 5;
    /// `sweep --max-time`: the time ran out with cases not run (named in `not-run.jsonl`;
    /// `--resume` runs them). Before 4 and 1: the sweep is incomplete whatever else it found.
    pub const OUT_OF_TIME: i32 = 6;
}

/// How a command that ran to its end concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Nothing failed.
    Ok,
    /// Something failed (a case, a launch contract, a gate).
    Failures,
    /// The CPU-side checks ran; the GPU checks were skipped (no GPU, or `--cpu`).
    GpuSkipped,
    /// The sweep's time limit ran out before every case ran.
    OutOfTime,
}

impl Status {
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Ok => exit::OK,
            Status::Failures => exit::FAILURES,
            Status::GpuSkipped => exit::GPU_SKIPPED,
            Status::OutOfTime => exit::OUT_OF_TIME,
        }
    }
    /// `Failures` when `failed`, else `Ok`.
    pub fn failed_if(failed: bool) -> Status {
        if failed {
            Status::Failures
        } else {
            Status::Ok
        }
    }
}

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
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Results(ResultsError),
    #[error(transparent)]
    Baseline(GateError),
    /// `minimize` and `repro` take a case line, a verdict line, or a file holding either.
    #[error("{input}: not a case or verdict line: {msg}")]
    NotACase { input: String, msg: String },
    /// A directory (or another non-file) where a file is expected.
    #[error("{path} is {what}, not a file")]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("{path}: no case line in it (only blank lines and # comments)")]
    NoCaseLine { path: PathBuf },
    #[error("{path}: not a sweep-summary.json: {msg}")]
    NotASummary { path: PathBuf, msg: String },
    /// Results a baseline cannot be made from.
    #[error("no baseline written from {}: {why}; finish the sweep (--resume) and write the baseline from its complete results", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotForBaseline { paths: Vec<PathBuf>, why: String },
}

/// Where kedge writes.
#[derive(Debug, Error)]
pub enum OutputError {
    /// Another kedge holds the output directory's lock.
    #[error(
        "{dir} is in use by another kedge ({holder}); wait for it to finish, or give another --out"
    )]
    Locked { dir: PathBuf, holder: String },
    /// A results file would be overwritten.
    #[error("{path} already holds results: pass --resume to continue that run, or --force to start over (its results are discarded)")]
    ResultsExist { path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A name kedge writes is a symbolic link: writing through it would change the file it
    /// points to, outside the output directory.
    #[error("{path} is a symbolic link: kedge does not write through a link inside the directory it writes into (it would change the file the link points to); remove the link, or give another output")]
    Link { path: PathBuf },
    /// A file kedge writes has other names: writing it would change them too.
    #[error("{path} has {links} hard links: writing it would change the file under its other names too; remove this name (the others stay), or give another output")]
    HardLinked { path: PathBuf, links: u64 },
    /// Something other than a regular file where kedge writes one.
    #[error(
        "{path} is {what}, not a regular file kedge can write; remove it, or give another output"
    )]
    NotAFile { path: PathBuf, what: &'static str },
    /// An output directory that is something else.
    #[error("cannot write into {path}: it is {what}, not a directory (an output directory is a directory; kedge creates it when missing)")]
    NotADirectory { path: PathBuf, what: &'static str },
    /// A target that holds another kind of file than the one the command writes.
    #[error("{path} is {found}, not {writes}: {command} writes only {writes}; give another file")]
    WrongKind {
        path: PathBuf,
        found: &'static str,
        writes: &'static str,
        command: &'static str,
    },
    /// A target that is one of the command's own inputs.
    #[error("{path} is one of this command's inputs ({input}): writing it would destroy what is being read; give another output")]
    OwnInput { path: PathBuf, input: PathBuf },
}

impl OutputError {
    pub fn exit_code(&self) -> i32 {
        match self {
            OutputError::ResultsExist { .. }
            | OutputError::WrongKind { .. }
            | OutputError::OwnInput { .. } => exit::BAD_INPUT,
            OutputError::Locked { .. }
            | OutputError::Write { .. }
            | OutputError::Link { .. }
            | OutputError::HardLinked { .. }
            | OutputError::NotAFile { .. }
            | OutputError::NotADirectory { .. } => exit::ENVIRONMENT,
        }
    }
    pub fn write(path: impl Into<PathBuf>, source: std::io::Error) -> OutputError {
        OutputError::Write {
            path: path.into(),
            source,
        }
    }
}

/// A command that needs a GPU found none.
#[derive(Debug, Error)]
#[error("kedge {command} needs a GPU: {why}{}", hint.map(|h| format!("; {h}")).unwrap_or_default())]
pub struct NoGpu {
    pub command: &'static str,
    /// "no CUDA driver: ..." / "no CUDA device: ...".
    pub why: String,
    /// What to use instead (`kedge plan` checks launches without one).
    pub hint: Option<&'static str>,
}

/// A workflow that cannot do what was asked with what it was given.
#[derive(Debug, Error)]
pub enum WorkflowError {
    /// `minimize` on a case that passes.
    #[error("minimize needs a failing case: this one passes ({outcome})")]
    NotFailing { outcome: String },
    /// The result given says one thing; running the case again says another.
    #[error(
        "the case did not reproduce: the result given says {given}, running it again gave {got}"
    )]
    DidNotReproduce { given: String, got: String },
}

impl WorkflowError {
    pub fn exit_code(&self) -> i32 {
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
