//! The worker: `kedge worker` (hidden). Reads its `WorkerSpec` line, builds the same registry
//! as the command that started it, opens its GPU, then runs one case per line in, one
//! verdict line out. The supervisor owns it; a fault that kills the CUDA context kills only
//! this process.

use super::protocol::{FatalKind, WorkerMsg, WorkerSpec, EXIT_CONTEXT_DEAD, PROTOCOL};
use crate::exit;
use kedge_core::cuda::{device_count, kedge_case_marker, DeviceError};
use kedge_core::engine::bench::{bench, copy_bandwidth, BenchOptions};
use kedge_core::engine::{execute, DeviceSlot, ReferenceCache};
use kedge_core::Case;
use std::io::{BufRead, Write};

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
    let started = std::time::Instant::now();
    super::lifecycle::watch_supervisor();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    let spec = match lines.next() {
        Some(Ok(l)) => l,
        _ => return fatal(&mut out, FatalKind::Setup, "no worker spec on stdin".into()),
    };
    let spec: WorkerSpec = match serde_json::from_str(&spec) {
        Ok(s) => s,
        Err(e) => return fatal(&mut out, FatalKind::Setup, format!("bad worker spec: {e}")),
    };
    if spec.protocol != PROTOCOL {
        return fatal(
            &mut out,
            FatalKind::Setup,
            format!(
                "worker spec of protocol {}, this kedge speaks {PROTOCOL}",
                spec.protocol
            ),
        );
    }
    // The supervisor loaded these libraries in a child process first; a crash here costs
    // this worker only.
    let reg = match spec.external.registry_here() {
        Ok((r, _)) => r,
        Err(e) => return fatal(&mut out, FatalKind::Setup, e.to_string()),
    };
    // A library under test that aborts the process (ggml does, on a CUDA error or a failed
    // assertion) says why first: its words reach the supervisor, which judges the case.
    if let Some(ggml) = kedge_ggml::Ggml::loaded() {
        ggml.install_hooks(None, Some(abort_hook));
    }
    let slot = if spec.open_gpu {
        match DeviceSlot::open(spec.device as usize) {
            Ok(s) => s,
            Err(e) => {
                let kind = match e {
                    DeviceError::NoDriver => FatalKind::NoDriver,
                    DeviceError::OldDriver { .. } => FatalKind::OldDriver,
                    _ => FatalKind::NoDevice,
                };
                return fatal(&mut out, kind, e.to_string());
            }
        }
    } else {
        DeviceSlot::new(spec.device as usize)
    };
    let mut slot = slot.packed_exact(!spec.sanitized).judging(spec.judging);
    // Load what the cases this worker will probably run load (a worker started ahead of
    // need), before saying it is ready.
    for c in &spec.warm_up {
        if let Ok(imp) = reg.op(&c.op).and_then(|op| reg.imp(op, &c.imp)) {
            imp.load(c);
        }
    }
    let ready = match slot.opened() {
        Some(dev) => WorkerMsg::Ready {
            device: dev.limits.device.clone(),
            driver_version: dev.driver_version,
            driver: dev.kernel_driver.clone(),
            limits: Some(Box::new(dev.limits.clone())),
            pid: std::process::id(),
            device_count: device_count().ok(),
            startup_s: started.elapsed().as_secs_f64(),
        },
        None => WorkerMsg::Ready {
            device: "host (no GPU opened)".into(),
            driver_version: 0,
            driver: None,
            limits: None,
            pid: std::process::id(),
            device_count: None,
            startup_s: started.elapsed().as_secs_f64(),
        },
    };
    if send(&mut out, &ready).is_err() {
        return exit::ENVIRONMENT;
    }
    let mut refs = ReferenceCache::default();
    let mut seq = 0u64;
    // A bench worker measures the device's copy bandwidth once, the yardstick of its timings.
    let mut copy_gb_per_s: Option<f64> = None;
    for line in lines {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let case: Case = match serde_json::from_str(&line) {
            Ok(c) => c,
            Err(e) => {
                let _ = send(
                    &mut out,
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
        let ex = match spec.bench {
            None => execute(&reg, &mut slot, &case, &mut refs),
            Some(b) => {
                let mut ex = bench(
                    &reg,
                    &mut slot,
                    &case,
                    &mut refs,
                    BenchOptions {
                        warmup: b.warmup,
                        reps: b.reps,
                    },
                );
                if copy_gb_per_s.is_none() && !ex.context_dead && slot.opened().is_some() {
                    copy_gb_per_s = copy_bandwidth(&mut slot, 1 << 30, 10).ok();
                }
                if let Some(t) = ex.result.observed.bench.as_mut() {
                    t.copy_gb_per_s = copy_gb_per_s;
                }
                ex
            }
        };
        if ex.context_dead {
            let reason = format!("the CUDA context is dead after: {}", ex.result.detail);
            if send(&mut out, &WorkerMsg::Retiring { reason }).is_err() {
                return exit::ENVIRONMENT;
            }
        }
        if send(&mut out, &WorkerMsg::Result(Box::new(ex.result))).is_err() {
            return exit::ENVIRONMENT;
        }
        if ex.context_dead {
            // Every later call in this process would fail: hand over to a fresh worker.
            return EXIT_CONTEXT_DEAD;
        }
    }
    exit::OK
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
