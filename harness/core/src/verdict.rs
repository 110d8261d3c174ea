//! Verdicts and the detectors that produce them, and the result record streamed to
//! `results.jsonl`.

use crate::case::Case;
use crate::launch::LaunchViolation;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Pass,
    WrongValues,
    UnwrittenOutput,
    Nonfinite,
    LaunchError,
    DeviceFault,
    OobRead,
    OobWrite,
    UninitRead,
    Race,
    SyncError,
    Timeout,
    ResourceLimit,
    /// The impl refused the shape with a clear error: allowed, not a failure.
    Unsupported,
    /// No error, but no work done.
    SilentFailure,
    /// The CPU-side checks ran (plan and reference) but the device part was skipped.
    Skipped,
}

impl Verdict {
    pub const ALL: [Verdict; 16] = [
        Verdict::Pass,
        Verdict::WrongValues,
        Verdict::UnwrittenOutput,
        Verdict::Nonfinite,
        Verdict::LaunchError,
        Verdict::DeviceFault,
        Verdict::OobRead,
        Verdict::OobWrite,
        Verdict::UninitRead,
        Verdict::Race,
        Verdict::SyncError,
        Verdict::Timeout,
        Verdict::ResourceLimit,
        Verdict::Unsupported,
        Verdict::SilentFailure,
        Verdict::Skipped,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::WrongValues => "wrong-values",
            Verdict::UnwrittenOutput => "unwritten-output",
            Verdict::Nonfinite => "nonfinite",
            Verdict::LaunchError => "launch-error",
            Verdict::DeviceFault => "device-fault",
            Verdict::OobRead => "oob-read",
            Verdict::OobWrite => "oob-write",
            Verdict::UninitRead => "uninit-read",
            Verdict::Race => "race",
            Verdict::SyncError => "sync-error",
            Verdict::Timeout => "timeout",
            Verdict::ResourceLimit => "resource-limit",
            Verdict::Unsupported => "unsupported",
            Verdict::SilentFailure => "silent-failure",
            Verdict::Skipped => "skipped",
        }
    }
    /// Does this verdict fail a gate? `unsupported` and `skipped` do not.
    pub fn is_failure(self) -> bool {
        !matches!(
            self,
            Verdict::Pass | Verdict::Unsupported | Verdict::Skipped
        )
    }
    /// Worse verdicts win when several detectors fire: memory errors over value errors.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::Pass | Verdict::Skipped => 0,
            Verdict::Unsupported => 1,
            Verdict::WrongValues | Verdict::Nonfinite => 3,
            Verdict::UnwrittenOutput | Verdict::SilentFailure => 4,
            Verdict::Race | Verdict::SyncError | Verdict::UninitRead => 5,
            Verdict::LaunchError | Verdict::ResourceLimit => 6,
            Verdict::OobRead | Verdict::OobWrite => 7,
            Verdict::DeviceFault | Verdict::Timeout => 8,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Verdict::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| format!("unknown verdict '{s}'"))
    }
}

/// Which layer saw the failure (DESIGN.md, "Detectors, in layers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Detector {
    /// Layer 1: f64 CPU reference comparison.
    Reference,
    /// Layer 2: poisoned outputs that survived the run.
    Poison,
    /// Layer 3, CPU side: the plan broke the limits profile.
    LaunchContract,
    /// Layer 3, CPU side: a buffer the plan allocates is larger than the profile's largest
    /// single buffer (or than the device's memory).
    AllocContract,
    /// Layer 3, GPU side: the driver refused the launch.
    Driver,
    /// A fault seen at synchronization with no guard page involved.
    DeviceSync,
    /// Layer 5: a guard page turned an overrun into a native fault.
    GuardPage,
    /// Layer 6: red zones changed.
    Canary,
    /// Layer 7: compute-sanitizer tools.
    Memcheck,
    Initcheck,
    Racecheck,
    Synccheck,
    /// The supervisor: a worker that hung or died.
    Supervisor,
    /// The impl itself (a clear refusal: `unsupported`).
    Impl,
    /// Nothing looked (pass verdicts name no detector).
    None,
}

impl Detector {
    pub fn name(self) -> &'static str {
        match self {
            Detector::Reference => "reference",
            Detector::Poison => "poison",
            Detector::LaunchContract => "launch-contract",
            Detector::AllocContract => "alloc-contract",
            Detector::Driver => "driver",
            Detector::DeviceSync => "device-sync",
            Detector::GuardPage => "guard-page",
            Detector::Canary => "canary",
            Detector::Memcheck => "memcheck",
            Detector::Initcheck => "initcheck",
            Detector::Racecheck => "racecheck",
            Detector::Synccheck => "synccheck",
            Detector::Supervisor => "supervisor",
            Detector::Impl => "impl",
            Detector::None => "none",
        }
    }
}

impl fmt::Display for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The numbers of a value comparison.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Numbers {
    pub nmse: f64,
    pub max_abs: f64,
    pub max_rel: f64,
    /// First flat index (in the output's logical order) that failed, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<u64>,
    pub unwritten: u64,
    pub nonfinite: u64,
    pub compared: u64,
    pub threshold_nmse: f64,
}

/// One sanitizer finding, attributed to the case it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub tool: Detector,
    pub verdict: Verdict,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<[u64; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<[u64; 3]>,
    /// "N bytes after the nearest allocation at A of size S" when the tool says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<String>,
    /// How many identical records were folded into this one.
    pub count: u64,
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub case: Case,
    pub verdict: Verdict,
    pub detector: Detector,
    /// One sentence a person reads: what failed and where.
    pub detail: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<LaunchViolation>,
    /// Buffers the plan allocates that the profile cannot hold (verdict `resource-limit`,
    /// detector `alloc-contract`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buffer_violations: Vec<crate::launch::BufferViolation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numbers: Option<Numbers>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// What else saw something (a guard fault *and* a memcheck record, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Detector>,
    /// Which real workload reaches this shape, or "synthetic: ...".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<String>,
    /// What the allocation mode can and cannot see (e.g. a pool that hides overruns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_note: Option<String>,
    /// Which run produced it: "native", "memcheck", "cpu" ...
    pub under: String,
    /// The GPU (ordinal) it ran on, in a sweep; absent for CPU-side checks and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    pub ms: f64,
    /// Op-specific facts (FP8: bytes the plan reads past staging, cuBLASLt kernel names).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl CaseResult {
    pub fn new(
        case: &Case,
        verdict: Verdict,
        detector: Detector,
        detail: impl Into<String>,
    ) -> Self {
        CaseResult {
            id: case.id(),
            case: case.clone(),
            verdict,
            detector,
            detail: detail.into(),
            violations: Vec::new(),
            buffer_violations: Vec::new(),
            numbers: None,
            findings: Vec::new(),
            also: Vec::new(),
            reach: None,
            alloc_note: None,
            under: "native".into(),
            gpu: None,
            ms: 0.0,
            extra: serde_json::Map::new(),
        }
    }
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
