//! `kedge minimize`: shrink a failing case while its verdict and detector stay the same, then
//! bisect the dimension that crosses a boundary, stating a transition only when both sides
//! were run. The predicate is the CPU-side check (`--cpu`: launch-limit failures without a
//! GPU) or a fresh worker per probe on the GPU (natively, or under the sanitizer that saw it).

pub mod shrink;

pub use shrink::{
    minimize_and_transition, MinimizeError, Minimized, Outcome, Probe, Report, ShrinkConfig,
    Transition, TransitionFinding,
};

use crate::errors::{Error, WorkflowError};
use crate::run::{CpuExecutor, GpuExecutor};
use kedge_core::{Case, CaseResult, Detector, LimitsProfile, Op, Params, Registry, Verdict};

/// What a case's probes run on.
pub enum Probes<'a> {
    /// The CPU-side check against this profile.
    Cpu(&'a LimitsProfile),
    /// One case per fresh worker.
    Gpu(&'a mut GpuExecutor),
}

/// Every parameter's default, from the op's declaration.
pub fn param_defaults(op: &dyn Op) -> Params {
    op.params()
        .iter()
        .map(|p| (p.name.to_string(), p.default_value()))
        .collect()
}

fn unsupported(c: &Case, e: impl std::fmt::Display) -> CaseResult {
    CaseResult::new(
        c,
        Verdict::Unsupported,
        Detector::Impl,
        format!("bad input: {e}"),
    )
}

/// Shrink `case` (and find its transition). `given`: the result a verdict line says the case
/// had; on the GPU the case must reproduce it (on the CPU only the case is taken).
pub fn minimize(
    reg: &Registry,
    case: &Case,
    given: Option<&CaseResult>,
    limits: &LimitsProfile,
    budget: usize,
    probes: Probes<'_>,
) -> Result<Report, Error> {
    let op = reg.op(&case.op)?;
    let cfg = ShrinkConfig {
        param_defaults: param_defaults(op),
        max_probes: budget,
        ..ShrinkConfig::default()
    };
    let boundaries = crate::select::suite::boundaries(op, limits, case.dtype);
    let report = match probes {
        Probes::Cpu(profile) => {
            let cpu = CpuExecutor::new(reg, profile.clone());
            let pred = |c: &Case| -> Result<CaseResult, std::convert::Infallible> {
                Ok(match reg.validate(c) {
                    Ok(c) => cpu.check(&c),
                    Err(e) => unsupported(c, e),
                })
            };
            minimize_and_transition(case, None, &boundaries, cfg, pred).map_err(lift)?
        }
        Probes::Gpu(exec) => {
            let pred = |c: &Case| -> Result<CaseResult, Error> {
                match reg.validate(c) {
                    Ok(c) => Ok(exec.run_one(&c)?),
                    Err(e) => Ok(unsupported(c, e)),
                }
            };
            let given = given.map(Outcome::of);
            minimize_and_transition(case, given, &boundaries, cfg, pred).map_err(lift)?
        }
    };
    Ok(report)
}

/// A shrinking error as the command's error.
pub fn lift<E: std::error::Error + Into<Error> + 'static>(e: MinimizeError<E>) -> Error {
    match e {
        MinimizeError::NotFailing(o) => WorkflowError::NotFailing {
            outcome: o.to_string(),
        }
        .into(),
        MinimizeError::DidNotReproduce { given, got } => WorkflowError::DidNotReproduce {
            given: given.to_string(),
            got: got.to_string(),
        }
        .into(),
        MinimizeError::Predicate(e) => e.into(),
    }
}

impl From<std::convert::Infallible> for Error {
    fn from(e: std::convert::Infallible) -> Self {
        match e {}
    }
}

/// The report as text: every probe, the minimized case, the transition.
pub fn render(report: &Report) -> String {
    let mut s = format!("# probes ({} runs)\n", report.probes.len());
    s.push_str(&shrink::render_log(&report.probes));
    let m = &report.minimized;
    s.push_str(&format!(
        "\n# minimized: {} -> {}\n{}\noutcome: {}{}\n",
        kedge_core::model::shape::fmt_ne(&m.original.ne),
        kedge_core::model::shape::fmt_ne(&m.case.ne),
        m.case.to_line(),
        m.outcome,
        if m.budget_exhausted {
            " (probe budget ran out: may shrink further)"
        } else {
            ""
        }
    ));
    match &report.transition {
        Some(t) => s.push_str(&format!("{t}\n")),
        None => s.push_str("no transition: no dimension was blocked by a changed outcome\n"),
    }
    s
}

/// The transition both of whose sides were run, if one was found.
pub fn found_transition(report: &Report) -> Option<&Transition> {
    match &report.transition {
        Some(TransitionFinding::Found(t)) => Some(t),
        _ => None,
    }
}
