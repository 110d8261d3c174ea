//! The worker: runs cases on the device, one JSON line in, one JSON line out. The supervisor
//! owns it; a fault that kills the CUDA context kills only this process.

use kedge_core::device::{Device, DeviceError};
use kedge_core::{engine, Case, CaseResult, LimitsProfile, Registry};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// Messages a worker writes to stdout, one per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMsg {
    Ready {
        device: String,
        driver_version: i32,
        limits: Box<LimitsProfile>,
        pid: u32,
        /// GPUs this worker's driver shows (`sweep`'s default is all of them). Absent when
        /// the driver could not say.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device_count: Option<usize>,
    },
    Result(Box<CaseResult>),
    /// The worker cannot run at all (no driver, no device).
    Fatal {
        message: String,
        no_driver: bool,
    },
    /// A line it could not read (the supervisor validates first, so this is a bug).
    Error {
        message: String,
    },
    /// Sent just before the `result` of a case after which the context is dead: the worker
    /// exits after that result, so the supervisor must not send it another case.
    Retiring {
        reason: String,
    },
}

/// Exit code of a worker whose context died after a case (the result was written first).
pub const EXIT_CONTEXT_DEAD: i32 = 86;

fn send(out: &mut impl Write, msg: &WorkerMsg) -> std::io::Result<()> {
    let line = serde_json::to_string(msg).map_err(std::io::Error::other)?;
    writeln!(out, "{line}")?;
    out.flush()
}

/// Run the worker loop on stdin/stdout. Returns the process exit code.
pub fn main(reg: &Registry, ordinal: usize) -> i32 {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut dev = match Device::open(ordinal) {
        Ok(d) => d,
        Err(e) => {
            let no_driver = matches!(e, DeviceError::NoDriver);
            let _ = send(
                &mut out,
                &WorkerMsg::Fatal {
                    message: e.to_string(),
                    no_driver,
                },
            );
            return crate::exit::NO_GPU;
        }
    };
    let ready = WorkerMsg::Ready {
        device: dev.limits.device.clone(),
        driver_version: dev.driver_version,
        limits: Box::new(dev.limits.clone()),
        pid: std::process::id(),
        device_count: kedge_core::device::device_count().ok(),
    };
    if send(&mut out, &ready).is_err() {
        return crate::exit::ENVIRONMENT;
    }
    let mut seq = 0u64;
    for line in stdin.lock().lines() {
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
        // Marks the start of this case in compute-sanitizer's record stream.
        dev.case_marker(seq);
        seq += 1;
        let ex = engine::execute(reg, &mut dev, &case);
        if ex.context_dead {
            let reason = format!("the CUDA context is dead after: {}", ex.result.detail);
            if send(&mut out, &WorkerMsg::Retiring { reason }).is_err() {
                return crate::exit::ENVIRONMENT;
            }
        }
        if send(&mut out, &WorkerMsg::Result(Box::new(ex.result))).is_err() {
            return crate::exit::ENVIRONMENT;
        }
        if ex.context_dead {
            // Every later call in this process would fail: hand over to a fresh worker.
            return EXIT_CONTEXT_DEAD;
        }
    }
    crate::exit::OK
}
