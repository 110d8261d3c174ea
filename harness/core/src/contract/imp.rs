//! Impls: the device implementations of an op. Most are data (`KernelImpl`: a name, a role
//! and a planner whose plan is what runs); impls that do more than launch their plan (a
//! cuBLASLt call, a plugin) implement `Impl::run`; impls that own their device memory (a
//! library such as ggml) run through `BackendImpl`.

use crate::contract::plan::Plan;
use crate::contract::run::RunCtx;
use crate::contract::tensor::TensorSpec;
use crate::cuda::error::RunError;
use crate::judge::result::{Allocation, LibraryInfo};
use crate::model::case::Case;
use crate::model::dtype::DType;
use crate::model::host::HostTensor;
use crate::model::limits::LimitsProfile;
use crate::model::words::Detector;
use std::fmt;

/// An impl's clear refusal of a case (verdict `unsupported`, which is allowed): the reason, as
/// a sentence a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

impl From<String> for Refusal {
    fn from(s: String) -> Self {
        Refusal(s)
    }
}

impl From<&str> for Refusal {
    fn from(s: &str) -> Self {
        Refusal(s.to_string())
    }
}

/// What an impl is, so reports and selftest can tell the upstream launch path from its fix
/// and from calibration impls with a planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImplRole {
    /// Launches the way the upstream project ships it today.
    Upstream,
    /// The fixed launch.
    Fixed,
    /// Calibration: a deliberately planted bug and the detectors that must see it.
    Planted {
        /// The bug, in words.
        bug: &'static str,
        /// The detectors that must see it.
        expect: &'static [Detector],
    },
    /// Not kedge's code: a user's plugin (C ABI), NVRTC source kernel or library build,
    /// added at run time.
    External,
}

impl ImplRole {
    /// `upstream`, `fixed`, `planted` or `external`.
    pub fn name(&self) -> &'static str {
        match self {
            ImplRole::Upstream => "upstream",
            ImplRole::Fixed => "fixed",
            ImplRole::Planted { .. } => "planted",
            ImplRole::External => "external",
        }
    }
    /// Is this a calibration impl with a planted bug?
    pub fn is_planted(&self) -> bool {
        matches!(self, ImplRole::Planted { .. })
    }
}

/// One device implementation of an op.
pub trait Impl: Send + Sync {
    /// The impl's name, unique within its op (`ggml`, `clamped`, `ggml:CUDA0`).
    fn name(&self) -> &str;
    /// What it is: the upstream launch path, its fix, a planted bug, or external.
    fn role(&self) -> ImplRole;
    /// One line on what it does differently.
    fn about(&self) -> &str;
    /// Every launch and buffer this impl will issue for the case, before any is issued.
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal>;
    /// Issue the plan on the device. Tensors are allocated, inputs uploaded and outputs
    /// poisoned by the engine. The default runs the plan exactly as stated, which is what
    /// lets `kedge repro` write a `.cu` file that launches the same thing.
    fn run(&self, ctx: &mut RunCtx<'_>, _case: &Case, plan: &Plan) -> Result<(), RunError> {
        ctx.run_plan(plan)
    }
    /// Load now what this impl would load for `case` without touching device memory (a vendor
    /// library and its handle), so a worker started ahead of need pays for it before a case
    /// is waiting. Only what a case's verdict cannot depend on: no device memory (under a
    /// sanitizer memory allocated and freed before a case moves where the case's buffers
    /// land, and so what the tool sees past them), nothing in a cache the case reads. A
    /// failure is left for the case to report.
    fn load(&self, _case: &Case) {}
    /// Impls that own their device memory (a library) run here instead of `run`.
    fn backend(&self) -> Option<&dyn BackendImpl> {
        None
    }
    /// Does running the impl need a GPU? Not for a library's host backend (ggml's CPU
    /// backend), which then runs on a machine without one.
    fn needs_gpu(&self) -> bool {
        true
    }
    /// The dtypes this impl computes, where fewer than its op declares (a library that has
    /// the op in f32 only); `None`: all of the op's. A suite leaves the others out for this
    /// impl, and its plan refuses them.
    fn dtypes(&self) -> Option<&'static [DType]> {
        None
    }
}

/// An impl as data: its plan is what runs.
pub struct KernelImpl {
    /// The impl's name.
    pub name: &'static str,
    /// What it is.
    pub role: ImplRole,
    /// One line on what it does differently.
    pub about: &'static str,
    /// Its plan for a case against a limits profile; the plan is what runs.
    pub plan: fn(&Case, &LimitsProfile) -> Result<Plan, Refusal>,
}

impl Impl for KernelImpl {
    fn name(&self) -> &str {
        self.name
    }
    fn role(&self) -> ImplRole {
        self.role
    }
    fn about(&self) -> &str {
        self.about
    }
    fn plan(&self, case: &Case, limits: &LimitsProfile) -> Result<Plan, Refusal> {
        (self.plan)(case, limits)
    }
}

/// An impl whose library allocates, uploads, launches and reads back itself (a ggml build
/// through its C API). The engine hands it the op's tensors and kedge's inputs and judges
/// what comes back exactly as for a kernel impl.
pub trait BackendImpl: Send + Sync {
    /// The library build and device, recorded in every verdict of the impl.
    fn library(&self) -> LibraryInfo;
    /// Run the case: each tensor its own allocation, inputs uploaded, outputs poisoned with
    /// `model::host::poison_pattern` before the run, outputs read back in spec order.
    fn execute(
        &self,
        case: &Case,
        specs: &[TensorSpec],
        inputs: &[HostTensor],
    ) -> Result<BackendRun, RunError>;

    /// Whether the library computes the case at all, asked before kedge makes any of its
    /// inputs (a big case's take seconds to draw): an error here is the case's verdict
    /// (`RunError::Unsupported`: unsupported) and nothing is drawn or run. The default asks
    /// nothing, leaving it to `execute`.
    fn supports(&self, _case: &Case, _specs: &[TensorSpec]) -> Result<(), RunError> {
        Ok(())
    }

    /// Run a big case judged on sampled rows: inputs drawn where the library keeps them
    /// (`cuda::big::draw_uniform`, the same values as the host draw of the seed), outputs
    /// poisoned, the op computed, each output scanned for poison survivors and non-finite
    /// values where it lies, and only `draw.slices` of each output read back. Inputs the op
    /// made (`draw.made`) are uploaded instead of drawn. The default says
    /// the library cannot (the engine then judges the case whole).
    fn execute_sampled(
        &self,
        _case: &Case,
        _specs: &[TensorSpec],
        _draw: &SampledDraw<'_>,
    ) -> Result<SampledRun, RunError> {
        Err(RunError::Unsupported(
            "this library impl runs cases whole only".into(),
        ))
    }

    /// Whether `execute_sampled` can run cases (a GPU backend).
    fn samples(&self) -> bool {
        false
    }

    /// Time the library's compute alone (no uploads or downloads): `warmup` untimed runs, then
    /// `reps` timed ones, in milliseconds each. The default says the library cannot be timed.
    fn time(
        &self,
        _case: &Case,
        _specs: &[TensorSpec],
        _inputs: &[HostTensor],
        _warmup: u32,
        _reps: u32,
    ) -> Result<Vec<f64>, RunError> {
        Err(RunError::Unsupported(
            "this library impl cannot be timed".into(),
        ))
    }
}

/// What a backend run gives back.
#[derive(Debug, Clone)]
pub struct BackendRun {
    /// Outputs in the op's spec order.
    pub outputs: Vec<HostTensor>,
    /// Every tensor's allocation, so a sanitizer address can be named.
    pub allocations: Vec<Allocation>,
    /// The library build that ran it.
    pub library: LibraryInfo,
    /// Allocation modes that could not apply because the library owns the memory.
    pub not_applied: Option<String>,
    /// The library's own facts about the run, recorded as they are.
    pub facts: serde_json::Map<String, serde_json::Value>,
}

/// What a sampled run draws and reads back.
#[derive(Debug, Clone, Copy)]
pub struct SampledDraw<'a> {
    /// The slices of each output to read back, ascending (`judge::sample::Slicing`; rows when
    /// the slices are rows).
    pub slices: &'a [u64],
    /// Per spec, the bytes of one slice (0 for an input read whole): slice `p` of an output
    /// is its bytes from `p * chunk[i]`.
    pub chunk: &'a [u64],
    /// Per spec, the uniform range its values are drawn from (`contract::op::RowSampling`).
    pub ranges: &'a [(f32, f32)],
    /// The drawn inputs are distinct rows instead (`contract::op::distinct_rows`; on the
    /// device, `cuda::big::distinct_rows`).
    pub distinct: bool,
    /// Inputs the op made on the host, by spec index, uploaded as they are instead of drawn.
    pub made: &'a [(usize, HostTensor)],
}

/// What a sampled run gives back.
#[derive(Debug, Clone)]
pub struct SampledRun {
    /// Per output (spec order), its sampled slices one after the other: a dense
    /// `[elements of a slice, slices, 1, 1]` tensor.
    pub rows: Vec<HostTensor>,
    /// Per output, what a scan of all of it found.
    pub scans: Vec<crate::cuda::big::Scan>,
    /// Every tensor's allocation, so a sanitizer address can be named.
    pub allocations: Vec<Allocation>,
    /// The library build that ran it.
    pub library: LibraryInfo,
    /// Allocation modes that could not apply because the library owns the memory.
    pub not_applied: Option<String>,
    /// The library's own facts about the run.
    pub facts: serde_json::Map<String, serde_json::Value>,
}
