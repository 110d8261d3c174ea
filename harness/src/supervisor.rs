//! The supervisor: owns worker processes, feeds them cases, streams verdicts, replaces a
//! worker whose context died, kills a hung one, and wraps workers in compute-sanitizer.
//! Cases never run in the supervisor itself.

use crate::worker::{WorkerMsg, EXIT_CONTEXT_DEAD};
use kedge_core::{Case, CaseResult, Detector, LimitsProfile, Verdict};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("no GPU: {0}")]
    NoGpu(String),
    #[error("could not start a worker ({cmd}): {err}")]
    Spawn { cmd: String, err: std::io::Error },
    #[error("worker did not become ready within {0:?}")]
    NotReady(Duration),
    #[error("writing results: {0}")]
    Sink(std::io::Error),
    #[error("{0}")]
    Sanitizer(String),
}

/// How to wrap a worker in a sanitizer and read back what it found.
pub struct SanitizeSpec {
    /// Tool name for the record (`memcheck`...).
    pub tool: String,
    /// Program and arguments placed before the worker command; `{xml}` is replaced by the
    /// XML file of that worker.
    pub prefix: Vec<String>,
    /// Parse one worker's XML and attribute findings: `started` cases ran in order; returns
    /// the findings for each of them.
    #[allow(clippy::type_complexity)]
    pub attribute:
        Box<dyn Fn(&std::path::Path, usize) -> Result<Vec<crate::sanitizer::CaseFindings>, String>>,
    /// Cases per worker: the XML is read when a worker ends.
    pub batch: usize,
}

pub struct SupervisorConfig {
    /// The kedge binary (workers are `kedge worker ...`).
    pub exe: PathBuf,
    pub worker_args: Vec<String>,
    pub timeout: Duration,
    pub ready_timeout: Duration,
    pub sanitize: Option<SanitizeSpec>,
    /// Where worker logs (stderr) and sanitizer XML go.
    pub work_dir: PathBuf,
    pub progress: bool,
}

/// What happened, beyond the results themselves.
#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    pub workers_started: usize,
    pub workers_replaced: usize,
    pub device: Option<String>,
    pub driver_version: Option<i32>,
    pub limits: Option<LimitsProfile>,
    pub ran: usize,
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Option<String>>,
    xml: Option<PathBuf>,
    index: usize,
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
    fn recv(&self, t: Duration) -> Result<Option<String>, RecvTimeoutError> {
        self.rx.recv_timeout(t)
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

pub fn describe_exit(s: Option<std::process::ExitStatus>) -> String {
    match s {
        None => "was killed".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(sig)) => format!("died from signal {sig}"),
            _ => "ended".into(),
        },
    }
}

pub struct Supervisor {
    cfg: SupervisorConfig,
    spawned: usize,
}

impl Supervisor {
    pub fn new(cfg: SupervisorConfig) -> Self {
        Supervisor { cfg, spawned: 0 }
    }

    fn spawn(&mut self) -> Result<Worker, SupervisorError> {
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
        argv.extend(self.cfg.worker_args.iter().cloned());
        let log_path = self.cfg.work_dir.join(format!("worker-{index}.log"));
        let log = std::fs::File::create(&log_path).map_err(|err| SupervisorError::Spawn {
            cmd: log_path.display().to_string(),
            err,
        })?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .process_group(0);
        let mut child = cmd.spawn().map_err(|err| SupervisorError::Spawn {
            cmd: argv.join(" "),
            err,
        })?;
        let stdout = child.stdout.take().ok_or_else(|| SupervisorError::Spawn {
            cmd: argv.join(" "),
            err: std::io::Error::other("no stdout"),
        })?;
        let stdin = child.stdin.take();
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
        let res = self.wait_ready(&mut w, &mut s).map(|_| s);
        w.finish(Duration::from_secs(30));
        res
    }

    /// Wait for a worker's `ready` line. Lines that are not worker messages (compute-sanitizer
    /// prints a banner on stdout) are skipped.
    fn wait_ready(&self, w: &mut Worker, summary: &mut RunSummary) -> Result<(), SupervisorError> {
        let deadline = Instant::now() + self.cfg.ready_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match w.recv(left) {
                Ok(Some(line)) => match serde_json::from_str::<WorkerMsg>(&line) {
                    Ok(WorkerMsg::Ready {
                        device,
                        driver_version,
                        limits,
                        ..
                    }) => {
                        summary.device = Some(device);
                        summary.driver_version = Some(driver_version);
                        summary.limits = Some(*limits);
                        return Ok(());
                    }
                    Ok(WorkerMsg::Fatal { message, .. }) => {
                        w.finish(Duration::from_secs(5));
                        return Err(SupervisorError::NoGpu(message));
                    }
                    Ok(other) => {
                        w.kill();
                        return Err(SupervisorError::Spawn {
                            cmd: "kedge worker".into(),
                            err: std::io::Error::other(format!(
                                "unexpected message before ready: {other:?}"
                            )),
                        });
                    }
                    Err(_) => continue,
                },
                Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                    let st = w.finish(Duration::from_secs(5));
                    return Err(SupervisorError::Spawn {
                        cmd: "kedge worker".into(),
                        err: std::io::Error::other(format!(
                            "worker {} before it was ready; see {}",
                            describe_exit(st),
                            self.cfg
                                .work_dir
                                .join(format!("worker-{}.log", w.index))
                                .display()
                        )),
                    });
                }
                Err(RecvTimeoutError::Timeout) => {
                    w.kill();
                    return Err(SupervisorError::NotReady(self.cfg.ready_timeout));
                }
            }
        }
    }

    /// Run `cases`, calling `sink` with each result as soon as it is final.
    pub fn run(
        &mut self,
        cases: &[Case],
        sink: &mut dyn FnMut(CaseResult) -> std::io::Result<()>,
    ) -> Result<RunSummary, SupervisorError> {
        let mut summary = RunSummary::default();
        let bar = if self.cfg.progress {
            let b = indicatif::ProgressBar::new(cases.len() as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Some(b)
        } else {
            None
        };
        let under = self
            .cfg
            .sanitize
            .as_ref()
            .map(|s| s.tool.clone())
            .unwrap_or_else(|| "native".into());
        let batch = self
            .cfg
            .sanitize
            .as_ref()
            .map(|s| s.batch.max(1))
            .unwrap_or(usize::MAX);
        let mut i = 0;
        let mut emit = |r: CaseResult, done: usize| -> Result<(), SupervisorError> {
            let line = format!(
                "[{done}/{}] {:<16} {:<12} {}",
                cases.len(),
                r.verdict.name(),
                r.detector.name(),
                r.case.label()
            );
            match &bar {
                Some(b) => {
                    b.set_position(done as u64);
                    if r.verdict.is_failure() {
                        b.println(line);
                    }
                }
                None => eprintln!("{line}"),
            }
            sink(r).map_err(SupervisorError::Sink)
        };
        while i < cases.len() {
            let mut w = self.spawn()?;
            summary.workers_started += 1;
            if summary.workers_started > 1 {
                summary.workers_replaced += 1;
            }
            // Wait for the worker to open the device.
            self.wait_ready(&mut w, &mut summary)?;
            let mut held: Vec<CaseResult> = Vec::new();
            let mut started = 0usize;
            let mut worker_gone = false;
            while i < cases.len() && started < batch && !worker_gone {
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
                let r = if !sent {
                    worker_gone = true;
                    let st = w.finish(Duration::from_secs(5));
                    died(
                        case,
                        &format!("worker {} before the case could be sent", describe_exit(st)),
                    )
                } else {
                    loop {
                        match w.recv(self.cfg.timeout) {
                            Ok(Some(line)) => match serde_json::from_str::<WorkerMsg>(&line) {
                                Ok(WorkerMsg::Result(r)) => break *r,
                                Ok(WorkerMsg::Retiring { .. }) => {
                                    // Its result follows; then it exits. Send it nothing more.
                                    retiring = true;
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
                                _ => continue, // stray output: keep waiting
                            },
                            Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                                worker_gone = true;
                                let st = w.finish(Duration::from_secs(10));
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
                            Err(RecvTimeoutError::Timeout) => {
                                worker_gone = true;
                                w.kill();
                                let mut r = CaseResult::new(
                                    case,
                                    Verdict::Timeout,
                                    Detector::Supervisor,
                                    format!(
                                        "no verdict within {:?}; worker killed",
                                        self.cfg.timeout
                                    ),
                                );
                                r.ms = t0.elapsed().as_secs_f64() * 1e3;
                                break r;
                            }
                        }
                    }
                };
                let mut r = r;
                r.under = under.clone();
                i += 1;
                summary.ran += 1;
                if self.cfg.sanitize.is_some() {
                    held.push(r);
                } else {
                    emit(r, i)?;
                }
                // A worker whose context died exits by itself after writing its verdict.
                if retiring {
                    worker_gone = true;
                }
                if !worker_gone {
                    if let Ok(Some(st)) = w.child.try_wait() {
                        let _ = st;
                        worker_gone = true;
                    }
                }
            }
            let status = w.finish(Duration::from_secs(60));
            if let Some(s) = status {
                if s.code() == Some(EXIT_CONTEXT_DEAD) {
                    // Expected after a sticky fault; the next loop starts a fresh worker.
                }
            }
            if let (Some(spec), Some(xml)) = (&self.cfg.sanitize, &w.xml) {
                let findings =
                    (spec.attribute)(xml, started).map_err(SupervisorError::Sanitizer)?;
                for (r, f) in held.iter_mut().zip(findings) {
                    merge_findings(r, f);
                }
                let base = i - held.len();
                for (k, r) in held.into_iter().enumerate() {
                    emit(r, base + k + 1)?;
                }
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        Ok(summary)
    }
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
pub fn merge_findings(r: &mut CaseResult, cf: crate::sanitizer::CaseFindings) {
    crate::sanitizer::merge_into_result(r, &cf);
}
