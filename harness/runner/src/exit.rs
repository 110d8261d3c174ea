//! How a kedge command ends: its exit statuses, by name, and how a command that ran to its end
//! concluded. A leaf: every module may name a status; the error aggregator (`errors`) maps
//! each error to one.

/// Everything ran; no failures (`gate`: every failure is a known one).
pub(crate) const OK: i32 = 0;
/// Failures found (`plan`: a launch breaks the profile; `gate`: new failures, fixed known
/// ones, no results, or a cut-off results file).
pub(crate) const FAILURES: i32 = 1;
/// Bad input: a malformed case line, an unknown op/impl/param/dtype, an empty selection,
/// unreadable input files, bad flags.
pub(crate) const BAD_INPUT: i32 = 2;
/// A GPU was needed (`run`, `minimize`/`fuzz` without `--cpu`, `limits` without
/// `--profile`) and no driver or device was found.
pub(crate) const NO_GPU: i32 = 3;
/// `sweep` or `selftest` without a GPU: the CPU-side checks ran, the GPU checks were
/// skipped.
const GPU_SKIPPED: i32 = 4;
/// The environment failed kedge: results not writable, the output directory in use by
/// another kedge, a worker that could not start, every GPU of a sweep lost,
/// compute-sanitizer missing.
pub const ENVIRONMENT: i32 = 5;
/// `sweep --max-time`: the time ran out with cases not run (named in `not-run.jsonl`;
/// `--resume` runs them). Before 4 and 1: the sweep is incomplete whatever else it found.
const OUT_OF_TIME: i32 = 6;

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
    /// The process exit status: 0, 1, 4 or 6 (the README's table).
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Ok => OK,
            Status::Failures => FAILURES,
            Status::GpuSkipped => GPU_SKIPPED,
            Status::OutOfTime => OUT_OF_TIME,
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
