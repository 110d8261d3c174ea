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
use crate::events::Event;
use crate::external::ExternalSpec;
use crate::results::OutDir;
use crate::run::{CpuExecutor, EngineOptions, GpuExecutor, Gpus, RunEngine};
use kedge_core::{Case, CaseResult, Detector, LimitsProfile, Op, Params, Registry, Tool, Verdict};
use std::path::PathBuf;

/// The files `kedge minimize --out` may write: every probe, and the repro.
const MINIMIZE_FILES: [&str; 4] = [
    "minimize.json",
    "repro.txt",
    "repro.cu",
    super::repro::INPUTS_FILE,
];

/// What to minimize, and on what.
#[derive(Debug, Clone)]
pub struct MinimizeRequest {
    /// A case line, a verdict line, or a file whose first case line is either.
    pub input: String,
    /// Shrink on the CPU-side check (the launch contract against `profile`), no GPU.
    pub cpu: bool,
    /// The limits of the CPU-side check; on a GPU, the GPU's own limits are used.
    pub profile: LimitsProfile,
    /// Most predicate runs.
    pub budget: usize,
    /// The sanitizer tool the probes run under (else the given result's, else natively).
    pub tool: Option<Tool>,
    /// Impls from outside kedge (plugins, source kernels) the case may name.
    pub external: ExternalSpec,
    /// Worker options, and where events go.
    pub engine: EngineOptions,
    /// The GPU's ordinal.
    pub device: u32,
    /// Where minimize.json (and the repro, written by the caller) go.
    pub out: Option<PathBuf>,
}

/// What minimizing found, with what the caller needs to write the repro beside it.
pub struct MinimizeOutcome {
    /// The shrunk case, the transition if one was searched for, and every probe.
    pub report: Report,
    /// The registry the case was validated against (with the request's impls from outside).
    pub registry: Registry,
    /// The output directory, locked and checked, when one was given; minimize.json written.
    pub out: Option<OutDir>,
    /// The files written (minimize.json), when an output directory was given.
    pub written: Vec<PathBuf>,
}

/// Read the request's case, shrink it on the CPU or on fresh GPU workers, and write
/// minimize.json into the output directory (checked and locked before anything runs).
pub fn run(req: &MinimizeRequest) -> Result<MinimizeOutcome, Error> {
    let ev = &req.engine.events;
    let (reg, _) = req.external.registry()?;
    let (case, given) = super::case_input(&req.input, &reg)?;
    let out = match &req.out {
        Some(dir) => Some(
            OutDir::open(dir)?
                .reading(Some(std::path::Path::new(&req.input)))
                .writes(&MINIMIZE_FILES)?,
        ),
        None => None,
    };
    let report = if req.cpu {
        // A GPU result's outcome (driver) differs from the CPU's (launch-contract): only the
        // case is taken from it.
        if let Some(r) = &given {
            ev.emit(Event::GivenNotCompared {
                verdict: r.verdict.to_string(),
                detector: r.detector.to_string(),
            });
        }
        let probes = Probes::Cpu(&req.profile);
        minimize(&reg, &case, None, &req.profile, req.budget, probes)?
    } else {
        let tool = req
            .tool
            .or_else(|| given.as_ref().and_then(|r| r.under.tool()));
        let engine = RunEngine::builder("minimize")
            .external(req.external.clone())
            .options(req.engine.clone())
            .gpus(Gpus::One(req.device))
            .keep_workers(false)
            .build()?;
        let mut ex = engine.executor(tool)?;
        // Each probe is told by the report, not as progress.
        ex.set_events(ev.without_cases());
        let limits = engine.limits();
        minimize(
            &reg,
            &case,
            given.as_ref(),
            limits,
            req.budget,
            Probes::Gpu(&mut ex),
        )?
    };
    let mut written = Vec::new();
    if let Some(dir) = &out {
        let json = serde_json::to_string_pretty(&report).map_err(|e| {
            crate::results::OutputError::write(dir.join("minimize.json"), std::io::Error::other(e))
        })?;
        written.push(dir.write("minimize.json", &json)?);
    }
    ev.finish()?;
    Ok(MinimizeOutcome {
        report,
        registry: reg,
        out,
        written,
    })
}

/// What a case's probes run on.
pub enum Probes<'a> {
    /// The CPU-side check against this profile.
    Cpu(&'a LimitsProfile),
    /// One case per fresh worker.
    Gpu(&'a mut GpuExecutor),
}

/// Every parameter's default, from the op's declaration.
fn param_defaults(op: &dyn Op) -> Params {
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
fn lift<E: std::error::Error + Into<Error> + 'static>(e: MinimizeError<E>) -> Error {
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
