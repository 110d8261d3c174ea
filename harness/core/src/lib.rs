//! kedge-core: the contract between kedge's engine and its ops.
//!
//! An op (crate `kedge-ops`) describes itself as data: tensors, reference, params, impls,
//! boundaries, upstream repro format. An impl states its launches before issuing them
//! (`launch::Plan`), so they can be checked against a `limits::LimitsProfile` on a machine with
//! no GPU. The `device` module is the CUDA backend every impl launches through, and `engine`
//! runs one case end to end without knowing which op it is.

pub mod case;
pub mod compare;
pub mod device;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod host;
pub mod launch;
pub mod limits;
pub mod nvrtc;
pub mod op;
pub mod params;
pub mod rng;
pub mod shape;
pub mod verdict;

pub use case::{AllocMode, Case};
pub use dtype::DType;
pub use error::CaseError;
pub use launch::{BufferPlan, BufferViolation, Kernel, LaunchPlan, Plan, ReproArg};
pub use limits::LimitsProfile;
pub use op::{Boundary, Impl, ImplRole, Op, Reach, Registry, Role, TensorSpec, UpstreamRepro};
pub use params::{ParamSpec, Params, ParamsExt};
pub use shape::Ne;
pub use verdict::{CaseResult, Detector, Verdict};
