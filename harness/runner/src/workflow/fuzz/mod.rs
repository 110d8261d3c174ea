//! `kedge fuzz`: boundary-biased random cases (`cases`), run on the CPU side (`--cpu`: the
//! launch contract) or on a GPU; every failure is shrunk (keeping its verdict and detector)
//! and appended once to a finds corpus. `targets` holds the bodies of the cargo-fuzz targets.

pub mod cases;
pub mod targets;

pub use cases::{generate, known_finds, FuzzFind, FuzzSpec};

use crate::errors::{Error, OutputError, Status};
use crate::run::{CpuExecutor, EngineOptions, Executor, GpuExecutor, Gpus, Progress, RunEngine};
use crate::select::{parse_allocs, Filters, MaxElements, Selection};
use crate::workflow::minimize::{self, Probes};
use kedge_core::{CaseResult, LimitsProfile};
use std::io::Write;
use std::path::PathBuf;

/// Generated cases stay this small unless `--max-elements` says otherwise.
pub const FUZZ_MAX_ELEMENTS: u64 = 1 << 26;

/// What to fuzz.
#[derive(Debug, Clone)]
pub struct FuzzRequest {
    /// `-o`, `--impl`, `--dtype`, `-p`, `--filter`; `allocs` default `exact,guard`.
    pub selection: Selection,
    pub cases: usize,
    /// The generator's seed.
    pub fuzz_seed: u64,
    pub cpu: bool,
    /// The profile of the CPU side.
    pub profile: LimitsProfile,
    /// Probes per failure when shrinking it.
    pub budget: usize,
    /// Failures shrunk at most (the rest are listed, not shrunk).
    pub max_shrinks: usize,
    /// `--max-elements` as given (0: no limit).
    pub max_elements: Option<u64>,
    /// Where finds are appended.
    pub finds: PathBuf,
    pub engine: EngineOptions,
    pub device: u32,
    pub exe: Option<PathBuf>,
}

/// What fuzzing found.
#[derive(Debug, Clone)]
pub struct FuzzOutcome {
    pub generated: usize,
    pub failures: usize,
    /// Shrunk failures not in the finds file before (now appended).
    pub new_finds: Vec<FuzzFind>,
    /// Shrunk failures already in it.
    pub known: usize,
    /// Failures not shrunk (`--max-shrinks`), or whose shrinking failed, and why.
    pub unshrunk: Vec<(CaseResult, String)>,
    /// 1 when there is anything new to look at: a new find or an unshrunk failure.
    pub status: Status,
}

/// Generate, run, shrink, record.
pub fn fuzz(req: &FuzzRequest) -> Result<FuzzOutcome, Error> {
    let reg = kedge_ops::registry();
    let mut sel = req.selection.clone();
    let allocs = parse_allocs(sel.allocs.as_deref().unwrap_or("exact,guard"))?;
    sel.allocs = None;
    let filters = Filters::resolve(&reg, &sel)?;
    let engine = if req.cpu {
        None
    } else {
        let mut b = RunEngine::builder("fuzz")
            .options(req.engine.clone())
            .gpus(Gpus::One(req.device))
            .keep_workers(false);
        if let Some(e) = &req.exe {
            b = b.exe(e);
        }
        Some(b.build()?)
    };
    let limits = match &engine {
        Some(e) => e.limits().clone(),
        None => req.profile.clone(),
    };
    let spec = FuzzSpec {
        filters,
        allocs,
        max_elements: MaxElements::from_flag(req.max_elements, Some(FUZZ_MAX_ELEMENTS)),
    };
    let cases = generate(&reg, &limits, &spec, req.cases, req.fuzz_seed);
    if cases.is_empty() && req.cases > 0 {
        return Err(crate::select::SelectError::Empty {
            why: format!(
                "none of the cases generated (seed {}) passes the filters and --max-elements",
                req.fuzz_seed
            ),
        }
        .into());
    }
    crate::note!("fuzz: {} cases (seed {})", cases.len(), req.fuzz_seed);
    let mut gpu: Option<GpuExecutor> = match &engine {
        Some(e) => Some(e.executor(None)?),
        None => None,
    };
    let mut results = Vec::new();
    {
        let mut sink = |r: CaseResult| -> Result<(), Error> {
            results.push(r);
            Ok(())
        };
        match gpu.as_mut() {
            Some(g) => g.run(&cases, &mut sink)?,
            None => CpuExecutor::new(&reg, limits.clone()).run(&cases, &mut sink)?,
        };
    }
    let failures: Vec<&CaseResult> = results.iter().filter(|r| r.verdict.is_failure()).collect();
    crate::note!("fuzz: {} failures", failures.len());
    let mut known = known_finds(&req.finds);
    let mut out = FuzzOutcome {
        generated: cases.len(),
        failures: failures.len(),
        new_finds: Vec::new(),
        known: 0,
        unshrunk: Vec::new(),
        status: Status::Ok,
    };
    if let Some(g) = gpu.as_mut() {
        g.set_progress(Progress::Off);
    }
    for (k, r) in failures.into_iter().enumerate() {
        if k >= req.max_shrinks {
            out.unshrunk.push((
                r.clone(),
                format!("not shrunk (--max-shrinks {})", req.max_shrinks),
            ));
            continue;
        }
        let probes = match gpu.as_mut() {
            Some(g) => Probes::Gpu(g),
            None => Probes::Cpu(&limits),
        };
        let report = match minimize::minimize(&reg, &r.case, Some(r), &limits, req.budget, probes) {
            Ok(x) => x,
            Err(e) => {
                out.unshrunk
                    .push((r.clone(), format!("could not shrink: {e}")));
                continue;
            }
        };
        let find = FuzzFind::new(
            &r.case,
            &report.minimized.case,
            report.minimized.outcome,
            r.under,
            report.transition.as_ref(),
            &report.minimized.result.detail,
        );
        if !known.insert(find.key()) {
            out.known += 1;
            continue;
        }
        append(&req.finds, &find)?;
        out.new_finds.push(find);
    }
    out.status = Status::failed_if(!out.new_finds.is_empty() || !out.unshrunk.is_empty());
    Ok(out)
}

fn append(path: &std::path::Path, find: &FuzzFind) -> Result<(), Error> {
    let err = |e| OutputError::write(path, e);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| OutputError::write(dir, e))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    let line = serde_json::to_string(find).map_err(|e| err(std::io::Error::other(e)))?;
    writeln!(f, "{line}").map_err(err)?;
    Ok(())
}
