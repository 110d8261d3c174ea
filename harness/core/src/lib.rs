//! kedge-core: the op-independent core of kedge, laid out by phase.
//!
//! - `model`: what a case is (shape, dtype, params, seed, allocation mode), host tensors,
//!   limits profiles, and the words verdicts are made of.
//! - `cuda`: how a plan runs on an NVIDIA GPU (driver loaded at run time, NVRTC, allocation
//!   modes, checked launches).
//! - `contract`: what an op declares and what an impl promises before it runs (its plan).
//! - `judge`: outputs against the reference and poison; the result record.
//! - `engine`: one case end to end, without knowing which op it is.
//!
//! The layers depend downward only: model ← cuda ← contract ← judge ← engine.

#![warn(missing_docs)]

pub mod contract;
pub mod cuda;
pub mod engine;
pub mod error;
pub mod judge;
pub mod model;

pub use contract::boundary::{Axis, Boundary, ProbeBase, Reach};
pub use contract::imp::{
    BackendImpl, BackendRun, Impl, ImplRole, KernelImpl, Refusal, SampledDraw, SampledRun,
};
pub use contract::op::{Op, Role, RowSampling, TensorSpec, Tolerance};
pub use contract::plan::{
    BufferPlan, BufferViolation, KernelArg, LaunchPlan, LaunchViolation, Plan,
};
pub use contract::registry::Registry;
pub use contract::run::RunCtx;
pub use contract::upstream::UpstreamRepro;
pub use cuda::kernel::Kernel;
pub use error::CaseError;
pub use judge::result::{CaseResult, Numbers, Observed, FIXED_LIMIT};
pub use judge::run_info::{RunInfo, SuiteInfo};
pub use model::case::{AllocMode, Case};
pub use model::dtype::DType;
pub use model::host::HostTensor;
pub use model::limits::LimitsProfile;
pub use model::params::{OpParams, ParamSpec, Params};
pub use model::shape::Ne;
pub use model::words::{Detector, Tool, Under, Verdict};
