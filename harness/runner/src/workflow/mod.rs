//! What kedge's commands do, as library functions returning typed outcomes: the CLI turns
//! flags into their requests and their outcomes into output and an exit status.
//!
//! - `plan`: the launch and allocation contracts of cases on the CPU.
//! - `sweep`: a suite on GPUs or, without one, its CPU side: one workflow, two executors.
//! - `minimize`: shrink a failing case and find its transition from both sides.
//! - `repro`: a case in the forms upstream uses (test-backend-ops lines, a standalone `.cu`).
//! - `selftest`: every planted bug against the detector it is planted for.
//! - `fuzz`: boundary-biased random cases; failures shrunk into a finds corpus.
//! - `run`: cases on one GPU, each result handed over as it finishes.
//! - `bench`: kernel timing, impls of one shape side by side.
//! - `compare_runs`: sweeps' wall time side by side.

pub mod bench;
pub mod compare_runs;
pub mod fuzz;
pub mod minimize;
pub mod plan;
pub mod repro;
pub mod run;
pub mod selftest;
pub mod sweep;

use crate::errors::{Error, InputError};
use crate::run::RunEngine;
use kedge_core::{Case, CaseResult, LimitsProfile, Registry};
use std::path::Path;

/// A case, or a verdict line's case and result, from an argument or from the first case line
/// of a file (`kedge minimize` and `kedge repro` take either). Validated.
pub fn case_input(input: &str, reg: &Registry) -> Result<(Case, Option<CaseResult>), Error> {
    let path = Path::new(input);
    let text = if path.is_file() {
        let t = std::fs::read_to_string(path).map_err(|source| InputError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        t.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| InputError::NoCaseLine {
                path: path.to_path_buf(),
            })?
            .to_string()
    } else if path.is_dir() {
        return Err(InputError::NotAFile {
            path: path.to_path_buf(),
            what: "a directory",
        }
        .into());
    } else if !input.trim_start().starts_with('{') {
        // Not JSON: it was meant as a file.
        return Err(InputError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
        .into());
    } else {
        input.to_string()
    };
    let not_a_case = |msg: String| InputError::NotACase {
        input: if path.is_file() {
            input.to_string()
        } else {
            "the argument".to_string()
        },
        msg,
    };
    kedge_core::model::case::check_unique_keys(&text).map_err(not_a_case)?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| not_a_case(e.to_string()))?;
    let (case, result) = if v.get("verdict").is_some() && v.get("case").is_some() {
        let r: CaseResult = serde_json::from_value(v)
            .map_err(|e| not_a_case(format!("not a verdict line: {e}")))?;
        (r.case.clone(), Some(r))
    } else if let Some(c) = v.get("case") {
        // An incident or fuzz-find line.
        let c: Case =
            serde_json::from_value(c.clone()).map_err(|e| not_a_case(format!("bad case: {e}")))?;
        (c, None)
    } else {
        (Case::parse_line(1, &text)?, None)
    };
    Ok((reg.validate(&case)?, result))
}

/// Where a workflow runs: on a GPU when `gpu` (the engine `build` makes, and the GPU's
/// limits), else its CPU side only (no engine, and `profile`'s limits). Every workflow that
/// can run either way decides here; `gpu` is whether it should try (`sweep` and `selftest`
/// fall back to the CPU side without a driver: `on_gpu(cpu)`; `fuzz` runs its CPU side only
/// when asked, `!cpu`).
fn engine_or_profile(
    gpu: bool,
    profile: &LimitsProfile,
    build: impl FnOnce() -> Result<RunEngine, Error>,
) -> Result<(Option<RunEngine>, LimitsProfile), Error> {
    if !gpu {
        return Ok((None, profile.clone()));
    }
    let engine = build()?;
    let limits = engine.limits().clone();
    Ok((Some(engine), limits))
}

/// Should a workflow that falls back to its CPU side run on a GPU: `--cpu` not given, and a
/// CUDA driver on this machine.
fn on_gpu(cpu: bool) -> bool {
    !cpu && kedge_core::cuda::driver_present()
}
