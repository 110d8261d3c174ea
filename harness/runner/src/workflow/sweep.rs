//! `kedge sweep`: a suite through every check there is. The cases are built for a limits
//! profile (`--profile`, on every machine, so a suite is the same list of ids everywhere); on
//! a GPU they run natively or under each sanitizer tool asked for, judged by the GPU's own
//! limits; without one (or with `--cpu`) the same selection gets its CPU side: the launch and
//! allocation contracts against the profile, and the references. One workflow, two executors.
//! Every verdict carries the run's metadata (`RunInfo`: kedge's build, the profile, the mode,
//! where the impls came from, the suite), and `--resume` continues only the same run.
//!
//! The output directory holds `plan.jsonl` (the cases the sweep set out to run, for
//! `kedge gate --expect`), `results.jsonl` (one verdict per line, as each arrives),
//! `sweep-summary.json` (typed: `SweepSummary`), the reports, and the workers' logs. Every
//! count in the summary and the status comes from `results.jsonl`, so a sweep resumed after
//! being killed says what the file holds, not what the last process saw.

use crate::errors::{Error, OutputError, Status};
use crate::events::{Ending, Event, Events, LeftOutWhy};
use crate::external::ExternalSpec;
use crate::provenance;
use crate::report::NotRun;
use crate::report::ReportOptions;
use crate::results::{finished_ids, OutDir, OutMode, ResultSet, REPORT_FILES};
use crate::run::budget::human_duration;
use crate::run::{
    needs_gpu, CpuExecutor, EngineOptions, Executor, Gpus, HostExecutor, RunEngine,
    CPU_REFERENCE_LIMIT,
};
use crate::run::{MaxTime, RunStats, TimeBudget};
use crate::select::{largest_tensor_elements, order, MaxElements, Selection, Shard, Suite};
pub use crate::summary::{RunSummary, SweepSummary};
use crate::summary::{StartUp, TimeSpent};
use kedge_core::cuda::nvrtc;
use kedge_core::judge::sample::{big_and_whole, Judging};
use kedge_core::{Case, Kernel, LimitsProfile, Registry, SuiteInfo, Tool, Under};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

/// The cases a time-limited sweep did not start, one JSON line each:
/// `{"case":{...},"under":"native"}` (a corpus: `--corpus` reads it).
pub const NOT_RUN_FILE: &str = "not-run.jsonl";

/// Largest tensor a case on a library's host backend runs with unless told otherwise
/// (`--max-elements`), on every machine (and `selftest`'s fixed impls): a host backend holds a
/// big case's inputs, outputs and reference in host memory. A GPU sweep's own cases have no
/// bound: its big cases are judged on sampled rows (`judge::sample`), drawn and scanned on
/// the device.
pub const GPU_MAX_ELEMENTS: u64 = 1 << 28;

/// What to sweep, and how.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    /// The suite generated when the selection gives no cases of its own.
    pub suite: Suite,
    /// Cases given (`--case`, `--corpus`) and the filters on the suite's.
    pub selection: Selection,
    /// The limits profile the cases are built for, on any machine (and the one the CPU side
    /// checks against).
    pub profile: LimitsProfile,
    /// This machine's part of the selection (`--shard K/N`); all of it when absent.
    pub shard: Option<Shard>,
    /// `--max-elements` as given (0: no limit; absent: no limit, but `GPU_MAX_ELEMENTS` for a
    /// library's host backend).
    pub max_elements: Option<u64>,
    /// `--over-elements`: only the cases whose largest tensor has more elements than this (the
    /// ones a sweep with `--max-elements` of the same value leaves out); absent: no lower bound.
    pub over_elements: Option<u64>,
    /// Sanitizer tools; empty: natively.
    pub tools: Vec<Tool>,
    /// The CPU side only, even with a GPU.
    pub cpu: bool,
    /// The GPUs the cases are spread over.
    pub gpus: Gpus,
    /// Impls from outside kedge (plugins, source kernels, a ggml build).
    pub external: ExternalSpec,
    /// Worker options, the time limit, and where events go.
    pub engine: EngineOptions,
    /// The output directory: plan, results, summary, reports, workers' logs.
    pub out: PathBuf,
    /// What to do with a `results.jsonl` already there: refuse, resume it, or start over.
    pub mode: OutMode,
    /// The kedge binary workers start from (default: this process's).
    pub exe: Option<PathBuf>,
}

impl SweepRequest {
    /// The files a sweep reads (its corpus, plugins, source kernels): never written.
    fn inputs(&self) -> impl Iterator<Item = &std::path::Path> {
        self.selection
            .corpus
            .iter()
            .chain(self.external.plugins.iter())
            .chain(self.external.sources.iter().map(|s| &s.file))
            .map(PathBuf::as_path)
    }
}

/// How a sweep ended.
#[derive(Debug, Clone)]
pub struct SweepOutcome {
    /// What `sweep-summary.json` holds: a row per way the cases ran.
    pub summary: SweepSummary,
    /// 0, or 1 when a case failed; 4 when the GPU checks were skipped and 6 when the time ran
    /// out, whatever failed (these two told as `Event::Ended`).
    pub status: Status,
    /// The selected cases (after the shard and `--max-elements`).
    pub cases: usize,
    /// The `results.jsonl` every count comes from.
    pub results: PathBuf,
    /// The reports written (Markdown, summary, JSON, JUnit).
    pub reports: Vec<PathBuf>,
    /// Cases not started because the time limit ran out, each with the run it was for, in
    /// the order they would have run (also in `not-run.jsonl`).
    pub not_run: Vec<(Under, Case)>,
}

/// A sweep's cases before the shard and `--max-elements`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCases {
    /// The selection for the profile: the same ids on every machine.
    pub cases: Vec<Case>,
    /// Cases the live GPU's own limits add (its values where it differs from the profile),
    /// none of them among `cases`; empty without a GPU or for explicit cases.
    pub extra: Vec<Case>,
    /// Where the live GPU differs from the profile, one value each.
    pub differences: Vec<String>,
}

/// The cases of a sweep: the suite generated for `profile` on every machine, so the CPU plan,
/// any GPU and every shard have the same ids; on a GPU whose limits (`live`) differ from the
/// profile, also the cases its own limits would make, each with an id of its own.
pub fn planned_cases(
    reg: &kedge_core::Registry,
    suite: Suite,
    selection: &Selection,
    profile: &LimitsProfile,
    live: Option<&LimitsProfile>,
    events: &Events,
) -> Result<PlannedCases, Error> {
    let cases = selection.cases(reg, suite, profile, None, events)?;
    let differences = live.map(|l| profile.differences(l)).unwrap_or_default();
    let mut extra = Vec::new();
    if let (Some(live), false) = (live, differences.is_empty() || selection.is_explicit()) {
        let have: HashSet<String> = cases.iter().map(Case::id).collect();
        // What the live limits' selection leaves out was told for the profile's already.
        let told = Events::new(crate::events::Collect::default());
        extra = selection
            .cases(reg, suite, live, None, &told)?
            .into_iter()
            .filter(|c| !have.contains(&c.id()))
            .collect();
    }
    Ok(PlannedCases {
        cases,
        extra,
        differences,
    })
}

/// Whether the case's impl is a library that owns its memory (a ggml build).
fn is_library(reg: &Registry, c: &Case) -> bool {
    reg.resolve(c)
        .map(|(_, imp)| imp.backend().is_some())
        .unwrap_or(false)
}

/// Run a sweep, phase by phase: the output directory and the engine, the cases, the runs,
/// the summary, the reports and the status. What it has to tell goes to the engine options'
/// events (`req.engine.events`), each phase's time too.
pub fn sweep(req: &SweepRequest) -> Result<SweepOutcome, Error> {
    let ev = &req.engine.events;
    let mut phases = Phases::start(ev);
    // `--max-time`: counted from here (the engine options carry it to every worker pool).
    let budget = req.engine.budget.clone();
    let out = open_out(req)?;
    let (reg, added) = req.external.registry()?;
    for a in added {
        ev.emit(Event::ImplsAdded { note: a.note });
    }
    // The cases are the profile's on every machine (a GPU's own limits judge them).
    let (engine, _) = super::engine_or_profile(super::on_gpu(req.cpu), &req.profile, || {
        gpu_engine(req, &out)
    })?;
    let gpu = engine.is_some();
    let limits = req.profile.clone();
    let Selected { cases, suite } = select(req, &reg, &limits, engine.as_ref())?;
    let runs = runs_of(req, &reg, &cases, gpu);
    let run = provenance::sweep_info(
        &limits.name,
        provenance::mode(&runs, req.selection.allocs.as_deref()),
        provenance::impl_sources(&reg, &cases, &req.external),
        suite,
    );
    if req.mode == OutMode::Resume {
        provenance::check_resume(&out.results_path(), &run)?;
    }
    let plan: String = cases.iter().map(|c| format!("{}\n", c.to_line())).collect();
    out.write("plan.jsonl", &plan)?;
    ev.emit(Event::PlanReady {
        cases: cases.len(),
        runs: runs.clone(),
    });
    phases.done("plan");
    if let Some(e) = engine.as_ref() {
        compile_ahead(&reg, e, &cases, ev);
        phases.done("kernels");
    }
    let ran = run_all(req, &reg, engine.as_ref(), &limits, &cases, &out, &run)?;
    phases.done("run");
    let results_path = out.results_path();
    let set = ResultSet::load(std::slice::from_ref(&results_path))?;
    for t in &set.torn {
        ev.emit(Event::TornLine {
            text: t.to_string(),
        });
    }
    let fleet = engine.as_ref().map(|e| e.fleet().clone());
    let (summary, costs) = summarize(req, &reg, &set, &cases, ran.stats, fleet, &results_path);
    let json = serde_json::to_string_pretty(&summary).map_err(|e| {
        OutputError::write(out.join("sweep-summary.json"), std::io::Error::other(e))
    })?;
    out.write("sweep-summary.json", &json)?;
    let not_run = ran.not_run;
    let listed = not_run_list(
        &out,
        &reg,
        budget.as_deref(),
        &summary,
        &not_run,
        &costs,
        ev,
    )?;
    phases.done("summary");
    let reports = reports(&out, &reg, &set, &summary, listed.as_ref(), &run, ev)?;
    phases.done("reports");
    // Every case ran for real (on a GPU, or on a library's host backend): 0 or 1.
    let all_ran = gpu || !runs.contains(&Under::Cpu);
    let status = status(&summary, &not_run, all_ran, ev);
    // Everything is written: now a console that could not be written fails the sweep.
    ev.finish()?;
    Ok(SweepOutcome {
        status,
        summary,
        cases: cases.len(),
        results: results_path,
        reports,
        not_run,
    })
}

/// The kernel files `cases` launch (their plans' launches, on the GPU's own limits, and the
/// device helpers of big cases), compiled for the GPU on the host's cores before its workers
/// start: each worker then reads them from the on-disk cache instead of compiling each file
/// itself, inside the first case that launches it. Without NVRTC on this machine nothing is
/// compiled here (each case that needs it says so, as before).
fn compile_ahead(reg: &Registry, engine: &RunEngine, cases: &[Case], ev: &Events) {
    if !nvrtc::present() {
        return;
    }
    let limits = engine.limits();
    let kernels = kernels_ahead(reg, limits, cases);
    if kernels.is_empty() {
        return;
    }
    let arch = format!("sm_{}", limits.compute_capability.value);
    let ahead = nvrtc::compile_ahead(&kernels, &arch);
    ev.emit(Event::KernelsCompiled {
        arch,
        files: ahead.files,
        compiled: ahead.compiled,
        failed: ahead.failed.len(),
        seconds: (ahead.seconds * 10.0).round() / 10.0,
    });
}

/// Cases with a tensor of this many elements or more use kedge's own device helpers
/// (`kedge_core::cuda::big`: inputs drawn and outputs scanned on the device, block-format
/// inputs laid out from a pool), whatever impl runs them, ggml's too.
const BIG_HELPERS_FROM: u64 = 1 << 24;

/// What to compile ahead for `cases`: the kernels their plans launch, and the device helpers
/// of big cases where any case is big.
fn kernels_ahead(reg: &Registry, limits: &LimitsProfile, cases: &[Case]) -> Vec<Kernel> {
    let mut kernels = launched_kernels(reg, limits, cases);
    if cases
        .iter()
        .any(|c| largest_tensor_elements(reg, c) >= BIG_HELPERS_FROM)
    {
        if let Some((k, _)) = kedge_core::cuda::big::KERNELS.first() {
            kernels.push(*k);
        }
    }
    kernels
}

/// The distinct kernels (by source file) the plans of `cases` launch on `limits`; a case
/// whose op, impl or plan is refused launches none here (its worker says why).
fn launched_kernels(reg: &Registry, limits: &LimitsProfile, cases: &[Case]) -> Vec<Kernel> {
    let mut out: Vec<Kernel> = Vec::new();
    for c in cases {
        let Ok(op) = reg.op(&c.op) else { continue };
        let Ok(imp) = reg.imp(op, &c.imp) else {
            continue;
        };
        // A library's impl (ggml's) launches the library's own kernels, nothing of NVRTC's.
        if imp.backend().is_some() {
            continue;
        }
        let Ok(plan) = imp.plan(c, limits) else {
            continue;
        };
        for l in plan.launches {
            if !out.iter().any(|k| k.file == l.kernel.file) {
                out.push(l.kernel);
            }
        }
    }
    out
}

/// The time each phase of a workflow took, told as `Event::Phase` when it ends.
struct Phases<'a> {
    events: &'a Events,
    since: std::time::Instant,
}

impl<'a> Phases<'a> {
    fn start(events: &'a Events) -> Phases<'a> {
        Phases {
            events,
            since: std::time::Instant::now(),
        }
    }
    /// The phase `name` ended now; the next starts.
    fn done(&mut self, name: &'static str) {
        let seconds = (self.since.elapsed().as_secs_f64() * 1e3).round() / 1e3;
        self.events.emit(Event::Phase { name, seconds });
        self.since = std::time::Instant::now();
    }
}

/// What the runs of a sweep left: each executor's run with how many cases it did not get to,
/// and those cases (a time limit ran out).
struct Ran {
    stats: Vec<(ExecutorRun, usize)>,
    not_run: Vec<(Under, Case)>,
}

/// Every executor's part of the sweep, each result written to `results.jsonl` as it becomes
/// final; with a time limit, in the order of expected yield.
fn run_all(
    req: &SweepRequest,
    reg: &Registry,
    engine: Option<&RunEngine>,
    limits: &LimitsProfile,
    cases: &[Case],
    out: &OutDir,
    run: &kedge_core::RunInfo,
) -> Result<Ran, Error> {
    let ev = &req.engine.events;
    let mut writer = out.results(req.mode)?;
    if let Some(t) = &writer.torn {
        ev.emit(Event::TornLine {
            text: format!("{t}: cut off before resuming; that case runs again"),
        });
    }
    let results_path = out.results_path();
    let mut executors = executors(req, reg, engine, limits, cases, out)?;
    // An executor with nothing to run makes no row (a CPU-side sweep of host-backend cases).
    executors.retain(|e| cases.iter().any(|c| e.accepts(c)));
    // With a time limit, the whole selection's order of expected yield: each executor runs
    // its part in it, and a resumed sweep continues it.
    let yield_order = req.engine.budget.as_ref().map(|b| {
        let order = order::by_yield(
            reg,
            limits,
            cases,
            req.engine.judging,
            !req.tools.is_empty(),
        );
        (b.limit(), order)
    });
    if let Some((limit, _)) = &yield_order {
        ev.emit(Event::TimeLimit {
            limit: MaxTime(*limit).to_string(),
            order: order::classes(!req.tools.is_empty()),
        });
    }
    let mut ran = Ran {
        stats: Vec::new(),
        not_run: Vec::new(),
    };
    for ex in executors.iter_mut() {
        let ordered = yield_order.as_ref().map_or(cases, |(_, (o, _))| o);
        if let Some((_, (_, o))) = &yield_order {
            ex.set_order(Arc::new(o.clone()));
        }
        let (st, left) = run_one(req, ex.as_mut(), ordered, run, &mut writer, &results_path)?;
        ran.not_run
            .extend(left.iter().map(|c| (st.under, c.clone())));
        ran.stats.push((st, left.len()));
    }
    Ok(ran)
}

/// The output directory, locked, with every file a sweep writes checked.
fn open_out(req: &SweepRequest) -> Result<OutDir, Error> {
    let out = OutDir::open(&req.out)?
        .reading(req.inputs())
        .writes(&[
            "plan.jsonl",
            "results.jsonl",
            "sweep-summary.json",
            "not-run.jsonl",
        ])?
        .writes(&REPORT_FILES)?;
    out.check_results(req.mode)?;
    // Worker logs go under workers/: no link there either.
    out.subdir("workers")?;
    Ok(out)
}

/// The GPU engine of a sweep: its workers' logs under `workers/`.
fn gpu_engine(req: &SweepRequest, out: &OutDir) -> Result<RunEngine, Error> {
    let mut b = RunEngine::builder("sweep")
        .external(req.external.clone())
        .options(req.engine.clone())
        .work_dir(out.join("workers"))
        .gpus(req.gpus.clone());
    if let Some(e) = &req.exe {
        b = b.exe(e);
    }
    Ok(b.build()?)
}

/// A sweep's cases, and the suite they are as every shard sees it.
struct Selected {
    cases: Vec<Case>,
    suite: SuiteInfo,
}

/// The cases of a sweep: the profile's (and the live GPU's own), bounded by
/// `--max-elements`, then this shard's.
fn select(
    req: &SweepRequest,
    reg: &Registry,
    limits: &LimitsProfile,
    engine: Option<&RunEngine>,
) -> Result<Selected, Error> {
    // The cases are the profile's on every machine: the same ids in the CPU plan, on any GPU
    // and in every shard. A GPU whose limits differ from the profile runs those cases as
    // they are (its own limits judge them), says how it differs, and adds the cases its own
    // limits would make, each with its own id.
    let live = engine.map(|e| e.limits());
    let ev = &req.engine.events;
    let planned = planned_cases(reg, req.suite, &req.selection, limits, live, ev)?;
    if let Some(live) = live.filter(|_| !planned.differences.is_empty()) {
        ev.emit(Event::ProfileDiffers {
            device: live.device.clone(),
            profile: limits.name.clone(),
            differences: planned.differences.clone(),
        });
    }
    if !planned.extra.is_empty() {
        ev.emit(Event::ExtraCases {
            cases: planned.extra.len(),
        });
    }
    let extra: HashSet<String> = planned.extra.iter().map(Case::id).collect();
    let mut cases = planned.cases;
    cases.extend(planned.extra);
    bound_elements(req, reg, &mut cases);
    // The suite as every shard sees it: its name and flags, and the digest of its shared ids.
    let suite = SuiteInfo::of(
        provenance::suite_name(
            req.suite,
            &req.selection,
            MaxElements::from_flag(req.max_elements, None),
            req.over_elements,
        ),
        cases
            .iter()
            .map(Case::id)
            .filter(|id| !extra.contains(id))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
    );
    if let Some(sh) = req.shard {
        let before = cases.len();
        cases = sh.select(cases);
        ev.emit(Event::Shard {
            shard: sh.to_string(),
            cases: cases.len(),
            of: before,
        });
        if cases.is_empty() {
            // A shard with nothing to run would "pass" on nothing.
            return Err(crate::select::SelectError::Empty {
                why: format!(
                    "shard {sh} holds none of the {before} selected cases (use fewer shards for a selection this small)"
                ),
            }
            .into());
        }
    }
    Ok(Selected { cases, suite })
}

/// The same on every machine: `--max-elements` bounds every case; without it, only the cases
/// of a library's host backend are bounded (they hold everything in host memory).
fn bound_elements(req: &SweepRequest, reg: &Registry, cases: &mut Vec<Case>) {
    let mut left_out = MaxElements::from_flag(req.max_elements, None).retain(reg, cases);
    let (mut host, rest): (Vec<Case>, Vec<Case>) = std::mem::take(cases)
        .into_iter()
        .partition(|c| !needs_gpu(reg, c) && is_library(reg, c));
    left_out +=
        MaxElements::from_flag(req.max_elements, Some(GPU_MAX_ELEMENTS)).retain(reg, &mut host);
    *cases = rest;
    cases.extend(host);
    if left_out > 0 {
        req.engine.events.emit(Event::LeftOut {
            cases: left_out,
            why: LeftOutWhy::OverElements {
                limit: MaxElements::from_flag(req.max_elements, Some(GPU_MAX_ELEMENTS))
                    .limit()
                    .unwrap_or(0),
            },
        });
    }
    if let Some(floor) = req.over_elements {
        let before = cases.len();
        cases.retain(|c| largest_tensor_elements(reg, c) > floor);
        if before > cases.len() {
            req.engine.events.emit(Event::LeftOut {
                cases: before - cases.len(),
                why: LeftOutWhy::UpToElements { limit: floor },
            });
        }
    }
}

/// What runs the cases: on a GPU natively or under each tool; without one the CPU side, and a
/// library's host backend for real.
fn runs_of(req: &SweepRequest, reg: &Registry, cases: &[Case], gpu: bool) -> Vec<Under> {
    if gpu {
        if req.tools.is_empty() {
            vec![Under::Native]
        } else {
            req.tools.iter().copied().map(Under::Tool).collect()
        }
    } else {
        let mut r = Vec::new();
        if cases.iter().any(|c| needs_gpu(reg, c)) {
            r.push(Under::Cpu);
        }
        if cases.iter().any(|c| !needs_gpu(reg, c)) {
            r.push(Under::Native);
        }
        r
    }
}

/// The executors of a sweep: one per tool on the GPU engine; without one, the CPU side and,
/// for a library's host backend, workers that run it for real.
fn executors<'a>(
    req: &SweepRequest,
    reg: &'a Registry,
    engine: Option<&'a RunEngine>,
    limits: &LimitsProfile,
    cases: &[Case],
    out: &OutDir,
) -> Result<Vec<Box<dyn Executor + 'a>>, Error> {
    let mut executors: Vec<Box<dyn Executor + 'a>> = Vec::new();
    if let Some(e) = engine {
        let tools: Vec<Option<Tool>> = if req.tools.is_empty() {
            vec![None]
        } else {
            req.tools.iter().copied().map(Some).collect()
        };
        for t in tools {
            executors.push(Box::new(e.executor(t)?));
        }
        return Ok(executors);
    }
    let ev = &req.engine.events;
    ev.emit(Event::CpuSideOnly {
        why: if req.cpu {
            "--cpu given"
        } else {
            "no CUDA driver on this machine"
        }
        .into(),
        profile: limits.name.clone(),
        cases: cases.len(),
    });
    if !req.tools.is_empty() {
        ev.emit(Event::FlagNotUsed {
            flag: "--sanitize".into(),
            value: req
                .tools
                .iter()
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    if let Gpus::Listed(l) = &req.gpus {
        ev.emit(Event::FlagNotUsed {
            flag: "--devices".into(),
            value: l.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        });
    }
    let mut cpu = CpuExecutor::new(reg, limits.clone()).with_references(CPU_REFERENCE_LIMIT);
    cpu.events = ev.clone();
    cpu.budget = req.engine.budget.clone();
    // A library's host backend (ggml's CPU backend) runs for real without a GPU, in workers
    // that open none.
    let host = cases.iter().filter(|c| !needs_gpu(reg, c)).count();
    if host > 0 {
        ev.emit(Event::HostBackend { cases: host });
        cpu.skip_host = true;
        executors.push(Box::new(cpu));
        executors.push(Box::new(HostExecutor::new(
            reg,
            req.exe.clone(),
            req.external.clone(),
            &req.engine,
            &out.join("workers").join("host"),
        )?));
    } else {
        executors.push(Box::new(cpu));
    }
    Ok(executors)
}

/// How one executor's run went, for its summary row.
struct ExecutorRun {
    under: Under,
    device: String,
    stats: RunStats,
    /// The ids of the sweep's cases this executor takes.
    accepted: HashSet<String>,
    /// The ids it was given to run now (a resumed sweep gives it only those not finished).
    ran: HashSet<String>,
}

/// One executor's part of the sweep, in `ordered`'s order, each result written as it becomes
/// final; with the cases it did not get to (a time limit ran out).
fn run_one(
    req: &SweepRequest,
    ex: &mut (dyn Executor + '_),
    ordered: &[Case],
    run: &kedge_core::RunInfo,
    writer: &mut crate::results::ResultsWriter,
    results_path: &std::path::Path,
) -> Result<(ExecutorRun, Vec<Case>), Error> {
    let under = ex.under();
    let accepted: HashSet<String> = ordered
        .iter()
        .filter(|c| ex.accepts(c))
        .map(Case::id)
        .collect();
    let (done, _) = if req.mode == OutMode::Resume {
        finished_ids(results_path, under)?
    } else {
        Default::default()
    };
    let todo: Vec<Case> = ordered
        .iter()
        .filter(|c| ex.accepts(c) && !done.contains(&c.id()))
        .cloned()
        .collect();
    if req.mode == OutMode::Resume {
        req.engine.events.emit(Event::Resuming {
            under,
            finished: accepted.len() - todo.len(),
            to_run: todo.len(),
        });
    }
    let mut got: HashSet<String> = HashSet::new();
    let mut sink = |mut r: kedge_core::CaseResult| -> Result<(), OutputError> {
        r.run = Some(run.clone());
        got.insert(r.case.id());
        writer.write(&r)
    };
    let stats = ex.run(&todo, &mut sink)?;
    let left: Vec<Case> = todo
        .iter()
        .filter(|c| !got.contains(&c.id()))
        .cloned()
        .collect();
    let ran: HashSet<String> = todo.iter().map(Case::id).collect();
    let device = ex.device();
    Ok((
        ExecutorRun {
            under,
            device,
            stats,
            accepted,
            ran,
        },
        left,
    ))
}

/// The sweep's summary, a row per executor (each said as a line), and the cost and seconds of
/// each case run now: what cases not run are costed by.
fn summarize(
    req: &SweepRequest,
    reg: &Registry,
    set: &ResultSet,
    cases: &[Case],
    runs: Vec<(ExecutorRun, usize)>,
    fleet: Option<crate::run::Fleet>,
    results_path: &std::path::Path,
) -> (SweepSummary, Costs) {
    let ids: HashSet<String> = cases.iter().map(Case::id).collect();
    let allocs = req
        .selection
        .allocs
        .clone()
        .unwrap_or_else(|| "exact".into());
    let mut summary = SweepSummary::default();
    let mut costs = Costs {
        ran: Vec::new(),
        judging: req.engine.judging,
    };
    for (x, left) in runs {
        let under = x.under;
        let mine: Vec<_> = set
            .results
            .iter()
            .filter(|r| r.under == under && ids.contains(&r.id) && x.accepted.contains(&r.id))
            .collect();
        let failures = mine.iter().filter(|r| r.verdict.is_failure()).count();
        let now: Vec<&kedge_core::CaseResult> = mine
            .iter()
            .copied()
            .filter(|r| x.ran.contains(&r.id))
            .collect();
        let time = TimeSpent::of(&now);
        if req.engine.budget.is_some() {
            costs.ran.extend(
                now.iter()
                    .map(|r| (Cost::of(reg, &r.case, req.engine.judging), r.ms / 1e3)),
            );
        }
        let st = &x.stats;
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
            missing: x.accepted.len().saturating_sub(mine.len()),
            not_run: left,
            ran_now: st.ran,
            wall_s: st.wall_s,
            workers: st.workers,
            worker_wait_s: (st.worker_wait_s * 1e3).round() / 1e3,
            slot_s: st.slot_time.rounded(),
            worker_start_s: StartUp::of(&st.worker_start_s),
            device: fleet
                .as_ref()
                .map(|f| f.device.clone())
                .unwrap_or_else(|| x.device.clone()),
            driver_version: fleet.as_ref().map(|f| f.driver_version).unwrap_or(0),
            driver: fleet.as_ref().and_then(|f| f.driver.clone()),
            gpus: fleet.as_ref().map(|f| f.gpus.clone()).unwrap_or_default(),
            per_gpu: st.per_gpu.clone(),
            time: time.clone(),
        };
        let ev = &req.engine.events;
        if let Some(t) = time {
            ev.emit(Event::TimeSpent { under, time: t });
        }
        ev.emit(Event::RunSummed {
            row: Box::new(row.clone()),
            of: cases.len(),
            on: x.device.clone(),
            replaced: st.replaced,
            results: results_path.to_path_buf(),
        });
        summary.runs.push(row);
    }
    (summary, costs)
}

/// The reports of a sweep, and the console's final summary.
fn reports(
    out: &OutDir,
    reg: &Registry,
    set: &ResultSet,
    summary: &SweepSummary,
    not_run: Option<&NotRun>,
    run: &kedge_core::RunInfo,
    events: &Events,
) -> Result<Vec<PathBuf>, Error> {
    let devices: Vec<String> = summary
        .runs
        .iter()
        .map(|r| format!("{}: {}", r.under, r.device))
        .collect();
    let provenance = [format!("results: {}; from {}", run.what(), run.build())];
    let reports = write_reports(
        out,
        set,
        &ReportOptions {
            registry: Some(reg),
            devices: &devices,
            not_run,
            provenance: &provenance,
            ..ReportOptions::default()
        },
    )?;
    events.emit(Event::ReportsWritten {
        results: set.results.len(),
        dir: out.path().to_path_buf(),
    });
    events.emit(Event::summary(&set.results, out.join("report.md")));
    Ok(reports)
}

/// How the sweep ended. A time limit that ran out says so first: whatever ran, the sweep is
/// incomplete. Only when some case got no more than its CPU side were GPU checks skipped.
fn status(
    summary: &SweepSummary,
    not_run: &[(Under, Case)],
    all_ran: bool,
    events: &Events,
) -> Status {
    let (how, status) = if !not_run.is_empty() {
        (
            Ending::OutOfTime {
                cases: not_run.len(),
            },
            Status::OutOfTime,
        )
    } else if all_ran {
        return Status::failed_if(summary.failures() > 0);
    } else {
        (Ending::GpuSkipped, Status::GpuSkipped)
    };
    events.emit(Event::Ended {
        how,
        status: status.exit_code(),
    });
    status
}

/// `not-run.jsonl` and what is said of it when a time limit ran out with cases left. Cases
/// are left only then; a sweep that ran everything removes the list an earlier, cut-short run
/// of this directory left.
fn not_run_list(
    out: &OutDir,
    reg: &Registry,
    budget: Option<&TimeBudget>,
    summary: &SweepSummary,
    not_run: &[(Under, Case)],
    costs: &Costs,
    events: &Events,
) -> Result<Option<NotRun>, Error> {
    match budget {
        Some(b) if !not_run.is_empty() => out_of_time(out, reg, b, summary, not_run, costs, events),
        _ => {
            let file = out.join(NOT_RUN_FILE);
            match std::fs::remove_file(&file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(OutputError::write(&file, e).into())
                }
                _ => Ok(None),
            }
        }
    }
}

/// The end of a sweep whose time limit ran out: `not-run.jsonl` written, and what a person
/// needs said: how many did not run, whether the limit
/// was too small for even one case, and roughly how long the rest would take.
fn out_of_time(
    out: &OutDir,
    reg: &Registry,
    budget: &TimeBudget,
    summary: &SweepSummary,
    not_run: &[(Under, Case)],
    costs: &Costs,
    events: &Events,
) -> Result<Option<NotRun>, Error> {
    let wall_s: f64 = summary.runs.iter().map(|r| r.wall_s).sum();
    let file = out.join(NOT_RUN_FILE);
    let lines: String = not_run
        .iter()
        .map(|(u, c)| format!("{}\n", serde_json::json!({ "under": u.name(), "case": c })))
        .collect();
    out.write(NOT_RUN_FILE, &lines)?;
    let limit = MaxTime(budget.limit());
    let why = format!(
        "the time limit (--max-time {limit}) ran out after {}",
        human_duration(budget.elapsed())
    );
    let started = budget.started();
    if started <= 1 {
        events.emit(Event::TooSmallForOne {
            limit: limit.to_string(),
            before_any: budget.first_past_limit(),
            slowest: summary
                .runs
                .iter()
                .find_map(|r| r.time.as_ref())
                .and_then(|t| t.slowest.first())
                .cloned(),
        });
    }
    // What the rest would cost: each case not run costs what the case run now nearest to it
    // in bytes of tensors took (a case's time follows its bytes), among those that run as it
    // does (alone, or beside others), scaled by how many ran at once.
    let left: Vec<Cost> = not_run
        .iter()
        .map(|(_, c)| Cost::of(reg, c, costs.judging))
        .collect();
    let gpus = summary.runs.iter().map(|r| r.gpus.len()).max().unwrap_or(0);
    events.emit(Event::NotRun {
        why: why.clone(),
        cases: not_run.len(),
        file: file.clone(),
        bytes: left.iter().fold(0u64, |a, c| a.saturating_add(c.bytes)),
        estimate_s: estimate_s(&costs.ran, wall_s, gpus, &left),
    });
    Ok(Some(NotRun {
        why,
        file: file.display().to_string(),
        cases: not_run
            .iter()
            .map(|(u, c)| format!("{u}: {}", c.label()))
            .collect(),
    }))
}

/// The cases run now, each with its cost and seconds, and how big cases were judged: what the
/// cases a time limit left are costed by.
struct Costs {
    ran: Vec<(Cost, f64)>,
    judging: Judging,
}

/// What a case costs, for the estimate of the cases a time limit left: its tensors' bytes (a
/// case's time follows them), and whether it runs alone on its GPU (judged whole, its tensors
/// past `ALONE_FROM_BYTES`: a CPU reference of the whole case on every core, one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cost {
    bytes: u64,
    alone: bool,
}

impl Cost {
    fn of(reg: &Registry, c: &Case, judging: Judging) -> Cost {
        let Ok(op) = reg.op(&c.op) else {
            return Cost {
                bytes: 0,
                alone: false,
            };
        };
        let bytes = op
            .tensors(c)
            .map(|ts| ts.iter().map(|t| t.bytes).fold(0u64, u64::saturating_add))
            .unwrap_or(0);
        Cost {
            bytes,
            alone: bytes >= crate::run::ALONE_FROM_BYTES && big_and_whole(op, c, judging),
        }
    }
}

/// Roughly how long cases of `left` costs would take, in seconds of wall time. Each costs the
/// seconds of the case in `costs` (the cases run now) nearest to it in bytes (by ratio) among
/// those that run as it does, alone or beside others (any, where none does). Cases beside others
/// are scaled by `wall_s` over the summed seconds of `costs` (how many ran at once); those alone
/// run one per GPU of `gpus`. (Costed as the nearest in bytes of any kind and scaled as the
/// cases beside them, run 39's 270 whole-judged 2^31- and 2^32-element cases left, at 5 to 39 s
/// each, were "roughly 1m 13s more".) `None` without costs.
fn estimate_s(costs: &[(Cost, f64)], wall_s: f64, gpus: usize, left: &[Cost]) -> Option<f64> {
    let worker_s: f64 = costs.iter().map(|c| c.1).sum();
    if costs.is_empty() || worker_s <= 0.0 || wall_s <= 0.0 {
        return None;
    }
    let sorted = |alone: Option<bool>| -> Vec<(u64, f64)> {
        let mut v: Vec<(u64, f64)> = costs
            .iter()
            .filter(|(c, _)| alone.is_none_or(|a| c.alone == a))
            .map(|(c, s)| (c.bytes, *s))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        v
    };
    let (all, alone, shared) = (sorted(None), sorted(Some(true)), sorted(Some(false)));
    let ln = |b: u64| (b.max(1) as f64).ln();
    let nearest = |by_size: &[(u64, f64)], b: u64| -> f64 {
        let i = by_size.partition_point(|c| c.0 < b);
        [i.checked_sub(1), (i < by_size.len()).then_some(i)]
            .into_iter()
            .flatten()
            .map(|k| by_size[k])
            .min_by(|x, y| (ln(x.0) - ln(b)).abs().total_cmp(&(ln(y.0) - ln(b)).abs()))
            .map_or(0.0, |c| c.1)
    };
    let like = |c: &Cost| -> &[(u64, f64)] {
        let same = if c.alone { &alone } else { &shared };
        if same.is_empty() {
            &all
        } else {
            same
        }
    };
    let (mut beside, mut by_itself) = (0.0, 0.0);
    for c in left {
        let s = nearest(like(c), c.bytes);
        if c.alone {
            by_itself += s;
        } else {
            beside += s;
        }
    }
    Some(beside * wall_s / worker_s + by_itself / gpus.max(1) as f64)
}

/// report.md (a person reads it first), summary.md (a CI step summary), report.json
/// (machines), junit.xml (CI systems); their paths, in that order.
pub fn write_reports(
    out: &OutDir,
    set: &ResultSet,
    opts: &ReportOptions<'_>,
) -> Result<Vec<PathBuf>, Error> {
    let r = crate::report::render_all_with(set, opts)
        .map_err(|e| OutputError::write(out.join("report.json"), std::io::Error::other(e)))?;
    let mut paths = Vec::new();
    let [md, summary, json, junit] = REPORT_FILES;
    for (name, text) in [
        (md, &r.markdown),
        (summary, &r.summary),
        (json, &r.json),
        (junit, &r.junit),
    ] {
        paths.push(out.write(name, text)?);
    }
    Ok(paths)
}

#[cfg(test)]
mod estimate_tests {
    use super::{estimate_s, Cost};

    fn shared(bytes: u64) -> Cost {
        Cost {
            bytes,
            alone: false,
        }
    }

    fn alone(bytes: u64) -> Cost {
        Cost { bytes, alone: true }
    }

    #[test]
    fn cases_not_run_cost_what_the_nearest_size_took() {
        // Small cases took 0.01 s, a 1 GiB one 2 s; two workers ran at once (wall = half).
        let costs = [
            (shared(1 << 10), 0.01),
            (shared(2 << 10), 0.01),
            (shared(1 << 30), 2.0),
        ];
        let wall = (0.01 + 0.01 + 2.0) / 2.0;
        let left = [shared(3 << 10), shared(2 << 30), shared(1 << 30)];
        let got = estimate_s(&costs, wall, 1, &left).unwrap();
        assert!((got - (0.01 + 2.0 + 2.0) / 2.0).abs() < 1e-9, "{got}");
        assert_eq!(estimate_s(&[], 1.0, 1, &[shared(1)]), None);
        assert_eq!(estimate_s(&costs, 1.0, 1, &[]), Some(0.0));
    }

    /// A big case judged whole costs what the nearest such case took, not a sampled case of
    /// its size, and runs one per GPU, not at the sweep's pace beside others.
    #[test]
    fn cases_judged_whole_alone_cost_their_kind_one_per_gpu() {
        const GB: u64 = 1 << 30;
        // Eight at a time: sampled 16 GiB cases took 0.25 s each, one whole-judged 17 GiB
        // case 39 s alone; the sweep's wall is an eighth of the shared cases' time plus it.
        let mut costs: Vec<(Cost, f64)> = (0..64).map(|_| (shared(16 * GB), 0.25)).collect();
        costs.push((alone(17 * GB), 39.0));
        let wall = 64.0 * 0.25 / 8.0 + 39.0;
        // Ten such whole-judged cases left: ten times 39 s on one GPU, 5 times on two.
        let left = vec![alone(16 * GB); 10];
        let one = estimate_s(&costs, wall, 1, &left).unwrap();
        assert!((one - 390.0).abs() < 1e-9, "{one}");
        let two = estimate_s(&costs, wall, 2, &left).unwrap();
        assert!((two - 195.0).abs() < 1e-9, "{two}");
        // Sampled cases left cost the sampled ones' time, at the sweep's pace.
        let got = estimate_s(&costs, wall, 1, &[shared(17 * GB)]).unwrap();
        let pace = wall / (64.0 * 0.25 + 39.0);
        assert!((got - 0.25 * pace).abs() < 1e-9, "{got}");
        // No whole-judged case ran: the nearest of any kind, one per GPU.
        let got = estimate_s(&costs[..64], 2.0, 1, &[alone(16 * GB)]).unwrap();
        assert!((got - 0.25).abs() < 1e-9, "{got}");
    }
}

#[cfg(test)]
mod kernels_tests {
    use super::launched_kernels;
    use kedge_core::{Case, DType, LimitsProfile};

    #[test]
    fn the_kernels_compiled_ahead_are_each_file_the_cases_launch_once() {
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").expect("h200 profile");
        let cases = [
            Case::new("rms_norm", "ggml", DType::F32, [64, 5, 4, 3]),
            Case::new("rms_norm", "clamped", DType::F32, [64, 5, 4, 3]),
            Case::new("rms_norm", "ggml", DType::F16, [4096, 2, 1, 1]),
            Case::new("softmax", "ggml", DType::F32, [64, 5, 1, 1]),
            // Not an op, and an impl the op does not have: no kernel, no error.
            Case::new("no_such_op", "ggml", DType::F32, [1, 1, 1, 1]),
            Case::new("softmax", "no_such_impl", DType::F32, [64, 5, 1, 1]),
        ];
        let mut files: Vec<&str> = launched_kernels(&reg, &h200, &cases)
            .iter()
            .map(|k| k.file)
            .collect();
        files.sort_unstable();
        assert_eq!(
            files,
            [
                "ops/catalog/src/rms_norm/rms_norm.cu",
                "ops/catalog/src/softmax/softmax.cu"
            ]
        );
        assert!(launched_kernels(&reg, &h200, &[]).is_empty());
    }

    #[test]
    fn a_big_case_of_any_impl_adds_the_device_helpers_and_small_ones_do_not() {
        use super::kernels_ahead;
        let reg = kedge_ops::registry();
        let h200 = LimitsProfile::builtin("h200").expect("h200 profile");
        let small = Case::new("rms_norm", "ggml", DType::F32, [64, 5, 4, 3]);
        let files = |cases: &[Case]| -> Vec<&str> {
            let mut f: Vec<&str> = kernels_ahead(&reg, &h200, cases)
                .iter()
                .map(|k| k.file)
                .collect();
            f.sort_unstable();
            f
        };
        assert_eq!(
            files(std::slice::from_ref(&small)),
            ["ops/catalog/src/rms_norm/rms_norm.cu"]
        );
        // 2^24 elements, an impl no registry here has (a library's): only the helpers.
        let big = Case::new("rms_norm", "ggml:CUDA0", DType::F32, [64, 1 << 18, 1, 1]);
        assert_eq!(
            files(std::slice::from_ref(&big)),
            ["harness/core/src/cuda/big.cu"]
        );
        assert_eq!(
            files(&[small, big]),
            [
                "harness/core/src/cuda/big.cu",
                "ops/catalog/src/rms_norm/rms_norm.cu"
            ]
        );
    }
}
