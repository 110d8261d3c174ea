//! How the run engine fails: no GPU where one is needed, and the engine's own errors, each
//! with its exit status.

use super::*;

/// A command that needs a GPU found none.
#[derive(Debug, Error)]
#[error("kedge {command} needs a GPU: {why}{}", hint.map(|h| format!("; {h}")).unwrap_or_default())]
pub struct NoGpu {
    /// The command that needs it (`run`, `minimize`), as the message names it.
    pub command: &'static str,
    /// "no CUDA driver: ..." / "no CUDA device: ...".
    pub why: String,
    /// What to use instead (`kedge plan` checks launches without one).
    pub hint: Option<&'static str>,
}

/// The worker pool could not run the cases.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The worker started to read a GPU's limits did not become ready.
    #[error("starting a worker on gpu {gpu}: {source}")]
    Probe {
        /// The GPU's ordinal.
        gpu: u32,
        /// Why the worker did not become ready.
        #[source]
        source: SupervisorError,
    },
    /// A worker became ready without limits (it opened no GPU).
    #[error("the worker on gpu {gpu} reported no limits")]
    NoLimits {
        /// The GPU's ordinal.
        gpu: u32,
    },
    /// A listed GPU has other limits than the first: cases are built for one set of limits.
    #[error("gpu {gpu} ({device}) has other limits than gpu {first} ({first_device}): a sweep builds its cases for one GPU's limits; sweep each kind of GPU on its own (--devices)")]
    MixedLimits {
        /// The GPU whose limits differ.
        gpu: u32,
        /// Its name, as its worker reported it.
        device: String,
        /// The first GPU, whose limits the cases are built for.
        first: u32,
        /// The first GPU's name.
        first_device: String,
    },
    /// The scheduler stopped before every case had a result (every GPU lost, a fatal error).
    #[error("the {under} run on GPUs {gpus} stopped after {written} results: {source}{left}")]
    Stopped {
        /// How the run was running (natively or under a sanitizer tool).
        under: Under,
        /// The GPUs of the run, comma separated.
        gpus: String,
        /// Results passed on before it stopped.
        written: usize,
        /// "; not run: ..." when every GPU was lost.
        left: String,
        /// Why the scheduler stopped.
        #[source]
        source: Box<schedule::ScheduleError<SupervisorError>>,
    },
    /// A one-case run (`GpuExecutor::run_one`) ended without a result for its case.
    #[error("the worker returned no verdict for {case}")]
    NoVerdict {
        /// The case's label.
        case: String,
    },
    /// This process's own executable, which workers are started from, cannot be found.
    #[error("cannot find the kedge binary to start workers: {0}")]
    Exe(std::io::Error),
    /// The temporary directory for worker logs could not be created.
    #[error("cannot create a temporary directory for worker logs (set TMPDIR to a writable directory): {0}")]
    TempDir(std::io::Error),
    /// The workers of a library's host backend stopped.
    #[error("the host-backend run stopped: {0}")]
    Host(SupervisorError),
    /// Where the results go failed them (the results file, the console).
    #[error(transparent)]
    Sink(#[from] OutputError),
    /// No CUDA driver, for a command that needs a GPU.
    #[error(transparent)]
    NoGpu(#[from] NoGpu),
    /// compute-sanitizer is missing, or its options are bad.
    #[error(transparent)]
    Sanitizer(#[from] SanitizerError),
}

impl EngineError {
    /// The exit status: 3 without a GPU, 2 for GPUs of mixed limits, the sink's or the
    /// sanitizer's own status, else 5.
    pub fn exit_code(&self) -> i32 {
        match self {
            EngineError::Probe {
                source: SupervisorError::NoGpu(_),
                ..
            } => exit::NO_GPU,
            EngineError::MixedLimits { .. } => exit::BAD_INPUT,
            EngineError::Sink(e) => e.exit_code(),
            EngineError::NoGpu(_) => exit::NO_GPU,
            EngineError::Sanitizer(e) => e.exit_code(),
            _ => exit::ENVIRONMENT,
        }
    }
}
