//! `kedge sweep`: a suite through every check there is. On a GPU the cases are built for the
//! live device's limits and run natively or under each sanitizer tool asked for; without one
//! (or with `--cpu`) the same selection gets its CPU side: the launch and allocation
//! contracts against a profile, and the references. One workflow, two executors.
//!
//! The output directory holds `plan.jsonl` (the cases the sweep set out to run, for
//! `kedge gate --expect`), `results.jsonl` (one verdict per line, as each arrives),
//! `sweep-summary.json` (typed: `SweepSummary`), the reports, and the workers' logs. Every
//! count in the summary and the status comes from `results.jsonl`, so a sweep resumed after
//! being killed says what the file holds, not what the last process saw.

use crate::errors::{Error, OutputError, Status};
use crate::external::ExternalSpec;
use crate::report::ReportOptions;
use crate::results::{finished_ids, OutDir, OutMode, ResultSet};
use crate::run::{
    needs_gpu, CpuExecutor, EngineOptions, Executor, GpuRun, Gpus, HostExecutor, RunEngine,
    CPU_REFERENCE_LIMIT,
};
use crate::select::{MaxElements, Selection, Shard, Suite};
use kedge_core::{Case, LimitsProfile, Tool, Under};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::PathBuf;

/// Largest tensor a GPU sweep runs unless told otherwise (`--max-elements`): the
/// 2^31-element index-width cases need 16 GiB of device memory and about 40 GiB of host
/// memory for the f64 reference.
pub const GPU_MAX_ELEMENTS: u64 = 1 << 28;

/// What to sweep, and how.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    pub suite: Suite,
    pub selection: Selection,
    /// The limits the CPU side checks against.
    pub profile: LimitsProfile,
    pub shard: Option<Shard>,
    /// `--max-elements` as given (0: no limit; absent: `GPU_MAX_ELEMENTS` on a GPU).
    pub max_elements: Option<u64>,
    /// Sanitizer tools; empty: natively.
    pub tools: Vec<Tool>,
    /// The CPU side only, even with a GPU.
    pub cpu: bool,
    pub gpus: Gpus,
    pub external: ExternalSpec,
    pub engine: EngineOptions,
    pub out: PathBuf,
    pub mode: OutMode,
    /// The kedge binary workers start from (default: this process's).
    pub exe: Option<PathBuf>,
}

/// One row of `sweep-summary.json`: one way the cases ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub under: Under,
    /// The allocation modes asked for (`exact` when none was).
    pub allocs: String,
    pub suite: String,
    /// Selected cases with a result in `results.jsonl` (with `--resume`, earlier ones too).
    pub cases: usize,
    /// Of those, the failing ones.
    pub failures: usize,
    /// Selected cases with no result.
    #[serde(default)]
    pub missing: usize,
    /// Cases run by this invocation, and its wall time.
    #[serde(default)]
    pub ran_now: usize,
    pub wall_s: f64,
    #[serde(default)]
    pub workers: usize,
    /// The GPU (or the profile the CPU side checked against).
    pub device: String,
    /// `cuDriverGetVersion` (13000: CUDA 13.0); 0 without a GPU.
    #[serde(default)]
    pub driver_version: i32,
    /// The kernel-mode driver's version (`580.159.04`), where the worker could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default)]
    pub gpus: Vec<u32>,
    #[serde(default)]
    pub per_gpu: Vec<GpuRun>,
}

/// `sweep-summary.json`: one row per way the cases ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SweepSummary {
    pub runs: Vec<RunSummary>,
}

impl SweepSummary {
    pub fn failures(&self) -> usize {
        self.runs.iter().map(|r| r.failures).sum()
    }
}

/// How a sweep ended.
#[derive(Debug, Clone)]
pub struct SweepOutcome {
    pub summary: SweepSummary,
    pub status: Status,
    /// The selected cases (after the shard and `--max-elements`).
    pub cases: usize,
    pub results: PathBuf,
    pub reports: Vec<PathBuf>,
}

/// Run a sweep.
pub fn sweep(req: &SweepRequest) -> Result<SweepOutcome, Error> {
    let out = OutDir::open(&req.out)?;
    out.check_results(req.mode)?;
    let (reg, added) = req.external.registry()?;
    for a in &added {
        crate::note!("{}", a.note);
    }
    let gpu = !req.cpu && kedge_core::cuda::driver_present();
    let engine = if gpu {
        let mut b = RunEngine::builder("sweep")
            .external(req.external.clone())
            .options(req.engine.clone())
            .work_dir(out.join("workers"))
            .gpus(req.gpus.clone());
        if let Some(e) = &req.exe {
            b = b.exe(e);
        }
        Some(b.build()?)
    } else {
        None
    };
    let limits = match &engine {
        Some(e) => e.limits().clone(),
        None => req.profile.clone(),
    };
    let mut cases = req.selection.cases(&reg, req.suite, &limits, None)?;
    if let Some(sh) = req.shard {
        let before = cases.len();
        cases = sh.select(cases);
        crate::note!("shard {sh}: {} of the {before} selected cases", cases.len());
    }
    let default_max = gpu.then_some(GPU_MAX_ELEMENTS);
    let mut left_out =
        MaxElements::from_flag(req.max_elements, default_max).retain(&reg, &mut cases);
    if !gpu {
        // Without a GPU, the cases that really run (a library's host backend) are bounded as a
        // GPU sweep's are; the CPU side of the others only plans.
        let (mut host, rest): (Vec<Case>, Vec<Case>) =
            cases.into_iter().partition(|c| !needs_gpu(&reg, c));
        left_out += MaxElements::from_flag(req.max_elements, Some(GPU_MAX_ELEMENTS))
            .retain(&reg, &mut host);
        cases = rest;
        cases.extend(host);
    }
    if left_out > 0 {
        crate::note!(
            "{left_out} cases over {} elements left out (--max-elements 0 runs them)",
            MaxElements::from_flag(req.max_elements, Some(GPU_MAX_ELEMENTS))
                .limit()
                .unwrap_or(0)
        );
    }
    let plan: String = cases.iter().map(|c| format!("{}\n", c.to_line())).collect();
    out.write("plan.jsonl", &plan)?;
    let mut writer = out.results(req.mode)?;
    if let Some(t) = &writer.torn {
        crate::note!("{t}: cut off before resuming; that case runs again");
    }
    let results_path = out.results_path();

    let mut executors: Vec<Box<dyn Executor + '_>> = Vec::new();
    match &engine {
        Some(e) => {
            let tools: Vec<Option<Tool>> = if req.tools.is_empty() {
                vec![None]
            } else {
                req.tools.iter().copied().map(Some).collect()
            };
            for t in tools {
                executors.push(Box::new(e.executor(t)?));
            }
        }
        None => {
            crate::note!(
                "{}: running the CPU-side checks only (launch plans against profile {}, f64 references); GPU checks SKIPPED for {} cases",
                if req.cpu { "--cpu given" } else { "no CUDA driver on this machine" },
                limits.name,
                cases.len()
            );
            if !req.tools.is_empty() {
                crate::note!(
                    "--sanitize {} not used: nothing runs on a GPU",
                    req.tools
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
            if let Gpus::Listed(l) = &req.gpus {
                crate::note!(
                    "--devices {} not used: nothing runs on a GPU",
                    l.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                );
            }
            let mut cpu =
                CpuExecutor::new(&reg, limits.clone()).with_references(CPU_REFERENCE_LIMIT);
            cpu.progress = req.engine.progress;
            // A library's host backend (ggml's CPU backend) runs for real without a GPU, in
            // workers that open none.
            let host = cases.iter().filter(|c| !needs_gpu(&reg, c)).count();
            if host > 0 {
                crate::note!(
                    "{host} cases run on a library's host backend (no GPU needed): natively, in workers"
                );
                cpu.skip_host = true;
                executors.push(Box::new(cpu));
                executors.push(Box::new(HostExecutor::new(
                    &reg,
                    req.exe.clone(),
                    req.external.clone(),
                    &req.engine,
                    &out.join("workers").join("host"),
                )?));
            } else {
                executors.push(Box::new(cpu));
            }
        }
    }

    // An executor with nothing to run makes no row (a CPU-side sweep of host-backend cases).
    executors.retain(|e| cases.iter().any(|c| e.accepts(c)));
    let mut stats = Vec::new();
    for ex in executors.iter_mut() {
        let under = ex.under();
        let accepted: HashSet<String> = cases
            .iter()
            .filter(|c| ex.accepts(c))
            .map(Case::id)
            .collect();
        let (done, _) = if req.mode == OutMode::Resume {
            finished_ids(&results_path, under)?
        } else {
            Default::default()
        };
        let todo: Vec<Case> = cases
            .iter()
            .filter(|c| ex.accepts(c) && !done.contains(&c.id()))
            .cloned()
            .collect();
        if req.mode == OutMode::Resume {
            crate::note!(
                "resuming {under}: {} cases already finished, {} to run",
                accepted.len() - todo.len(),
                todo.len()
            );
        }
        let mut sink = |r: kedge_core::CaseResult| -> Result<(), Error> {
            writer.write(&r).map_err(Error::from)
        };
        let st = ex.run(&todo, &mut sink)?;
        stats.push((under, ex.device(), st, accepted));
    }
    drop(executors);
    drop(writer);

    let set = ResultSet::load(std::slice::from_ref(&results_path))?;
    for t in &set.torn {
        crate::note!("{t}");
    }
    let ids: HashSet<String> = cases.iter().map(Case::id).collect();
    let allocs = req
        .selection
        .allocs
        .clone()
        .unwrap_or_else(|| "exact".into());
    let fleet = engine.as_ref().map(|e| e.fleet().clone());
    let mut summary = SweepSummary::default();
    for (under, device, st, accepted) in stats {
        let mine: Vec<_> = set
            .results
            .iter()
            .filter(|r| r.under == under && ids.contains(&r.id) && accepted.contains(&r.id))
            .collect();
        let failures = mine.iter().filter(|r| r.verdict.is_failure()).count();
        let row = RunSummary {
            under,
            allocs: allocs.clone(),
            suite: if req.selection.is_explicit() {
                "given cases".into()
            } else {
                req.suite.to_string()
            },
            cases: mine.len(),
            failures,
            missing: accepted.len().saturating_sub(mine.len()),
            ran_now: st.ran,
            wall_s: st.wall_s,
            workers: st.workers,
            device: fleet
                .as_ref()
                .map(|f| f.device.clone())
                .unwrap_or_else(|| device.clone()),
            driver_version: fleet.as_ref().map(|f| f.driver_version).unwrap_or(0),
            driver: fleet.as_ref().and_then(|f| f.driver.clone()),
            gpus: fleet.as_ref().map(|f| f.gpus.clone()).unwrap_or_default(),
            per_gpu: st.per_gpu.clone(),
        };
        crate::note!(
            "{under}: {} of {} cases have results ({} run now in {:.1} s on {device}; {} workers, {} replaced): {failures} failures; results in {}",
            row.cases,
            cases.len(),
            st.ran,
            st.wall_s,
            st.workers,
            st.replaced,
            results_path.display()
        );
        summary.runs.push(row);
    }
    let json = serde_json::to_string_pretty(&summary).map_err(|e| {
        OutputError::write(out.join("sweep-summary.json"), std::io::Error::other(e))
    })?;
    out.write("sweep-summary.json", &json)?;
    let devices: Vec<String> = summary
        .runs
        .iter()
        .map(|r| format!("{}: {}", r.under, r.device))
        .collect();
    let reports = write_reports(
        &out,
        &set,
        &ReportOptions {
            registry: Some(&reg),
            devices: &devices,
            ..ReportOptions::default()
        },
    )?;
    crate::console::final_summary(crate::console::Style::stderr(), &set.results, |n| {
        format!("{n} more: see {}", out.join("report.md").display())
    });
    let status = if gpu {
        Status::failed_if(summary.failures() > 0)
    } else {
        crate::note!(
            "GPU checks skipped: no kernel ran, no allocation mode or sanitizer was exercised (exit status {})",
            Status::GpuSkipped.exit_code()
        );
        Status::GpuSkipped
    };
    Ok(SweepOutcome {
        summary,
        status,
        cases: cases.len(),
        results: results_path,
        reports,
    })
}

/// report.md (a person reads it first), summary.md (a CI step summary), report.json
/// (machines), junit.xml (CI systems).
pub fn write_reports(
    out: &OutDir,
    set: &ResultSet,
    opts: &ReportOptions<'_>,
) -> Result<Vec<PathBuf>, Error> {
    let r = crate::report::render_all_with(set, opts)
        .map_err(|e| OutputError::write(out.join("report.json"), std::io::Error::other(e)))?;
    let mut paths = Vec::new();
    for (name, text) in [
        ("report.md", &r.markdown),
        ("summary.md", &r.summary),
        ("report.json", &r.json),
        ("junit.xml", &r.junit),
    ] {
        paths.push(out.write(name, text)?);
    }
    crate::note!(
        "{} results -> {}/report.md, summary.md, report.json, junit.xml",
        set.results.len(),
        out.path().display()
    );
    Ok(paths)
}
