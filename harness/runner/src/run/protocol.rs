//! The worker protocol: the supervisor writes one `WorkerSpec` line, then one case per line;
//! the worker answers one `WorkerMsg` per line. Everything that defines a worker's registry
//! and device is in the spec, typed: a worker never re-parses command-line flags.

use crate::external::ExternalSpec;
use crate::summary::StartupParts;
use kedge_core::judge::sample::Judging;
use kedge_core::{Case, CaseResult, LimitsProfile};
use serde::{Deserialize, Serialize};

/// The protocol this kedge speaks; a worker refuses a spec of another.
pub(crate) const PROTOCOL: u32 = 3;

/// Exit code of a worker whose context died after a case (the result was written first).
pub(crate) const EXIT_CONTEXT_DEAD: i32 = 86;

/// What a worker is: its GPU and the impls beyond kedge's own (plugins, source kernels).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    /// The protocol the spec is written in ([`WorkerSpec::new`] sets this kedge's); a
    /// worker refuses another.
    pub protocol: u32,
    /// The GPU ordinal (after `CUDA_VISIBLE_DEVICES`).
    pub(crate) device: u32,
    #[serde(default)]
    pub(crate) external: ExternalSpec,
    /// Open the GPU at start (the default). A worker that only runs impls on a host backend
    /// (ggml's CPU backend) needs none, so it runs on a machine without a GPU.
    #[serde(default = "yes")]
    pub(crate) open_gpu: bool,
    /// Time each case after its judged run (`kedge bench`): warm-up and timed repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bench: Option<BenchSpec>,
    /// The worker runs under compute-sanitizer: exact mode then allocates each buffer with
    /// `cuMemAlloc`, whose bounds the sanitizer knows, instead of packing them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) sanitized: bool,
    /// Cases like the ones this worker will probably run, to get ready for before it says it
    /// is ready (`Impl::load`), not to run: a worker started ahead of need loads what
    /// they load while another worker runs cases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_up: Vec<Case>,
    /// How big cases are judged (`--judge`): sampled rows from 2^20 elements by default.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub(crate) judging: Judging,
    /// Where the worker keeps the phase of the case in flight (`kedge_core::engine::phase`),
    /// one JSON object rewritten as the phase changes: a supervisor that kills the worker for
    /// a timeout reads it to say whose work was taking the time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_file: Option<std::path::PathBuf>,
}

/// What a worker's phase file holds: the phase of the case in flight and when it began.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct PhaseNote {
    /// The phase; absent between cases.
    pub(crate) phase: Option<kedge_core::engine::phase::Phase>,
    /// When the worker saw it begin, in milliseconds since the Unix epoch.
    pub(crate) since_ms: u64,
}

impl PhaseNote {
    /// `phase`, beginning now.
    pub(crate) fn now(phase: Option<kedge_core::engine::phase::Phase>) -> PhaseNote {
        PhaseNote {
            phase,
            since_ms: unix_ms(),
        }
    }
    /// Seconds since the phase began.
    pub(crate) fn age_s(&self) -> f64 {
        unix_ms().saturating_sub(self.since_ms) as f64 / 1e3
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn is_auto(j: &Judging) -> bool {
    *j == Judging::Auto
}

/// How a bench worker times its cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BenchSpec {
    pub(crate) warmup: u32,
    pub(crate) reps: u32,
}

fn yes() -> bool {
    true
}

impl WorkerSpec {
    /// A native worker on GPU `device` that opens it at start, with `external`'s impls.
    pub fn new(device: u32, external: ExternalSpec) -> WorkerSpec {
        WorkerSpec {
            protocol: PROTOCOL,
            device,
            external,
            open_gpu: true,
            bench: None,
            sanitized: false,
            judging: Judging::Auto,
            warm_up: Vec::new(),
            phase_file: None,
        }
    }
    /// The same spec on another GPU.
    pub(crate) fn on(&self, device: u32) -> WorkerSpec {
        WorkerSpec {
            device,
            ..self.clone()
        }
    }
    /// The spec as the one JSON line a worker reads first.
    pub fn to_line(&self) -> String {
        // A plain struct of strings, numbers and paths: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a worker cannot run at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FatalKind {
    /// No NVIDIA driver on this machine.
    NoDriver,
    /// The driver is there; the GPU is not (or cannot be opened).
    NoDevice,
    /// The driver is older than this build needs.
    OldDriver,
    /// The spec could not be read, or its registry built.
    Setup,
}

/// Messages a worker writes to stdout, one per line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerMsg {
    /// The worker's device is open and its libraries loaded: it takes cases now.
    Ready {
        /// The GPU's name, or `host (no GPU opened)`.
        device: String,
        /// `cuDriverGetVersion` (13000: CUDA 13.0); 0 for a worker that opened no GPU.
        driver_version: i32,
        /// The kernel-mode driver's version (`580.159.04`), where the system says it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        driver: Option<String>,
        /// The GPU's limits; absent for a worker that runs host backends only (no GPU opened).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limits: Option<Box<LimitsProfile>>,
        /// The worker's own process id: under compute-sanitizer, the tool's child, which the
        /// supervisor can end alone so that the tool still writes its report.
        pid: u32,
        /// GPUs this worker's driver shows (`sweep`'s default is all of them). Absent when
        /// the driver could not say.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device_count: Option<usize>,
        /// Seconds from the worker's start to this line (its device opened, its libraries
        /// loaded).
        #[serde(default)]
        startup_s: f64,
        /// Where those seconds went; absent from an older worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        startup_parts: Option<StartupParts>,
    },
    /// A case's final result, in the order the cases were sent.
    Result(Box<CaseResult>),
    /// The worker cannot run at all.
    Fatal {
        /// What is wrong, for a person.
        message: String,
        /// What kind of failure: no GPU (exit 3) or a bad setup (exit 5).
        kind: FatalKind,
    },
    /// A line it could not read (the supervisor validates first, so this is a bug).
    Error {
        /// The line's parse error.
        message: String,
    },
    /// Sent just before the `result` of a case after which the context is dead: the worker
    /// exits after that result, so the supervisor must not send it another case.
    Retiring {
        /// What left the context dead (the case's detail).
        reason: String,
    },
    /// A library under test is aborting the process (ggml on a CUDA error or a failed
    /// assertion): its own last words, sent from its abort hook before it dies. The case in
    /// flight is judged from them.
    Aborting {
        /// The library's abort message (ggml: `FILE:LINE: what`).
        message: String,
        /// The library's last warning and error lines before the abort, oldest first.
        #[serde(default)]
        log: Vec<String>,
    },
}

impl WorkerMsg {
    /// The message as one JSON line, as the worker writes it.
    pub(crate) fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_is_one_typed_line() {
        let mut ext = ExternalSpec::default();
        ext.plugins.push("/x/libp.so".into());
        let s = WorkerSpec::new(1, ext).on(3);
        let line = s.to_line();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<WorkerSpec>(&line).unwrap(), s);
        assert_eq!(s.device, 3);
        assert!(
            serde_json::from_str::<WorkerSpec>(r#"{"protocol":1,"device":0,"plugin":"x"}"#)
                .is_err()
        );
        let m = WorkerMsg::Fatal {
            message: "m".into(),
            kind: FatalKind::NoDriver,
        };
        assert!(m.to_line().contains("\"no-driver\""), "{}", m.to_line());
    }
}
