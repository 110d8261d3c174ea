//! The supervisor: owns worker processes, feeds them cases, streams verdicts, replaces a
//! worker whose context died, kills a hung one, and wraps workers in compute-sanitizer.
//! Cases never run in the supervisor itself.

use super::budget::TimeBudget;
use super::protocol::{FatalKind, WorkerMsg, WorkerSpec};
use super::schedule::BatchError;
use crate::events::{Event, Events};
use crate::results::OutputError;
use crate::summary::{StartupParts, WorkerStart};
use kedge_core::{AllocMode, Case, CaseResult, Detector, LimitsProfile, Tool, Under, Verdict};
use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a supervisor could not run its cases.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The worker found no driver or could not open its GPU.
    #[error("{0}")]
    NoGpu(String),
    /// The worker could not read its spec or build its registry.
    #[error("the worker could not start: {0}")]
    Setup(String),
    /// The worker process could not be started.
    #[error("could not start a worker ({cmd}): {err}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why the operating system refused it.
        err: std::io::Error,
    },
    /// The worker process started, then ended or said something other than `ready` before it
    /// was ready.
    #[error("could not start a worker (kedge worker): {why}")]
    NotStarted {
        /// How it ended (its status or signal, and the end of its stderr), or what it said.
        why: String,
    },
    /// No `ready` line within the ready timeout (the timeout, and the end of the worker's
    /// stderr); the worker was killed.
    #[error("worker did not become ready within {0:?}{1}")]
    NotReady(Duration, String),
    /// The sink refused a result.
    #[error("writing results: {0}")]
    Sink(OutputError),
    /// A worker's log could not be created.
    #[error("could not create the worker's log: {0}")]
    Log(OutputError),
    /// A sanitized worker's XML could not be read (a batch whose records cannot be split
    /// between its cases is run again one case per worker instead).
    #[error("{0}")]
    Sanitizer(String),
}

/// Parse one worker's XML and attribute findings: `started` cases ran in order; returns the
/// findings for each of them. `Send + Sync`: a multi-GPU sweep runs one supervisor per GPU,
/// each on its own thread.
pub type Attribute = Box<
    dyn Fn(&std::path::Path, usize) -> Result<Vec<crate::sanitizer::CaseFindings>, String>
        + Send
        + Sync,
>;

/// How to wrap a worker in a sanitizer and read back what it found.
pub struct SanitizeSpec {
    /// The compute-sanitizer tool the workers run under.
    pub tool: Tool,
    /// Program and arguments placed before the worker command; `{xml}` is replaced by the
    /// XML file of that worker.
    pub prefix: Vec<String>,
    /// How the worker's records become findings per case (`run::attribution`).
    pub attribute: Attribute,
    /// Cases per worker: the XML is read when a worker ends.
    pub batch: usize,
    /// Bytes of records one case may make the sanitizer print on the worker's stdout (or add
    /// to its XML, where a tool writes it as it goes) before kedge stops the worker: a kernel
    /// whose every thread reads out of bounds makes the sanitizer report every access
    /// (millions, for minutes), and the first thousands already say all there is. The tool
    /// then writes its report and the records before the cut are judged as usual. `None`: no
    /// limit.
    pub record_cap: Option<u64>,
}

/// Seconds a case may take beyond the base timeout for each GiB of its tensors: drawing,
/// copying and judging gigabytes takes the host time that is not a hang (a 2^32-element case
/// judged whole held 32 GiB and took minutes on the H200's host).
const TIMEOUT_S_PER_GIB: u64 = 15;

/// A case's timeout: `base` (`--timeout`) and `TIMEOUT_S_PER_GIB` for each GiB of its tensors.
fn case_timeout(base: Duration, case: &Case) -> Duration {
    let bytes = kedge_ops::registry()
        .op(&case.op)
        .and_then(|op| op.tensors(case))
        .map(|ts| ts.iter().map(|t| t.bytes).fold(0u64, u64::saturating_add))
        .unwrap_or(0);
    base + Duration::from_secs((bytes >> 30).saturating_mul(TIMEOUT_S_PER_GIB))
}

/// The worker's `GLIBC_TUNABLES`: the supervisor's own with `glibc.malloc.hugetlb=1` added
/// (`None`: leave it as it is, where it already says). A big case's host side is a few
/// allocations of gigabytes (inputs, the CPU backend's tensors, the reference), each touched
/// page by page the first time: in 4 KiB pages the kernel's page faults were about 40 % of a
/// set_rows reference's time on the CPU machine. With the tunable, glibc asks for transparent
/// huge pages on the chunks it maps (a glibc without the tunable ignores it): there, three
/// runs each at 2^28 elements, the median reference went 6.74 → 3.80 s (diag), 2.79 → 1.75 s
/// (gelu) and 2.54 → 2.32 s (set_rows into q4_0), as fast as before where no huge page was
/// free.
fn huge_pages(current: Option<String>) -> Option<String> {
    const HUGE: &str = "glibc.malloc.hugetlb=1";
    match current {
        Some(t) if t.contains("glibc.malloc.hugetlb") => None,
        Some(t) if !t.is_empty() => Some(format!("{t}:{HUGE}")),
        _ => Some(HUGE.to_string()),
    }
}

/// The default of `SanitizeSpec::record_cap`: thousands of records (memcheck took about a
/// millisecond a record on the H200, so a case stops within seconds).
pub const RECORD_CAP_BYTES: u64 = 4 << 20;

/// Where a slot's time went, as the supervisor saw it (the worker's own phases are each
/// result's `observed.timings`): from sending each case to its verdict coming back, and
/// waiting for a sanitized worker to exit and reading its report. Beside the case times the
/// workers measure, these tell what a case costs outside its timed phases (under memcheck,
/// the tool's own work at each allocation, free and marker) and what reading reports costs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlotTime {
    /// Sending each case until its verdict came back, summed.
    pub cases: Duration,
    /// A sanitized worker's exit waited for and its report read, summed.
    pub read_out: Duration,
}

impl std::ops::Add for SlotTime {
    type Output = SlotTime;
    fn add(self, o: SlotTime) -> SlotTime {
        SlotTime {
            cases: self.cases + o.cases,
            read_out: self.read_out + o.read_out,
        }
    }
}

impl SlotTime {
    /// What was spent since `before` (an earlier reading of the same slots).
    pub fn since(self, before: SlotTime) -> SlotTime {
        SlotTime {
            cases: self.cases.saturating_sub(before.cases),
            read_out: self.read_out.saturating_sub(before.read_out),
        }
    }
}

/// What a supervisor starts its workers from and how long it waits for them.
pub struct SupervisorConfig {
    /// The kedge binary (workers are `kedge worker`, reading `spec` as their first line).
    pub exe: PathBuf,
    /// What every worker is; the supervisor sets `sanitized` and `warm_up` itself.
    pub spec: WorkerSpec,
    /// A case without a result after this long (plus 15 s per GiB of its tensors) is a
    /// `timeout`, and its worker is killed (`EngineOptions::timeout_for`: longer under a
    /// sanitizer).
    pub timeout: Duration,
    /// How long a worker may take to say it is ready (its device opened, its libraries
    /// loaded).
    pub ready_timeout: Duration,
    /// Run the workers under compute-sanitizer; `None`: natively.
    pub sanitize: Option<SanitizeSpec>,
    /// Where worker logs (stderr) and sanitizer XML go.
    pub work_dir: PathBuf,
    /// Keep a native worker alive between `run` calls: a multi-GPU sweep hands each GPU one
    /// case at a time, and a fresh worker per case would pay for a CUDA context each time.
    /// Off where each call should start clean (`minimize`'s probes).
    pub keep_worker: bool,
}

/// What happened, beyond the results themselves.
#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    /// Workers taken for this call's cases (a worker kept from the last call is not counted).
    pub workers_started: usize,
    /// Of those, the ones after the first: each took over from a worker that ended (a fault,
    /// a hang, a sanitized batch read out).
    pub workers_replaced: usize,
    pub(crate) device: Option<String>,
    pub(crate) driver_version: Option<i32>,
    /// The kernel-mode driver's version, where the worker could read it.
    pub(crate) driver: Option<String>,
    pub(crate) limits: Option<LimitsProfile>,
    /// GPUs the worker's driver shows (what `sweep` runs on when not told).
    pub(crate) device_count: Option<usize>,
    /// Cases that got a result.
    pub ran: usize,
}

/// What a worker says once it has opened its device.
#[derive(Debug, Clone)]
struct ReadyInfo {
    /// The worker's own pid (under a sanitizer, the tool's child).
    pid: u32,
    device: String,
    driver_version: i32,
    driver: Option<String>,
    limits: Option<LimitsProfile>,
    device_count: Option<usize>,
    /// Its start-up, as it measured it, and where it went.
    startup_s: f64,
    startup_parts: Option<StartupParts>,
}

impl RunSummary {
    fn note_ready(&mut self, r: &ReadyInfo) {
        self.device = Some(r.device.clone());
        self.driver_version = Some(r.driver_version);
        self.driver = r.driver.clone();
        if let Some(l) = &r.limits {
            self.limits = Some(l.clone());
        }
        self.device_count = r.device_count;
    }
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Option<String>>,
    xml: Option<PathBuf>,
    index: usize,
    /// Where it keeps the phase of its case in flight (`PhaseNote`).
    phase_file: PathBuf,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Never leave a worker running behind its handle.
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
        super::lifecycle::worker_ended(self.child.id() as i32);
    }
}

impl Worker {
    fn kill(&mut self) {
        // The worker leads its own process group (compute-sanitizer and its child included).
        let pgid = self.child.id() as i32;
        // SAFETY: plain syscall on a pid we own.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    /// End the worker but not the sanitizer around it, which then writes its report of
    /// what it saw (killing the tool too would leave no report at all, seen on the H200).
    /// `pid` is the worker's own, from its ready line; without one, everything goes.
    fn stop_for_report(&mut self, pid: u32) {
        let own = self.child.id();
        if pid == 0 || pid == own {
            self.kill();
            return;
        }
        // SAFETY: plain syscall; the pid is this worker's, in the group we lead.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
        // The tool's report of a flood can take a while to write; past that, everything goes.
        self.finish(Duration::from_secs(60));
    }
    fn recv(&self, t: Duration) -> Result<Option<String>, RecvTimeoutError> {
        self.rx.recv_timeout(t)
    }
    /// Send it nothing more (it reads the end of its input and exits).
    fn close_stdin(&mut self) {
        self.stdin.take();
    }
    /// Close stdin and wait for a clean exit, killing it if it lingers.
    fn finish(&mut self, t: Duration) -> Option<std::process::ExitStatus> {
        self.stdin.take();
        let t0 = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if t0.elapsed() < t => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    self.kill();
                    return None;
                }
            }
        }
    }
}

/// The end of a worker's stderr log, for a message about a worker that could not start: the
/// log may be in a temporary directory that is gone by the time a person reads the message.
fn stderr_tail(log: &std::path::Path) -> String {
    const MAX: usize = 2000;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        return format!(" (its stderr, {}, is empty)", log.display());
    }
    let start = text
        .char_indices()
        .map(|(i, _)| i)
        .find(|&i| text.len() - i <= MAX)
        .unwrap_or(0);
    format!(
        "; its stderr ({}){}:\n{}",
        log.display(),
        if start > 0 { ", last part" } else { "" },
        &text[start..]
    )
}

fn describe_exit(s: Option<std::process::ExitStatus>) -> String {
    match s {
        None => "was killed".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(sig)) => format!("died from signal {sig}"),
            _ => "ended".into(),
        },
    }
}

/// One worker slot on one GPU: starts `kedge worker` processes (and standbys ahead of need),
/// feeds them cases one line at a time and passes their verdicts on.
pub struct Supervisor {
    cfg: SupervisorConfig,
    spawned: usize,
    /// A ready worker kept from the last `run` (`keep_worker`), and what it said when ready.
    idle: Option<(Worker, ReadyInfo)>,
    /// Workers started ahead of need, opening their device (and getting ready for the cases
    /// coming: `WorkerSpec::warm_up`) while the current one runs: the next replacement takes
    /// the oldest instead of waiting for a fresh start. How many: `standbys_wanted`.
    standbys: VecDeque<Worker>,
    /// Threads each worker's CPU-side work may use (`RAYON_NUM_THREADS`); `None`: all.
    threads: Option<usize>,
    /// Standbys kept once a worker was lost running cases (`set_standbys`).
    standby_cap: usize,
    /// Workers that ended while running cases (a fault, a crash, a hang).
    lost: usize,
    /// Cases in guard mode were sent: a read past a tensor ends the worker there.
    guarded: bool,
    /// Each ready worker's start-up in seconds, in the order they were taken.
    startups: Vec<WorkerStart>,
    /// The cases the scheduler will hand out next (`Runner::upcoming`): what standbys get
    /// ready for beyond the current batch.
    upcoming: Vec<Case>,
    /// Time spent waiting for a worker to become ready, with cases waiting.
    waited: Duration,
    /// Where the slot's time went besides: see [`SlotTime`].
    slot_time: std::cell::Cell<SlotTime>,
    /// Workers that gave their last verdict and are exiting on their own: reaped when they
    /// have, killed if they still linger when the supervisor ends.
    exiting: Vec<Worker>,
    /// A sanitized worker whose batch is done, exiting while the next worker runs cases: its
    /// report is read when that worker's turn ends (`overlap_read_out`).
    reading: Option<(Worker, Turn)>,
    /// Let a sanitized worker exit (the tool tearing it down and writing its report) while
    /// the next one runs its batch, rather than the slot waiting for it. On unless a tier of
    /// big cases says otherwise (`set_overlap_read_out`): an exiting worker holds its device
    /// memory until it is gone.
    overlap_read_out: bool,
    /// The sweep's time limit: asked before each case is sent.
    budget: Option<Arc<TimeBudget>>,
    /// Where it tells what it does on its own (a batch run again).
    events: Events,
}

/// Standbys a slot keeps when every slot of its GPU is in use. Guard mode's FP8 over-reads end
/// workers faster than one starts, but with three per slot that sweep took 38 s on the H200
/// against 21 to 25 s with one: while 24 processes opened contexts, every other worker's
/// driver calls (guard mode's mapping and unmapping most) took about three times as long.
/// A tier of fewer slots shares the same number out (`standbys_per_slot`).
pub const MAX_STANDBYS: usize = 1;
/// Cases a standby gets ready for, the distinct ones coming next.
const WARM_UP_CASES: usize = 4;

impl Drop for Supervisor {
    fn drop(&mut self) {
        if let Some((mut w, _)) = self.idle.take() {
            w.finish(Duration::from_secs(30));
        }
        // A standby ran no case: its Drop kills it.
        self.standbys.clear();
        for mut w in self.exiting.drain(..) {
            w.finish(Duration::from_secs(30));
        }
    }
}

impl Supervisor {
    /// A supervisor with no worker started yet, no time limit, and events told to the
    /// console.
    pub fn new(cfg: SupervisorConfig) -> Self {
        Supervisor {
            cfg,
            spawned: 0,
            idle: None,
            standbys: VecDeque::new(),
            threads: None,
            standby_cap: MAX_STANDBYS,
            lost: 0,
            guarded: false,
            startups: Vec::new(),
            upcoming: Vec::new(),
            waited: Duration::ZERO,
            slot_time: std::cell::Cell::new(SlotTime::default()),
            exiting: Vec::new(),
            reading: None,
            overlap_read_out: true,
            budget: None,
            events: Events::default(),
        }
    }

    /// A time limit shared with the rest of the run: once it is up, `run` sends no new case
    /// (the case a worker is running finishes) and returns with the rest unreported.
    pub(crate) fn set_budget(&mut self, budget: Option<Arc<TimeBudget>>) {
        self.budget = budget;
    }

    /// Where the supervisor tells what it does on its own.
    pub(crate) fn set_events(&mut self, events: Events) {
        self.events = events;
    }

    /// Let the idle worker and the standby go (this pool sits out a tier of bigger cases).
    pub(crate) fn release(&mut self) {
        if let Some((mut w, _)) = self.idle.take() {
            w.finish(Duration::from_secs(30));
        }
        self.standbys.clear();
    }

    /// Threads for the CPU-side work (inputs, reference, comparison) of the workers started
    /// from now on; workers started with another number are let go. Workers that each take
    /// every core for long parallel work only oversubscribe the host: a tier of big cases
    /// gives each its part.
    pub(crate) fn set_threads(&mut self, threads: Option<usize>) {
        if self.threads != threads {
            self.threads = threads;
            self.release();
        }
    }

    /// Standbys to keep once a worker was lost running cases (at least one): a tier of fewer
    /// slots than its GPU has keeps more each (`standbys_per_slot`). Under a sanitizer, where
    /// every batch ends its worker anyway and a worker under the tool is heavy, one.
    pub fn set_standbys(&mut self, cap: usize) {
        self.standby_cap = cap.max(1);
        // Standbys past the new number are let go (their Drop kills them), newest first.
        let keep = self.standbys_wanted();
        while self.standbys.len() > keep {
            self.standbys.pop_back();
        }
    }

    /// Whether a sanitized worker's exit and report may overlap the next worker's batch (see
    /// the field). A tier of fewer slots than its GPU has (big cases) says no.
    pub fn set_overlap_read_out(&mut self, on: bool) {
        self.overlap_read_out = on;
    }

    /// Cases each worker runs before it is read out and replaced (a sanitized worker's
    /// batch); `None`: a worker runs until it dies.
    pub(crate) fn cases_per_worker(&self) -> Option<usize> {
        self.cfg.sanitize.as_ref().map(|s| s.batch.max(1))
    }

    /// Workers started so far that took cases, replacements included (a standby still
    /// waiting is not counted).
    pub fn workers_started(&self) -> usize {
        self.spawned - self.standbys.len()
    }

    /// Workers started ahead of need, waiting for the next replacements.
    pub fn standing_by(&self) -> usize {
        self.standbys.len()
    }

    /// The start-up of each worker taken so far (seconds, as each measured it).
    pub fn startups(&self) -> &[WorkerStart] {
        &self.startups
    }

    /// Time spent so far waiting for a worker to become ready while cases waited (a fresh
    /// start, or a standby not ready yet).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Where the slot's time went so far, besides waiting for workers.
    pub fn slot_time(&self) -> SlotTime {
        self.slot_time.get()
    }

    fn add_slot_time(&self, more: SlotTime) {
        self.slot_time.set(self.slot_time.get() + more);
    }

    /// How many standbys to keep: see [`standbys_wanted`].
    fn standbys_wanted(&self) -> usize {
        standbys_wanted(
            StandbyNeed {
                sanitized: self.cfg.sanitize.is_some(),
                guarded: self.guarded,
                lost: self.lost,
            },
            self.standby_cap,
        )
    }

    /// A ready worker for the next cases: the oldest standby still alive and ready, else a
    /// fresh start. A standby that died waiting, or whose getting ready failed, is let go
    /// (a fresh start reports what is wrong, if anything is, with its stderr).
    fn ready_worker(&mut self) -> Result<(Worker, ReadyInfo), SupervisorError> {
        // Reap the workers that have finished exiting (their Drop notes the end).
        self.exiting
            .retain_mut(|w| matches!(w.child.try_wait(), Ok(None)));
        let t0 = Instant::now();
        let got = loop {
            let Some(mut w) = self.standbys.pop_front() else {
                let mut w = self.spawn()?;
                break self.wait_ready(&mut w).map(|info| (w, info));
            };
            if let Ok(None) = w.child.try_wait() {
                if let Ok(info) = self.wait_ready(&mut w) {
                    break Ok((w, info));
                }
            }
            w.finish(Duration::from_secs(5));
        };
        self.waited += t0.elapsed();
        if let Ok((_, info)) = &got {
            self.startups.push(WorkerStart {
                total_s: info.startup_s,
                parts: info.startup_parts,
            });
        }
        got
    }

    /// Start standbys until there are `standbys_wanted`, each to get ready for the distinct
    /// cases among `next` and those the scheduler hands out after them (`Impl::load`).
    fn start_standbys(&mut self, next: &[Case]) {
        let want = self.standbys_wanted();
        if self.standbys.len() >= want {
            return;
        }
        let warm = warm_up_cases(next.iter().chain(&self.upcoming), WARM_UP_CASES);
        while self.standbys.len() < want {
            // A standby that cannot start is not an error yet: the next replacement starts
            // one the usual way and reports what went wrong.
            match self.spawn_with(warm.clone()) {
                Ok(w) => self.standbys.push_back(w),
                Err(_) => break,
            }
        }
    }

    /// The worker kept from the last run, unless it has exited since (its GPU may be gone):
    /// sending it a case would blame the case for the worker's death.
    fn take_idle(&mut self) -> Option<(Worker, ReadyInfo)> {
        let (mut w, info) = self.idle.take()?;
        match w.child.try_wait() {
            Ok(None) => Some((w, info)),
            _ => {
                w.finish(Duration::from_secs(5));
                None
            }
        }
    }

    fn spawn(&mut self) -> Result<Worker, SupervisorError> {
        self.spawn_with(Vec::new())
    }

    fn spawn_with(&mut self, warm_up: Vec<Case>) -> Result<Worker, SupervisorError> {
        let index = self.spawned;
        self.spawned += 1;
        let _ = std::fs::create_dir_all(&self.cfg.work_dir);
        let xml = self.cfg.sanitize.as_ref().map(|s| {
            self.cfg
                .work_dir
                .join(format!("{}-worker-{index}.xml", s.tool))
        });
        let mut argv: Vec<String> = Vec::new();
        if let (Some(s), Some(x)) = (&self.cfg.sanitize, &xml) {
            let _ = std::fs::remove_file(x);
            argv.extend(
                s.prefix
                    .iter()
                    .map(|a| a.replace("{xml}", &x.display().to_string())),
            );
        }
        argv.push(self.cfg.exe.display().to_string());
        argv.push("worker".into());
        let log_path = self.cfg.work_dir.join(format!("worker-{index}.log"));
        let phase_file = self.cfg.work_dir.join(format!("worker-{index}.phase"));
        // Never through a link: the log may be inside an output directory.
        let log = crate::results::outfile::create_log(&log_path).map_err(SupervisorError::Log)?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .env(
                super::lifecycle::SUPERVISOR_PID_ENV,
                std::process::id().to_string(),
            )
            .envs(self.threads.map(|n| ("RAYON_NUM_THREADS", n.to_string())))
            .envs(huge_pages(std::env::var("GLIBC_TUNABLES").ok()).map(|t| ("GLIBC_TUNABLES", t)))
            .process_group(0);
        let mut child = cmd.spawn().map_err(|err| SupervisorError::Spawn {
            cmd: argv.join(" "),
            err,
        })?;
        super::lifecycle::worker_started(child.id() as i32);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| SupervisorError::NotStarted {
                why: "its stdout was not a pipe kedge could read".into(),
            })?;
        let mut stdin = child.stdin.take();
        // The spec first: everything the worker is. A worker that died at once shows up as
        // a worker that never became ready.
        if let Some(i) = stdin.as_mut() {
            let mut spec = self.cfg.spec.clone();
            spec.sanitized = self.cfg.sanitize.is_some();
            spec.warm_up = warm_up;
            spec.phase_file = Some(phase_file.clone());
            let _ = writeln!(i, "{}", spec.to_line()).and_then(|_| i.flush());
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = BufReader::new(stdout);
            for line in r.lines() {
                match line {
                    Ok(l) => {
                        if tx.send(Some(l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(None);
        });
        Ok(Worker {
            child,
            stdin,
            rx,
            xml,
            index,
            phase_file,
        })
    }

    /// Start one worker, wait until it has opened the device, and stop it: the live limits
    /// (cases are generated for them) without opening a context in the supervisor.
    pub fn probe(&mut self) -> Result<RunSummary, SupervisorError> {
        let mut w = self.spawn()?;
        let mut s = RunSummary {
            workers_started: 1,
            ..Default::default()
        };
        let res = self.wait_ready(&mut w).map(|info| {
            s.note_ready(&info);
            s
        });
        w.finish(Duration::from_secs(30));
        res
    }

    /// Wait for a worker's `ready` line. Lines that are not worker messages (compute-sanitizer
    /// prints a banner on stdout) are skipped.
    fn wait_ready(&self, w: &mut Worker) -> Result<ReadyInfo, SupervisorError> {
        let deadline = Instant::now() + self.cfg.ready_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match w.recv(left) {
                Ok(Some(line)) => match serde_json::from_str::<WorkerMsg>(&line) {
                    Ok(WorkerMsg::Ready {
                        device,
                        driver_version,
                        driver,
                        limits,
                        device_count,
                        pid,
                        startup_s,
                        startup_parts,
                    }) => {
                        return Ok(ReadyInfo {
                            pid,
                            device,
                            driver_version,
                            driver,
                            limits: limits.map(|l| *l),
                            device_count,
                            startup_s,
                            startup_parts,
                        });
                    }
                    Ok(WorkerMsg::Fatal { message, kind }) => {
                        w.finish(Duration::from_secs(5));
                        return Err(match kind {
                            FatalKind::NoDriver | FatalKind::NoDevice | FatalKind::OldDriver => {
                                SupervisorError::NoGpu(message)
                            }
                            FatalKind::Setup => SupervisorError::Setup(message),
                        });
                    }
                    Ok(other) => {
                        w.kill();
                        return Err(SupervisorError::NotStarted {
                            why: format!("unexpected message before ready: {other:?}"),
                        });
                    }
                    Err(_) => continue,
                },
                Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                    let st = w.finish(Duration::from_secs(5));
                    let log = self.cfg.work_dir.join(format!("worker-{}.log", w.index));
                    return Err(SupervisorError::NotStarted {
                        why: format!(
                            "worker {} before it was ready{}",
                            describe_exit(st),
                            stderr_tail(&log)
                        ),
                    });
                }
                Err(RecvTimeoutError::Timeout) => {
                    w.kill();
                    let log = self.cfg.work_dir.join(format!("worker-{}.log", w.index));
                    return Err(SupervisorError::NotReady(
                        self.cfg.ready_timeout,
                        stderr_tail(&log),
                    ));
                }
            }
        }
    }

    /// Run `cases`, calling `sink` with each result as soon as it is final.
    pub fn run(
        &mut self,
        cases: &[Case],
        sink: &mut dyn FnMut(CaseResult) -> Result<(), OutputError>,
    ) -> Result<RunSummary, SupervisorError> {
        self.guarded |= cases
            .iter()
            .any(|c| matches!(c.alloc, AllocMode::Guard | AllocMode::GuardFront));
        let mut pass = Pass::new(&self.cfg, cases, sink);
        loop {
            while pass.i < cases.len() && !pass.out_of_time {
                // No worker is started for cases that will not run.
                if self.budget.as_ref().is_some_and(|b| b.exhausted()) {
                    break;
                }
                let (mut w, info) = self.next_worker(&mut pass)?;
                pass.summary.note_ready(&info);
                let turn = self.feed(&mut w, &info, &mut pass)?;
                // The worker before this one, exiting meanwhile: its report comes first. Where
                // it sets cases to run again, this turn's cases (after them, their results all
                // held) are dropped and run again too, as if the slot had waited for it.
                let at = pass.i;
                self.read_out_exited(&mut pass)?;
                if pass.i != at {
                    pass.summary.ran -= turn.started;
                    drop(w);
                    continue;
                }
                if !self.end_turn(w, info, turn, &mut pass)? {
                    break;
                }
            }
            // The last worker's report; it may set cases to run again.
            let at = pass.i;
            self.read_out_exited(&mut pass)?;
            let again = pass.i != at && !pass.out_of_time;
            if !again || self.budget.as_ref().is_some_and(|b| b.exhausted()) {
                break;
            }
        }
        Ok(pass.summary)
    }

    /// Read out the sanitized worker left exiting (`reading`), if any, once it has ended.
    fn read_out_exited(&mut self, pass: &mut Pass<'_>) -> Result<(), SupervisorError> {
        let Some((mut w, turn)) = self.reading.take() else {
            return Ok(());
        };
        let t = Instant::now();
        w.finish(Duration::from_secs(60));
        let r = self.read_out(&w, turn, pass);
        self.add_slot_time(SlotTime {
            read_out: t.elapsed(),
            ..SlotTime::default()
        });
        r
    }

    /// The worker for the next cases: the one kept from the last call, else a ready one
    /// (counted in the summary), with standbys started behind it for the cases after.
    fn next_worker(&mut self, pass: &mut Pass<'_>) -> Result<(Worker, ReadyInfo), SupervisorError> {
        let got = match self.take_idle() {
            Some(kept) => kept,
            None => {
                let (w, info) = self.ready_worker()?;
                pass.summary.workers_started += 1;
                if pass.summary.workers_started > 1 {
                    pass.summary.workers_replaced += 1;
                }
                self.start_standbys(pass.cases.get(pass.i + 1..).unwrap_or_default());
                (w, info)
            }
        };
        Ok(got)
    }

    /// Send `w` the cases from `pass.i` on, one at a time, until its batch is sent, it ends,
    /// or the time is up. Each result goes to the sink, or is held for the worker's sanitizer
    /// report.
    fn feed(
        &self,
        w: &mut Worker,
        info: &ReadyInfo,
        pass: &mut Pass<'_>,
    ) -> Result<Turn, SupervisorError> {
        let cases = pass.cases;
        let mut turn = Turn {
            held: Vec::new(),
            started: 0,
            worker_gone: false,
            retired: false,
        };
        while pass.i < cases.len() && turn.started < pass.batch && !turn.worker_gone {
            if pass.settled.contains(&pass.i) {
                // Its result went out when a batch before this one ran again.
                pass.i += 1;
                continue;
            }
            if !super::budget::may_start(self.budget.as_deref()) {
                pass.out_of_time = true;
                break;
            }
            let case = &cases[pass.i];
            turn.started += 1;
            let t = Instant::now();
            let end = self.run_case(w, info, case);
            self.add_slot_time(SlotTime {
                cases: t.elapsed(),
                ..SlotTime::default()
            });
            turn.worker_gone |= end.gone;
            let mut r = end.result;
            r.under = pass.under;
            pass.i += 1;
            pass.summary.ran += 1;
            if self.cfg.sanitize.is_some() {
                turn.held.push((pass.i - 1, r));
            } else {
                pass.emit(r)?;
            }
            // A worker whose context died exits by itself after writing its verdict.
            if end.retiring {
                turn.worker_gone = true;
                turn.retired = true;
            }
            if !turn.worker_gone {
                if let Ok(Some(st)) = w.child.try_wait() {
                    let _ = st;
                    turn.worker_gone = true;
                }
            }
        }
        Ok(turn)
    }

    /// Send `case` to `w` and wait for its verdict (see `CaseWait`).
    fn run_case(&self, w: &mut Worker, info: &ReadyInfo, case: &Case) -> CaseEnd {
        let sent = match w.stdin.as_mut() {
            Some(s) => writeln!(s, "{}", case.to_line())
                .and_then(|_| s.flush())
                .is_ok(),
            None => false,
        };
        let t0 = Instant::now();
        if !sent {
            let st = w.finish(Duration::from_secs(5));
            return CaseEnd {
                result: died(
                    case,
                    &format!("worker {} before the case could be sent", describe_exit(st)),
                ),
                retiring: false,
                gone: true,
            };
        }
        // Under a sanitizer the wait is cut into short slices to watch how much the case has
        // made the sanitizer write: to its XML, and the text it prints on the worker's stdout.
        let cap = self
            .cfg
            .sanitize
            .as_ref()
            .and_then(|s| s.record_cap)
            .zip(w.xml.clone())
            .map(|(cap, xml)| (cap, file_len(&xml), xml));
        let deadline = t0 + case_timeout(self.cfg.timeout, case);
        CaseWait {
            cfg: &self.cfg,
            w,
            pid: info.pid,
            case,
            t0,
            deadline,
            cap,
            printed: 0,
            aborting: None,
            retiring: false,
            gone: false,
        }
        .until_verdict()
    }

    /// After a worker's turn: keep it for the next call, let it exit on its own, or end it
    /// and read out its sanitizer report. `false`: this call has nothing more to run.
    fn end_turn(
        &mut self,
        mut w: Worker,
        info: ReadyInfo,
        turn: Turn,
        pass: &mut Pass<'_>,
    ) -> Result<bool, SupervisorError> {
        if turn.started == 0 {
            // The time ran out before this worker got a case: it has nothing to report.
            if pass.keep {
                self.idle = Some((w, info));
            } else {
                w.finish(Duration::from_secs(60));
            }
            return Ok(false);
        }
        if turn.worker_gone {
            self.lost += 1;
        }
        if pass.keep && !turn.worker_gone && (pass.i == pass.cases.len() || pass.out_of_time) {
            // Alive and done with this run: the next run starts with it.
            self.idle = Some((w, info));
            return Ok(false);
        }
        // A worker that exits EXIT_CONTEXT_DEAD after a sticky fault is expected; the next
        // turn starts a fresh one. Natively its verdicts are all in, so it may take its time
        // tearing its context down while the next worker runs cases.
        if turn.retired && self.cfg.sanitize.is_none() {
            w.close_stdin();
            self.exiting.push(w);
            return Ok(true);
        }
        // Under a sanitizer the tool tears the worker down and writes its report on exit
        // (about 3 s a worker of the H200's own suite under memcheck: 182 s of wall for 364 s
        // of case time on 8 slots, with 9.5 s waited for starts). Another worker runs the next
        // batch meanwhile; the report is read when its turn ends.
        if self.cfg.sanitize.is_some() && self.overlap_read_out {
            w.close_stdin();
            self.reading = Some((w, turn));
            return Ok(true);
        }
        let t = Instant::now();
        w.finish(Duration::from_secs(60));
        let r = self.read_out(&w, turn, pass);
        self.add_slot_time(SlotTime {
            read_out: t.elapsed(),
            ..SlotTime::default()
        });
        r?;
        Ok(true)
    }

    /// A sanitized worker has ended: fold its report's findings into the results held for
    /// its started cases and pass them on. A batch whose records cannot be split between
    /// its cases is set to run again, one case per worker. Where the tool wrote no report,
    /// the cases that finished before the worker ended run again in a fresh worker (once):
    /// a verdict under a sanitizer is never given without the sanitizer's word on it.
    fn read_out(
        &mut self,
        w: &Worker,
        turn: Turn,
        pass: &mut Pass<'_>,
    ) -> Result<(), SupervisorError> {
        let (Some(spec), Some(xml)) = (&self.cfg.sanitize, &w.xml) else {
            return Ok(());
        };
        let started = turn.started;
        let first = turn.held.first().map(|(i, _)| *i);
        if !xml.exists() {
            // The tool ended before writing a report (killed with its worker). The case the
            // worker ended with keeps its verdict and says what is missing; the others, which
            // finished, run again for the tool's report (a case already run again keeps its
            // verdict and says so too).
            let n = turn.held.len();
            let (mut again, mut n_again) = (None, 0);
            for (k, (i, mut r)) in turn.held.into_iter().enumerate() {
                let ended_the_worker = turn.worker_gone && k + 1 == n;
                if !ended_the_worker && pass.again.insert(i) {
                    again.get_or_insert(i);
                    n_again += 1;
                    pass.summary.ran -= 1;
                    continue;
                }
                r.detail.push_str(&format!(
                    " (no {} report: the tool ended before writing one)",
                    spec.tool
                ));
                pass.settled.insert(i);
                pass.emit(r)?;
            }
            if let Some(i) = again {
                self.events.emit(Event::ReportLost {
                    tool: spec.tool.to_string(),
                    cases: n_again,
                });
                pass.i = i;
            }
            return Ok(());
        }
        let mut held = turn.held;
        let findings = match (spec.attribute)(xml, started) {
            Ok(f) => f,
            Err(why) if started > 1 => {
                // Never stop the sweep for it: run the batch again, one case per worker,
                // where every record is that case's.
                self.events.emit(Event::BatchAgain {
                    why: why.clone(),
                    cases: started,
                });
                pass.i = first.unwrap_or(pass.i);
                pass.summary.ran -= started;
                pass.batch = 1;
                pass.alone.extend(held.iter().map(|(i, _)| *i));
                return Ok(());
            }
            Err(why) => return Err(SupervisorError::Sanitizer(why)),
        };
        for ((_, r), f) in held.iter_mut().zip(findings) {
            merge_findings(r, f);
        }
        for (i, mut r) in held {
            if pass.again.contains(&i) {
                r.detail.push_str(&format!(
                    " (run again in a fresh worker: {} wrote no report for its first run, \
                     which a later case of its batch ended)",
                    spec.tool
                ));
            }
            if pass.alone.contains(&i) {
                r.detail.push_str(
                    " (run alone: its batch's sanitizer records could not be split between cases)",
                );
            }
            pass.emit(r)?;
        }
        Ok(())
    }
}

/// One `Supervisor::run` call's way through its cases, across the workers it takes.
struct Pass<'a> {
    cases: &'a [Case],
    /// The next case to send.
    i: usize,
    summary: RunSummary,
    under: Under,
    /// Cases per worker: a sanitized worker's batch (one once a batch runs again alone),
    /// natively no limit.
    batch: usize,
    /// The cases of a batch whose records could not be split between them: they run again,
    /// one per worker (as does every case after them), and their results say so.
    alone: HashSet<usize>,
    /// Cases set to run again because their worker's sanitizer wrote no report.
    again: HashSet<usize>,
    /// Cases whose results went out before their turn came again (skipped when it does).
    settled: HashSet<usize>,
    /// A worker still alive at the end is kept for the next call.
    keep: bool,
    /// Set once the time limit stops the next case from starting.
    out_of_time: bool,
    sink: &'a mut dyn FnMut(CaseResult) -> Result<(), OutputError>,
}

impl<'a> Pass<'a> {
    fn new(
        cfg: &SupervisorConfig,
        cases: &'a [Case],
        sink: &'a mut dyn FnMut(CaseResult) -> Result<(), OutputError>,
    ) -> Self {
        let under = cfg
            .sanitize
            .as_ref()
            .map(|s| Under::Tool(s.tool))
            .unwrap_or(Under::Native);
        let batch = cfg
            .sanitize
            .as_ref()
            .map(|s| s.batch.max(1))
            .unwrap_or(usize::MAX);
        Pass {
            cases,
            i: 0,
            summary: RunSummary::default(),
            under,
            batch,
            alone: HashSet::new(),
            again: HashSet::new(),
            settled: HashSet::new(),
            keep: cfg.keep_worker && cfg.sanitize.is_none(),
            out_of_time: false,
            sink,
        }
    }

    /// Pass a final result to the sink.
    fn emit(&mut self, r: CaseResult) -> Result<(), SupervisorError> {
        (self.sink)(r).map_err(SupervisorError::Sink)
    }
}

/// What one worker's turn at the cases left.
struct Turn {
    /// Results waiting for the worker's sanitizer report, with their cases' indices
    /// (natively none: they went out).
    held: Vec<(usize, CaseResult)>,
    /// Cases sent to the worker.
    started: usize,
    /// The worker ended or was stopped (a fault, a crash, a hang, a flood of records), or
    /// is exiting.
    worker_gone: bool,
    /// The worker gave its last verdict and exits by itself (its context died).
    retired: bool,
}

/// A sent case's end: its result, and what became of its worker.
struct CaseEnd {
    result: CaseResult,
    /// The worker said it retires: this result was its last, and it exits.
    retiring: bool,
    /// The worker ended, or was stopped, with this case.
    gone: bool,
}

/// One sent case's wait for its verdict, and what its worker said and printed meanwhile.
struct CaseWait<'a> {
    cfg: &'a SupervisorConfig,
    w: &'a mut Worker,
    /// The worker's own pid, from its ready line (`Worker::stop_for_report`).
    pid: u32,
    case: &'a Case,
    t0: Instant,
    deadline: Instant,
    /// The record cap, the length of the worker's XML when the case was sent, and the XML.
    cap: Option<(u64, u64, PathBuf)>,
    /// Bytes of stray output (the sanitizer's text) so far.
    printed: u64,
    /// The worker dies next; its words judge the case.
    aborting: Option<(String, Vec<String>)>,
    retiring: bool,
    gone: bool,
}

impl CaseWait<'_> {
    /// Wait for the case's result: the worker's verdict, or what the supervisor makes of
    /// the worker ending, hanging or flooding the sanitizer with records.
    fn until_verdict(mut self) -> CaseEnd {
        let result = loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let slice = match self.cap {
                Some(_) => left.min(Duration::from_millis(250)),
                None => left,
            };
            let got = match self.w.recv(slice) {
                Ok(Some(line)) => self.on_line(&line),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => Some(self.on_end()),
                Err(RecvTimeoutError::Timeout) if Instant::now() < self.deadline => self.on_slice(),
                Err(RecvTimeoutError::Timeout) => Some(self.on_timeout()),
            };
            if let Some(r) = got {
                break r;
            }
        };
        CaseEnd {
            result,
            retiring: self.retiring,
            gone: self.gone,
        }
    }

    /// A line from the worker: the case's result, or `None` to keep waiting.
    fn on_line(&mut self, line: &str) -> Option<CaseResult> {
        match serde_json::from_str::<WorkerMsg>(line) {
            Ok(WorkerMsg::Result(r)) => Some(*r),
            Ok(WorkerMsg::Retiring { .. }) => {
                // Its result follows; then it exits. Send it nothing more.
                self.retiring = true;
                None
            }
            Ok(WorkerMsg::Aborting { message, log }) => {
                // The worker dies next; its words judge the case.
                self.aborting = Some((message, log));
                None
            }
            Ok(WorkerMsg::Error { message }) => Some(CaseResult::new(
                self.case,
                Verdict::Unsupported,
                Detector::Supervisor,
                message,
            )),
            // Stray output (the sanitizer's text): keep waiting, unless there is too much
            // of it.
            _ => {
                self.printed += line.len() as u64 + 1;
                match &self.cap {
                    Some((cap, _, _)) if self.printed > *cap => {
                        self.gone = true;
                        self.w.stop_for_report(self.pid);
                        Some(records_cut(self.case, self.printed, self.t0))
                    }
                    _ => None,
                }
            }
        }
    }

    /// The worker's stdout ended: it died running the case (by its library's abort, when it
    /// said so first).
    fn on_end(&mut self) -> CaseResult {
        self.gone = true;
        let st = self.w.finish(Duration::from_secs(10));
        if let Some((message, log)) = self.aborting.take() {
            let mut r = aborted(self.case, &message, &log);
            r.detail
                .push_str(&format!(" (worker {})", describe_exit(st)));
            r.ms = self.t0.elapsed().as_secs_f64() * 1e3;
            return r;
        }
        died(
            self.case,
            &format!(
                "worker {} while running this case (its log: {})",
                describe_exit(st),
                self.cfg
                    .work_dir
                    .join(format!("worker-{}.log", self.w.index))
                    .display()
            ),
        )
    }

    /// A slice of the wait passed with nothing said: stop the worker once the case's records
    /// in its XML pass the cap, else `None` to keep waiting.
    fn on_slice(&mut self) -> Option<CaseResult> {
        let (cap, at_start, xml) = self.cap.as_ref()?;
        let written = file_len(xml).saturating_sub(*at_start);
        if written <= *cap {
            return None;
        }
        self.gone = true;
        self.w.stop_for_report(self.pid);
        Some(records_cut(self.case, written, self.t0))
    }

    /// No verdict by the deadline: the case is a timeout, and its worker is killed.
    fn on_timeout(&mut self) -> CaseResult {
        self.gone = true;
        if self.cfg.sanitize.is_some() {
            // The worker alone: the tool around it writes its report of the batch so far.
            self.w.stop_for_report(self.pid);
        } else {
            self.w.kill();
        }
        let in_phase = killed_in(&self.w.phase_file);
        let mut r = CaseResult::new(
            self.case,
            Verdict::Timeout,
            Detector::Supervisor,
            format!(
                "no verdict within {:?} (--timeout{} and {TIMEOUT_S_PER_GIB} s per GiB of the case's tensors); worker killed{}",
                case_timeout(self.cfg.timeout, self.case),
                if self.cfg.sanitize.is_some() {
                    format!(
                        ", by default {} s under a sanitizer,",
                        super::DEFAULT_SANITIZED_TIMEOUT_S
                    )
                } else {
                    String::new()
                },
                in_phase.map_or_else(
                    || " (its phase unknown)".to_string(),
                    |(p, s)| format!(" in `{}` after {s:.1} s of it ({})", p.as_str(), p.whose())
                ),
            ),
        );
        if let Some((p, s)) = in_phase {
            r.facts.insert(
                "killed_in".into(),
                serde_json::json!({ "phase": p.as_str(), "seconds": (s * 10.0).round() / 10.0 }),
            );
        }
        r.ms = self.t0.elapsed().as_secs_f64() * 1e3;
        r
    }
}

/// The phase a worker was in (its phase file, `PhaseNote`) and for how many seconds; `None`
/// where it wrote none (a worker that never began a case, or an older kedge).
fn killed_in(file: &std::path::Path) -> Option<(kedge_core::engine::phase::Phase, f64)> {
    let note: super::protocol::PhaseNote =
        serde_json::from_str(std::fs::read_to_string(file).ok()?.trim()).ok()?;
    Some((note.phase?, note.age_s()))
}

/// What a supervisor's standbys are for: whether its workers are expected to end early, and
/// how many ended running cases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StandbyNeed {
    /// Under a sanitizer: every batch ends its worker.
    pub sanitized: bool,
    /// Guard mode: every read past a tensor ends its worker.
    pub guarded: bool,
    /// Workers that ended running cases (a fault, a crash, a hang, a library's abort).
    pub lost: usize,
}

/// How many standbys a supervisor keeps. Under a sanitizer, `MAX_STANDBYS`: every batch ends
/// its worker, but a batch is long and a worker under the tool heavy. Natively or in guard
/// mode, once a worker was lost, `cap` (a case that ends its worker tends to have neighbours
/// that do: ggml aborts on every CUDA error, and a tier of its 2^31-element unary cases ended
/// 449 workers in 784 cases on the H200, more than one standby a slot could start in time);
/// in guard mode before that, `MAX_STANDBYS`; else none.
pub fn standbys_wanted(need: StandbyNeed, cap: usize) -> usize {
    if need.sanitized {
        MAX_STANDBYS
    } else if need.lost > 0 {
        cap.max(MAX_STANDBYS)
    } else if need.guarded {
        MAX_STANDBYS
    } else {
        0
    }
}

/// Standbys a slot keeps at most, whatever the tier: each holds a context's device memory and
/// its libraries' host memory, which the big cases of a tier of two slots need.
pub const STANDBYS_AT_MOST: usize = 4;

/// Standbys each of a tier's `slots` per GPU keeps once workers die, out of the `jobs` slots a
/// GPU has: the GPU keeps as many processes as when every slot runs with `MAX_STANDBYS` beside
/// it, so a tier of fewer, bigger cases replaces its workers faster without more processes
/// opening contexts at once than the full tier has; `STANDBYS_AT_MOST` at most. A slot alone on
/// its GPU keeps `MAX_STANDBYS`: its cases are the ones that need the GPU's memory (those that
/// ran out of it beside others, run again alone), which more contexts would take.
pub fn standbys_per_slot(slots: usize, jobs: usize) -> usize {
    if slots <= 1 {
        return MAX_STANDBYS;
    }
    (jobs * MAX_STANDBYS / slots).clamp(MAX_STANDBYS, STANDBYS_AT_MOST)
}

/// Up to `n` of `cases`, in order, no two alike in what a warm-up depends on (op, impl,
/// shape, params: not the seed or the allocation mode).
pub fn warm_up_cases<'a>(cases: impl Iterator<Item = &'a Case>, n: usize) -> Vec<Case> {
    let mut out: Vec<Case> = Vec::new();
    for c in cases {
        if out.len() >= n {
            break;
        }
        let seen = out
            .iter()
            .any(|o| o.op == c.op && o.imp == c.imp && o.ne == c.ne && o.params == c.params);
        if !seen {
            out.push(c.clone());
        }
    }
    out
}

/// A supervisor is one GPU's worker pool in a multi-GPU sweep.
impl super::schedule::Runner<Case> for Supervisor {
    type Output = CaseResult;
    type Error = SupervisorError;

    fn upcoming(&mut self, next: &[Case]) {
        self.upcoming = next.to_vec();
    }

    fn run_batch(
        &mut self,
        batch: &[Case],
        done: &mut dyn FnMut(usize, CaseResult),
    ) -> Result<(), BatchError<SupervisorError>> {
        // Each result goes to its case's position: `run` gives them in the batch's order,
        // except where a sanitizer report set cases to run again (the case that ended the
        // worker comes first, then the ones run again).
        let mut reported = vec![false; batch.len()];
        let res = self.run(batch, &mut |r| {
            let k = (0..batch.len())
                .find(|&k| !reported[k] && batch[k] == r.case)
                .or_else(|| reported.iter().position(|&f| !f));
            if let Some(k) = k {
                reported[k] = true;
                done(k, r);
            }
            Ok(())
        });
        res.map(|_| ()).map_err(|e| match e {
            // A worker that cannot start or cannot open the GPU: retried, then the GPU is lost
            // and its cases go to the others.
            SupervisorError::NoGpu(_)
            | SupervisorError::Spawn { .. }
            | SupervisorError::NotStarted { .. }
            | SupervisorError::NotReady(..) => BatchError::Device(e),
            // An unreadable sanitizer report, results that cannot be written, a worker that
            // cannot build its registry: another GPU would do no better.
            SupervisorError::Sink(_)
            | SupervisorError::Log(_)
            | SupervisorError::Sanitizer(_)
            | SupervisorError::Setup(_) => BatchError::Fatal(e),
        })
    }
}

/// A case whose library aborted the process, judged by the library's own last words.
fn aborted(case: &Case, message: &str, log: &[String]) -> CaseResult {
    let (verdict, detector) = kedge_core::judge::abort::classify(message, log);
    CaseResult::new(
        case,
        verdict,
        detector,
        kedge_core::judge::abort::summarize(message, log),
    )
}

/// How a case's detail starts when its sanitizer records passed `SanitizeSpec::record_cap`.
const STOPPED_FOR_RECORDS: &str = "stopped by kedge: the sanitizer kept reporting";

/// The result of a case stopped for writing `bytes` of sanitizer records (its records so far
/// judge it when the worker's XML is read).
fn records_cut(case: &Case, bytes: u64, t0: Instant) -> CaseResult {
    let mut r = CaseResult::new(
        case,
        Verdict::Timeout,
        Detector::Supervisor,
        format!(
            "{STOPPED_FOR_RECORDS} after {:.1} MiB of records in {:.1} s; worker killed",
            bytes as f64 / (1u64 << 20) as f64,
            t0.elapsed().as_secs_f64()
        ),
    );
    r.ms = t0.elapsed().as_secs_f64() * 1e3;
    r
}

fn file_len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

fn died(case: &Case, what: &str) -> CaseResult {
    CaseResult::new(
        case,
        Verdict::DeviceFault,
        Detector::Supervisor,
        what.to_string(),
    )
}

/// Fold a case's sanitizer findings into its result (see `sanitizer::merge_into_result`).
fn merge_findings(r: &mut CaseResult, cf: crate::sanitizer::CaseFindings) {
    crate::sanitizer::merge_into_result(r, &cf);
}

#[cfg(test)]
mod tests {
    use super::huge_pages;

    #[test]
    fn workers_ask_for_huge_pages_unless_the_user_said_otherwise() {
        let huge = Some("glibc.malloc.hugetlb=1".to_string());
        assert_eq!(huge_pages(None), huge);
        assert_eq!(huge_pages(Some(String::new())), huge);
        assert_eq!(
            huge_pages(Some("glibc.malloc.arena_max=2".into())).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        // The user's own setting of the tunable stays as it is, even "off".
        assert_eq!(huge_pages(Some("glibc.malloc.hugetlb=0".into())), None);
    }
}
