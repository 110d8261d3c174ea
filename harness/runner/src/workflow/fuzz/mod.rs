//! `kedge fuzz`: boundary-biased random cases (`cases`), run on the CPU side (`--cpu`: the
//! launch contract) or on a GPU; every failure is shrunk (keeping its verdict and detector)
//! and appended once to a finds corpus. `targets` holds the bodies of the cargo-fuzz targets.
//!
//! Cases stream: a chunk is generated, run and forgotten before the next, and each failure
//! is shrunk and its find appended as its chunk ends, so memory does not grow with
//! `--cases` and a run stopped by Ctrl-C has written every find made so far.

mod cases;
pub mod targets;

use cases::known_finds;
pub use cases::{generate, CaseStream, FuzzFind, FuzzSpec};

use crate::errors::{Error, Status};
use crate::events::Event;
use crate::results::{outfile, FileKind, OutDir};
use crate::run::{CpuExecutor, EngineOptions, Executor, GpuExecutor, Gpus, RunEngine};
use crate::select::{parse_allocs, Filters, MaxElements, Selection};
use crate::workflow::minimize::{self, Probes};
use kedge_core::{Case, CaseResult, LimitsProfile};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Generated cases stay this small unless `--max-elements` says otherwise.
const FUZZ_MAX_ELEMENTS: u64 = 1 << 26;

/// What to fuzz.
#[derive(Debug, Clone)]
pub struct FuzzRequest {
    /// `-o`, `--impl`, `--dtype`, `-p`, `--filter`; `allocs` default `exact,guard`.
    pub selection: Selection,
    /// Cases to generate and run (at least 1).
    pub cases: usize,
    /// The generator's seed.
    pub fuzz_seed: u64,
    /// Run the CPU side only (the launch contract against `profile`), with no GPU.
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
    /// Worker options, and where progress goes (`Event::Fuzzed`).
    pub engine: EngineOptions,
    /// The GPU's ordinal.
    pub device: u32,
    /// The kedge binary workers start from (default: this process's).
    pub exe: Option<PathBuf>,
}

/// What fuzzing found, as it is found.
#[derive(Debug)]
pub enum FuzzEvent<'a> {
    /// A failure not shrunk (`--max-shrinks`), or whose shrinking failed, and why. The
    /// first `UNSHRUNK_LISTED` only: the rest are counted (a long run can fail millions of
    /// times; each is generated again from the same `--fuzz-seed`).
    Unshrunk(&'a CaseResult, &'a str),
    /// A shrunk failure not in the finds file before; it has been appended.
    NewFind(&'a FuzzFind),
}

/// What fuzzing found, counted.
#[derive(Debug, Clone)]
pub struct FuzzOutcome {
    /// Cases generated and run.
    generated: usize,
    /// Of those, the failing ones.
    failures: usize,
    /// Shrunk failures not in the finds file before (now appended).
    pub new_finds: usize,
    /// Shrunk failures already in it.
    pub known: usize,
    /// Failures not shrunk (`--max-shrinks`), or whose shrinking failed.
    pub unshrunk: usize,
    /// 1 when there is anything new to look at: a new find or an unshrunk failure.
    pub status: Status,
}

/// Unshrunk failures passed on one by one; the rest are counted.
pub const UNSHRUNK_LISTED: usize = 100;

/// Cases generated and run at a time: the memory a fuzz run holds, whatever `--cases` is.
const CHUNK_CPU: usize = 4096;
const CHUNK_GPU: usize = 1024;
/// How often a long run says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// Generate, run, shrink, record: chunk by chunk, each event passed to `on` as it happens.
pub fn fuzz(req: &FuzzRequest, on: &mut dyn FnMut(FuzzEvent<'_>)) -> Result<FuzzOutcome, Error> {
    if req.cases == 0 {
        return Err(crate::select::SelectError::Empty {
            why: "--cases 0 asks for no case (give 1 or more)".into(),
        }
        .into());
    }
    // The finds file: its directory locked, its kind and name checked, before anything runs.
    let finds = FindsFile::open(&req.finds)?;
    let reg = kedge_ops::registry();
    let mut sel = req.selection.clone();
    let allocs = parse_allocs(sel.allocs.as_deref().unwrap_or("exact,guard"))?;
    sel.allocs = None;
    let filters = Filters::resolve(&reg, &sel)?;
    let (engine, limits) = super::engine_or_profile(!req.cpu, &req.profile, || gpu_engine(req))?;
    let spec = FuzzSpec {
        filters,
        allocs,
        max_elements: MaxElements::from_flag(req.max_elements, Some(FUZZ_MAX_ELEMENTS)),
    };
    let mut stream = CaseStream::new(&reg, &limits, &spec, req.cases, req.fuzz_seed);
    let mut gpu: Option<GpuExecutor> = match &engine {
        Some(e) => Some(e.executor(None)?),
        None => None,
    };
    if let Some(g) = gpu.as_mut() {
        g.set_events(req.engine.events.without_cases());
    }
    let mut cpu = CpuExecutor::new(&reg, limits.clone());
    cpu.events = req.engine.events.without_cases();
    let mut out = FuzzOutcome {
        generated: 0,
        failures: 0,
        new_finds: 0,
        known: 0,
        unshrunk: 0,
        status: Status::Ok,
    };
    let ran = say_on_signal(&req.finds, &finds.written);
    let chunk = if gpu.is_some() { CHUNK_GPU } else { CHUNK_CPU };
    let mut last_note = Instant::now();
    let mut shrinker = Shrinker {
        req,
        reg: &reg,
        limits: &limits,
        finds,
        shrunk: 0,
    };
    loop {
        let cases: Vec<Case> = stream.by_ref().take(chunk).collect();
        if cases.is_empty() {
            break;
        }
        let failures = match gpu.as_mut() {
            Some(g) => failures_of(g, &cases)?,
            None => failures_of(&mut cpu, &cases)?,
        };
        out.generated += cases.len();
        out.failures += failures.len();
        ran.store(out.generated, Ordering::Relaxed);
        drop(cases);
        for r in &failures {
            let probes = match gpu.as_mut() {
                Some(g) => Probes::Gpu(g),
                None => Probes::Cpu(&limits),
            };
            shrinker.take(r, probes, &mut out, on)?;
        }
        if last_note.elapsed() >= PROGRESS_EVERY {
            last_note = Instant::now();
            req.engine.events.emit(Event::Fuzzed {
                cases: out.generated,
                failures: out.failures,
                new_finds: out.new_finds,
                done: false,
                seed: req.fuzz_seed,
            });
        }
    }
    finish(req, out)
}

/// What becomes of each failure: shrunk into a find (new ones appended to the finds file), or
/// passed on unshrunk with the reason (`--max-shrinks` reached, or shrinking failed).
struct Shrinker<'a> {
    req: &'a FuzzRequest,
    reg: &'a kedge_core::Registry,
    limits: &'a LimitsProfile,
    finds: FindsFile,
    /// Failures shrunk so far (at most `--max-shrinks`).
    shrunk: usize,
}

impl Shrinker<'_> {
    fn take(
        &mut self,
        r: &CaseResult,
        probes: Probes<'_>,
        out: &mut FuzzOutcome,
        on: &mut dyn FnMut(FuzzEvent<'_>),
    ) -> Result<(), Error> {
        let why = if self.shrunk >= self.req.max_shrinks {
            format!("not shrunk (--max-shrinks {})", self.req.max_shrinks)
        } else {
            self.shrunk += 1;
            match shrink(self.reg, r, self.limits, self.req.budget, probes) {
                Ok(find) if self.finds.add(&find)? => {
                    out.new_finds += 1;
                    on(FuzzEvent::NewFind(&find));
                    return Ok(());
                }
                Ok(_) => {
                    out.known += 1;
                    return Ok(());
                }
                Err(e) => format!("could not shrink: {e}"),
            }
        };
        out.unshrunk += 1;
        if out.unshrunk <= UNSHRUNK_LISTED {
            on(FuzzEvent::Unshrunk(r, &why));
        }
        Ok(())
    }
}

/// Run `cases`; keep the results of those that fail.
fn failures_of(ex: &mut dyn Executor, cases: &[Case]) -> Result<Vec<CaseResult>, Error> {
    let mut failures = Vec::new();
    ex.run(cases, &mut |r: CaseResult| {
        if r.verdict.is_failure() {
            failures.push(r);
        }
        Ok(())
    })?;
    Ok(failures)
}

/// The GPU engine of a fuzz run: one GPU, workers not kept.
fn gpu_engine(req: &FuzzRequest) -> Result<RunEngine, Error> {
    let mut b = RunEngine::builder("fuzz")
        .options(req.engine.clone())
        .gpus(Gpus::One(req.device))
        .keep_workers(false);
    if let Some(e) = &req.exe {
        b = b.exe(e);
    }
    Ok(b.build()?)
}

/// What a Ctrl-C says: the finds are on disk as they are made. The counter of cases run,
/// which the loop keeps current.
fn say_on_signal(finds: &std::path::Path, written: &Arc<AtomicUsize>) -> Arc<AtomicUsize> {
    let ran = Arc::new(AtomicUsize::new(0));
    let (r, w, path) = (ran.clone(), written.clone(), finds.to_path_buf());
    crate::run::lifecycle::on_signal(move || {
        format!(
            "fuzz: stopped after {} cases; {} new finds written to {}",
            r.load(Ordering::Relaxed),
            w.load(Ordering::Relaxed),
            path.display()
        )
    });
    ran
}

/// A failure shrunk to its smallest failing case, as a find.
fn shrink(
    reg: &kedge_core::Registry,
    r: &CaseResult,
    limits: &LimitsProfile,
    budget: usize,
    probes: Probes<'_>,
) -> Result<FuzzFind, Error> {
    let report = minimize::minimize(reg, &r.case, Some(r), limits, budget, probes)?;
    Ok(FuzzFind::new(
        &r.case,
        &report.minimized.case,
        report.minimized.outcome,
        r.under,
        report.transition.as_ref(),
        &report.minimized.result.detail,
    ))
}

/// How a fuzz run ended: an error when no case passed the filters, else 1 when there is
/// anything new to look at.
fn finish(req: &FuzzRequest, mut out: FuzzOutcome) -> Result<FuzzOutcome, Error> {
    if out.generated == 0 {
        return Err(crate::select::SelectError::Empty {
            why: format!(
                "none of the cases generated (seed {}) passes the filters and --max-elements",
                req.fuzz_seed
            ),
        }
        .into());
    }
    req.engine.events.emit(Event::Fuzzed {
        cases: out.generated,
        failures: out.failures,
        new_finds: out.new_finds,
        done: true,
        seed: req.fuzz_seed,
    });
    out.status = Status::failed_if(out.new_finds > 0 || out.unshrunk > 0);
    req.engine.events.finish()?;
    Ok(out)
}

/// The finds file: its directory locked and the file checked when opened, the keys of the
/// finds it holds, and the file opened for appending at the first new one.
struct FindsFile {
    dir: OutDir,
    name: String,
    path: PathBuf,
    file: Option<std::fs::File>,
    known: std::collections::HashSet<String>,
    /// New finds written, for what a Ctrl-C says.
    written: Arc<AtomicUsize>,
}

impl FindsFile {
    const COMMAND: &'static str = "fuzz --finds";

    fn open(path: &std::path::Path) -> Result<FindsFile, Error> {
        let (dir, name) = OutDir::for_file(path, Self::COMMAND)?;
        let path = dir.check_target(&name, Some((FileKind::Finds, Self::COMMAND)))?;
        Ok(FindsFile {
            known: known_finds(&path),
            dir,
            name,
            path,
            file: None,
            written: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Append `find` unless the file holds it already; whether it was new.
    fn add(&mut self, find: &FuzzFind) -> Result<bool, Error> {
        if !self.known.insert(find.key()) {
            return Ok(false);
        }
        let file = match self.file.as_mut() {
            Some(f) => f,
            None => {
                let kind = Some((FileKind::Finds, Self::COMMAND));
                self.file.insert(self.dir.append(&self.name, kind)?.1)
            }
        };
        let line = serde_json::to_string(find).unwrap_or_default();
        outfile::append_line(file, &self.path, &line)?;
        self.written.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}
