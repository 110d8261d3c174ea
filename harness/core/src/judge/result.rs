//! The result record streamed to `results.jsonl`: a case, its verdict and detector, the
//! numbers behind them, and what was observed while it ran.

use crate::contract::plan::{BufferViolation, LaunchViolation};
use crate::model::case::Case;
use crate::model::words::{Detector, Under, Verdict};
use serde::{Deserialize, Serialize};

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
    pub buffer_violations: Vec<BufferViolation>,
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
    pub under: Under,
    /// The GPU (ordinal) it ran on, in a sweep; absent for CPU-side checks and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    pub ms: f64,
    /// What was seen while it ran, beside the verdict.
    #[serde(default, skip_serializing_if = "Observed::is_empty")]
    pub observed: Observed,
    /// The op's own facts, which kedge records and does not interpret (fp8_gemm: bytes its
    /// plan reads past the staging buffer, the cuBLASLt kernel; sdpa_prefill: the score
    /// buffer's size).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub facts: serde_json::Map<String, serde_json::Value>,
}

/// What the engine saw while a case ran, typed: launches, output digests, allocations, where
/// the time went, and the library that ran it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// Launches as issued (a repeated launch once, with its count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches: Vec<String>,
    /// `name:digest` of each output (FNV-1a of its bytes): equal digests are bit-identical.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_digests: Vec<String>,
    /// Tensors whose end is not the last mapped byte in guard mode (alignment), and by how much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guard_slack: Vec<String>,
    /// Every allocation of the case, so a sanitizer address can be named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<Allocation>,
    #[serde(default, skip_serializing_if = "Timings::is_empty")]
    pub timings: Timings,
    /// The library that ran the case (a ggml build), when it was not kedge's own kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<LibraryInfo>,
    /// Allocation modes that did not apply (the library owns its memory), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applied: Option<String>,
    /// What the reference was, when it was not kedge's f64 CPU reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Kernel timing, when the case was timed (`kedge bench`), or why it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<Bench>,
}

/// One case timed: its runs after a warm-up, the bytes its tensors move, and the device's
/// copy bandwidth measured by the same process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bench {
    /// Every timed repetition, in milliseconds.
    pub times_ms: Vec<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Bytes of every tensor of the case (inputs read once, outputs written once).
    pub bytes: u64,
    /// `bytes` over the median time.
    pub gb_per_s: f64,
    /// The op's floating-point operations, where it counts them (a GEMM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflop_per_s: Option<f64>,
    /// "cuda-events" (around the impl's launches) or "host-wall" (a library's compute call).
    pub method: String,
    /// The device's copy bandwidth (read + write bytes of a device-to-device copy), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_gb_per_s: Option<f64>,
    /// Why the case has no times (its judged run failed, the library cannot be timed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_timed: Option<String>,
}

impl Observed {
    pub fn is_empty(&self) -> bool {
        self == &Observed::default()
    }
}

/// One allocation of a case: a tensor or a scratch buffer, where it starts and how big it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub name: String,
    /// Device address of the tensor's first byte.
    pub base: u64,
    pub bytes: u64,
}

/// A library build that ran a case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryInfo {
    /// "ggml"
    pub name: String,
    pub version: String,
    pub commit: String,
    /// The backend device that ran it ("CUDA0: NVIDIA H200").
    pub device: String,
}

/// Where a case's time went, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    #[serde(default)]
    pub setup: f64,
    #[serde(default)]
    pub upload: f64,
    #[serde(default)]
    pub run: f64,
    #[serde(default)]
    pub download: f64,
    #[serde(default)]
    pub reference: f64,
    #[serde(default)]
    pub compare: f64,
}

impl Timings {
    pub fn is_empty(&self) -> bool {
        self == &Timings::default()
    }
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
            under: Under::Native,
            gpu: None,
            ms: 0.0,
            observed: Observed::default(),
            facts: serde_json::Map::new(),
        }
    }
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
