//! What kedge's workflows and its run engine say while they work, as data: each thing worth
//! telling is an `Event`, handed to a `Reporter`. The console (lines on stderr, a progress bar
//! on a terminal) is one reporter, JSON lines for programs another (`kedge sweep --format
//! json`); a test collects them. Workflows never print: they emit, and return typed outcomes.
//!
//! A reporter's failed write is not lost: `Events` keeps the first one, and the workflow that
//! emitted it returns it (`Events::finish`) once its own work is done, so a full disk under
//! `2> log` ends the command with the output error's status instead of a silent gap. A reader
//! that went away (a closed pipe) stops the output quietly, as a closed stdout does.

use crate::results::OutputError;
use crate::run::budget::human_duration;
use crate::summary::{RunSummary, TimeSpent};
use kedge_core::contract::plan::human_bytes;
use kedge_core::{CaseResult, Under};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// How the console shows cases as they finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A progress bar, with failures printed above it.
    Bar,
    /// A line per case (CI logs).
    Lines,
    /// Nothing: the caller reports (a fuzz run, a minimization: their own events say more).
    Off,
}

impl Progress {
    /// A bar on a terminal, lines otherwise (CI logs).
    pub fn auto() -> Progress {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            Progress::Bar
        } else {
            Progress::Lines
        }
    }
}

/// One thing a workflow or the run engine has to tell. Serialized as one JSON object whose
/// `event` field names the variant (`{"event":"case-finished",...}`).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The cases of a command are chosen: how many, and each way they will run.
    PlanReady {
        /// Cases selected.
        cases: usize,
        /// Each way they run, in order: `cpu`, `native` or a sanitizer tool's name.
        runs: Vec<Under>,
    },
    /// Impls from outside kedge joined the registry (plugins, source kernels, a ggml build).
    ImplsAdded {
        /// The line that says which, for a person.
        note: String,
    },
    /// A run with a time limit: no case starts after it, cases run in order of expected yield.
    TimeLimit {
        /// The limit as `--max-time` reads it (`4m 59.2s`).
        limit: String,
        /// The order the cases run in, in words.
        order: String,
    },
    /// The live GPU's limits differ from the profile the cases are built for.
    ProfileDiffers {
        /// The GPU's name.
        device: String,
        /// The profile's name (`h200`).
        profile: String,
        /// One line per limit that differs: the GPU's value, then the profile's.
        differences: Vec<String>,
    },
    /// Cases the live GPU's own limits add, each with an id of its own.
    ExtraCases {
        /// How many.
        cases: usize,
    },
    /// Cases a selection left out, and why: never a silent drop.
    LeftOut {
        /// How many.
        cases: usize,
        /// Why, as an object whose `kind` names the reason.
        why: LeftOutWhy,
    },
    /// This shard's part of the selection.
    Shard {
        /// The shard as given (`1/4`).
        shard: String,
        /// Cases in this shard.
        cases: usize,
        /// Cases selected over every shard.
        of: usize,
    },
    /// No GPU is used: only the CPU side of the cases runs.
    CpuSideOnly {
        /// "--cpu given" or "no CUDA driver on this machine".
        why: String,
        /// The profile the launches are checked against.
        profile: String,
        /// Cases whose GPU checks are skipped.
        cases: usize,
    },
    /// A flag that has nothing to act on in this run.
    FlagNotUsed {
        /// The flag (`--sanitize`).
        flag: String,
        /// Its value as given.
        value: String,
    },
    /// The kernels the cases launch, compiled for the GPU before its workers start (NVRTC,
    /// into the on-disk cache the workers read).
    KernelsCompiled {
        /// The architecture (`sm_90`).
        arch: String,
        /// Distinct source files the cases launch.
        files: usize,
        /// Of them, compiled now (the rest were in the cache, or failed).
        compiled: usize,
        /// Of them, those that did not compile (each case that launches one says so).
        failed: usize,
        /// Wall time, seconds.
        seconds: f64,
    },
    /// Cases a library's host backend runs for real, without a GPU.
    HostBackend {
        /// How many.
        cases: usize,
    },
    /// A resumed run: what the results file already holds for one way of running.
    Resuming {
        /// The way of running.
        under: Under,
        /// Cases with a result already, not run again.
        finished: usize,
        /// Cases left to run.
        to_run: usize,
    },
    /// One executor starts on `cases` cases.
    RunStarted {
        /// How they run.
        under: Under,
        /// How many.
        cases: usize,
    },
    /// The `done`-th result of `total` of the run that started last.
    CaseFinished {
        /// Results so far in this run, this one included.
        done: usize,
        /// Cases in this run.
        total: usize,
        /// The result, as its `results.jsonl` line.
        result: Box<CaseResult>,
    },
    /// The executor that started last is done.
    RunEnded {
        /// How its cases ran.
        under: Under,
    },
    /// Bigger cases run with fewer beside them: a tier of the admission.
    Tier {
        /// How the cases run.
        under: Under,
        /// Cases in the tier.
        cases: usize,
        /// Device bytes of the tier's largest case's tensors.
        largest_bytes: u64,
        /// Cases of the tier running at once on each GPU.
        per_gpu: usize,
    },
    /// A tier of the admission is over: where a sweep's wall goes when its big cases run few
    /// at a time.
    TierEnded {
        /// How the cases ran.
        under: Under,
        /// Cases of the tier that got a result.
        ran: usize,
        /// Cases of the tier running at once on each GPU.
        per_gpu: usize,
        /// Seconds from the tier's first case to its last result.
        wall_s: f64,
        /// Workers that took the tier's cases after the first on each slot: one for each worker
        /// a case ended (a crash, an abort, a fault) or a sanitizer's batch used up.
        #[serde(default)]
        replaced: usize,
        /// Slot-seconds the tier's cases waited for a worker to be ready (a standby not yet
        /// started when the one before it ended): with few slots, aborting cases in a row
        /// cost this.
        #[serde(default)]
        waited_s: f64,
    },
    /// A GPU that could not join the run (it could not start a worker or has other limits).
    GpuLeftOut {
        /// Its ordinal.
        gpu: u32,
        /// Why.
        why: String,
    },
    /// A GPU lost mid-run; the others ran its unfinished cases.
    GpuLost {
        /// How the cases were running.
        under: Under,
        /// Its ordinal.
        gpu: u32,
        /// Cases it ran before it was lost.
        after: usize,
        /// Why it was given up.
        why: String,
    },
    /// A sanitized batch whose records could not be attributed, run again one case per worker.
    BatchAgain {
        /// Why the records could not be attributed.
        why: String,
        /// Cases run again.
        cases: usize,
    },
    /// A sanitized worker ended with a case of its batch and its tool wrote no report: the
    /// cases it had finished run again in a fresh worker (their verdicts need the tool's word).
    ReportLost {
        /// The sanitizer.
        tool: String,
        /// Cases run again.
        cases: usize,
    },
    /// Cases that ran out of device memory beside other cases, run again alone on their GPU
    /// (only that run's verdict is reported).
    AloneAgain {
        /// How the cases run.
        under: Under,
        /// Cases run again.
        cases: usize,
    },
    /// A results line that could not be read (a torn write), and what was done with it.
    TornLine {
        /// The whole message, for a person.
        text: String,
    },
    /// Where the worker time of one way of running went.
    TimeSpent {
        /// The way of running.
        under: Under,
        /// The phases' sums and the slowest cases, in seconds.
        time: TimeSpent,
    },
    /// One way of running, summed up (a row of `sweep-summary.json`).
    RunSummed {
        /// The row.
        row: Box<RunSummary>,
        /// Cases selected.
        of: usize,
        /// Workers that replaced one that died.
        replaced: usize,
        /// What ran them (the executor's device).
        on: String,
        /// The results file the row's counts come from.
        results: PathBuf,
    },
    /// The time limit ran out before the first case could run to its end.
    TooSmallForOne {
        /// The limit as `--max-time` reads it.
        limit: String,
        /// The limit was used up before any case started (setting up).
        before_any: bool,
        /// The case that ran, and its seconds.
        slowest: Option<(String, f64)>,
    },
    /// The time limit ran out: cases not run, where they are named, what they would cost.
    NotRun {
        /// What ran out, and after how long, for a person.
        why: String,
        /// Cases not run.
        cases: usize,
        /// The file naming them (`not-run.jsonl`), a corpus `--resume` runs.
        file: PathBuf,
        /// Bytes of the tensors of the cases not run.
        bytes: u64,
        /// Roughly how long they would take at this run's pace, in seconds.
        estimate_s: Option<f64>,
    },
    /// The reports are written.
    ReportsWritten {
        /// Results they cover.
        results: usize,
        /// The directory they are in.
        dir: PathBuf,
    },
    /// The closing summary: the counts and the failures (at most `FAILURES_LISTED`).
    Summary {
        /// Results in all.
        results: usize,
        /// Of those, passing.
        passed: usize,
        /// Failing (every verdict but pass, unsupported and skipped).
        failed: usize,
        /// The impl refused the case.
        unsupported: usize,
        /// Not run on a device (the CPU side only).
        skipped: usize,
        /// The first failures, in results order.
        failures: Vec<CaseResult>,
        /// Failures not listed, and where to read them.
        more: usize,
        /// The report that lists every failure.
        report: PathBuf,
    },
    /// How a sweep ends when not every case ran for real.
    Ended {
        /// What was short.
        how: Ending,
        /// The exit status it ends with (4 or 6).
        status: i32,
    },
    /// How long a phase of a workflow took, in seconds.
    Phase {
        /// The phase (`plan`, `kernels` on a GPU, `run`, `summary`, `reports`).
        name: &'static str,
        /// Wall time, to the millisecond.
        seconds: f64,
    },
    /// A fuzz run's progress.
    Fuzzed {
        /// Cases generated and run so far.
        cases: usize,
        /// Of those, failing.
        failures: usize,
        /// Shrunk failures not in the finds file before.
        new_finds: usize,
        /// The run is done (the last of these).
        done: bool,
        /// The generator's seed (`--fuzz-seed`), which generates the same cases again.
        seed: u64,
    },
    /// `minimize --cpu` was given a verdict line: only its case is taken (a GPU's verdict
    /// and detector differ from the CPU side's).
    GivenNotCompared {
        /// The verdict the line states.
        verdict: String,
        /// The detector the line states.
        detector: String,
    },
    /// A case an op declared but rejects when validated (a selftest finding about kedge).
    DeclaredRejected {
        /// The case's label and the validation error.
        detail: String,
    },
}

/// Why a selection left cases out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum LeftOutWhy {
    /// Over `--max-elements` (or a host backend's default bound).
    OverElements {
        /// The largest tensor allowed, in elements.
        limit: u64,
    },
    /// Within `--over-elements`: the cases a sweep with that `--max-elements` runs.
    UpToElements {
        /// The largest tensor left out, in elements.
        limit: u64,
    },
    /// Generated probes and other dtypes' shapes the ops refuse.
    Refused,
    /// Incidents of ops this build does not have.
    OtherOps {
        /// Those ops' names.
        ops: Vec<String>,
    },
}

impl LeftOutWhy {
    /// The console's line for `cases` cases left out for this reason.
    fn line(&self, cases: usize) -> String {
        match self {
            LeftOutWhy::OverElements { limit } => format!(
                "{cases} cases over {limit} elements left out (--max-elements 0 runs them)"
            ),
            LeftOutWhy::UpToElements { limit } => format!(
                "{cases} cases of {limit} elements or fewer left out (--over-elements {limit}: the ones --max-elements {limit} runs)"
            ),
            LeftOutWhy::Refused => format!(
                "{cases} generated probes and shapes outside ops' first dtypes left out: the ops refuse them"
            ),
            LeftOutWhy::OtherOps { ops } => format!(
                "{cases} incidents of ops this build does not have left out ({})",
                ops.join(", ")
            ),
        }
    }
}

/// How a sweep ended short of every case running for real.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ending {
    /// The time limit ran out with cases not run.
    OutOfTime {
        /// How many.
        cases: usize,
    },
    /// Nothing ran on a GPU.
    GpuSkipped,
}

impl Ending {
    /// The console's line for a sweep that ends this way with exit status `status`.
    fn line(&self, status: i32) -> String {
        match self {
            Ending::OutOfTime { cases } => format!(
                "the time ran out with {cases} cases not run (exit status {status}): `--resume` with the same flags runs them"
            ),
            Ending::GpuSkipped => format!(
                "GPU checks skipped: no kernel ran, no allocation mode or sanitizer was exercised (exit status {status})"
            ),
        }
    }
}

/// The failures a closing summary lists; the rest are counted.
const FAILURES_LISTED: usize = 50;

impl Event {
    /// The line a person reads on stderr (after `kedge: `), for the events that have one.
    /// Progress, the summary and phase timings are drawn by the console itself.
    pub fn human(&self) -> Option<String> {
        match self {
            Event::PlanReady { .. }
            | Event::RunStarted { .. }
            | Event::CaseFinished { .. }
            | Event::RunEnded { .. }
            | Event::Summary { .. }
            | Event::Phase { .. } => None,
            Event::ImplsAdded { .. }
            | Event::TimeLimit { .. }
            | Event::ProfileDiffers { .. }
            | Event::ExtraCases { .. }
            | Event::LeftOut { .. }
            | Event::Shard { .. }
            | Event::CpuSideOnly { .. }
            | Event::FlagNotUsed { .. }
            | Event::KernelsCompiled { .. }
            | Event::HostBackend { .. } => self.setup_line(),
            Event::Resuming { .. }
            | Event::Tier { .. }
            | Event::TierEnded { .. }
            | Event::GpuLeftOut { .. }
            | Event::GpuLost { .. }
            | Event::BatchAgain { .. }
            | Event::ReportLost { .. }
            | Event::AloneAgain { .. }
            | Event::TornLine { .. }
            | Event::TimeSpent { .. }
            | Event::RunSummed { .. } => self.running_line(),
            Event::TooSmallForOne { .. }
            | Event::NotRun { .. }
            | Event::ReportsWritten { .. }
            | Event::Ended { .. }
            | Event::Fuzzed { .. }
            | Event::GivenNotCompared { .. }
            | Event::DeclaredRejected { .. } => self.closing_line(),
        }
    }

    /// The line of an event told while the cases are chosen and the run is set up; `None`
    /// for the other events (`human` sends each event to its group).
    fn setup_line(&self) -> Option<String> {
        Some(match self {
            Event::ImplsAdded { note } => note.clone(),
            Event::TimeLimit { limit, order } => format!(
                "--max-time {limit}: no case starts after it (cases running then finish); in order of expected yield: {order}"
            ),
            Event::ProfileDiffers {
                device,
                profile,
                differences,
            } => format!(
                "the GPU ({device}) differs from profile {profile}: {}; the suite's cases are the profile's (--profile picks another)",
                differences.join(", ")
            ),
            Event::ExtraCases { cases } => format!(
                "{cases} more cases from the GPU's own limits, each with an id of its own (the profile's cases keep theirs)"
            ),
            Event::LeftOut { cases, why } => why.line(*cases),
            Event::Shard { shard, cases, of } => {
                format!("shard {shard}: {cases} of the {of} selected cases")
            }
            Event::CpuSideOnly { why, profile, cases } => format!(
                "{why}: running the CPU-side checks only (launch plans against profile {profile}, f64 references); GPU checks SKIPPED for {cases} cases"
            ),
            Event::FlagNotUsed { flag, value } => {
                format!("{flag} {value} not used: nothing runs on a GPU")
            }
            Event::HostBackend { cases } => format!(
                "{cases} cases run on a library's host backend (no GPU needed): natively, in workers"
            ),
            Event::KernelsCompiled {
                arch,
                files,
                compiled,
                failed,
                seconds,
            } => {
                let cached = files - compiled - failed;
                let mut line = format!(
                    "{files} kernel files for {arch}: {compiled} compiled in {seconds:.1} s (NVRTC), {cached} already in the cache"
                );
                if *failed > 0 {
                    line.push_str(&format!(
                        "; {failed} did not compile (each case that launches one says why)"
                    ));
                }
                line
            }
            _ => return None,
        })
    }

    /// The line of an event told while the cases run; `None` for the other events.
    fn running_line(&self) -> Option<String> {
        Some(match self {
            Event::Resuming {
                under,
                finished,
                to_run,
            } => format!("resuming {under}: {finished} cases already finished, {to_run} to run"),
            Event::Tier {
                under,
                cases,
                largest_bytes,
                per_gpu,
            } => format!(
                "{under}: {cases} cases of up to {} each: {per_gpu} at a time per GPU",
                human_bytes(*largest_bytes)
            ),
            Event::TierEnded {
                under,
                ran,
                per_gpu,
                wall_s,
                replaced,
                waited_s,
            } => {
                let workers = if *replaced > 0 || *waited_s >= 0.05 {
                    let (n, them) = if *replaced == 1 {
                        ("worker", "it")
                    } else {
                        ("workers", "them")
                    };
                    format!(
                        " ({replaced} {n} replaced, {waited_s:.1} s of slot time waiting for {them})"
                    )
                } else {
                    String::new()
                };
                format!("{under}: {ran} cases {per_gpu} at a time per GPU in {wall_s:.1} s{workers}")
            }
            Event::GpuLeftOut { gpu, why } => format!("gpu {gpu} left out: {why}"),
            Event::GpuLost {
                under,
                gpu,
                after,
                why,
            } => format!(
                "{under}: gpu {gpu} lost after {after} cases ({why}); the other GPUs ran its unfinished cases"
            ),
            Event::BatchAgain { why, cases } => {
                format!("{why}; running those {cases} cases again, one per worker")
            }
            Event::ReportLost { tool, cases } => format!(
                "{tool} wrote no report for a worker that ended with a case of its batch; running the {cases} cases it had finished again in a fresh worker"
            ),
            Event::AloneAgain { under, cases } => format!(
                "{under}: {cases} cases ran out of device memory beside other cases; running each again alone on its GPU"
            ),
            Event::TornLine { text } => text.clone(),
            Event::TimeSpent { under, time } => format!("{under}: {}", time.line()),
            Event::RunSummed {
                row,
                of,
                replaced,
                on,
                results,
            } => run_line(row, *of, *replaced, on, results),
            _ => return None,
        })
    }

    /// The line of an event told as a command ends (or, for a fuzz run, as it goes); `None`
    /// for the other events.
    fn closing_line(&self) -> Option<String> {
        Some(match self {
            Event::TooSmallForOne {
                limit,
                before_any,
                slowest,
            } => format!(
                "--max-time {limit} is too small for one case: {} the first case only{}",
                if *before_any {
                    "the time was used up before any case started (setting up), so kedge ran"
                } else {
                    "it ran"
                },
                slowest
                    .as_ref()
                    .map(|(label, secs)| format!(" ({label}, {secs:.1} s)"))
                    .unwrap_or_default()
            ),
            Event::NotRun {
                why,
                cases,
                file,
                bytes,
                estimate_s,
            } => not_run_line(why, *cases, file, *bytes, *estimate_s),
            Event::ReportsWritten { results, dir } => format!(
                "{results} results -> {}/report.md, summary.md, report.json, junit.xml",
                dir.display()
            ),
            Event::Ended { how, status } => how.line(*status),
            Event::Fuzzed {
                cases,
                failures,
                new_finds,
                done,
                seed,
            } => {
                if *done {
                    format!("fuzz: {cases} cases (seed {seed}): {failures} failures")
                } else {
                    format!("fuzz: {cases} cases so far, {failures} failures, {new_finds} new finds")
                }
            }
            Event::GivenNotCompared { verdict, detector } => format!(
                "--cpu: shrinking on the launch contract; the given result ({verdict} / {detector}) is not compared"
            ),
            Event::DeclaredRejected { detail } => {
                format!("selftest: an op declared a case it rejects: {detail}")
            }
            _ => return None,
        })
    }

    /// The closing summary of `results`, listing at most `FAILURES_LISTED` failures; `report`
    /// is where the rest are.
    pub(crate) fn summary(results: &[CaseResult], report: PathBuf) -> Event {
        Event::summary_listing(results, report, FAILURES_LISTED)
    }

    /// The closing summary of `results`, listing at most `limit` failures.
    pub(crate) fn summary_listing(results: &[CaseResult], report: PathBuf, limit: usize) -> Event {
        use kedge_core::Verdict;
        let count = |f: &dyn Fn(Verdict) -> bool| results.iter().filter(|r| f(r.verdict)).count();
        let failed = count(&|v| v.is_failure());
        Event::Summary {
            results: results.len(),
            passed: count(&|v| v == Verdict::Pass),
            failed,
            unsupported: count(&|v| v == Verdict::Unsupported),
            skipped: count(&|v| v == Verdict::Skipped),
            failures: results
                .iter()
                .filter(|r| r.verdict.is_failure())
                .take(limit)
                .cloned()
                .collect(),
            more: failed.saturating_sub(limit),
            report,
        }
    }
}

/// One way of running's line: how many cases have results, how they ran, the failures.
fn run_line(
    row: &RunSummary,
    of: usize,
    replaced: usize,
    on: &str,
    results: &std::path::Path,
) -> String {
    let start_up = row
        .worker_start_s
        .map(|s| {
            let parts = s
                .parts
                .map(|p| {
                    format!(
                        ": libraries {:.2}, device {:.2}, warm-up {:.2}",
                        p.libraries_s, p.device_s, p.warm_up_s
                    )
                })
                .unwrap_or_default();
            format!(
                " (start-up {:.2} s median{parts}, {:.2} s at most)",
                s.median, s.max
            )
        })
        .unwrap_or_default();
    let slots = if row.slot_s.is_empty() {
        String::new()
    } else {
        // A run without the queue (the host side) has no pulls to tell.
        let pulls = if row.slot_s.pulls_s > 0.0 {
            format!(", {:.1} s in pulls of cases", row.slot_s.pulls_s)
        } else {
            String::new()
        };
        format!(
            "; {:.1} s from sending cases to their verdicts, {:.1} s reading sanitizer reports{pulls}",
            row.slot_s.cases_s, row.slot_s.read_out_s
        )
    };
    format!(
        "{}: {} of {of} cases have results ({} run now in {:.1} s on {on}; {} workers{start_up}, {replaced} replaced, {:.1} s of slot time waiting for them{slots}): {} failures; results in {}",
        row.under,
        row.cases,
        row.ran_now,
        row.wall_s,
        row.workers,
        row.worker_wait_s,
        row.failures,
        results.display()
    )
}

/// The line of cases the time limit left: where they are named and, with an estimate, what
/// they would cost.
fn not_run_line(
    why: &str,
    cases: usize,
    file: &std::path::Path,
    bytes: u64,
    estimate_s: Option<f64>,
) -> String {
    format!(
        "{why}: {cases} cases not run, named in {}{}",
        file.display(),
        estimate_s
            .map(|secs| format!(
                "; their tensors come to {}, roughly {} more at this sweep's pace",
                human_bytes(bytes),
                human_duration(std::time::Duration::from_secs_f64(secs.max(0.0)))
            ))
            .unwrap_or_default()
    )
}

/// Something that takes events: the console, JSON lines, a test's list.
pub trait Reporter: Send + Sync {
    /// Take one event. An error is kept by `Events` and returned when the workflow finishes.
    fn report(&self, event: &Event) -> Result<(), OutputError>;
}

/// Where a workflow's events go: a cheap handle, shared by the engine's threads. It keeps the
/// first error a reporter returned; `finish` hands it back.
#[derive(Clone)]
pub struct Events {
    to: Arc<dyn Reporter>,
    failed: Arc<Mutex<Option<OutputError>>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Events")
    }
}

impl Events {
    /// Events to `reporter`.
    pub fn new(reporter: impl Reporter + 'static) -> Events {
        Events {
            to: Arc::new(reporter),
            failed: Arc::new(Mutex::new(None)),
        }
    }
    /// The same reporter without the cases as they finish (`RunStarted`, `CaseFinished`,
    /// `RunEnded`): for a caller that reports its cases on its own (fuzzing, minimizing).
    /// Errors are kept with this handle's.
    pub fn without_cases(&self) -> Events {
        Events {
            to: Arc::new(NoCases(self.to.clone())),
            failed: self.failed.clone(),
        }
    }
    /// Hand `event` to the reporter; its first error is kept for `finish`.
    pub fn emit(&self, event: Event) {
        if let Err(e) = self.to.report(&event) {
            if let Ok(mut f) = self.failed.lock() {
                f.get_or_insert(e);
            }
        }
    }
    /// The first error a reporter returned, if any: a workflow returns it once its own work
    /// is done (and its files written).
    pub fn finish(&self) -> Result<(), OutputError> {
        match self.failed.lock().ok().and_then(|mut f| f.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A reporter that is not told the cases as they finish.
struct NoCases(Arc<dyn Reporter>);

impl Reporter for NoCases {
    fn report(&self, event: &Event) -> Result<(), OutputError> {
        match event {
            Event::RunStarted { .. } | Event::CaseFinished { .. } | Event::RunEnded { .. } => {
                Ok(())
            }
            e => self.0.report(e),
        }
    }
}

/// Two reporters, each given every event.
pub struct Both<A, B>(pub A, pub B);

impl<A: Reporter, B: Reporter> Reporter for Both<A, B> {
    fn report(&self, event: &Event) -> Result<(), OutputError> {
        let a = self.0.report(event);
        let b = self.1.report(event);
        a.and(b)
    }
}

/// A stream that stops quietly once its reader has gone, and fails on any other error.
pub(crate) struct Stream<W> {
    name: &'static str,
    w: W,
    gone: bool,
}

impl<W: Write> Stream<W> {
    pub(crate) fn new(name: &'static str, w: W) -> Stream<W> {
        Stream {
            name,
            w,
            gone: false,
        }
    }
    /// Has output stopped (the reader went away, or a write failed)?
    pub(crate) fn stopped(&self) -> bool {
        self.gone
    }
    /// The writer back.
    pub(crate) fn into_inner(self) -> W {
        self.w
    }
    pub(crate) fn write(&mut self, text: &str) -> Result<(), OutputError> {
        if self.gone {
            return Ok(());
        }
        match self
            .w
            .write_all(text.as_bytes())
            .and_then(|_| self.w.flush())
        {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.gone = true;
                Ok(())
            }
            Err(source) => {
                // Once failed, said once: the rest would fail the same way.
                self.gone = true;
                Err(OutputError::Stream {
                    stream: self.name,
                    source,
                })
            }
        }
    }
}

/// One executor's run as events: `RunStarted` when made, a counted `CaseFinished` per result,
/// `RunEnded` at `end`.
pub(crate) struct Ticker<'a> {
    events: &'a Events,
    under: Under,
    total: usize,
    done: std::sync::atomic::AtomicUsize,
}

impl<'a> Ticker<'a> {
    /// `total` cases start under `under`.
    pub(crate) fn start(events: &'a Events, under: Under, total: usize) -> Ticker<'a> {
        events.emit(Event::RunStarted {
            under,
            cases: total,
        });
        Ticker {
            events,
            under,
            total,
            done: std::sync::atomic::AtomicUsize::new(0),
        }
    }
    /// One more result.
    pub(crate) fn case(&self, r: &CaseResult) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.events.emit(Event::CaseFinished {
            done,
            total: self.total,
            result: Box::new(r.clone()),
        });
    }
    /// The run is over.
    pub(crate) fn end(self) {
        self.events.emit(Event::RunEnded { under: self.under });
    }
}

/// One JSON object a line, for programs. Each carries `t_s`, the seconds since the stream
/// began (the command's start), so a program can lay a run's events on a timeline: which
/// slots were idle when, what a tier's tail cost.
pub struct JsonLines {
    out: Mutex<Stream<Box<dyn Write + Send>>>,
    start: std::time::Instant,
}

impl JsonLines {
    /// JSON lines on stdout.
    pub fn stdout() -> JsonLines {
        JsonLines::to(Box::new(std::io::stdout()))
    }
    /// JSON lines on `w`.
    fn to(w: Box<dyn Write + Send>) -> JsonLines {
        JsonLines {
            out: Mutex::new(Stream::new("stdout", w)),
            start: std::time::Instant::now(),
        }
    }
}

impl Reporter for JsonLines {
    fn report(&self, event: &Event) -> Result<(), OutputError> {
        // Every event serializes (plain data, finite or null numbers); a failure here would
        // be a bug, said on the line rather than lost.
        let t_s = (self.start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        let line = match serde_json::to_value(event) {
            Ok(serde_json::Value::Object(mut o)) => {
                o.insert("t_s".to_string(), t_s.into());
                serde_json::Value::Object(o).to_string()
            }
            Ok(v) => v.to_string(),
            Err(e) => {
                serde_json::json!({ "event": "unserializable", "why": e.to_string(), "t_s": t_s })
                    .to_string()
            }
        };
        match self.out.lock() {
            Ok(mut o) => o.write(&format!("{line}\n")),
            Err(_) => Ok(()),
        }
    }
}

/// Keeps every event: for tests, and for callers that render after the fact.
#[derive(Default)]
pub struct Collect(Mutex<Vec<Event>>);

impl Collect {
    /// The events taken so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Reporter for Collect {
    fn report(&self, event: &Event) -> Result<(), OutputError> {
        if let Ok(mut v) = self.0.lock() {
            v.push(event.clone());
        }
        Ok(())
    }
}

impl Reporter for Arc<Collect> {
    fn report(&self, event: &Event) -> Result<(), OutputError> {
        self.as_ref().report(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::Console;
    use kedge_core::{Case, DType, Detector, Verdict};

    /// A buffer a test can read after the console wrote into it.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Buf {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().map(|v| v.clone()).unwrap_or_default())
                .unwrap_or_default()
        }
    }

    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Gone;
    impl Write for Gone {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn result(v: Verdict) -> CaseResult {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, 65536, 1]);
        CaseResult::new(&c, v, Detector::Driver, "launch refused")
    }

    #[test]
    fn the_console_writes_lines_and_progress_and_json_one_object_a_line() {
        let err = Buf::default();
        let out = Buf::default();
        let ev = Events::new(Both(
            Console::to(Progress::Lines, Box::new(err.clone())),
            JsonLines::to(Box::new(out.clone())),
        ));
        ev.emit(Event::Shard {
            shard: "1/2".into(),
            cases: 3,
            of: 6,
        });
        ev.emit(Event::RunStarted {
            under: Under::Native,
            cases: 1,
        });
        ev.emit(Event::CaseFinished {
            done: 1,
            total: 1,
            result: Box::new(result(Verdict::LaunchError)),
        });
        ev.emit(Event::Phase {
            name: "run",
            seconds: 0.5,
        });
        ev.finish().expect("no write failed");
        let text = err.text();
        assert!(
            text.starts_with("kedge: shard 1/2: 3 of the 6 selected cases\n"),
            "{text}"
        );
        assert!(text.contains("[1/1] launch-error"), "{text}");
        assert!(
            !text.contains("run"),
            "a phase timing has no console line: {text}"
        );
        let lines: Vec<serde_json::Value> = out
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        let kinds: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
        assert_eq!(kinds, ["shard", "run-started", "case-finished", "phase"]);
        assert_eq!(lines[2]["result"]["verdict"], "launch-error");
        assert_eq!(lines[3]["seconds"], 0.5);
        // Every line carries its time since the stream began, in order.
        let times: Vec<f64> = lines.iter().filter_map(|l| l["t_s"].as_f64()).collect();
        assert_eq!(times.len(), lines.len(), "a t_s on every line: {lines:?}");
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    }

    #[test]
    fn kernels_compiled_ahead_say_how_many_were_compiled_cached_and_refused() {
        let line = |compiled, failed| {
            Event::KernelsCompiled {
                arch: "sm_90".into(),
                files: 11,
                compiled,
                failed,
                seconds: 0.8,
            }
            .human()
            .expect("a setup line")
        };
        assert_eq!(
            line(9, 0),
            "11 kernel files for sm_90: 9 compiled in 0.8 s (NVRTC), 2 already in the cache"
        );
        let l = line(9, 1);
        assert!(
            l.contains("1 already in the cache; 1 did not compile"),
            "{l}"
        );
    }

    #[test]
    fn a_tier_tells_its_wall_when_it_ends() {
        let tier = |ran, per_gpu, wall_s, replaced, waited_s| Event::TierEnded {
            under: Under::Native,
            ran,
            per_gpu,
            wall_s,
            replaced,
            waited_s,
        };
        let line = |e: &Event| e.human().expect("a running line");
        let e = tier(852, 2, 95.34, 0, 0.0);
        assert_eq!(line(&e), "native: 852 cases 2 at a time per GPU in 95.3 s");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["event"], "tier-ended");
        assert_eq!(json["wall_s"], 95.34);
        // Workers that cases ended, and the slots' wait for the next: said where there were.
        let e = tier(586, 1, 130.84, 140, 88.27);
        assert_eq!(
            line(&e),
            "native: 586 cases 1 at a time per GPU in 130.8 s \
             (140 workers replaced, 88.3 s of slot time waiting for them)"
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["replaced"], 140);
        assert_eq!(json["waited_s"], 88.27);
        assert_eq!(
            line(&tier(8, 1, 191.6, 1, 0.0)),
            "native: 8 cases 1 at a time per GPU in 191.6 s \
             (1 worker replaced, 0.0 s of slot time waiting for it)"
        );
    }

    #[test]
    fn cases_run_again_alone_say_why_and_have_their_name() {
        let e = Event::AloneAgain {
            under: Under::Tool(kedge_core::Tool::Memcheck),
            cases: 16,
        };
        assert_eq!(
            e.human().expect("a running line"),
            "memcheck: 16 cases ran out of device memory beside other cases; running each again alone on its GPU"
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["event"], "alone-again");
        assert_eq!(json["cases"], 16);
    }

    #[test]
    fn a_failed_write_is_kept_for_the_end_and_a_closed_reader_is_not_an_error() {
        let full = Events::new(Console::to(Progress::Lines, Box::new(Full)));
        full.emit(Event::HostBackend { cases: 2 });
        full.emit(Event::HostBackend { cases: 3 });
        let e = full.finish().expect_err("a full disk is an error");
        assert!(e.to_string().contains("stderr"), "{e}");
        assert_eq!(e.exit_code(), crate::exit::ENVIRONMENT);
        full.finish().expect("said once");
        let gone = Events::new(JsonLines::to(Box::new(Gone)));
        gone.emit(Event::HostBackend { cases: 2 });
        gone.finish()
            .expect("a reader that went away stops output quietly");
    }

    #[test]
    fn the_summary_counts_and_lists_at_most_its_share_of_failures() {
        let mut rs: Vec<CaseResult> = (0..FAILURES_LISTED + 2)
            .map(|_| result(Verdict::LaunchError))
            .collect();
        rs.push(result(Verdict::Pass));
        match Event::summary(&rs, "out/report.md".into()) {
            Event::Summary {
                results,
                passed,
                failed,
                failures,
                more,
                ..
            } => {
                assert_eq!(
                    (results, passed, failed),
                    (rs.len(), 1, FAILURES_LISTED + 2)
                );
                assert_eq!((failures.len(), more), (FAILURES_LISTED, 2));
            }
            e => panic!("not a summary: {e:?}"),
        }
    }
}
