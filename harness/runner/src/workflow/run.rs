//! `kedge run`: cases on one GPU, each result handed to the caller as it finishes (the CLI
//! prints it), natively or under each sanitizer tool asked for. Without cases given, the smoke
//! suite; a case named in `OP(vars)` form is looked for among the default suite's (its
//! boundaries too). Results may also be appended to a file, written as every writer writes:
//! its directory locked, never over an input or a file of another kind, never through a link.

use crate::errors::{Error, Status};
use crate::events::Event;
use crate::external::ExternalSpec;
use crate::results::{FileKind, OutDir, ResultsWriter};
use crate::run::{EngineOptions, Executor, Gpus, RunEngine};
use crate::select::{profile, Selection, Suite};
use kedge_core::{CaseResult, Tool};
use std::path::PathBuf;

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The cases: given, or named in `OP(vars)` form, or else the smoke suite's.
    pub selection: Selection,
    /// Sanitizer tools, one run each; empty: natively.
    pub tools: Vec<Tool>,
    /// Impls from outside kedge (plugins, source kernels, a ggml build).
    pub external: ExternalSpec,
    /// Worker options, and where events go.
    pub engine: EngineOptions,
    /// The GPU's ordinal.
    pub device: u32,
    /// Append every result to this file as well.
    pub results: Option<PathBuf>,
}

/// How a run went.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Results handed over.
    ran: usize,
    /// Of those, the failing ones.
    failures: usize,
    /// Wall time from the first case to the last, in milliseconds.
    pub wall_ms: f64,
    /// 1 when a case failed.
    pub status: Status,
}

/// Run the request's cases; `on` gets each result as it becomes final.
pub fn run(req: &RunRequest, on: &mut dyn FnMut(&CaseResult)) -> Result<RunOutcome, Error> {
    let ev = &req.engine.events;
    let (reg, added) = req.external.registry()?;
    for x in added {
        ev.emit(Event::ImplsAdded { note: x.note });
    }
    let suite = suite_of(&req.selection);
    // Bad input is bad input with or without a GPU: select once before looking for one.
    let mut cases = req
        .selection
        .cases(&reg, suite, &profile("h200")?, None, ev)?;
    let mut writer = match &req.results {
        Some(p) => Some(results_file(p, &req.selection)?),
        None => None,
    };
    let engine = one_gpu_engine("run", req.external.clone(), req.engine.clone(), req.device)?;
    if !req.selection.is_explicit() {
        cases = req
            .selection
            .cases(&reg, suite, engine.limits(), None, ev)?;
    }
    let t0 = std::time::Instant::now();
    let mut out = RunOutcome {
        ran: 0,
        failures: 0,
        wall_ms: 0.0,
        status: Status::Ok,
    };
    for tool in runs(&req.tools) {
        let mut ex = engine.executor(tool)?;
        ex.run(&cases, &mut |r| {
            out.ran += 1;
            out.failures += usize::from(r.verdict.is_failure());
            on(&r);
            match writer.as_mut() {
                Some((w, _)) => w.write(&r),
                None => Ok(()),
            }
        })?;
    }
    out.wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    out.status = Status::failed_if(out.failures > 0);
    ev.finish()?;
    Ok(out)
}

/// Without cases given, the smoke suite; a case named in `OP(vars)` form is looked for
/// among the default suite's (its boundaries too).
pub(crate) fn suite_of(sel: &Selection) -> Suite {
    if sel.names_cases() {
        Suite::Default
    } else {
        Suite::Smoke
    }
}

/// Each way the cases run: natively, or once per tool.
fn runs(tools: &[Tool]) -> Vec<Option<Tool>> {
    if tools.is_empty() {
        vec![None]
    } else {
        tools.iter().copied().map(Some).collect()
    }
}

/// A results file opened for appending: its directory locked, never one of the selection's
/// inputs, never a file of another kind, never through a link.
fn results_file(path: &std::path::Path, sel: &Selection) -> Result<(ResultsWriter, OutDir), Error> {
    let command = "run --results";
    let (dir, name) = OutDir::for_file(path, command)?;
    let dir = dir.reading(sel.corpus.as_deref());
    let target = dir.check_target(&name, Some((FileKind::Results, command)))?;
    Ok((ResultsWriter::append(&target)?, dir))
}

/// The engine of a command that runs on one GPU.
fn one_gpu_engine(
    command: &'static str,
    external: ExternalSpec,
    opts: EngineOptions,
    device: u32,
) -> Result<RunEngine, Error> {
    Ok(RunEngine::builder(command)
        .external(external)
        .options(opts)
        .gpus(Gpus::One(device))
        .build()?)
}
