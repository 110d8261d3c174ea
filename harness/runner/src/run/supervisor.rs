//! The supervisor: owns worker processes, feeds them cases, streams verdicts, replaces a
//! worker whose context died, kills a hung one, and wraps workers in compute-sanitizer.
//! Cases never run in the supervisor itself.

use super::budget::TimeBudget;
use super::protocol::{FatalKind, WorkerMsg, WorkerSpec};
use super::schedule::BatchError;
use crate::events::{Event, Events};
use crate::results::OutputError;
use kedge_core::{AllocMode, Case, CaseResult, Detector, LimitsProfile, Tool, Under, Verdict};
use std::collections::VecDeque;
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

/// The default of `SanitizeSpec::record_cap`: thousands of records (memcheck took about a
/// millisecond a record on the H200, so a case stops within seconds).
pub const RECORD_CAP_BYTES: u64 = 4 << 20;

/// What a supervisor starts its workers from and how long it waits for them.
pub struct SupervisorConfig {
    /// The kedge binary (workers are `kedge worker`, reading `spec` as their first line).
    pub exe: PathBuf,
    /// What every worker is; the supervisor sets `sanitized` and `warm_up` itself.
    pub spec: WorkerSpec,
    /// A case without a result after this long (plus 15 s per GiB of its tensors) is a
    /// `timeout`, and its worker is killed.
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
    /// Its start-up, as it measured it.
    startup_s: f64,
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
    /// Workers that ended while running cases (a fault, a crash, a hang).
    lost: usize,
    /// Cases in guard mode were sent: a read past a tensor ends the worker there.
    guarded: bool,
    /// Each ready worker's start-up in seconds, in the order they were taken.
    startups: Vec<f64>,
    /// The cases the scheduler will hand out next (`Runner::upcoming`): what standbys get
    /// ready for beyond the current batch.
    upcoming: Vec<Case>,
    /// Time spent waiting for a worker to become ready, with cases waiting.
    waited: Duration,
    /// Workers that gave their last verdict and are exiting on their own: reaped when they
    /// have, killed if they still linger when the supervisor ends.
    exiting: Vec<Worker>,
    /// The sweep's time limit: asked before each case is sent.
    budget: Option<Arc<TimeBudget>>,
    /// Where it tells what it does on its own (a batch run again).
    events: Events,
}

/// Standbys a slot keeps at most. Guard mode's FP8 over-reads end workers faster than one
/// starts, but with three per slot that sweep took 38 s on the H200 against 21 to 25 s with
/// one: while 24 processes opened contexts, every other worker's driver calls (guard mode's
/// mapping and unmapping most) took about three times as long.
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
            lost: 0,
            guarded: false,
            startups: Vec::new(),
            upcoming: Vec::new(),
            waited: Duration::ZERO,
            exiting: Vec::new(),
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
    pub fn startups(&self) -> &[f64] {
        &self.startups
    }

    /// Time spent so far waiting for a worker to become ready while cases waited (a fresh
    /// start, or a standby not ready yet).
    pub(crate) fn waited(&self) -> Duration {
        self.waited
    }

    /// How many standbys to keep: `MAX_STANDBYS` under a sanitizer (every batch ends its
    /// worker), in guard mode (every read past a tensor ends it), and natively once a worker
    /// was lost running cases (a case that faults tends to have neighbours that fault); else
    /// none.
    fn standbys_wanted(&self) -> usize {
        standbys_wanted(self.cfg.sanitize.is_some() || self.guarded, self.lost)
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
            self.startups.push(info.startup_s);
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
                    }) => {
                        return Ok(ReadyInfo {
                            pid,
                            device,
                            driver_version,
                            driver,
                            limits: limits.map(|l| *l),
                            device_count,
                            startup_s,
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
        let mut summary = RunSummary::default();
        self.guarded |= cases
            .iter()
            .any(|c| matches!(c.alloc, AllocMode::Guard | AllocMode::GuardFront));
        let under = self
            .cfg
            .sanitize
            .as_ref()
            .map(|s| Under::Tool(s.tool))
            .unwrap_or(Under::Native);
        let mut batch = self
            .cfg
            .sanitize
            .as_ref()
            .map(|s| s.batch.max(1))
            .unwrap_or(usize::MAX);
        // Set when a batch's records could not be split between its cases: its cases run
        // again, one per worker, and their results say so.
        let mut alone_from: Option<usize> = None;
        let mut i = 0;
        let mut emit = |r: CaseResult| -> Result<(), SupervisorError> {
            sink(r).map_err(SupervisorError::Sink)
        };
        let keep = self.cfg.keep_worker && self.cfg.sanitize.is_none();
        // Set once the time limit stops the next case from starting.
        let mut out_of_time = false;
        while i < cases.len() && !out_of_time {
            // No worker is started for cases that will not run.
            if self.budget.as_ref().is_some_and(|b| b.exhausted()) {
                break;
            }
            let (mut w, info) = match self.take_idle() {
                Some(kept) => kept,
                None => {
                    let (w, info) = self.ready_worker()?;
                    summary.workers_started += 1;
                    if summary.workers_started > 1 {
                        summary.workers_replaced += 1;
                    }
                    self.start_standbys(cases.get(i + 1..).unwrap_or_default());
                    (w, info)
                }
            };
            summary.note_ready(&info);
            let mut held: Vec<CaseResult> = Vec::new();
            let mut started = 0usize;
            let mut worker_gone = false;
            // The worker gave its last verdict and exits by itself (its context died).
            let mut retired = false;
            while i < cases.len() && started < batch && !worker_gone {
                if !super::budget::may_start(self.budget.as_deref()) {
                    out_of_time = true;
                    break;
                }
                let case = &cases[i];
                let mut retiring = false;
                let sent = match w.stdin.as_mut() {
                    Some(s) => writeln!(s, "{}", case.to_line())
                        .and_then(|_| s.flush())
                        .is_ok(),
                    None => false,
                };
                started += 1;
                let t0 = Instant::now();
                let mut aborting: Option<(String, Vec<String>)> = None;
                let r = if !sent {
                    worker_gone = true;
                    let st = w.finish(Duration::from_secs(5));
                    died(
                        case,
                        &format!("worker {} before the case could be sent", describe_exit(st)),
                    )
                } else {
                    // Under a sanitizer the wait is cut into short slices to watch how much
                    // the case has made the sanitizer write: to its XML, and the text it
                    // prints on the worker's stdout.
                    let mut printed = 0u64;
                    let cap = self
                        .cfg
                        .sanitize
                        .as_ref()
                        .and_then(|s| s.record_cap)
                        .zip(w.xml.clone())
                        .map(|(cap, xml)| (cap, file_len(&xml), xml));
                    let deadline = t0 + case_timeout(self.cfg.timeout, case);
                    loop {
                        let left = deadline.saturating_duration_since(Instant::now());
                        let slice = match cap {
                            Some(_) => left.min(Duration::from_millis(250)),
                            None => left,
                        };
                        match w.recv(slice) {
                            Ok(Some(line)) => match serde_json::from_str::<WorkerMsg>(&line) {
                                Ok(WorkerMsg::Result(r)) => break *r,
                                Ok(WorkerMsg::Retiring { .. }) => {
                                    // Its result follows; then it exits. Send it nothing more.
                                    retiring = true;
                                    continue;
                                }
                                Ok(WorkerMsg::Aborting { message, log }) => {
                                    // The worker dies next; its words judge the case.
                                    aborting = Some((message, log));
                                    continue;
                                }
                                Ok(WorkerMsg::Error { message }) => {
                                    break CaseResult::new(
                                        case,
                                        Verdict::Unsupported,
                                        Detector::Supervisor,
                                        message,
                                    )
                                }
                                // Stray output (the sanitizer's text): keep waiting, unless
                                // there is too much of it.
                                _ => {
                                    printed += line.len() as u64 + 1;
                                    match &cap {
                                        Some((cap, _, _)) if printed > *cap => {
                                            worker_gone = true;
                                            w.stop_for_report(info.pid);
                                            break records_cut(case, printed, t0);
                                        }
                                        _ => continue,
                                    }
                                }
                            },
                            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                                worker_gone = true;
                                let st = w.finish(Duration::from_secs(10));
                                if let Some((message, log)) = aborting.take() {
                                    let mut r = aborted(case, &message, &log);
                                    r.detail
                                        .push_str(&format!(" (worker {})", describe_exit(st)));
                                    r.ms = t0.elapsed().as_secs_f64() * 1e3;
                                    break r;
                                }
                                break died(
                                    case,
                                    &format!(
                                        "worker {} while running this case (its log: {})",
                                        describe_exit(st),
                                        self.cfg
                                            .work_dir
                                            .join(format!("worker-{}.log", w.index))
                                            .display()
                                    ),
                                );
                            }
                            Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                                let Some((cap, at_start, xml)) = &cap else {
                                    continue;
                                };
                                let written = file_len(xml).saturating_sub(*at_start);
                                if written <= *cap {
                                    continue;
                                }
                                worker_gone = true;
                                w.stop_for_report(info.pid);
                                break records_cut(case, written, t0);
                            }
                            Err(RecvTimeoutError::Timeout) => {
                                worker_gone = true;
                                w.kill();
                                let mut r = CaseResult::new(
                                    case,
                                    Verdict::Timeout,
                                    Detector::Supervisor,
                                    format!(
                                        "no verdict within {:?} (--timeout and {TIMEOUT_S_PER_GIB} s per GiB of the case's tensors); worker killed",
                                        case_timeout(self.cfg.timeout, case)
                                    ),
                                );
                                r.ms = t0.elapsed().as_secs_f64() * 1e3;
                                break r;
                            }
                        }
                    }
                };
                let mut r = r;
                r.under = under;
                i += 1;
                summary.ran += 1;
                if self.cfg.sanitize.is_some() {
                    held.push(r);
                } else {
                    emit(r)?;
                }
                // A worker whose context died exits by itself after writing its verdict.
                if retiring {
                    worker_gone = true;
                    retired = true;
                }
                if !worker_gone {
                    if let Ok(Some(st)) = w.child.try_wait() {
                        let _ = st;
                        worker_gone = true;
                    }
                }
            }
            if started == 0 {
                // The time ran out before this worker got a case: it has nothing to report.
                if keep {
                    self.idle = Some((w, info));
                } else {
                    w.finish(Duration::from_secs(60));
                }
                break;
            }
            if worker_gone {
                self.lost += 1;
            }
            if keep && !worker_gone && (i == cases.len() || out_of_time) {
                // Alive and done with this run: the next run starts with it.
                self.idle = Some((w, info));
                break;
            }
            // A worker that exits EXIT_CONTEXT_DEAD after a sticky fault is expected; the
            // next loop starts a fresh one. Natively its verdicts are all in, so it may take
            // its time tearing its context down while the next worker runs cases.
            if retired && self.cfg.sanitize.is_none() {
                w.close_stdin();
                self.exiting.push(w);
                continue;
            }
            w.finish(Duration::from_secs(60));
            if let (Some(spec), Some(xml)) = (&self.cfg.sanitize, &w.xml) {
                if !xml.exists() {
                    // The tool ended before writing a report (it was killed with its worker):
                    // the cases keep their worker's verdicts and say what is missing.
                    for mut r in held {
                        r.detail.push_str(&format!(
                            " (no {} report: the tool ended before writing one)",
                            spec.tool
                        ));
                        emit(r)?;
                    }
                    continue;
                }
                let findings = match (spec.attribute)(xml, started) {
                    Ok(f) => f,
                    Err(why) if started > 1 => {
                        // Never stop the sweep for it: run the batch again, one case per
                        // worker, where every record is that case's.
                        self.events.emit(Event::BatchAgain {
                            why: why.clone(),
                            cases: started,
                        });
                        i -= started;
                        summary.ran -= started;
                        batch = 1;
                        alone_from = Some(i);
                        continue;
                    }
                    Err(why) => return Err(SupervisorError::Sanitizer(why)),
                };
                for (r, f) in held.iter_mut().zip(findings) {
                    merge_findings(r, f);
                }
                for mut r in held {
                    if alone_from.is_some() {
                        r.detail.push_str(
                            " (run alone: its batch's sanitizer records could not be split between cases)",
                        );
                    }
                    emit(r)?;
                }
            }
        }
        Ok(summary)
    }
}

/// How many standbys a supervisor keeps (see `Supervisor::standbys_wanted`): `ended_by_faults`
/// when its workers are expected to end early (a sanitizer, guard mode).
pub fn standbys_wanted(ended_by_faults: bool, lost: usize) -> usize {
    if ended_by_faults || lost > 0 {
        MAX_STANDBYS
    } else {
        0
    }
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
        // `run` gives results in the batch's order (a sanitized worker's when it ends).
        let mut k = 0;
        let res = self.run(batch, &mut |r| {
            done(k, r);
            k += 1;
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
