//! The one run engine every command uses. Cases run through an `Executor`: on the CPU
//! (`CpuExecutor`: the launch and allocation contracts against a profile, and the reference)
//! or on GPUs (`GpuExecutor`: worker processes owned by a supervisor per GPU, pulling from one
//! shared queue, optionally wrapped in compute-sanitizer). `RunEngine::builder` assembles the
//! GPU side: it checks for a driver, probes the GPUs (in workers: the supervisor never opens
//! CUDA itself), and hands out one executor per sanitizer tool.
//!
//! Here: the `Executor` trait, the engine and its options. Beside it, one file each: `cpu`
//! (the CPU side), `host` (a library's host backend), `gpu` (the GPU executor and its
//! admission by memory), `error`, and the supervisor, schedule, worker protocol and lifecycle.

pub mod budget;
mod cpu;
mod error;
mod gpu;
pub(crate) use gpu::ALONE_FROM_BYTES;
mod host;
pub mod lifecycle;
pub(crate) mod protocol;
pub mod schedule;
pub mod supervisor;
pub mod worker;

use crate::events::Progress;
use crate::events::{Event, Events, Ticker};
pub use budget::{MaxTime, TimeBudget};
pub use cpu::CpuExecutor;
pub(crate) use cpu::CPU_REFERENCE_LIMIT;
pub use error::{EngineError, NoGpu};
use gpu::host_memory_bytes;
pub(crate) use gpu::units_ranked;
pub use gpu::{GpuExecutor, Rank, YieldOrder};
pub(crate) use host::HostExecutor;
pub(crate) use protocol::BenchSpec;
pub use protocol::{FatalKind, WorkerMsg, WorkerSpec};
pub use schedule::DeviceList;
pub use supervisor::{
    standbys_per_slot, standbys_wanted, warm_up_cases, SanitizeSpec, SlotTime, StandbyNeed,
    Supervisor, SupervisorConfig, SupervisorError, MAX_STANDBYS, RECORD_CAP_BYTES,
    STANDBYS_AT_MOST,
};

use crate::exit;
use crate::external::ExternalSpec;
use crate::results::OutputError;
use crate::sanitizer::SanitizerError;
use crate::sanitizer::{self as san, SanitizerConfig};
use kedge_core::engine::{check_on_cpu, ReferenceKey};
use kedge_core::judge::sample::Judging;
use kedge_core::{Case, CaseResult, LimitsProfile, Registry, Tool, Under, Verdict};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How a set of cases ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Cases that got a result.
    pub ran: usize,
    /// Wall time of the run, in seconds.
    pub(crate) wall_s: f64,
    /// Worker processes started.
    pub workers: usize,
    /// How many of them replaced one that died.
    pub(crate) replaced: usize,
    /// Time slots spent waiting for a worker to become ready with cases waiting, summed
    /// over the slots (worker time, like the phases of `TimeSpent`).
    #[serde(default)]
    pub(crate) worker_wait_s: f64,
    /// Where the slots' time went besides (`summary::SlotSeconds`).
    #[serde(default)]
    pub(crate) slot_time: crate::summary::SlotSeconds,
    /// Each worker's start-up in seconds (as it measured it: its device opened, its
    /// libraries loaded), in the order they were taken.
    #[serde(default)]
    pub(crate) worker_start_s: Vec<crate::summary::WorkerStart>,
    /// Per GPU: cases run and why it was lost, if it was.
    pub(crate) per_gpu: Vec<GpuRun>,
}

impl RunStats {
    /// Add another part of the same run (a tier) to these.
    pub(crate) fn add(&mut self, more: RunStats) {
        self.ran += more.ran;
        self.wall_s += more.wall_s;
        self.workers += more.workers;
        self.replaced += more.replaced;
        self.worker_wait_s += more.worker_wait_s;
        self.slot_time += more.slot_time;
        self.worker_start_s.extend(more.worker_start_s);
        self.per_gpu.extend(more.per_gpu);
    }
}

use crate::summary::GpuRun;

impl From<SlotTime> for crate::summary::SlotSeconds {
    fn from(t: SlotTime) -> Self {
        crate::summary::SlotSeconds {
            cases_s: t.cases.as_secs_f64(),
            read_out_s: t.read_out.as_secs_f64(),
            pulls_s: 0.0,
        }
    }
}

/// Where results go as they become final.
pub type Sink<'a> = dyn FnMut(CaseResult) -> Result<(), OutputError> + 'a;

/// Runs cases one way (on the CPU, natively on GPUs, under one sanitizer tool).
pub trait Executor {
    /// How this executor's results are marked.
    fn under(&self) -> Under;
    /// Run `cases`, passing each result to `sink` as soon as it is final.
    fn run(&mut self, cases: &[Case], sink: &mut Sink<'_>) -> Result<RunStats, EngineError>;
    /// The device the cases ran on, as a person names it.
    fn device(&self) -> String;
    /// Does this executor take the case? A sweep without a GPU gives a library's host-backend
    /// cases to a host executor and the rest to the CPU side.
    fn accepts(&self, _case: &Case) -> bool {
        true
    }
    /// Run cases in this order of expected yield (`select::order`). An executor that spreads
    /// cases over several workers orders its units by it; one that runs them one after another
    /// in the order given (the CPU side, a host backend) needs nothing: the caller gives them
    /// in this order.
    fn set_order(&mut self, _order: Arc<YieldOrder>) {}
}

/// Does running the case need a GPU (every kernel impl does; a library's host backend not)?
pub(crate) fn needs_gpu(reg: &Registry, c: &Case) -> bool {
    reg.resolve(c).map(|(_, i)| i.needs_gpu()).unwrap_or(true)
}

/// Which GPUs a command runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gpus {
    /// This one (`--device N`; 0 by default).
    One(u32),
    /// These (`--devices 0,1`): each must start a worker and share the first one's limits.
    Listed(Vec<u32>),
    /// Every GPU the driver shows; one that cannot start a worker or has other limits is
    /// left out with a note.
    All,
}

/// Worker options, from the command line.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// A case with no verdict after this long is `timeout` and its worker killed.
    pub timeout: Duration,
    /// The same under a sanitizer, whose instrumented kernels run many times slower and pay
    /// for every launch: a concat of 116,224 launches (one per `ne[3]`) took 98 s under
    /// memcheck on the H200 and passed 120 s on an H100, where it runs in milliseconds.
    pub sanitized_timeout: Duration,
    /// How long a worker may take to open its GPU.
    pub ready_timeout: Duration,
    /// Cases per sanitized worker (memcheck; the other tools run one case per worker).
    pub batch: usize,
    /// Bytes of sanitizer records one case may write (`SanitizeSpec::record_cap`).
    pub record_cap: Option<u64>,
    /// Extra compute-sanitizer options, overriding kedge's defaults.
    pub sanitizer_args: Option<String>,
    /// Where the engine tells what happens (verdicts as they come, GPUs lost, tiers of big
    /// cases): the console unless the caller gives another reporter.
    pub events: Events,
    /// Workers per GPU. Verdicts do not depend on it: each case still runs alone in its
    /// worker, and cases too big to share the device's memory run one at a time.
    pub jobs: usize,
    /// The run's time limit (`sweep --max-time`): once it is up, no new case starts.
    pub budget: Option<Arc<TimeBudget>>,
    /// How workers judge big cases (`--judge`): sampled rows from 2^20 elements by default.
    pub judging: Judging,
}

/// `EngineOptions::timeout` unless given (`--timeout`), in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
/// `EngineOptions::sanitized_timeout` unless given.
pub const DEFAULT_SANITIZED_TIMEOUT_S: u64 = 600;

/// Cases per memcheck worker (`--batch`). A batch should outlast the start of the standby that
/// replaces its worker (about 2 s under the tool): on an H100 the own suite under memcheck ran
/// 33 cases a second with batches of 16 (about 1.3 s each; slots waited 211 s for starts over
/// 263 workers) and 41 with batches of 64 (9 s of waiting over 93 workers), the same verdicts.
pub const DEFAULT_BATCH: usize = 64;

impl EngineOptions {
    /// A case's base timeout: `sanitized_timeout` for a worker under a sanitizer.
    pub(crate) fn timeout_for(&self, sanitized: bool) -> Duration {
        if sanitized {
            self.sanitized_timeout
        } else {
            self.timeout
        }
    }
    /// Half the CPU cores (each worker computes references on the CPU too), at most 8.
    pub fn default_jobs() -> usize {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get() / 2)
            .clamp(1, 8)
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_S),
            sanitized_timeout: Duration::from_secs(DEFAULT_SANITIZED_TIMEOUT_S),
            ready_timeout: Duration::from_secs(180),
            batch: DEFAULT_BATCH,
            record_cap: Some(supervisor::RECORD_CAP_BYTES),
            sanitizer_args: None,
            events: Events::default(),
            jobs: 1,
            budget: None,
            judging: Judging::Auto,
        }
    }
}

/// The GPUs a run uses, and what their workers said.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub(crate) gpus: Vec<u32>,
    /// The first GPU's limits: every case is built for them.
    limits: LimitsProfile,
    pub(crate) device: String,
    /// `cuDriverGetVersion` of the first GPU's worker (13000: CUDA 13.0).
    pub(crate) driver_version: i32,
    /// The kernel-mode driver's version (`580.159.04`), where the worker could read it.
    pub(crate) driver: Option<String>,
}

impl Fleet {
    /// `driver 580.159.04 (CUDA 13.0)`, or `CUDA 13.0` when the kernel-mode version is unknown.
    pub fn driver_text(&self) -> String {
        kedge_core::cuda::driver_text(self.driver.as_deref(), self.driver_version)
    }

    fn gpu_list(&self) -> String {
        self.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Assembles the GPU side of a run.
pub struct RunEngineBuilder {
    command: &'static str,
    bench: Option<BenchSpec>,
    exe: Option<PathBuf>,
    external: ExternalSpec,
    opts: EngineOptions,
    /// Where worker logs go; none: a temporary directory, removed at the end unless a case
    /// failed in it.
    work_dir: Option<PathBuf>,
    gpus: Gpus,
    keep_workers: bool,
    check_driver: bool,
}

impl RunEngineBuilder {
    /// The kedge binary workers start from (default: this process's).
    pub fn exe(mut self, exe: impl Into<PathBuf>) -> Self {
        self.exe = Some(exe.into());
        self
    }
    pub(crate) fn external(mut self, e: ExternalSpec) -> Self {
        self.external = e;
        self
    }
    /// Workers time each case after judging it (`kedge bench`).
    pub(crate) fn bench(mut self, b: BenchSpec) -> Self {
        self.bench = Some(b);
        self
    }
    /// Timeouts, workers per GPU, sanitizer options, events and the time limit.
    pub fn options(mut self, o: EngineOptions) -> Self {
        self.opts = o;
        self
    }
    /// Worker logs and sanitizer XML go under here.
    pub fn work_dir(mut self, d: impl Into<PathBuf>) -> Self {
        self.work_dir = Some(d.into());
        self
    }
    /// The GPUs to probe and run on (default: GPU 0).
    pub fn gpus(mut self, g: Gpus) -> Self {
        self.gpus = g;
        self
    }
    /// Keep a native worker between `run` calls (a sweep), or start each call clean
    /// (`minimize`'s probes).
    pub(crate) fn keep_workers(mut self, keep: bool) -> Self {
        self.keep_workers = keep;
        self
    }
    /// Skip the driver check in this process (fake workers in tests need no driver).
    pub fn without_driver_check(mut self) -> Self {
        self.check_driver = false;
        self
    }

    /// Check for a driver, start a worker on each GPU to read its limits, and keep the GPUs
    /// that can run.
    pub fn build(self) -> Result<RunEngine, EngineError> {
        if self.check_driver && !kedge_core::cuda::driver_present() {
            return Err(NoGpu {
                command: self.command,
                why: kedge_core::cuda::DeviceError::NoDriver.to_string(),
                hint: hint(self.command),
            }
            .into());
        }
        let exe = match self.exe {
            Some(e) => e,
            None => std::env::current_exe().map_err(EngineError::Exe)?,
        };
        let mut spec = WorkerSpec::new(0, self.external);
        spec.bench = self.bench;
        spec.judging = self.opts.judging;
        let (work_dir, temp) = match self.work_dir {
            Some(d) => (d, None),
            None => {
                let t =
                    lifecycle::TempWorkDir::create(self.command).map_err(EngineError::TempDir)?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let workers = Workers {
            exe,
            spec,
            opts: self.opts,
            work_dir,
            temp,
            keep_workers: self.keep_workers,
        };
        let fleet = workers.probe(&self.gpus)?;
        Ok(RunEngine { workers, fleet })
    }
}

fn hint(command: &str) -> Option<&'static str> {
    match command {
        "run" => Some("`kedge plan` checks launches without one"),
        "minimize" => Some("--cpu shrinks launch-limit failures without one"),
        "fuzz" => Some("--cpu fuzzes the launch contract without one"),
        _ => None,
    }
}

/// How to start workers: the binary, their spec, their options and where their logs go.
struct Workers {
    exe: PathBuf,
    spec: WorkerSpec,
    opts: EngineOptions,
    work_dir: PathBuf,
    /// The temporary directory `work_dir` is, when the command gave none.
    temp: Option<std::sync::Arc<lifecycle::TempWorkDir>>,
    keep_workers: bool,
}

/// The GPU side of a run: a fleet of probed GPUs and how to start workers on them.
pub struct RunEngine {
    workers: Workers,
    fleet: Fleet,
}

impl RunEngine {
    /// `command` names what needs the GPU in messages (`kedge run needs a GPU ...`).
    pub fn builder(command: &'static str) -> RunEngineBuilder {
        RunEngineBuilder {
            command,
            bench: None,
            exe: None,
            external: ExternalSpec::default(),
            opts: EngineOptions::default(),
            work_dir: None,
            gpus: Gpus::One(0),
            keep_workers: true,
            check_driver: true,
        }
    }

    /// The GPUs kept after probing, and what their workers reported.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    pub(crate) fn limits(&self) -> &LimitsProfile {
        &self.fleet.limits
    }

    /// The compute-sanitizer wrapping for one tool (see `Workers::sanitize_spec`).
    pub fn sanitize_spec(&self, tool: Tool) -> Result<SanitizeSpec, EngineError> {
        self.workers.sanitize_spec(tool)
    }

    /// An executor running natively (`None`) or under a sanitizer tool, one worker pool per
    /// GPU of the fleet (logs in `WORK/TOOL/gpuN/`).
    pub fn executor(&self, tool: Option<Tool>) -> Result<GpuExecutor, EngineError> {
        let under = tool.map(Under::Tool).unwrap_or(Under::Native);
        let jobs = self.workers.opts.jobs.max(1);
        // Slot-major (every GPU's first slot, then every GPU's second...), so the first
        // entries are one worker per GPU: what cases too big to share a GPU run on.
        let mut pools = Vec::new();
        for k in 0..jobs {
            for &g in &self.fleet.gpus {
                let mut dir = self
                    .workers
                    .work_dir
                    .join(under.name())
                    .join(format!("gpu{g}"));
                if jobs > 1 {
                    dir = dir.join(format!("slot{k}"));
                }
                let sanitize = match tool {
                    Some(t) => Some(self.workers.sanitize_spec(t)?),
                    None => None,
                };
                pools.push((g, self.workers.supervisor(g, &dir, sanitize)));
            }
        }
        Ok(GpuExecutor {
            under,
            pools,
            jobs,
            device_bytes: self.fleet.limits.device_memory_bytes.value,
            host_bytes: host_memory_bytes(),
            temp: self.workers.temp.clone(),
            events: self.workers.opts.events.clone(),
            budget: self.workers.opts.budget.clone(),
            judging: self.workers.opts.judging,
            order: None,
            device: format!(
                "{}, {}, gpus {}",
                self.fleet.device,
                self.fleet.driver_text(),
                self.fleet.gpu_list()
            ),
        })
    }
}

impl Workers {
    fn supervisor(&self, gpu: u32, dir: &Path, sanitize: Option<SanitizeSpec>) -> Supervisor {
        let mut s = Supervisor::new(SupervisorConfig {
            exe: self.exe.clone(),
            spec: self.spec.on(gpu),
            timeout: self.opts.timeout_for(sanitize.is_some()),
            ready_timeout: self.opts.ready_timeout,
            sanitize,
            work_dir: dir.to_path_buf(),
            keep_worker: self.keep_workers,
        });
        s.set_budget(self.opts.budget.clone());
        s.set_events(self.opts.events.clone());
        s
    }

    fn probe_one(&self, gpu: u32) -> Result<supervisor::RunSummary, EngineError> {
        let dir = self.work_dir.join(format!("probe-gpu{gpu}"));
        self.supervisor(gpu, &dir, None)
            .probe()
            .map_err(|source| EngineError::Probe { gpu, source })
    }

    /// Every GPU is probed first, because cases are built for one set of limits: a listed
    /// GPU that cannot start a worker, or whose limits differ from the first's, stops the run
    /// here; when the GPUs were not listed, such a GPU is left out with a note (a machine's
    /// display GPU should not stop its sweep).
    fn probe(&self, gpus: &Gpus) -> Result<Fleet, EngineError> {
        let (first, listed): (u32, Option<Vec<u32>>) = match gpus {
            Gpus::One(g) => (*g, Some(vec![*g])),
            Gpus::Listed(l) => (l.first().copied().unwrap_or(0), Some(l.clone())),
            Gpus::All => (0, None),
        };
        let s0 = self.probe_one(first)?;
        let limits = s0
            .limits
            .clone()
            .ok_or(EngineError::NoLimits { gpu: first })?;
        let explicit = listed.is_some();
        let candidates = listed.unwrap_or_else(|| match s0.device_count {
            Some(n) if n > 0 => (0..n).filter_map(|g| u32::try_from(g).ok()).collect(),
            // The driver could not count: the GPU the probe opened.
            _ => vec![first],
        });
        let others: Vec<(u32, Result<supervisor::RunSummary, EngineError>)> =
            std::thread::scope(|s| {
                let handles: Vec<_> = candidates
                    .iter()
                    .filter(|&&g| g != first)
                    .map(|&g| (g, s.spawn(move || self.probe_one(g))))
                    .collect();
                handles
                    .into_iter()
                    .map(|(g, h)| (g, h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))))
                    .collect()
            });
        let mut fleet = Fleet {
            gpus: vec![first],
            device: s0.device.clone().unwrap_or_default(),
            driver_version: s0.driver_version.unwrap_or_default(),
            driver: s0.driver.clone(),
            limits,
        };
        for (g, r) in others {
            let unfit = match r {
                Ok(s) if s.limits.as_ref() == Some(&fleet.limits) => None,
                Ok(s) => Some(EngineError::MixedLimits {
                    gpu: g,
                    device: s.device.unwrap_or_default(),
                    first,
                    first_device: fleet.limits.device.clone(),
                }),
                Err(e) => Some(e),
            };
            match unfit {
                None => fleet.gpus.push(g),
                Some(e) if explicit => return Err(e),
                Some(e) => self.opts.events.emit(Event::GpuLeftOut {
                    gpu: g,
                    why: e.to_string(),
                }),
            }
        }
        Ok(fleet)
    }

    /// The compute-sanitizer wrapping for one tool: kedge's defaults, the user's overrides,
    /// and the parser that attributes each worker's records to its cases.
    fn sanitize_spec(&self, tool: Tool) -> Result<SanitizeSpec, EngineError> {
        let path = san::find_sanitizer()?;
        let mut cfg = SanitizerConfig::new(tool);
        if san::accepts_option(&path, san::EXCLUDE_OPTION) {
            cfg.exclude_helpers();
        }
        if let Some(a) = &self.opts.sanitizer_args {
            cfg.apply_args(a)?;
        }
        let mut prefix = vec![path.display().to_string()];
        prefix.extend(
            cfg.args(Path::new("{xml}"))
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned()),
        );
        prefix.push("--".into());
        Ok(SanitizeSpec {
            tool,
            prefix,
            attribute: attribution(tool),
            // Attribution splits a worker's records at kedge_case_marker API-error records.
            // Only memcheck reports API errors (seen on the H200: an initcheck worker's XML
            // held 68 Initcheck records and no marker), so the other tools run one case per
            // worker.
            batch: if tool == Tool::Memcheck {
                self.opts.batch.max(1)
            } else {
                1
            },
            record_cap: self.opts.record_cap,
        })
    }
}

/// How one worker's sanitizer XML becomes findings per case: split at the
/// `kedge_case_marker` records. With no marker at all (a sanitizer set up to hide API errors,
/// say), one case's records are still its own; a batch's cannot be split, which is an error
/// the supervisor answers by running that batch again one case per worker.
pub fn attribution(tool: Tool) -> supervisor::Attribute {
    Box::new(move |xml: &Path, started: usize| {
        let mut run = san::analyze_run(xml, tool, started, None)
            .map_err(|e| format!("reading {}: {e}", xml.display()))?;
        if run.markers == 0 && !run.preamble.is_empty() {
            if started == 1 {
                let pre = std::mem::take(&mut run.preamble);
                run.per_case[0].primary.extend(pre.primary);
                run.per_case[0].secondary.extend(pre.secondary);
            } else {
                return Err(format!(
                    "{}: no kedge_case_marker records, so its records cannot be attributed to the {started} cases of this worker",
                    xml.display()
                ));
            }
        }
        Ok(run.per_case)
    })
}
