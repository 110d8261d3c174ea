//! The worker: `kedge worker` (hidden). Reads its `WorkerSpec` line, builds the same registry
//! as the command that started it, opens its GPU, then runs one case per line in, one
//! verdict line out. The supervisor owns it; a fault that kills the CUDA context kills only
//! this process.

use super::protocol::{BenchSpec, FatalKind, WorkerMsg, WorkerSpec, EXIT_CONTEXT_DEAD, PROTOCOL};
use crate::exit;
use crate::summary::StartupParts;
use kedge_core::cuda::{device_count, kedge_case_marker, DeviceError};
use kedge_core::engine::bench::{bench, copy_bandwidth, BenchOptions};
use kedge_core::engine::{execute, DeviceSlot, Executed, ReferenceCache};
use kedge_core::{Case, Registry};
use std::io::{BufRead, Write};
use std::time::Instant;

fn send(out: &mut impl Write, msg: &WorkerMsg) -> std::io::Result<()> {
    writeln!(out, "{}", msg.to_line())?;
    out.flush()
}

fn fatal(out: &mut impl Write, kind: FatalKind, message: String) -> i32 {
    let _ = send(out, &WorkerMsg::Fatal { message, kind });
    match kind {
        FatalKind::NoDriver | FatalKind::NoDevice | FatalKind::OldDriver => exit::NO_GPU,
        FatalKind::Setup => exit::ENVIRONMENT,
    }
}

/// Run the worker on stdin/stdout. Returns the process exit code.
pub fn main() -> i32 {
    let started = Instant::now();
    super::lifecycle::watch_supervisor();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    let spec = match read_spec(lines.next()) {
        Ok(s) => s,
        Err(why) => return fatal(&mut out, FatalKind::Setup, why),
    };
    // The supervisor loaded these libraries in a child process first; a crash here costs
    // this worker only.
    let t = Instant::now();
    let reg = match spec.external.registry_here() {
        Ok((r, _)) => r,
        Err(e) => return fatal(&mut out, FatalKind::Setup, e.to_string()),
    };
    // A library under test that aborts the process (ggml does, on a CUDA error or a failed
    // assertion) says why first: its words reach the supervisor, which judges the case.
    if let Some(ggml) = kedge_ggml::Ggml::loaded() {
        ggml.install_hooks(None, Some(abort_hook));
    }
    let libraries_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let slot = match open_slot(&spec, &mut out) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let device_s = t.elapsed().as_secs_f64();
    let mut slot = slot.packed_exact(!spec.sanitized).judging(spec.judging);
    if let Some(f) = &spec.phase_file {
        keep_phase(f.clone(), kedge_core::engine::phase::current);
    }
    let t = Instant::now();
    warm_up(&reg, &spec.warm_up);
    let parts = StartupParts {
        libraries_s,
        device_s,
        warm_up_s: t.elapsed().as_secs_f64(),
    };
    if send(&mut out, &ready(&slot, started, parts)).is_err() {
        return exit::ENVIRONMENT;
    }
    serve(lines, &mut out, &spec, CaseRunner::new(&reg, &mut slot))
}

/// Keep the phase of the case in flight in `file` (`PhaseNote`), rewritten within a fifth of
/// a second of each change, from a thread of its own: the main thread may be inside a
/// library's compute when the supervisor's deadline comes.
fn keep_phase(
    file: std::path::PathBuf,
    read: impl Fn() -> Option<kedge_core::engine::phase::Phase> + Send + 'static,
) {
    std::thread::spawn(move || {
        // What the file says; `None` before its first write.
        let mut written = None;
        loop {
            let now = read();
            if written != Some(now) {
                let note = super::protocol::PhaseNote::now(now);
                // Never through a link: the file may be inside an output directory.
                if let Ok(mut f) = crate::results::outfile::create_log(&file) {
                    let _ = writeln!(f, "{}", serde_json::to_string(&note).unwrap_or_default());
                }
                written = Some(now);
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
}

/// The worker's spec, its first line in; `Err`: why it cannot be used.
fn read_spec(first: Option<std::io::Result<String>>) -> Result<WorkerSpec, String> {
    let spec = match first {
        Some(Ok(l)) => l,
        _ => return Err("no worker spec on stdin".into()),
    };
    let spec: WorkerSpec = match serde_json::from_str(&spec) {
        Ok(s) => s,
        Err(e) => return Err(format!("bad worker spec: {e}")),
    };
    if spec.protocol != PROTOCOL {
        return Err(format!(
            "worker spec of protocol {}, this kedge speaks {PROTOCOL}",
            spec.protocol
        ));
    }
    Ok(spec)
}

/// The device slot the spec asks for: its GPU opened, or not (a host-only worker); `Err`:
/// the exit code, told the supervisor.
fn open_slot(spec: &WorkerSpec, out: &mut impl Write) -> Result<DeviceSlot, i32> {
    if !spec.open_gpu {
        return Ok(DeviceSlot::new(spec.device as usize));
    }
    match DeviceSlot::open(spec.device as usize) {
        Ok(s) => Ok(s),
        Err(e) => {
            let kind = match e {
                DeviceError::NoDriver => FatalKind::NoDriver,
                DeviceError::OldDriver { .. } => FatalKind::OldDriver,
                _ => FatalKind::NoDevice,
            };
            Err(fatal(out, kind, e.to_string()))
        }
    }
}

/// Load what the cases this worker will probably run load (a worker started ahead of need),
/// before saying it is ready.
fn warm_up(reg: &Registry, cases: &[Case]) {
    for c in cases {
        if let Ok(imp) = reg.op(&c.op).and_then(|op| reg.imp(op, &c.imp)) {
            imp.load(c);
        }
    }
}

/// The `ready` line: the device the worker opened (or none), and its start-up so far.
fn ready(slot: &DeviceSlot, started: Instant, parts: StartupParts) -> WorkerMsg {
    match slot.opened() {
        Some(dev) => WorkerMsg::Ready {
            device: dev.limits.device.clone(),
            driver_version: dev.driver_version,
            driver: dev.kernel_driver.clone(),
            limits: Some(Box::new(dev.limits.clone())),
            pid: std::process::id(),
            device_count: device_count().ok(),
            startup_s: started.elapsed().as_secs_f64(),
            startup_parts: Some(parts),
        },
        None => WorkerMsg::Ready {
            device: "host (no GPU opened)".into(),
            driver_version: 0,
            driver: None,
            limits: None,
            pid: std::process::id(),
            device_count: None,
            startup_s: started.elapsed().as_secs_f64(),
            startup_parts: Some(parts),
        },
    }
}

/// Run one case per line in, one verdict line out, until the input ends (or the context
/// dies). Returns the process exit code.
fn serve(
    lines: impl Iterator<Item = std::io::Result<String>>,
    out: &mut impl Write,
    spec: &WorkerSpec,
    mut cases: CaseRunner<'_>,
) -> i32 {
    let mut seq = 0u64;
    for line in lines {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = match serde_json::from_str(&line) {
            Ok(c) => c,
            Err(e) => {
                let _ = send(
                    out,
                    &WorkerMsg::Error {
                        message: format!("bad case line: {e}"),
                    },
                );
                continue;
            }
        };
        // Marks the start of this case in compute-sanitizer's record stream (a host-only
        // worker has no driver to mark with, and runs under no sanitizer).
        if spec.open_gpu {
            kedge_case_marker(seq);
        }
        seq += 1;
        // ggml's ring of warning and error lines starts empty for each case: its abort names
        // only its own case. (Left full, a case's abort carried an earlier case's failed
        // allocations in its words, 216 GiB for a 32 GiB repeat, on an H100.)
        kedge_ggml::clear_recent_log();
        let ex = match spec.bench {
            None => cases.execute(&case),
            Some(b) => cases.bench(&case, b),
        };
        if ex.context_dead {
            let reason = format!("the CUDA context is dead after: {}", ex.result.detail);
            if send(out, &WorkerMsg::Retiring { reason }).is_err() {
                return exit::ENVIRONMENT;
            }
        }
        if send(out, &WorkerMsg::Result(Box::new(ex.result))).is_err() {
            return exit::ENVIRONMENT;
        }
        if ex.context_dead {
            // Every later call in this process would fail: hand over to a fresh worker.
            return EXIT_CONTEXT_DEAD;
        }
    }
    exit::OK
}

/// Runs the worker's cases on its device slot, with what carries over from one case to
/// the next.
struct CaseRunner<'a> {
    reg: &'a Registry,
    slot: &'a mut DeviceSlot,
    refs: ReferenceCache,
    /// A bench worker measures the device's copy bandwidth once, the yardstick of its
    /// timings.
    copy_gb_per_s: Option<f64>,
}

impl<'a> CaseRunner<'a> {
    fn new(reg: &'a Registry, slot: &'a mut DeviceSlot) -> Self {
        CaseRunner {
            reg,
            slot,
            refs: ReferenceCache::default(),
            copy_gb_per_s: None,
        }
    }

    /// Run and judge one case.
    fn execute(&mut self, case: &Case) -> Executed {
        execute(self.reg, self.slot, case, &mut self.refs)
    }

    /// Judge and time one case (`kedge bench`), the device's copy bandwidth beside its
    /// timing.
    fn bench(&mut self, case: &Case, b: BenchSpec) -> Executed {
        let mut ex = bench(
            self.reg,
            self.slot,
            case,
            &mut self.refs,
            BenchOptions {
                warmup: b.warmup,
                reps: b.reps,
            },
        );
        if self.copy_gb_per_s.is_none() && !ex.context_dead && self.slot.opened().is_some() {
            self.copy_gb_per_s = copy_bandwidth(self.slot, 1 << 30, 10).ok();
        }
        if let Some(t) = ex.result.observed.bench.as_mut() {
            t.copy_gb_per_s = self.copy_gb_per_s;
        }
        ex
    }
}

/// ggml's abort hook: one `aborting` line on stdout, written straight to the descriptor (the
/// abort may come from any thread, and the process dies right after).
fn abort_hook(r: &kedge_ggml::AbortReport<'_>) {
    let msg = WorkerMsg::Aborting {
        message: r.message.to_string(),
        log: r.recent.iter().map(|l| l.text.clone()).collect(),
    };
    let line = format!("{}\n", msg.to_line());
    let mut bytes = line.as_bytes();
    while !bytes.is_empty() {
        // SAFETY: writes from a live buffer to the process's stdout descriptor.
        let n = unsafe { libc::write(1, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            break;
        }
        bytes = &bytes[n as usize..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::engine::phase::Phase;
    use std::sync::atomic::{AtomicU8, Ordering};

    /// The phase thread writes each phase it sees, with when it began, where the supervisor
    /// reads it (`PhaseNote`).
    #[test]
    fn the_phase_thread_keeps_the_file_current() {
        static NOW: AtomicU8 = AtomicU8::new(0);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("worker-0.phase");
        keep_phase(file.clone(), || match NOW.load(Ordering::Relaxed) {
            0 => None,
            1 => Some(Phase::Run),
            _ => Some(Phase::Reference),
        });
        let read = |want: Option<Phase>| {
            for _ in 0..50 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                if let Ok(t) = std::fs::read_to_string(&file) {
                    if let Ok(n) =
                        serde_json::from_str::<super::super::protocol::PhaseNote>(t.trim())
                    {
                        if n.phase == want {
                            return n;
                        }
                    }
                }
            }
            panic!("the phase file never said {want:?}");
        };
        assert_eq!(read(None).phase, None);
        NOW.store(1, Ordering::Relaxed);
        let run = read(Some(Phase::Run));
        NOW.store(2, Ordering::Relaxed);
        let reference = read(Some(Phase::Reference));
        assert!(reference.since_ms >= run.since_ms);
    }
}
