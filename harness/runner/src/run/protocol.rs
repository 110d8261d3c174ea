//! The worker protocol: the supervisor writes one `WorkerSpec` line, then one case per line;
//! the worker answers one `WorkerMsg` per line. Everything that defines a worker's registry
//! and device is in the spec, typed: a worker never re-parses command-line flags.

use crate::external::ExternalSpec;
use kedge_core::judge::sample::Judging;
use kedge_core::{Case, CaseResult, LimitsProfile};
use serde::{Deserialize, Serialize};

/// The protocol this kedge speaks; a worker refuses a spec of another.
pub const PROTOCOL: u32 = 3;

/// Exit code of a worker whose context died after a case (the result was written first).
pub const EXIT_CONTEXT_DEAD: i32 = 86;

/// What a worker is: its GPU and the impls beyond kedge's own (plugins, source kernels).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    pub protocol: u32,
    /// The GPU ordinal (after `CUDA_VISIBLE_DEVICES`).
    pub device: u32,
    #[serde(default)]
    pub external: ExternalSpec,
    /// Open the GPU at start (the default). A worker that only runs impls on a host backend
    /// (ggml's CPU backend) needs none, so it runs on a machine without a GPU.
    #[serde(default = "yes")]
    pub open_gpu: bool,
    /// Time each case after its judged run (`kedge bench`): warm-up and timed repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<BenchSpec>,
    /// The worker runs under compute-sanitizer: exact mode then allocates each buffer with
    /// `cuMemAlloc`, whose bounds the sanitizer knows, instead of packing them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
    /// Cases like the ones this worker will probably run, to get ready for before it says it
    /// is ready (`Impl::load`), not to run: a worker started ahead of need loads what
    /// they load while another worker runs cases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_up: Vec<Case>,
    /// How big cases are judged (`--judge`): sampled rows from 2^26 elements by default.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub judging: Judging,
}

fn is_auto(j: &Judging) -> bool {
    *j == Judging::Auto
}

/// How a bench worker times its cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchSpec {
    pub warmup: u32,
    pub reps: u32,
}

fn yes() -> bool {
    true
}

impl WorkerSpec {
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
        }
    }
    /// The same spec on another GPU.
    pub fn on(&self, device: u32) -> WorkerSpec {
        WorkerSpec {
            device,
            ..self.clone()
        }
    }
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
    Ready {
        device: String,
        driver_version: i32,
        /// The kernel-mode driver's version (`580.159.04`), where the system says it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        driver: Option<String>,
        /// The GPU's limits; absent for a worker that runs host backends only (no GPU opened).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limits: Option<Box<LimitsProfile>>,
        pid: u32,
        /// GPUs this worker's driver shows (`sweep`'s default is all of them). Absent when
        /// the driver could not say.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        device_count: Option<usize>,
        /// Seconds from the worker's start to this line (its device opened, its libraries
        /// loaded).
        #[serde(default)]
        startup_s: f64,
    },
    Result(Box<CaseResult>),
    /// The worker cannot run at all.
    Fatal {
        message: String,
        kind: FatalKind,
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
    /// A library under test is aborting the process (ggml on a CUDA error or a failed
    /// assertion): its own last words, sent from its abort hook before it dies. The case in
    /// flight is judged from them.
    Aborting {
        message: String,
        #[serde(default)]
        log: Vec<String>,
    },
}

impl WorkerMsg {
    pub fn to_line(&self) -> String {
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
