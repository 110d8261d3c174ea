//! Exit statuses, documented in the README. Scripts and CI rely on them.

/// Everything ran; no failures (or, for `gate`, every failure is known).
pub const OK: i32 = 0;
/// At least one case failed (or `gate` found new failures / fixed known ones).
pub const FAILURES: i32 = 1;
/// Bad input: a malformed case line, an unknown op/impl/param, a shape that overflows, bad flags.
pub const BAD_INPUT: i32 = 2;
/// A GPU was required (`run`, `selftest`, `limits` without `--profile`) and no driver/device was found.
pub const NO_GPU: i32 = 3;
/// `sweep` on a machine without a GPU: the CPU-side checks (plan, reference) ran and passed,
/// the GPU checks were skipped.
pub const GPU_SKIPPED: i32 = 4;
/// The environment failed kedge: results could not be written, compute-sanitizer is missing,
/// a worker could not be started.
pub const ENVIRONMENT: i32 = 5;
